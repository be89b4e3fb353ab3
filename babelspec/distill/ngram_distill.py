"""Distilled n-grams: an n-gram counted on the target's own next-token distributions.

A bigram counted on corpus text models the corpus, but the verifier keeps a drafted token with
probability min(1, q/p) under the *target's* distribution q, and a small target writes text
quite unlike a low-resource corpus (Gemma-3-270M answers Amharic story prompts in
Arabic script more often than in Ge'ez). So, as the paper's distilled drafters learn the
target's top-20 soft targets, this counts them: at every position of a text the target's
warped distribution q there (its ``top_k`` most likely tokens, under the sampling settings the
drafter will be judged with) is added to the row of the context before it, scaled to integer
counts (``scale`` per position; ``counting.count_weighted``). A position thus contributes a
whole distribution rather than one sampled token, which is what a few thousand tokens need.

Two sources, the paper's two distillation modes:

* ``general``: monolingual train text, scored teacher-forced (one forward per chunk);
* ``task``: the target's own sampled responses to a task's *train* prompts (one generation and
  one scoring forward each), so the drafter learns the trajectories it will be asked to draft.

The corpus's own counts can be added at a weight per occurrence (``corpus_weight``, in units of
one position's soft counts).

Measured with ``benchmarks/ngram_distill.py`` (expected acceptance of the first drafted token on
the target's own sampled outputs for held-out test prompts, paper sampling, bf16): see the
results file ``benchmarks/results/ngram_distill.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from babelspec.errors import UserError
from babelspec.ngram.counting import CountConfig, count_weighted
from babelspec.ngram.model import NgramModel
from babelspec.sampling import SamplingConfig, warp


@dataclass(frozen=True)
class DistillConfig:
    order: int = 2  # n of the n-gram (2: the paper's bigram)
    top_k: int = 20  # the target's most likely tokens kept per position (the paper's top-20)
    scale: int = 1000  # integer counts one position's probabilities add up to
    chunk: int = 256  # tokens scored per teacher-forced forward (general mode)
    max_tokens: int = 8192  # general mode: positions scored from the monolingual text
    # counts per corpus occurrence, in positions (0: the target only; 0.1 and 1 measured worse
    # than 0 in most cells, see benchmarks/ngram_distill.py's results)
    corpus_weight: float = 0.0

    def __post_init__(self) -> None:
        for name in ("order", "top_k", "scale", "chunk"):
            if getattr(self, name) < 1:
                raise UserError(f"distilled n-gram {name} must be >= 1 (got {getattr(self, name)})")
        if self.max_tokens < 0 or self.corpus_weight < 0:
            raise UserError("distilled n-gram max_tokens and corpus_weight must be >= 0")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Observations:
    """Weighted (context, next token) observations, gathered from several texts."""

    def __init__(self, order: int) -> None:
        self.order = order
        self._contexts: list[np.ndarray] = []
        self._next: list[np.ndarray] = []
        self._weights: list[np.ndarray] = []
        self.positions = 0

    def add(self, contexts: np.ndarray, next_tokens: np.ndarray, weights: np.ndarray) -> None:
        self._contexts.append(contexts.reshape(-1, self.order - 1))
        self._next.append(next_tokens.reshape(-1))
        self._weights.append(weights.reshape(-1))

    def add_text(self, ids: Sequence[int], weight: int) -> None:
        """Every position of a tokenised text, once, at ``weight`` (a corpus's hard counts)."""
        if weight <= 0 or len(ids) < 1:
            return
        seq = np.asarray(ids, dtype=np.int64)
        self.add(_contexts(seq, np.arange(len(seq)), self.order), seq, np.full(len(seq), weight, np.int64))

    def model(self, config: CountConfig, tokenizer: dict[str, Any], training: dict[str, Any]) -> NgramModel:
        if not self._next:
            raise UserError("no text to distil the n-gram from")
        return count_weighted(np.concatenate(self._contexts), np.concatenate(self._next),
                              np.concatenate(self._weights), config, tokenizer=tokenizer,
                              training={**training, "positions": self.positions})  # fmt: skip


def _contexts(seq: np.ndarray, positions: np.ndarray, order: int) -> np.ndarray:
    """[len(positions), order - 1]: the token ids before each position (−1 before the text)."""
    offsets = positions[:, None] + np.arange(-(order - 1), 0)[None, :]
    return np.where(offsets >= 0, seq[offsets.clip(min=0)], -1)


@torch.inference_mode()
def score(model: torch.nn.Module, ids: Sequence[int], start: int, sampling: SamplingConfig,
          config: DistillConfig, out: Observations) -> None:
    """Add the target's top-k soft counts at positions ``start`` … ``len(ids) − 1`` of ``ids``
    (the distribution of token t given tokens < t) to ``out``."""
    if not 1 <= start < len(ids):
        raise ValueError(f"start must be in [1, {len(ids)}) (got {start})")
    seq = torch.as_tensor(list(ids), dtype=torch.long)
    device = next(model.parameters()).device
    n = len(ids) - start
    logits = model(input_ids=seq[None, :-1].to(device), logits_to_keep=n).logits[0].float().cpu()
    probs = warp(logits, sampling, seq, first_position=start)
    k = config.top_k
    nxt = np.zeros((n, k), dtype=np.int64)
    weights = np.zeros((n, k), dtype=np.int64)
    for i in range(n):
        tokens, p = probs.support(i)
        if len(p) > k:
            top = np.argpartition(p, len(p) - k)[len(p) - k :]
            tokens, p = tokens[top], p[top]
        m = len(p)
        nxt[i, :m] = tokens
        weights[i, :m] = np.rint(p * config.scale)
    positions = np.arange(start, len(ids))
    ctx = _contexts(seq.numpy(), positions, config.order)
    out.add(np.repeat(ctx, k, axis=0), nxt, weights)
    out.positions += n


def general(model: torch.nn.Module, texts: Iterable[Sequence[int]], sampling: SamplingConfig,
            config: DistillConfig, out: Observations) -> None:
    """Score ``config.max_tokens`` positions of tokenised monolingual texts, ``config.chunk`` at
    a time (each chunk after the first token of its text sees the ``order - 1`` tokens before)."""
    budget = config.max_tokens
    for ids in texts:
        ids = list(ids)
        for begin in range(1, len(ids), config.chunk):
            if budget <= 0:
                return
            end = min(len(ids), begin + min(config.chunk, budget))
            lead = max(0, begin - (config.order - 1))
            score(model, ids[lead:end], begin - lead, sampling, config, out)
            budget -= end - begin


def distil(target: Any, *, sampling: SamplingConfig, config: DistillConfig = DistillConfig(),
           monolingual: Sequence[Sequence[int]] = (), responses: Sequence[tuple[Sequence[int], int]] = (),
           training: dict[str, Any] | None = None, log: Callable[[str], None] | None = None) -> NgramModel:  # fmt: skip
    """A distilled n-gram of ``target`` (a ``Target`` or anything with ``model`` and
    ``tokenizer``): general mode over ``monolingual`` (tokenised texts, also the corpus counts
    when ``config.corpus_weight`` > 0) and task mode over ``responses`` ((prompt + response ids,
    where the response starts) pairs, e.g. from ``task_responses``)."""
    from babelspec.models.tokenizers import tokenizer_fingerprint

    out = Observations(config.order)
    if config.max_tokens and monolingual:
        general(target.model, monolingual, sampling, config, out)
    general_positions = out.positions
    for ids, start in responses:
        if start < len(ids):
            score(target.model, ids, start, sampling, config, out)
    if log is not None:
        log(f"scored {general_positions} monolingual and {out.positions - general_positions} response positions")
    weight = int(round(config.corpus_weight * config.scale))
    if weight:
        for ids in monolingual:
            out.add_text(ids, weight)
    meta = {**(training or {}), "distilled": config.to_dict(), "sampling": sampling.to_dict(),
            "general_positions": general_positions, "task_positions": out.positions - general_positions}
    return out.model(CountConfig(order=config.order), tokenizer_fingerprint(target.tokenizer), meta)


def task_responses(target: Any, prompts: Sequence[Any], sampling: SamplingConfig,
                   max_new_tokens: int) -> list[tuple[list[int], int]]:  # fmt: skip
    """The target's own sampled responses to ``prompts`` (``data.tasks`` prompts: text and stop
    strings), as (prompt + response ids, response start) pairs; prompt i is sampled with seed
    ``sampling.seed + i``. A response ends before the token that completed a stop string."""
    from dataclasses import replace

    from babelspec.drafters.base import NoDrafter
    from babelspec.engine import generate

    tok = target.tokenizer
    pairs = []
    for i, prompt in enumerate(prompts):
        ids = tok(prompt.text)["input_ids"]
        r = generate(target, NoDrafter(), ids, gamma=1, max_new_tokens=max_new_tokens,
                     sampling=replace(sampling, seed=sampling.seed + i), stop_strings=tuple(prompt.stop_strings))
        response = list(r.token_ids)
        while response and r.stop_reason == "stop_string" and \
                not r.text.startswith(tok.decode(response, skip_special_tokens=False)):
            response.pop()  # the tokens of the stop string and after it
        if response:
            pairs.append((list(ids) + list(response), len(ids)))
    return pairs


def distil_texts(target: Any, texts: Iterable[str], *, sampling: SamplingConfig,
                 config: DistillConfig = DistillConfig(), task: str = "", lang: str = "",
                 prompts: int = 16, max_new_tokens: int = 48, training: dict[str, Any] | None = None,
                 log: Callable[[str], None] | None = None) -> NgramModel:  # fmt: skip
    """``distil`` from raw monolingual ``texts`` (general mode: ``config.max_tokens`` positions)
    and, with ``task``, from the target's answers to that task's train prompts for ``lang``
    (task mode). ValueError when there is nothing to score."""
    tok = target.tokenizer
    monolingual = tok(list(texts), add_special_tokens=True).input_ids \
        if config.max_tokens or config.corpus_weight else []  # fmt: skip
    responses: list[tuple[list[int], int]] = []
    if task:
        from babelspec.data.tasks import get_task

        items = get_task(task).prompts(lang, tok, prompts, split="train")
        if not items:
            raise UserError(f"no {task} train prompts for {lang!r} to distil on")
        if log is not None:
            log(f"answering {len(items)} {task} train prompts")
        responses = task_responses(target, items, sampling, max_new_tokens)
    return distil(target, sampling=sampling, config=config, monolingual=monolingual,
                  responses=responses, training=training, log=log)
