"""Restricted heads that take the rows of the tokens the target writes outside them, measured.

``head:LANG`` and ``int8:LANG`` score only the language's tokens (``drafters.vocab``) and the
prompt's. Where the target writes a token outside those rows a draft cannot propose it; since
``VocabHeadDrafter.commit`` the head scores such a token from the next draft on. This runs each
drafter with the rows fixed (the earlier behaviour) and growing, each beside plain decoding in
the same round, under the paper's sampling, on the bundled test prompts of a task: α and the
median per-prompt speedup per language, and the share of the target's own sampled tokens that
lay outside the language's rows and the prompt's.

    .venv/bin/python benchmarks/head_growth.py --task story -o benchmarks/results/head_growth_story.json
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from babelspec.distill.data import task_prompts
from babelspec.drafters import make_drafter
from babelspec.drafters.selfdraft import SelfDrafter
from babelspec.drafters.vocab import language_token_ids
from babelspec.drafters.vocabhead import VocabHeadDrafter
from babelspec.engine import generate
from babelspec.fileio import emit_json
from babelspec.machine import execution_info
from babelspec.sampling import SamplingConfig
from babelspec.target import load_target


def per_token(out) -> float:
    return (out.wall_seconds - out.prefill_seconds) / max(out.n_tokens, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="story", choices=["story", "translation"])
    parser.add_argument("--langs", default="amh,npi,yor")
    parser.add_argument("--prompts-per-lang", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--drafters", default="head,int8")
    parser.add_argument("-o", "--output")
    args = parser.parse_args()
    started = time.perf_counter()
    target = load_target("gemma-3-270m", dtype="auto")
    plain = make_drafter("none", target)
    growing = VocabHeadDrafter.commit
    out: dict = {"benchmark": "head_growth", "task": args.task, "prompts_per_lang": args.prompts_per_lang,
                 "max_new_tokens": args.max_new_tokens, "gamma": args.gamma, "threads": torch.get_num_threads(),
                 "execution": execution_info(target), "langs": {}}  # fmt: skip
    try:
        for lang in args.langs.split(","):
            prompts = task_prompts(args.task, lang, target.tokenizer, "test", args.prompts_per_lang)
            rows = set(language_token_ids(lang, target.tokenizer).tolist())
            result: dict = {}
            outside = written = 0
            for spec in args.drafters.split(","):
                drafter = make_drafter(f"{spec}:{lang}", target, lang=lang)
                for mode in ("fixed", "growing"):
                    VocabHeadDrafter.commit = SelfDrafter.commit if mode == "fixed" else growing
                    accepted = rejections = 0
                    ratios = []
                    for i, prompt in enumerate(prompts):
                        sampling = SamplingConfig.paper(seed=i)
                        ids = list(prompt.prompt_ids)
                        order = [(drafter, args.gamma), (plain, 1)][:: 1 if i % 2 == 0 else -1]  # alternated per prompt
                        runs = {d.name: generate(target, d, ids, gamma=g, max_new_tokens=args.max_new_tokens,
                                                 sampling=sampling, stop_strings=prompt.stop_strings) for d, g in order}
                        spec_run, plain_run = runs[drafter.name], runs[plain.name]
                        accepted += spec_run.accepted
                        rejections += spec_run.rejections
                        ratios.append(per_token(plain_run) / per_token(spec_run))
                        if spec == args.drafters.split(",")[0] and mode == "fixed":
                            known = rows | set(ids)
                            outside += sum(t not in known for t in plain_run.token_ids)
                            written += len(plain_run.token_ids)
                    result[f"{spec} {mode}"] = {"alpha": round(accepted / max(accepted + rejections, 1), 3),
                                                "speedup": round(statistics.median(ratios), 3)}  # fmt: skip
            result["target_tokens_outside_rows"] = f"{outside} of {written}"
            out["langs"][lang] = result
            print(lang, result, flush=True)
    finally:  # growth back on, whatever ended the runs
        VocabHeadDrafter.commit = growing
    out["wall_seconds"] = round(time.perf_counter() - started, 1)
    emit_json(out, args.output)


if __name__ == "__main__":
    main()
