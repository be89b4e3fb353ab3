"""Plain decoding tokens/s now against a checkout of an earlier commit, side by side.

    git worktree add runs/before 80d2052   # the float32 path before --dtype and the lean forward
    .venv/bin/python benchmarks/plain_then_now.py --before runs/before -o benchmarks/results/plain_then_now.json
    git worktree remove runs/before

Each round starts one child process per variant, in an order rotated per round: the ``--before``
tree in its default dtype, and this tree in float32 and in its default (``auto``). A child loads
the default target, warms up, and times greedy plain decoding (``NoDrafter`` through the
engine) of the same short in-language prompts. Tokens/s is tokens over wall seconds (the
prompts are 12 words, so prefill is a small share, the same for every variant); ratios are
taken per round, so the load of a shared machine hits the variants of one round alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time, torch
from babelspec.drafters.base import NoDrafter
from babelspec.engine import generate
from babelspec.target import load_target
from babelspec.sampling import SamplingConfig
prompts, tokens, dtype = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
target = load_target("gemma-3-270m", **({"dtype": dtype} if dtype else {}))
dt = str(next(target.model.parameters()).dtype)
ids = [target.tokenizer(p)["input_ids"] for p in prompts]
generate(target, NoDrafter(), ids[0], gamma=1, max_new_tokens=4, sampling=SamplingConfig(greedy=True))
n = s = 0
for x in ids:
    r = generate(target, NoDrafter(), x, gamma=1, max_new_tokens=tokens, sampling=SamplingConfig(greedy=True))
    n += r.n_tokens
    s += r.wall_seconds
print(json.dumps({"tokens": n, "seconds": s, "dtype": dt, "threads": torch.get_num_threads()}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="a checkout of the earlier commit")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--langs", default="amh,npi,yor")
    ap.add_argument("-o", "--output", type=Path, default=Path("runs/plain_then_now.json"))
    args = ap.parse_args()

    from babelspec.data.corpus import monolingual
    from babelspec.fileio import write_text_atomic

    prompts = [" ".join(monolingual(lang, "test")[0].split()[:12]) for lang in args.langs.split(",")]
    here = Path(__file__).resolve().parent.parent
    variants = {"before": (args.before.resolve(), ""), "now-float32": (here, "float32"), "now-auto": (here, "auto")}
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    for r in range(args.rounds):
        names = list(variants)
        names = names[r % len(names):] + names[: r % len(names)]
        for name in names:
            tree, dtype = variants[name]
            env = {**os.environ, "PYTHONPATH": str(tree)}
            out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(prompts), str(args.tokens), dtype],
                                 env=env, cwd=tree, capture_output=True, text=True, check=True)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            result["tokens_per_s"] = result["tokens"] / result["seconds"]
            runs[name].append(result)
            print(r, name, json.dumps(result), file=sys.stderr, flush=True)
    summary = {
        "prompts": prompts, "tokens_per_prompt": args.tokens, "rounds": args.rounds,
        "before": subprocess.run(["git", "-C", str(args.before), "rev-parse", "--short", "HEAD"],
                                 capture_output=True, text=True).stdout.strip() or args.before.name,
        "variants": {name: {"dtype": rs[0]["dtype"], "threads": rs[0]["threads"],
                            "tokens_per_s": round(statistics.median(x["tokens_per_s"] for x in rs), 2)}
                     for name, rs in runs.items()},
        "ratio_to_before": {
            name: round(statistics.median(a["tokens_per_s"] / b["tokens_per_s"]
                                          for a, b in zip(rs, runs["before"])), 3)
            for name, rs in runs.items()},
    }
    write_text_atomic(args.output, json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps(summary, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
