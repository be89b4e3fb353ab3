"""Acceptance of n-gram drafters with the real default target, per language, mode and policy.

For each language a bigram (and a trigram) is counted on the bundled monolingual train split
with the target's tokenizer. Each translation prompt (few-shot, base-model template) is followed
by its reference translation, each story prompt by a paragraph of the test split: real text in
the language, scored teacher-forced in one target forward (generating the target's own
continuations costs ~0.1–2 s per token on this shared CPU). At every position of that text each
drafter configuration proposes its first token and we compute, from the target's exact warped
distribution q there (the paper's sampling settings), the probability that the verifier keeps
it: Σₓ min(p(x), q(x)) for a sampled draft, q(x) for a point mass. Averaged over the positions
where the drafter proposed something, that is the expected acceptance rate α of the paper
(matched / judged); "coverage" is the share of positions where it proposed at all. With
``--engine-prompts N`` a few configurations also run through the real engine (γ = 4).

    .venv/bin/python benchmarks/ngram_acceptance.py --langs amh,npi,yor --prompts 8 -o runs/ngram_acceptance.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from babelspec.data.corpus import monolingual
from babelspec.data.tasks import get_task
from babelspec.drafters.base import NoDrafter, Verdict
from babelspec.drafters.ngram_drafter import NgramDraftConfig, NgramDrafter
from babelspec.engine import generate
from babelspec.ngram import CountConfig, train
from babelspec.sampling import SamplingConfig, logits_to_probs
from babelspec.target import load_target

CONFIGS: dict[str, tuple[int, dict]] = {
    f"{mode}/{unseen}": (2, {"mode": mode, "unseen": unseen})
    for mode in ("sample", "top1", "nucleus")
    for unseen in ("stop", "backoff", "uniform")
}
CONFIGS.update(
    {
        "top1/backoff/min1": (2, {"mode": "top1", "unseen": "backoff", "min_backoff": 1}),
        "top1/backoff/lookup3": (2, {"mode": "top1", "unseen": "backoff", "lookup": 3, "lookup_min": 2}),
        "sample/backoff/lookup3": (2, {"mode": "sample", "unseen": "backoff", "lookup": 3, "lookup_min": 2}),
        "sample/backoff/lookup3/min1": (2, {"mode": "sample", "unseen": "backoff", "lookup": 3, "lookup_min": 1}),
        "nucleus/backoff/lookup3": (2, {"mode": "nucleus", "unseen": "backoff", "lookup": 3, "lookup_min": 2}),
        "top1/backoff/threshold0.2": (2, {"mode": "top1", "unseen": "backoff", "threshold": 0.2}),
        "trigram/top1/backoff": (3, {"mode": "top1", "unseen": "backoff"}),
        "trigram/sample/backoff": (3, {"mode": "sample", "unseen": "backoff"}),
    }
)
ENGINE_CONFIGS = ("sample/uniform", "sample/backoff/lookup3")


def expected_acceptance(drafter: NgramDrafter, prompt: list[int], continuation: list[int], q: torch.Tensor,
                        sampling: SamplingConfig) -> tuple[list[float], int]:
    """Acceptance probability of the drafter's first token at each position it drafts."""
    drafter.start(prompt, sampling, torch.Generator().manual_seed(0))
    out, skipped = [], 0
    for i, y in enumerate(continuation):
        draft = drafter.propose(1)
        if len(draft) == 0:
            skipped += 1
        else:
            ids, p = draft.probs.support(0)
            out.append(float(torch.minimum(torch.from_numpy(p), q[i, torch.from_numpy(ids)]).sum()))
        drafter.commit(Verdict([], y))
    return out, skipped


def acceptance_on_responses(target, models: dict, responses: list[tuple[list[int], int]],
                            sampling: SamplingConfig) -> tuple[dict[str, list[float]], int]:  # fmt: skip
    """Per n-gram model, the acceptance of its first drafted token at every position of the
    target's own ``responses`` ((prompt + response ids, response start) pairs), scored against
    the target's exact warped rows; and the number of positions."""
    acc: dict[str, list[float]] = {k: [] for k in models}
    positions = 0
    for ids, start in responses:
        seq = torch.tensor(ids)
        with torch.inference_mode():
            logits = target.model(input_ids=seq[None, :-1], logits_to_keep=len(ids) - start).logits[0].float()
        q = logits_to_probs(logits, sampling, seq, first_position=start)
        positions += len(ids) - start
        for name, model in models.items():
            drafter = NgramDrafter(model, NgramDraftConfig(), vocab_size=target.vocab_size)
            acc[name] += expected_acceptance(drafter, ids[:start], ids[start:], q, sampling)[0]
    return acc, positions


