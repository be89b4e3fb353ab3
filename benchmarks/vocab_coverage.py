"""How many of the tokens the target samples a restricted head has rows for, with and without the
tokens the target itself finds likely on the language's text (``drafters.vocab.predicted_token_ids``).

A restricted head's draft is the target's own distribution renormalised on its rows (``gguf:LANG``
scores the target's hidden state with the target's own rows), so under sampling a draft is
accepted with about the probability the target puts on those rows: a token the target samples
outside them is a rejection. This reads a run's store and artifacts (``babelspec run``, a
``kind = "head"`` setting): the texts its plain decoding sampled per language, tokenised again,
and counts the tokens outside the rows the run's head kept (with the prompt's tokens and those
already written, as the drafter keeps them), then outside those rows widened by the target's likely
tokens at each threshold, over the first ``--tokens`` tokens of the language's train text. JSON.

    .venv/bin/python benchmarks/vocab_coverage.py runs/flores200 --langs oci ast_Latn hin_Deva som_Latn \\
        -o benchmarks/results/vocab_coverage.json
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from pathlib import Path

import numpy as np

from babelspec.data.corpus import monolingual
from babelspec.data.sources import training_texts
from babelspec.drafters.vocab import predicted_token_ids
from babelspec.experiments.config import load_config
from babelspec.experiments.worker import task_prompts
from babelspec.fileio import write_text_atomic
from babelspec.machine import cpu_model
from babelspec.target import load_target


def outside_share(rows: set[int], samples: list[tuple[list[int], list[int]]]) -> float:
    """The share of the sampled tokens outside ``rows``, the prompt's and those written before."""
    outside = total = 0
    for prompt, written in samples:
        kept = rows | set(prompt)
        for token in written:
            total += 1
            outside += token not in kept
            kept.add(token)
    return outside / max(total, 1)


def language(run: Path, cfg, target, lang: str, head: str, tokens: int, thresholds: list[float]) -> dict:
    store = sqlite3.connect(run / "results.sqlite")
    found = sorted((run / "artifacts" / "head").glob(f"{head}-{lang}-*.npy"))
    if not found:
        raise SystemExit(f"no {head} rows for {lang} under {run}/artifacts/head: is it a kind = \"head\" setting?")
    rows = set(np.load(found[0]).tolist())
    done = store.execute("select prompt_index, text from examples where language=? and drafter='none'",
                         (lang,)).fetchall()  # fmt: skip
    prompts = task_prompts("translation", lang, target.tokenizer, max(i for i, _ in done) + 1, data=cfg.data)
    samples = [(prompts[i].ids, target.tokenizer(text, add_special_tokens=False)["input_ids"]) for i, text in done]
    if cfg.data is None or cfg.data.bundled(lang):  # the bundled train split, as the run counted it
        texts = monolingual(lang, "train")
    else:
        sources = cfg.data.sources(lang)
        texts, _ = training_texts(list(sources[2]), lang, sources[0])
    out = {"language": lang, "sampled_tokens": sum(len(w) for _, w in samples), "rows": len(rows),
           "outside": round(outside_share(rows, samples), 4), "predicted": []}  # fmt: skip
    for threshold in thresholds:
        t0 = time.perf_counter()
        likely = set(predicted_token_ids(target.model, target.tokenizer, texts, tokens=tokens,
                                         threshold=threshold).tolist())  # fmt: skip
        seconds = time.perf_counter() - t0
        wider = rows | likely
        out["predicted"].append({"threshold": threshold, "tokens": tokens, "rows": len(wider),
                                 "outside": round(outside_share(wider, samples), 4), "seconds": round(seconds, 2)})  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--langs", nargs="+", required=True)
    ap.add_argument("--head", default="gguf", help="the kind = \"head\" setting's name in the run")
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.002, 0.001, 0.0005])
    ap.add_argument("-o", "--output", type=Path)
    args = ap.parse_args()
    cfg = load_config(args.run / "config.toml")
    target = load_target(cfg.target)
    result = {"benchmark": "vocab_coverage", "run": str(args.run), "machine": cpu_model(),
              "languages": [language(args.run, cfg, target, lang, args.head, args.tokens, args.thresholds)
                            for lang in args.langs]}  # fmt: skip
    text = json.dumps(result, indent=1)
    if args.output:
        write_text_atomic(args.output, text + "\n")
    print(text)


if __name__ == "__main__":
    main()
