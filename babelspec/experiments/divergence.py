"""Draft/target divergence on held-out text, and its relation to how well-resourced a language is.

For each held-out (monolingual test) text the target scores every position in one forward;
the drafter is driven through its own interface (``propose(1)``, then ``commit`` of the true
next token), so any drafter, neural or n-gram, is measured the same way and under the same
decoding settings. Per position the total-variation distance TV = 1/2 sum |p - q| (and
1 - TV is the expected acceptance of that token, Leviathan et al. Cor. 3.6); summed over a
text and divided by its characters it gives TV per character, which tokenizer fertility
does not distort.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

from babelspec.drafters.base import Drafter, Verdict
from babelspec.sampling import Probs, SamplingConfig, logits_to_probs


@dataclass
class DivergenceResult:
    language: str
    drafter: str
    n_texts: int = 0
    n_tokens: int = 0  # positions with a draft distribution
    n_chars: int = 0
    tv_sum: float = 0.0
    tv_per_token: float = math.nan
    tv_per_char: float = math.nan
    covered: float = math.nan  # share of positions where the drafter proposed something
    expected_alpha: float = math.nan  # 1 - mean TV over covered positions

    def to_dict(self) -> dict:
        return asdict(self)


def _tv_row(q: np.ndarray, probs: Probs) -> float:
    """TV(p, q) = 1 - sum min(p, q), over the draft row's support (a point mass included)."""
    ids, p = probs.support(0)
    return float(1.0 - np.minimum(p, q[ids]).sum())


@torch.inference_mode()
def text_divergence(
    target, drafter: Drafter, ids: list[int], sampling: SamplingConfig, seed: int = 0
) -> tuple[float, int, int]:
    """(sum of TV over positions, positions with a draft, positions judged) for one text."""
    if len(ids) < 2:
        return 0.0, 0, 0
    target.reset()
    logits = target.forward(ids)  # row i: distribution of the token at position i + 1
    sequence = torch.tensor(ids)
    q_all = logits_to_probs(logits[:-1], sampling, sequence, first_position=1).numpy()
    generator = torch.Generator().manual_seed(seed)
    target.reset()  # a drafter on the target's own steps (``drafters.stackhead``) steps it from the start
    drafter.start(ids[:1], sampling, generator)
    tv_sum, covered = 0.0, 0
    for t in range(1, len(ids)):
        draft = drafter.propose(1)
        if draft.hidden is not None:  # its rows are in the target's cache: keep the pending token's, as verification does
            target.crop_or_replay(target.cached_len - draft.hidden.shape[1] + 1)
        if len(draft):
            tv_sum += _tv_row(q_all[t - 1], draft.probs)
            covered += 1
        drafter.commit(Verdict([], ids[t]))
    return tv_sum, covered, len(ids) - 1


def language_divergence(
    target,
    drafter: Drafter,
    texts: list[str],
    sampling: SamplingConfig,
    language: str,
    drafter_name: str,
    max_tokens: int = 48,
) -> DivergenceResult:
    tokenizer = target.tokenizer
    res = DivergenceResult(language=language, drafter=drafter_name)
    judged = 0
    for i, text in enumerate(texts):
        ids = tokenizer(text)["input_ids"][: max_tokens + 1]
        if len(ids) < 2:
            continue
        # characters of the part of the text that was scored
        n_chars = len(tokenizer.decode(ids, skip_special_tokens=True))
        tv, covered, positions = text_divergence(target, drafter, ids, sampling, seed=i)
        res.n_texts += 1
        res.n_tokens += covered
        res.n_chars += n_chars
        res.tv_sum += tv
        judged += positions
    if res.n_tokens:
        res.tv_per_token = res.tv_sum / res.n_tokens
        res.expected_alpha = 1.0 - res.tv_per_token
    if res.n_chars:
        res.tv_per_char = res.tv_sum / res.n_chars
    if judged:
        res.covered = res.n_tokens / judged
    return res


def resourcedness_correlation(
    tv_per_char: dict[str, float], corpus_chars: dict[str, float]
) -> dict[str, float]:
    """Pearson r and p between TV per character and log10 of the bundled corpus size."""
    from scipy.stats import pearsonr

    langs = [
        lang for lang in tv_per_char
        if math.isfinite(tv_per_char[lang]) and corpus_chars.get(lang, 0) > 0
    ]  # fmt: skip
    out = {"n": float(len(langs)), "r": math.nan, "p": math.nan}
    if len(langs) >= 3:
        x = [math.log10(corpus_chars[lang]) for lang in langs]
        y = [tv_per_char[lang] for lang in langs]
        if len(set(x)) > 1 and len(set(y)) > 1:
            r, p = pearsonr(x, y)
            out.update(r=float(r), p=float(p))
    return out
