"""How closely a lower-precision target follows the model it was made from: teacher-forced top-1
agreement on the reference's own greedy continuation (both models read the same tokens; at each
position, does the other model's arg-max equal the reference's?)."""

from __future__ import annotations

from typing import Any


def teacher_forced_agreement(reference: Any, other: Any, ids: list[int], tokens: list[int]) -> float:
    """The share of ``tokens`` (a continuation of ``ids``) at which both ``CausalLM``\\ s, fed
    ``ids + tokens``, pick the same next token."""
    if not tokens:
        raise ValueError("teacher-forced agreement needs at least one continuation token")
    tops = []
    for lm in (reference, other):
        lm.reset()
        logits = lm.forward(list(ids) + list(tokens), logits_to_keep=len(tokens) + 1)[:-1]
        tops.append(logits.argmax(-1))
        lm.reset()
    return float((tops[0] == tops[1]).float().mean())


def greedy_agreement(reference: Any, other: Any, prompts: list[tuple[str, list[int]]], max_new_tokens: int) -> dict:
    """``{"agreement", "tokens", "per_lang": {lang: {"agreement", "tokens"}}}`` over ``(lang, ids)``
    prompts, each continued greedily by ``reference`` for up to ``max_new_tokens`` tokens;
    agreements are weighted by tokens."""
    from babelspec.drafters import make_drafter
    from babelspec.engine import generate
    from babelspec.sampling import SamplingConfig

    plain = make_drafter("none", reference)
    runs = []
    for lang, ids in prompts:
        tokens = generate(reference, plain, ids, max_new_tokens=max_new_tokens,
                          sampling=SamplingConfig(greedy=True)).token_ids  # fmt: skip
        if tokens:
            runs.append((lang, len(tokens), teacher_forced_agreement(reference, other, ids, tokens)))

    def pooled(rows: list[tuple[str, int, float]]) -> dict:
        n = sum(k for _, k, _ in rows)
        return {"agreement": round(sum(k * a for _, k, a in rows) / n, 4) if n else None, "tokens": n}

    langs = list(dict.fromkeys(lang for lang, _ in prompts))
    return {**pooled(runs), "per_lang": {lang: pooled([r for r in runs if r[0] == lang]) for lang in langs}}
