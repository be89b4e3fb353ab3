"""The lean forward's bf16 fusions, on and off, side by side in one process.

On: q, k and v one oneDNN product, gate and up one product, and the query heads of the shared
key/value head attended as rows of one product instead of copying the keys and values once per
query head, in blocks of up to ``MERGE_MAX_TOKENS`` tokens. Off (``fuse=False``): Hugging Face's
op structure one for one. The merges can change the last bits of a block's logits in some
shapes (see ``babelspec.lean.MERGE_MAX_TOKENS``). This measures what they save, for a
one-token decode and for verification blocks of 2-9 tokens after a short and a long context
(every cell once per round, in an order rotated per round; medians over the rounds), and what
they cost in agreement: greedy output, token for token, against Hugging Face greedy and against
babelspec's own plain decoding (``bench equivalence``), with the merges on and off.

    .venv/bin/python benchmarks/lean_fusion.py -o benchmarks/results/lean_fusion.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from babelspec.fileio import emit_json
from babelspec.lean import lean_forward
from babelspec.machine import execution_info
from babelspec.models import DEFAULT_TARGET
from babelspec.target import load_target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=DEFAULT_TARGET)
    ap.add_argument("--blocks", default="1,2,5,9", help="tokens per forward")
    ap.add_argument("--contexts", default="64,512", help="cached tokens before each forward")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--agreement-prompts", type=int, default=2, help="translation prompts per language (0: skip)")
    ap.add_argument("--agreement-drafters", default="none,bigram@,self:12@")
    ap.add_argument("--agreement-tokens", type=int, default=32)
    ap.add_argument("-o", "--output", type=Path, default=Path("runs/lean_fusion.json"))
    args = ap.parse_args()
    blocks = [int(b) for b in args.blocks.split(",")]
    contexts = [int(c) for c in args.contexts.split(",")]

    target = load_target(args.target, dtype="bfloat16")
    forwards = {"fused": lean_forward(target.model, "lean"), "unfused": lean_forward(target.model, "lean", fuse=False)}
    if any(f is None for f in forwards.values()):
        raise SystemExit(f"{args.target} has no lean forward: nothing to compare")
    caches = {}
    for name, forward in forwards.items():
        for context in contexts:
            cache = forward.new_cache()
            forward(torch.arange(1000, 1000 + context).view(1, -1), cache)
            caches[(name, context)] = cache
    cells = [(name, context, b) for name in forwards for context in contexts for b in blocks]
    times: dict[tuple, list[float]] = {cell: [] for cell in cells}
    for round_ in range(args.rounds + 1):  # round 0 warms up and is dropped
        shift = round_ % len(cells)
        for name, context, b in cells[shift:] + cells[:shift]:
            cache = caches[(name, context)]
            ids = torch.full((1, b), 1234)
            t0 = time.perf_counter()
            forwards[name](ids, cache)
            elapsed = time.perf_counter() - t0
            cache.crop(-b)
            if round_:
                times[(name, context, b)].append(elapsed)
    ms = {cell: statistics.median(t) * 1e3 for cell, t in times.items()}
    out = {"benchmark": "lean_fusion", "target": args.target, "rounds": args.rounds,
           "execution": execution_info(target), "cells": {}}  # fmt: skip
    for context in contexts:
        for b in blocks:
            fused, unfused = ms[("fused", context, b)], ms[("unfused", context, b)]
            out["cells"][f"context {context}, {b} tokens"] = {
                "fused_ms": round(fused, 2), "unfused_ms": round(unfused, 2), "speedup": round(unfused / fused, 3)}
    out["median_speedup"] = round(statistics.median(c["speedup"] for c in out["cells"].values()), 3)
    if args.agreement_prompts:
        out["agreement"] = _agreement(target, args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    emit_json(out, args.output, indent=2)


def _agreement(target, args) -> dict:
    """``bench equivalence`` on the same prompts with the merges on, then off."""
    from babelspec import lean
    from babelspec.bench.peers import DEFAULT_LANGS, benchmark_prompts, equivalence

    prompts = benchmark_prompts(target.tokenizer, list(DEFAULT_LANGS), args.agreement_prompts, "translation")
    drafters = args.agreement_drafters.split(",")
    out = {"prompts": len(prompts), "drafters": drafters, "max_new_tokens": args.agreement_tokens}
    saved = lean.MERGE_MAX_TOKENS
    try:
        for name, merge in (("fused", saved), ("unfused", 0)):
            lean.MERGE_MAX_TOKENS = merge
            report = equivalence(target, prompts, drafters, max_new_tokens=args.agreement_tokens)
            out[name] = {"agreement_rate": round(report.agreement_rate, 3),
                         "agreement_with_plain": round(report.agreement_with_plain, 3),
                         "compared": report.compared, "mismatches": len(report.mismatches)}  # fmt: skip
    finally:
        lean.MERGE_MAX_TOKENS = saved
    return out


if __name__ == "__main__":
    main()
