"""Versions of the quantized product's source (``babelspec/forward/qmm.c``) side by side: each
built, then the output head's product (and with ``--layers`` one layer's products) timed per
block of rows, the versions interleaved call by call, and every version's output checked equal
to the first's bit for bit. What a change to the kernel is measured with (a copy of the source
as it was, e.g. ``git show HEAD~1:babelspec/forward/qmm.c > build/qmm_old.c``, against the file):

    .venv/bin/python benchmarks/qmm_variants.py build/qmm_old.c babelspec/forward/qmm.c --rows 1,5,8,16
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from pathlib import Path

import torch

from babelspec.fileio import emit_json
from babelspec.forward import native, qmm
from babelspec.forward.gguf import read_gguf
from babelspec.machine import cpu_model
from babelspec.models.loader import gguf_source


def _handle(lib: qmm._Library, parts: list[qmm.QWeight]) -> int:
    longs = lambda values: qmm._array(ctypes.c_long, values)  # noqa: E731
    pointers = lambda ts: qmm._array(ctypes.c_void_p, [0 if t is None else t.data_ptr() for t in ts])  # noqa: E731
    return lib.new(parts[0].k, len(parts), longs([w.n for w in parts]), longs([w.g for w in parts]),
                   longs([w.zero for w in parts]), longs([int(w.scales.dtype == torch.float16) for w in parts]),
                   longs([w.bits for w in parts]), pointers([w.codes for w in parts]), pointers([w.high for w in parts]),
                   pointers([w.scales for w in parts]), pointers([w.offsets for w in parts]))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", help="versions of qmm.c; the first is the reference")
    parser.add_argument("--rows", default="1,4,5,8,9,12,16")
    parser.add_argument("--calls", type=int, default=15, help="calls per version and block size")
    parser.add_argument("--layers", action="store_true", help="also layer 0's products (they fit in cache)")
    parser.add_argument("-o", "--output")
    args = parser.parse_args()
    torch.set_num_threads(2)
    with gguf_source("gemma-3-270m") as path:
        weights = read_gguf(path, 18)
    libs = [qmm._Library(native.build(Path(s), flags=qmm.FLAGS)) for s in args.sources]
    shapes = {"head": ([weights["output"]], True)}
    if args.layers:
        shapes |= {kind: ([weights[f"blk.0.{p}"] for p in parts], False) for kind, parts in
                   (("qkv", ("attn_q", "attn_k", "attn_v")), ("o", ("attn_output",)), ("gate_up", ("ffn_gate", "ffn_up")),
                    ("down", ("ffn_down",)))}  # fmt: skip
    out: dict = {"benchmark": "qmm_variants", "sources": args.sources, "cpu": cpu_model(), "threads": 2,
                 "calls": args.calls, "ms": {}}  # fmt: skip
    for name, (parts, f32) in shapes.items():
        handles = [_handle(lib, parts) for lib in libs]
        n, k = sum(w.n for w in parts), parts[0].k
        for m in (int(r) for r in args.rows.split(",")):
            x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
            outs = [torch.empty(m, n, dtype=torch.float32 if f32 else torch.bfloat16) for _ in libs]
            times: list[list[float]] = [[] for _ in libs]
            for call in range(args.calls + 1):  # call 0 warms up
                for i, (lib, h) in enumerate(zip(libs, handles)):
                    started = time.perf_counter()
                    lib.qmm(h, m, x.data_ptr(), k, outs[i].data_ptr(), n, f32, 2, -1)
                    if call:
                        times[i].append(time.perf_counter() - started)
            if any(not torch.equal(outs[0], o) for o in outs[1:]):
                raise SystemExit(f"{name} at {m} rows: a version's output differs from the first's")
            out["ms"][f"{name}:{m}"] = [round(statistics.median(t) * 1e3, 3) for t in times]
    emit_json(out, args.output)


if __name__ == "__main__":
    main()
