"""The W8A8 target mode, measured: speed against bf16 and agreement with it, per language.

``load_target(precision="w8a8")`` (``lean.quantize_w8a8``) runs the layers' products (MLP
down-projections kept bf16 by default) and the output head on oneDNN's int8 product, int8 weights
with one scale per row and each activation row quantized with its own scale after SmoothQuant's
per-channel smoothing, calibrated on the bundled corpora's training pairs. On held-out FLORES-200
test translations this measures plain greedy decode tokens/s of bf16 and of W8A8, the first token
where their greedy outputs part, and the teacher-forced top-1 agreement (W8A8's arg-max on bf16's
own output, position by position), per language; ``--llama-cpp`` adds llama.cpp's agreement on
the same GGUF (its Q4_K_M weights under 8-bit activations), the quality the peer runs at.
``--keep`` and ``--alpha`` try other settings than the mode's.

    .venv/bin/python benchmarks/w8a8_target.py --llama-cpp --prompts-per-lang 3 -o benchmarks/results/w8a8_target.json
"""

from __future__ import annotations

import argparse
import statistics

import torch

from babelspec.bench.agreement import teacher_forced_agreement
from babelspec.bench.tree import flores_prompts, real_root
from babelspec.drafters import make_drafter
from babelspec.engine import generate
from babelspec.fileio import emit_json
from babelspec.forward.w8a8 import W8A8_ALPHA, W8A8_KEEP, quantize_w8a8
from babelspec.machine import execution_info
from babelspec.models import DEFAULT_TARGET
from babelspec.models.llamacpp import open_llama_cpp
from babelspec.sampling import SamplingConfig
from babelspec.target import calibrate, load_target

LANGS = ("amh", "npi", "yor", "grn", "ibo", "oci")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=DEFAULT_TARGET, help="a preset or a local model directory")
    parser.add_argument("--langs", default=",".join(LANGS))
    parser.add_argument("--alpha", type=float, default=W8A8_ALPHA, help="SmoothQuant's migration strength (0: none)")
    parser.add_argument("--keep", default=",".join(W8A8_KEEP), help="product kinds kept bf16 (qkv,o,gate_up,down)")
    parser.add_argument("--head-rows", type=int, default=0, help="calibrate the head on each text's last N rows (0: all)")
    parser.add_argument("--llama-cpp", action="store_true", help="also llama.cpp's agreement on the same GGUF")
    parser.add_argument("--prompts-per-lang", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--data-root", default="")
    parser.add_argument("-o", "--output")
    args = parser.parse_args()
    root = real_root("w8a8_target", args.data_root)
    base = load_target(args.target, dtype="bfloat16")
    quant = load_target(args.target, dtype="bfloat16")
    keep = tuple(k for k in args.keep.split(",") if k)
    quantize_w8a8(quant.lean, lambda: calibrate(quant, head_rows=args.head_rows), args.alpha, keep)  # the mode's own calibration
    llama = None
    if args.llama_cpp:  # the same GGUF's weights (Q4_K_M) under llama.cpp's 8-bit activations
        llama = open_llama_cpp(args.target, torch.get_num_threads(), logits_all=True)

    greedy = SamplingConfig(greedy=True)
    runs = []
    langs = args.langs.split(",")
    for lang in langs:
        for p in flores_prompts(lang, base.tokenizer, args.prompts_per_lang, root):
            ids = list(p.prompt_ids)
            outs = [generate(t, make_drafter("none", t), ids, max_new_tokens=args.max_new_tokens, sampling=greedy,
                             stop_strings=p.stop_strings) for t in (base, quant)]  # fmt: skip
            a, b = (o.token_ids for o in outs)
            parted = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            k = len(a)
            extra = {}
            if llama is not None:
                extra["llama_cpp_agreement"] = teacher_forced_agreement(base, llama, ids, a)
            runs.append({"lang": lang, "tokens": k, "parted_at": parted, **extra,
                         "agreement": teacher_forced_agreement(base, quant, ids, a),
                         "bf16_tokens_per_s": outs[0].n_tokens / (outs[0].wall_seconds - outs[0].prefill_seconds),
                         "w8a8_tokens_per_s": outs[1].n_tokens / (outs[1].wall_seconds - outs[1].prefill_seconds)})

    def summary(rows: list[dict]) -> dict:
        def pooled(key: str) -> float:  # weighted by tokens
            return round(sum(r[key] * r["tokens"] for r in rows) / sum(r["tokens"] for r in rows), 3)

        extra = {"llama_cpp_agreement": pooled("llama_cpp_agreement")} if llama is not None else {}
        return {**extra, "teacher_forced_agreement": pooled("agreement"),
                "median_parted_at": statistics.median(r["parted_at"] for r in rows),
                "speedup": round(statistics.median(r["w8a8_tokens_per_s"] / r["bf16_tokens_per_s"] for r in rows), 3)}  # fmt: skip

    out = {"benchmark": "w8a8_target", "alpha": args.alpha, "keep": list(keep), "head_rows": args.head_rows, "execution": execution_info(base),
           "threads": torch.get_num_threads(), "all": summary(runs),
           "per_lang": {lang: summary([r for r in runs if r["lang"] == lang]) for lang in langs}, "runs": runs}  # fmt: skip
    emit_json(out, args.output)


if __name__ == "__main__":
    main()
