"""What a step whose drafts are almost all rejected costs, in plain decoding steps, on the real
default target: a bigram of another script (the bundled Tamazight, Tifinagh) drafts an
English→Italian translation, γ 4, the paper's sampling, side by side with plain decoding per
seed (the order alternating). Prints one JSON object: medians of the decode time per token of
each, and of one speculative step's time over one plain token's.

    .venv/bin/python benchmarks/rejected_step.py --seeds 8 -o benchmarks/results/rejected_step.json
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from babelspec.data.corpus import monolingual
from babelspec.drafters import make_drafter
from babelspec.engine import generate
from babelspec.fileio import emit_json
from babelspec.machine import execution_info
from babelspec.ngram import CountConfig, train
from babelspec.sampling import SamplingConfig
from babelspec.target import load_target

PROMPT = "English: The weather is nice today and we will walk to the old market near the river.\nItalian:"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="gemma-3-270m")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()
    target = load_target(args.target, dtype=args.dtype)
    with tempfile.TemporaryDirectory() as folder:
        table = Path(folder) / "zgh.ngram"
        train(monolingual("zgh"), target.tokenizer, CountConfig(order=2)).save(table)
        wrong = make_drafter(f"ngram:{table}", target)
    plain = make_drafter("none", target)
    ids = target.tokenizer(PROMPT)["input_ids"]
    rows = []
    for seed in range(args.seeds):
        runs = [(plain, 1), (wrong, args.gamma)][:: -1 if seed % 2 else 1]
        res = {}
        for drafter, gamma in runs:
            r = generate(target, drafter, ids, gamma=gamma, max_new_tokens=args.max_new_tokens,
                         sampling=SamplingConfig.paper(seed))  # fmt: skip
            res[gamma] = r
        p, s = res[1], res[args.gamma]
        plain_token = (p.wall_seconds - p.prefill_seconds) / p.n_tokens
        rows.append({"plain_token_s": plain_token, "spec_token_s": (s.wall_seconds - s.prefill_seconds) / s.n_tokens,
                     "step_in_plain_steps": (s.wall_seconds - s.prefill_seconds) / s.steps / plain_token,
                     "accepted": s.accepted, "proposed": s.proposed})  # fmt: skip
    emit_json({
        "benchmark": "rejected_step", "target": args.target, "gamma": args.gamma, "max_new_tokens": args.max_new_tokens, "seeds": args.seeds,
        "execution": execution_info(target),
        "plain_ms_per_token": round(1000 * statistics.median(r["plain_token_s"] for r in rows), 2),
        "speculative_ms_per_token": round(1000 * statistics.median(r["spec_token_s"] for r in rows), 2),
        "step_in_plain_steps_median": round(statistics.median(r["step_in_plain_steps"] for r in rows), 3),
        "alpha_token": round(sum(r["accepted"] for r in rows) / max(1, sum(r["proposed"] for r in rows)), 3),
    }, args.output)  # fmt: skip


if __name__ == "__main__":
    main()
