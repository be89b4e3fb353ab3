"""GELU's rows against the row alone at 1-12 torch threads: the lean forward's ``_gelu_rows``
(pieces of whole rows) beside ATen's GELU on the whole block (the forward before it), on the
model's own shape: gate and up as the two halves of a [1, n, 4096] bf16 block (the chunk view
the layers take), blocks of 9-300 rows, each row of ``gelu(gate) * up`` compared with
``torch.equal`` to the same row computed alone.

    .venv/bin/python benchmarks/gelu_threads.py -o benchmarks/results/gelu_threads.json
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from babelspec.fileio import emit_json
from babelspec.forward.gemma3 import _gelu_rows
from babelspec.machine import cpu_model

THREADS = (1, 2, 3, 4, 5, 6, 7, 8, 12)


def differing_rows(gelu, threads: int, sizes: range) -> tuple[int, int]:
    """(rows of ``gelu(gate) * up`` that differ from the row alone, rows compared)."""
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    differ = total = 0
    for n in sizes:
        gate, up = (torch.randn(1, n, 4096, generator=g) * 2).bfloat16().chunk(2, dim=-1)
        block = gelu(gate) * up
        for i in range(n):
            alone = (gelu(gate[:, i : i + 1]) * up[:, i : i + 1])[:, 0]
            differ += not torch.equal(block[:, i], alone)
            total += 1
    return differ, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", type=int, default=10, help="Block sizes 9, 9 + step, ... up to 300.")
    parser.add_argument("-o", "--output")
    args = parser.parse_args()
    sizes = range(9, 301, args.step)
    rows = []
    for threads in THREADS:
        before, total = differing_rows(lambda x: F.gelu(x, approximate="tanh"), threads, sizes)
        after, _ = differing_rows(lambda x: _gelu_rows(x, "tanh"), threads, sizes)
        rows.append({"threads": threads, "rows": total, "differ_aten_whole_block": before, "differ_gelu_rows": after})
    emit_json({"benchmark": "gelu_threads", "cpu": cpu_model(), "block_sizes": [sizes.start, sizes.stop - 1, sizes.step],
               "rows": rows}, args.output)  # fmt: skip


if __name__ == "__main__":
    main()
