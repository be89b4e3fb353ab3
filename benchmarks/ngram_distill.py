"""Distilled n-grams against the corpus bigram, on the target's own outputs.

For each language and task the target (real default, paper sampling) answers held-out *test*
prompts; at every position of its own response we compute, from its exact warped distribution q,
the probability that the verifier keeps each drafter's first drafted token (Σₓ min(p(x), q(x)),
as in ``ngram_acceptance.py``), with prompt lookup on as in the study. Drafters, all bigrams
walked the same way (``NgramDraftConfig()``):

* ``corpus``: counted on the bundled monolingual train split (the paper's);
* ``general``: the target's top-20 soft targets over the first ``--tokens`` positions of that
  split, teacher-forced (``babelspec.distill.ngram_distill``, general mode: forwards only);
* ``task``: its soft targets over its own sampled responses to ``--train-prompts`` *train*
  prompts of the task (task mode: a generation per prompt);
* ``general+task``: both.

    .venv/bin/python benchmarks/ngram_distill.py --langs amh,npi,yor -o benchmarks/results/ngram_distill.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

from ngram_acceptance import acceptance_on_responses

from babelspec.data.corpus import monolingual
from babelspec.data.tasks import get_task
from babelspec.distill.ngram_distill import DistillConfig, distil, task_responses
from babelspec.fileio import write_text_atomic
from babelspec.machine import execution_info
from babelspec.ngram import CountConfig, train
from babelspec.sampling import SamplingConfig
from babelspec.target import load_target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="gemma-3-270m", help="a preset or a local model directory")
    ap.add_argument("--langs", default="amh,npi,yor")
    ap.add_argument("--tasks", default="story,translation")
    ap.add_argument("--tokens", type=int, default=8192, help="general-mode positions per language")
    ap.add_argument("--train-prompts", type=int, default=16, help="task-mode train prompts per cell")
    ap.add_argument("--test-prompts", type=int, default=6, help="held-out test prompts per cell")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--corpus-weight", type=float, default=0.0,
                    help="corpus counts per occurrence beside the soft counts (DistillConfig.corpus_weight)")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("-o", "--output", type=Path, default=Path("runs/ngram_distill.json"))
    args = ap.parse_args()

    sampling = SamplingConfig.paper()
    target = load_target(args.target, dtype=args.dtype)
    tok = target.tokenizer
    results: dict = {"sampling": sampling.to_dict(), "execution": execution_info(target),
                     "args": {k: str(v) for k, v in vars(args).items()}, "cells": {}}
    for lang in args.langs.split(","):
        texts = monolingual(lang, "train")
        mono = tok(list(texts), add_special_tokens=True).input_ids
        t0 = time.perf_counter()
        general_config = DistillConfig(max_tokens=args.tokens, corpus_weight=args.corpus_weight)
        general = distil(target, sampling=sampling, config=general_config, monolingual=mono)
        general_s = time.perf_counter() - t0
        corpus = train(texts, tok, CountConfig(order=2))
        for task in args.tasks.split(","):
            t0 = time.perf_counter()
            prompts = get_task(task).prompts(lang, tok, args.train_prompts, split="train")
            train_pairs = task_responses(target, prompts, replace(sampling, seed=1000), args.max_new_tokens)
            task_only = distil(target, sampling=sampling, config=DistillConfig(max_tokens=0), responses=train_pairs)
            task_s = time.perf_counter() - t0
            both = distil(target, sampling=sampling, config=general_config, monolingual=mono,
                          responses=train_pairs)
            models = {"corpus": corpus, "general": general, "task": task_only, "general+task": both}
            test = task_responses(target, get_task(task).prompts(lang, tok, args.test_prompts, split="test"),
                                  sampling, args.max_new_tokens)
            acc, positions = acceptance_on_responses(target, models, test, sampling)
            cell = {
                "test_positions": positions,
                "task_train_positions": task_only.training["task_positions"],
                "general_positions": general.training["general_positions"],
                "general_seconds": round(general_s, 1), "task_seconds": round(task_s, 1),
                "accepted_per_position": {k: round(sum(v) / positions, 4) if positions else None for k, v in acc.items()},
            }
            results["cells"][f"{lang}/{task}"] = cell
            print(lang, task, json.dumps(cell), flush=True)
    cells = [c for c in results["cells"].values() if c["test_positions"]]
    results["mean_accepted_per_position"] = {
        k: round(statistics.fmean(c["accepted_per_position"][k] for c in cells), 4) for k in cells[0]["accepted_per_position"]
    }
    base = results["mean_accepted_per_position"]["corpus"]
    results["relative_to_corpus"] = {k: round(v / base, 3) for k, v in results["mean_accepted_per_position"].items()}
    write_text_atomic(args.output, json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({k: results[k] for k in ("mean_accepted_per_position", "relative_to_corpus")}, indent=1))


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"done in {time.perf_counter() - t0:.0f} s")
