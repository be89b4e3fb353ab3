"""The lean forward's C glue (``babelspec.native``), on and off, side by side in one process.

Three measurements, every cell once per round in an order rotated per round, medians over the
rounds (round 0 warms up and is dropped):

* one norm-and-residual region of a layer ([1, 1, 640] bf16: residual + RMSNorm(h), then the
  next RMSNorm) as the eager torch operations, under ``torch.compile`` and as the C call;
* the bf16 target's forward, a decode step (1 token) and verification blocks, after a short and a
  long context: glue and float32 attention (the default), glue with bf16 attention, neither;
* the int8 self-drafter's one-token step (``int8:LANG``'s forward), with its glue and float32
  attention, and without either (its bf16 cache, as the target's).

Then the glue's agreement with the torch operations: greedy output (``bench equivalence``) with
the glue on and off, against Hugging Face greedy and against babelspec's own plain decoding.

    .venv/bin/python benchmarks/native_glue.py -o benchmarks/results/native_glue.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from babelspec.fileio import emit_json
from babelspec.lean import _rms, lean_forward
from babelspec.machine import execution_info
from babelspec.models import DEFAULT_TARGET
from babelspec.native import glue
from babelspec.target import load_target


def _median_us(function, calls: int = 300) -> float:
    for _ in range(20):
        function()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        function()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def region_call(c_glue) -> dict:
    """One norm-and-residual region: eager, compiled and C, microseconds a call."""

    def region(residual, h, first, second):
        x = residual + _rms(h, first, 1e-6)
        return x, _rms(x, second, 1e-6)

    residual, h = torch.randn(1, 1, 640).bfloat16(), torch.randn(1, 1, 640).bfloat16()
    first, second = torch.rand(640) + 0.5, torch.rand(640) + 0.5
    compiled = torch.compile(region, dynamic=False, fullgraph=True)
    with torch.inference_mode():
        compiled(residual, h, first, second)
        out = {"eager_us": _median_us(lambda: region(residual, h, first, second)),
               "compiled_us": _median_us(lambda: compiled(residual, h, first, second)),
               "c_us": _median_us(lambda: c_glue.add_rms(residual, h, (first, 1e-6), (second, 1e-6)))}  # fmt: skip
    return {k: round(v, 1) for k, v in out.items()}


def forward_cells(target, c_glue, blocks, contexts, rounds, lang) -> dict:
    """Medians of the target's forward (glue on/off) and the int8 drafter's step (on/off), ms."""
    from babelspec.drafters.vocab import language_token_ids
    from babelspec.drafters.vocabhead import RestrictedHeadLM

    lean = target.lean
    drafter = lean_forward(RestrictedHeadLM(target.model, torch.as_tensor(language_token_ids(lang, target.tokenizer)),
                                            quantize="int8"), quantize="int8")  # fmt: skip
    settings = {("target", "on"): (lean, c_glue, lean.cache_dtype, lean.keys_t),
                ("target", "glue_bf16_attention"): (lean, c_glue, torch.bfloat16, lean.keys_t),
                ("target", "off"): (lean, None, torch.bfloat16, lean.keys_t),
                ("int8", "on"): (drafter, c_glue, torch.float32, drafter.keys_t),
                ("int8", "off"): (drafter, None, torch.bfloat16, True)}  # fmt: skip

    def use(key):
        forward, g, dtype, keys_t = settings[key]
        forward.glue, forward.cache_dtype, forward.keys_t = g, dtype, keys_t
        return forward

    caches = {}
    for key in settings:
        for context in contexts:
            forward = use(key)
            caches[(key, context)] = cache = forward.new_cache()
            forward(torch.arange(1000, 1000 + context).view(1, -1), cache)
    cells = [(key, context, b) for key in settings for context in contexts
             for b in (blocks if key[0] == "target" else [1])]  # fmt: skip
    times: dict[tuple, list[float]] = {cell: [] for cell in cells}
    for round_ in range(rounds + 1):
        shift = round_ % len(cells)
        for key, context, b in cells[shift:] + cells[:shift]:
            forward, cache = use(key), caches[(key, context)]
            ids = torch.full((1, b), 1234)
            t0 = time.perf_counter()
            forward(ids, cache)
            elapsed = time.perf_counter() - t0
            cache.crop(-b)
            if round_:
                times[(key, context, b)].append(elapsed)
    use(("target", "on"))
    use(("int8", "on"))
    out = {}
    for (model, setting), context, b in cells:
        if setting != "on":
            continue
        ms = {s: statistics.median(times[((model, s), context, b)]) * 1e3 for m, s in settings if m == model}
        name = "target" if model == "target" else f"int8:{lang} drafter"
        cell = {"glue_ms": round(ms["on"], 2), "torch_ops_ms": round(ms["off"], 2),
                "speedup": round(ms["off"] / ms["on"], 3)}  # fmt: skip
        if "glue_bf16_attention" in ms:
            cell["glue_bf16_attention_ms"] = round(ms["glue_bf16_attention"], 2)
        out[f"{name}, context {context}, {b} tokens"] = cell
    return out


def agreement(target, c_glue, prompts_per_lang, drafters, max_new_tokens) -> dict:
    """``bench equivalence`` on the same prompts with the glue on, then off."""
    from babelspec.bench.peers import DEFAULT_LANGS, benchmark_prompts, equivalence

    prompts = benchmark_prompts(target.tokenizer, list(DEFAULT_LANGS), prompts_per_lang, "translation")
    out = {"prompts": len(prompts), "drafters": drafters, "max_new_tokens": max_new_tokens}
    try:
        for name, on in (("glue", True), ("torch_ops", False)):
            target.lean.set_native(on)
            target.reset()
            report = equivalence(target, prompts, drafters, max_new_tokens=max_new_tokens)
            out[name] = {"agreement_rate": round(report.agreement_rate, 3),
                         "agreement_with_plain": round(report.agreement_with_plain, 3),
                         "compared": report.compared, "mismatches": len(report.mismatches)}  # fmt: skip
    finally:
        target.lean.set_native(True)
        target.reset()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=DEFAULT_TARGET)
    ap.add_argument("--blocks", default="1,5,9", help="tokens per target forward")
    ap.add_argument("--contexts", default="64,512", help="cached tokens before each forward")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--lang", default="amh", help="the int8 drafter's language (its restricted head)")
    ap.add_argument("--agreement-prompts", type=int, default=2, help="translation prompts per language (0: skip)")
    ap.add_argument("--agreement-drafters", default="none,bigram@,int8")
    ap.add_argument("--agreement-tokens", type=int, default=32)
    ap.add_argument("-o", "--output", type=Path, default=Path("runs/native_glue.json"))
    args = ap.parse_args()
    c_glue = glue()
    if c_glue is None:
        raise SystemExit("the C glue is not built here (no C compiler, or BABELSPEC_NATIVE=0): nothing to compare")
    target = load_target(args.target, dtype="bfloat16")
    if target.lean is None or target.lean.glue is None:
        raise SystemExit(f"{args.target} runs no glue in bf16 (its lean forward is not fused): nothing to compare")
    blocks = [int(b) for b in args.blocks.split(",")]
    contexts = [int(c) for c in args.contexts.split(",")]
    out = {"benchmark": "native_glue", "target": args.target, "rounds": args.rounds,
           "execution": execution_info(target), "region_call": region_call(c_glue),
           "cells": forward_cells(target, c_glue, blocks, contexts, args.rounds, args.lang)}  # fmt: skip
    speedups = [c["speedup"] for c in out["cells"].values()]
    out["median_speedup"] = round(statistics.median(speedups), 3)
    if args.agreement_prompts:
        drafters = args.agreement_drafters.split(",")
        out["agreement"] = agreement(target, c_glue, args.agreement_prompts, drafters, args.agreement_tokens)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    emit_json(out, args.output, indent=2)


if __name__ == "__main__":
    main()
