"""The int8 self-drafter's layers on int4 instead, measured: does a quarter of bf16's bytes pay?

``int8:LANG`` runs the target's 18 layers on weight-only int8 copies (``lean.Int8Linear``) under
LANG's bf16 restricted head. This runs ``babelspec bench quant``'s int8 drafter once as it is and
once per int4 group size with the layers' products on torch's int4 product for the CPU
(``_weight_int4pack_mm_for_cpu``: 4-bit weights, one bf16 scale and zero per group of input
columns, rounded to nearest as gpt-fast quantizes), under the paper's sampling on held-out
FLORES-200 translations: α, c and speedup over plain decoding per language, each run timed
against plain decoding in the same run.

    .venv/bin/python benchmarks/int4_drafter.py -o benchmarks/results/int4_drafter.json
"""

from __future__ import annotations

import argparse
import contextlib
import functools
from collections.abc import Iterator

import torch

from babelspec import lean
from babelspec.bench.quant import QUANT_LANGS, QuantBenchConfig, quant_bench
from babelspec.fileio import emit_json


def quantize_int4(weight: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed 4-bit rows, scales and zeros [in / group, out, 2]): asymmetric round-to-nearest
    per group of ``group`` input columns, ``w ~ (q - 8) * scale + zero``."""
    w = weight.detach().float()
    rows, cols = w.shape
    grouped = w.reshape(rows, cols // group, group)
    low, high = grouped.amin(-1), grouped.amax(-1)
    scales = (high - low).clamp(min=1e-6) / 15
    zeros = low + 8 * scales
    q = ((grouped - low[..., None]) / scales[..., None]).round().clamp(0, 15).to(torch.int32).reshape(rows, cols)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    return packed, torch.stack([scales.t(), zeros.t()], -1).to(weight.dtype).contiguous()


class Int4Linear(lean._StackedProduct):
    """``x @ weight.T`` on a group-wise int4 copy of ``weights`` (stacked as ``Int8Linear``)."""

    __slots__ = ("packed", "scales_zeros", "group")

    def __init__(self, weights: list[torch.Tensor], group: int) -> None:
        super().__init__(weights)
        self.group = group
        self.packed, self.scales_zeros = quantize_int4(self._stack(weights), group)

    def stacked(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.packed, self.group, self.scales_zeros)
        return out.view(*x.shape[:-1], -1)


@contextlib.contextmanager
def int4_layers(group: int) -> Iterator[None]:
    """Lean forwards built inside take ``Int4Linear`` where they would take ``Int8Linear``."""
    original = lean.Int8Linear
    lean.Int8Linear = functools.partial(Int4Linear, group=group)
    try:
        yield
    finally:
        lean.Int8Linear = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", default="64,32", help="int4 group sizes to run beside int8")
    parser.add_argument("--prompts-per-lang", type=int, default=4)
    parser.add_argument("-o", "--output")
    args = parser.parse_args()
    if not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"):
        raise SystemExit(f"torch {torch.__version__} has no int4 product for the CPU")
    cfg = QuantBenchConfig(langs=QUANT_LANGS, prompts_per_lang=args.prompts_per_lang, drafters=("int8",),
                           modes=("sample",))  # fmt: skip
    runs = {}
    for group in [0, *(int(g) for g in args.groups.split(","))]:
        with int4_layers(group) if group else contextlib.nullcontext():
            result = quant_bench(cfg, progress=False)
        row = result["modes"]["sample"]["int8"]
        runs["int8" if not group else f"int4 group {group}"] = {
            "speedup": row["speedup"], "alpha": row["alpha"], "c": row["c"],
            "worst_lang_speedup": row["worst_lang_speedup"],
            "per_lang": {lang: {k: v[k] for k in ("alpha", "c", "speedup")} for lang, v in row["per_lang"].items()},
            "execution": result["execution"]}  # fmt: skip
    out = {"benchmark": "int4_drafter", "langs": list(QUANT_LANGS), "prompts_per_lang": args.prompts_per_lang,
           "mode": "sample", "gamma": cfg.gammas[0], "runs": runs}  # fmt: skip
    emit_json(out, args.output)


if __name__ == "__main__":
    main()
