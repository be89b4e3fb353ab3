"""How the distilled n-gram's acceptance grows with the target positions it learns from.

For each language (FLORES-200 codes; the real sets of ``--data-root``), the bigram distilled from
the target (general mode, top-20 soft targets) over the first N positions of the language's real
training text (SIB-200 train + dev, NTREX-128, OLDI Seed where they hold it, test sentences
dropped), for each N of ``--positions``, and the trigram over the most positions (backing off to
the bigram where it has not seen a context), are scored on the target's own sampled answers to
``--prompts`` held-out SIB-200 test prompts (4-shot translation, the wide profile's): at every
position, the probability that the verifier keeps the drafter's first drafted token,
sum_x min(p(x), q(x)) under the paper's sampling (as ``ngram_acceptance.py``). The corpus bigram
of the same text is the reference. Prints JSON: per language and drafter the mean acceptance,
and the distillation's seconds.

    .venv/bin/python benchmarks/distil_positions.py --data-root ../shared/corpora \\
        -o benchmarks/results/distil_positions.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from ngram_acceptance import acceptance_on_responses

from babelspec.data.sources import real_training_texts
from babelspec.distill.ngram_distill import DistillConfig, distil, task_responses
from babelspec.experiments.config import config_from_dict
from babelspec.experiments.worker import task_prompts
from babelspec.fileio import write_text_atomic
from babelspec.machine import execution_info
from babelspec.ngram import CountConfig, train
from babelspec.sampling import SamplingConfig
from babelspec.target import load_target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="gemma-3-270m")
    ap.add_argument("--langs", default="ita_Latn,rus_Cyrl,tur_Latn,yor_Latn")
    ap.add_argument("--positions", default="4096,16384,65536", help="general-mode positions per distillation")
    ap.add_argument("--prompts", type=int, default=8, help="held-out SIB-200 test prompts per language")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--data-root", required=True, help="the corpora folder (SIB-200 unpacked as sib200/)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("-o", "--output", type=Path, default=Path("runs/distil_positions.json"))
    args = ap.parse_args()

    sampling = SamplingConfig.paper()
    target = load_target(args.target, dtype=args.dtype)
    tok = target.tokenizer
    counts = [int(n) for n in args.positions.split(",")]
    data = config_from_dict({"languages": args.langs.split(","), "data": {"default": "real", "root": args.data_root}}).data
    results: dict = {"sampling": sampling.to_dict(), "execution": execution_info(target),
                     "args": {k: str(v) for k, v in vars(args).items()}, "languages": {}}  # fmt: skip
    for lang in args.langs.split(","):
        texts = real_training_texts(lang, args.data_root)
        mono = tok(list(texts), add_special_tokens=True).input_ids
        available = sum(len(ids) for ids in mono)
        models, seconds = {"corpus bigram": train(texts, tok, CountConfig(order=2))}, {}
        for n in counts:
            t0 = time.perf_counter()
            models[f"bigram {n}"] = distil(target, sampling=sampling, config=DistillConfig(order=2, max_tokens=n),
                                           monolingual=mono)  # fmt: skip
            seconds[f"bigram {n}"] = round(time.perf_counter() - t0, 1)
        t0 = time.perf_counter()
        models[f"trigram {counts[-1]}"] = distil(target, sampling=sampling, monolingual=mono,
                                                 config=DistillConfig(order=3, max_tokens=counts[-1]))  # fmt: skip
        seconds[f"trigram {counts[-1]}"] = round(time.perf_counter() - t0, 1)
        prompts = task_prompts("translation", lang, tok, args.prompts, data)
        test = task_responses(target, prompts, sampling, args.max_new_tokens)
        acc, positions = acceptance_on_responses(target, models, test, sampling)
        row = {"training_tokens": available, "test_positions": positions,
               "distilled_positions": {k: m.training.get("general_positions") for k, m in models.items() if k != "corpus bigram"},
               "seconds": seconds,
               "accepted_per_position": {k: round(sum(v) / positions, 4) if positions else None for k, v in acc.items()}}  # fmt: skip
        results["languages"][lang] = row
        print(lang, json.dumps(row), flush=True)
    rows = [r for r in results["languages"].values() if r["test_positions"]]
    names = list(rows[0]["accepted_per_position"])
    results["mean_accepted_per_position"] = {k: round(statistics.fmean(r["accepted_per_position"][k] for r in rows), 4)
                                             for k in names}  # fmt: skip
    write_text_atomic(args.output, json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps(results["mean_accepted_per_position"], indent=1))


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"done in {time.perf_counter() - t0:.0f} s")
