"""The gguf target mode's quality, measured: how closely the file's model as babelspec computes it
follows the float32 forward of the same weights, beside the bf16 rounding of them and llama.cpp's
own arithmetic on the same GGUF, per language, on held-out FLORES-200 text.

Teacher-forced: each test sentence of a language (SIB-200's FLORES-200 test split) follows its
English source as the translation task writes it ("English: ...\\n<Language>: "), and every model
reads the same tokens. Per language: top-1 agreement with float32 at each of the sentence's
tokens, and the perplexity of the sentence, for gguf, bf16 and llama.cpp (and float32's own
perplexity). ``gguf_minus_llama_cpp``: the paired difference of their agreements with a 95%
interval from a bootstrap over sentences; gguf is no worse than llama.cpp beyond the noise where
the interval's upper end is at or above 0.

    .venv/bin/python benchmarks/gguf_target.py --sentences 12 -o benchmarks/results/gguf_target.json
"""

from __future__ import annotations

import argparse
import math
import random
import time

import numpy as np
import torch

from babelspec.bench.tree import real_root
from babelspec.data import LANGUAGES
from babelspec.data.real import real_data
from babelspec.data.sources import parallel_records, parse_source
from babelspec.fileio import emit_json
from babelspec.machine import execution_info
from babelspec.models import DEFAULT_TARGET
from babelspec.models.llamacpp import open_llama_cpp
from babelspec.target import load_target

LANGS = ("amh", "ber", "grn", "ibo", "npi", "oci", "que", "yor", "zgh")  # the paper's 11 but chr, haw: no FLORES text


def logits_of(model, ids: list[int], n: int) -> torch.Tensor:
    """[n, vocab] float32: the logits predicting the last n of ``ids``."""
    if hasattr(model, "llama"):
        llm = model.llama
        llm.reset()
        llm.eval(ids)
        rows = torch.from_numpy(np.asarray(llm.scores[len(ids) - n - 1 : len(ids) - 1], dtype=np.float32))
        llm.reset()
        return rows
    model.reset()
    rows = model.forward(ids, logits_to_keep=n + 1)[:-1].float()
    model.reset()
    return rows


def bootstrap(pairs: list[tuple[int, int]], rounds: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% interval of sum(a)/sum(n) over sentences resampled with replacement (a: a paired
    difference summed over a sentence's tokens, n: its tokens)."""
    rng = random.Random(seed)
    stats = []
    for _ in range(rounds):
        pick = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        stats.append(sum(a for a, _ in pick) / sum(n for _, n in pick))
    stats.sort()
    return stats[int(0.025 * rounds)], stats[int(0.975 * rounds) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=DEFAULT_TARGET)
    parser.add_argument("--langs", default=",".join(LANGS))
    parser.add_argument("--sentences", type=int, default=12, help="held-out test sentences per language")
    parser.add_argument("--data-root", default="")
    parser.add_argument("-o", "--output")
    args = parser.parse_args()
    root = real_root("gguf_target", args.data_root)
    started = time.perf_counter()
    models = {"float32": load_target(args.target, dtype="float32"), "gguf": load_target(args.target, precision="gguf"),
              "bfloat16": load_target(args.target, dtype="bfloat16")}  # fmt: skip
    models["llama.cpp"] = open_llama_cpp(args.target, torch.get_num_threads(), logits_all=True)
    tokenizer = models["gguf"].tokenizer
    compared = ("gguf", "bfloat16", "llama.cpp")
    per_lang, totals = {}, {name: [0, 0.0] for name in compared}
    for lang in args.langs.split(","):
        real = real_data(lang, root)
        records = parallel_records(parse_source(real.test).resolve(str(root)), lang)[: args.sentences]
        agree = {name: [] for name in compared}  # per sentence: tokens agreeing with float32
        nll = {name: 0.0 for name in ("float32", *compared)}
        lengths = []
        for record in records:
            prompt = tokenizer(f"English: {record['en']}\n{LANGUAGES[lang].name}:")["input_ids"]
            text = tokenizer(" " + record["text"], add_special_tokens=False)["input_ids"]
            ids, n = prompt + text, len(text)
            target = torch.tensor(text)
            rows = {name: logits_of(model, ids, n) for name, model in models.items()}
            reference = rows["float32"].argmax(-1)
            for name in nll:
                nll[name] += float(-torch.log_softmax(rows[name], -1)[torch.arange(n), target].sum())
            for name in compared:
                agree[name].append(int((rows[name].argmax(-1) == reference).sum()))
            lengths.append(n)
        tokens = sum(lengths)
        diff = [(ours - theirs, n) for ours, theirs, n in zip(agree["gguf"], agree["llama.cpp"], lengths)]
        low, high = bootstrap(diff)
        per_lang[lang] = {"sentences": len(records), "tokens": tokens,
                          "agreement_with_float32": {name: round(sum(agree[name]) / tokens, 4) for name in compared},
                          "perplexity": {name: round(math.exp(nll[name] / tokens), 3) for name in nll},
                          "gguf_minus_llama_cpp": round(sum(d for d, _ in diff) / tokens, 4),
                          "gguf_minus_llama_cpp_95": [round(low, 4), round(high, 4)],
                          "gguf_no_worse_than_llama_cpp": high >= 0}  # fmt: skip
        for name in compared:
            totals[name][0] += sum(agree[name])
        totals_tokens = sum(v["tokens"] for v in per_lang.values())
        print(lang, per_lang[lang], flush=True)
    out = {"benchmark": "gguf_target", "target": args.target, "data": "SIB-200 FLORES-200 test split, first "
           f"{args.sentences} sentences per language, after their English source", "execution": execution_info(models["gguf"]),
           "threads": torch.get_num_threads(), "wall_seconds": round(time.perf_counter() - started, 1),
           "agreement_with_float32": {name: round(totals[name][0] / totals_tokens, 4) for name in compared},
           "languages_no_worse_than_llama_cpp": sum(v["gguf_no_worse_than_llama_cpp"] for v in per_lang.values()),
           "per_lang": per_lang}  # fmt: skip
    models["llama.cpp"].close()
    emit_json(out, args.output)


if __name__ == "__main__":
    main()