def continuations(lang: str, task: str, tok, n: int, max_tokens: int) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, continuation ids) pairs: each prompt followed by real target-language text
    (the reference translation; for stories a paragraph of the monolingual test split)."""
    prompts = get_task(task).prompts(lang, tok, n)
    if task == "translation":
        texts = [p.reference or "" for p in prompts]
    else:
        texts = [t for t in monolingual(lang, "test") if len(t) > 80][: len(prompts)]
    out = []
    for prompt, text in zip(prompts, texts):
        ids = tok(prompt.text)["input_ids"]
        cont = tok(" " + text + "\n", add_special_tokens=False)["input_ids"][:max_tokens]
        if cont:
            out.append((ids, cont))
    return out


def _cell_summary(acc: dict[str, list[float]], positions: int, texts: int, engine: dict[str, list[dict]]) -> dict:
    """One language and task: each configuration's expected α, coverage and accepted tokens
    per position, and the engine's α, tokens per step and tokens/s where it ran."""
    return {
        "positions": positions,
        "texts": texts,
        "expected": {
            name: {
                "alpha": round(statistics.fmean(v), 4) if v else None,
                "coverage": round(len(v) / positions, 4) if positions else None,
                "accepted_per_position": round(sum(v) / positions, 4) if positions else None,
            }
            for name, v in acc.items()
        },
        "engine": {
            name: {
                "alpha": round(sum(x["accepted"] for x in runs)
                               / max(sum(x["accepted"] + x["rejections"] for x in runs), 1), 4),
                "tokens_per_step": round(sum(x["tokens"] for x in runs) / max(sum(x["steps"] for x in runs), 1), 3),
                "tokens_per_s": round(sum(x["tokens"] for x in runs) / max(sum(x["wall_seconds"] for x in runs), 1e-9), 3),
            }
            for name, runs in engine.items()
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="gemma-3-270m", help="a preset or a local model directory")
    ap.add_argument("--langs", default="amh,npi,yor")
    ap.add_argument("--tasks", default="translation,story")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per language and task")
    ap.add_argument("--max-tokens", type=int, default=96, help="continuation tokens scored per prompt")
    ap.add_argument("--engine-prompts", type=int, default=0, help="prompts per cell also run through the engine")
    ap.add_argument("--engine-tokens", type=int, default=32)
    ap.add_argument("-o", "--output", type=Path, default=Path("runs/ngram_acceptance.json"))
    args = ap.parse_args()

    sampling = SamplingConfig.paper()
    target = load_target(args.target)
    tok = target.tokenizer
    results: dict = {"sampling": sampling.to_dict(), "configs": {k: {"order": o, **v} for k, (o, v) in CONFIGS.items()},
                     "langs": {}}
    for lang in args.langs.split(","):
        models = {n: train(monolingual(lang, "train"), tok, CountConfig(order=n), corpus_name=f"{lang}:train")
                  for n in (2, 3)}
        lang_out: dict = {"train_tokens": models[2].training["tokens"], "tasks": {}}
        for task in args.tasks.split(","):
            acc: dict[str, list[float]] = {name: [] for name in CONFIGS}
            positions = 0
            engine: dict[str, list[dict]] = {}
            pairs = continuations(lang, task, tok, args.prompts, args.max_tokens)
            for pi, (ids, cont) in enumerate(pairs):
                seq = torch.tensor(ids + cont)
                with torch.inference_mode():
                    logits = target.model(input_ids=seq[None, :-1], logits_to_keep=len(cont)).logits[0].float()
                q = logits_to_probs(logits, sampling, seq, first_position=len(ids))
                positions += len(cont)
                for name, (order, opts) in CONFIGS.items():
                    d = NgramDrafter(models[order], NgramDraftConfig(**opts), vocab_size=target.vocab_size)
                    acc[name] += expected_acceptance(d, ids, cont, q, sampling)[0]
                if pi < args.engine_prompts:
                    for name in ("none",) + ENGINE_CONFIGS:
                        if name == "none":
                            d = NoDrafter()
                        else:
                            order, opts = CONFIGS[name]
                            d = NgramDrafter(models[order], NgramDraftConfig(**opts), vocab_size=target.vocab_size)
                        r = generate(target, d, ids, gamma=4, max_new_tokens=args.engine_tokens,
                                     sampling=SamplingConfig.paper(seed=100 + pi))
                        engine.setdefault(name, []).append(
                            {"accepted": r.accepted, "proposed": r.proposed, "rejections": r.rejections,
                             "steps": r.steps, "tokens": r.n_tokens, "wall_seconds": r.wall_seconds})
            cell = _cell_summary(acc, positions, len(pairs), engine)
            lang_out["tasks"][task] = cell
            print(lang, task, positions, json.dumps({k: v["alpha"] for k, v in cell["expected"].items()}),
                  json.dumps(cell["engine"]), flush=True)
        results["langs"][lang] = lang_out
    # mean over language × task cells of each configuration's expected α
    cells = [c for lo in results["langs"].values() for c in lo["tasks"].values() if c["positions"]]
    results["mean_expected"] = {
        name: {
            key: round(statistics.fmean(c["expected"][name][key] for c in cells if c["expected"][name][key] is not None), 4)
            for key in ("alpha", "coverage", "accepted_per_position")
        }
        for name in CONFIGS
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, ensure_ascii=False))
    tmp.replace(args.output)
    print(json.dumps(results["mean_expected"], indent=1))


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"done in {time.perf_counter() - t0:.0f} s")
