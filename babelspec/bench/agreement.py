"""How closely a lower-precision target follows the model it was made from: teacher-forced top-1
agreement on the reference's own greedy continuation (both models read the same tokens; at each
position, does the other model's arg-max equal the reference's?)."""

from __future__ import annotations

from typing import Any

import torch

from babelspec.errors import UserError


def top_tokens(model: Any, ids: list[int], tokens: list[int]) -> torch.Tensor:
    """``model``'s arg-max after each position of ``ids + tokens`` from the last prompt token on
    (``len(tokens)`` of them): a ``CausalLM``, or anything with its own ``top_tokens`` (llama.cpp)."""
    if hasattr(model, "top_tokens"):
        return torch.as_tensor(model.top_tokens(ids, tokens))
    model.reset()
    logits = model.forward(list(ids) + list(tokens), logits_to_keep=len(tokens) + 1)[:-1]
    model.reset()
    return logits.argmax(-1)


def teacher_forced_agreement(reference: Any, other: Any, ids: list[int], tokens: list[int]) -> float:
    """The share of ``tokens`` (a continuation of ``ids``) at which both models, fed
    ``ids + tokens``, pick the same next token."""
    if not tokens:
        raise UserError("teacher-forced agreement needs at least one continuation token")
    mine, theirs = top_tokens(reference, ids, tokens), top_tokens(other, ids, tokens)
    return float((mine == theirs).float().mean())


def greedy_agreement(reference: Any, others: dict[str, Any], prompts: list[tuple[str, list[int]]],
                     max_new_tokens: int) -> dict:  # fmt: skip
    """For each named model in ``others``: ``{"agreement", "tokens", "per_lang": {lang:
    {"agreement", "tokens"}}}`` over ``(lang, ids)`` prompts, each continued greedily by
    ``reference`` for up to ``max_new_tokens`` tokens; agreements weighted by tokens."""
    from babelspec.drafters import make_drafter
    from babelspec.engine import generate
    from babelspec.sampling import SamplingConfig

    plain = make_drafter("none", reference)
    runs: dict[str, list[tuple[str, int, float]]] = {name: [] for name in others}
    for lang, ids in prompts:
        tokens = generate(reference, plain, ids, max_new_tokens=max_new_tokens,
                          sampling=SamplingConfig(greedy=True)).token_ids  # fmt: skip
        if tokens:
            mine = top_tokens(reference, ids, tokens)
            for name, other in others.items():
                runs[name].append((lang, len(tokens), float((mine == top_tokens(other, ids, tokens)).float().mean())))

    def pooled(rows: list[tuple[str, int, float]]) -> dict:
        n = sum(k for _, k, _ in rows)
        return {"agreement": round(sum(k * a for _, k, a in rows) / n, 4) if n else None, "tokens": n}

    langs = list(dict.fromkeys(lang for lang, _ in prompts))
    return {name: {**pooled(rows), "per_lang": {lang: pooled([r for r in rows if r[0] == lang]) for lang in langs}}
            for name, rows in runs.items()}  # fmt: skip
