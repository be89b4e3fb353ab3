"""Turning logits into the distributions both models are judged by, and sampling from them.

The same warping (repetition penalty, temperature, top-k, top-p) is applied to the target's
and the draft's logits, as in the paper's code. Greedy decoding is the limit case: a
point mass at the arg-max of the penalised logits, so one rejection rule serves both.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class SamplingConfig:
    greedy: bool = False  # arg-max decoding (temperature, top-k and top-p are then ignored)
    temperature: float = 1.0  # logits are divided by this before top-k / top-p
    top_k: int = 0  # keep the k most likely tokens; 0 = off
    top_p: float = 1.0  # keep the smallest set with this much mass (nucleus); 1.0 = off
    repetition_penalty: float = 1.0  # CTRL-style penalty on tokens of the last window; 1.0 = off
    repetition_window: int = 16  # how many previous tokens the penalty looks at
    seed: int = 0  # seed of the generation's random generator

    def __post_init__(self) -> None:
        if self.temperature <= 0 and not self.greedy:
            raise ValueError(
                f"temperature must be > 0 (got {self.temperature}); use greedy decoding for T = 0"
            )
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (got {self.top_k}); 0 turns it off")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] (got {self.top_p}); 1.0 turns it off")
        if self.repetition_penalty <= 0:
            raise ValueError(
                f"repetition_penalty must be > 0 (got {self.repetition_penalty}); 1.0 turns it off"
            )
        if self.repetition_window < 0:
            raise ValueError(f"repetition_window must be >= 0 (got {self.repetition_window})")

    @classmethod
    def paper(cls, seed: int = 0) -> "SamplingConfig":
        """The paper's decoding settings: top-k 100, top-p 0.9, penalty 1.1 over 16 tokens."""
        return cls(top_k=100, top_p=0.9, repetition_penalty=1.1, repetition_window=16, seed=seed)

    def to_dict(self) -> dict:
        return asdict(self)


def apply_repetition_penalty(
    logits: torch.Tensor, sequence: torch.Tensor, first_position: int, penalty: float, window: int
) -> torch.Tensor:
    """Penalise, in row i, the tokens among the ``window`` tokens before ``first_position + i``.

    ``sequence`` holds the token ids the rows condition on (at least up to the last row's
    position). A token seen several times is penalised once, as in Hugging Face's processor.
    """
    if penalty == 1.0 or window == 0:
        return logits
    n = logits.shape[0]
    if first_position >= window:  # the usual case: every row has a full window
        window_ids = sequence[first_position - window : first_position + n - 1].unfold(0, window, 1)
    else:
        ends = torch.arange(first_position, first_position + n)  # row i predicts position ends[i]
        positions = ends[:, None] + torch.arange(-window, 0)[None, :]  # [n, window]
        # Positions before the sequence start repeat the row's first valid token (no effect).
        positions = positions.clamp(min=0)
        window_ids = sequence[positions.to(sequence.device)]
    window_ids = window_ids.to(logits.device)
    picked = logits.gather(1, window_ids)
    picked = torch.where(picked > 0, picked / penalty, picked * penalty)
    return logits.scatter(1, window_ids, picked)


@dataclass
class Warped:
    """Warped distributions, rows [n]: compact (``indices`` [n, m] with ``probs`` [n, m]) when
    top-k or greedy decoding leaves few candidates, else dense (``indices`` None, probs [n, V]).

    The compact form keeps the hot path off the full vocabulary (262k entries for Gemma-3)."""

    probs: torch.Tensor
    indices: torch.Tensor | None
    vocab_size: int

    def dense(self) -> torch.Tensor:
        if self.indices is None:
            return self.probs
        out = torch.zeros(self.probs.shape[0], self.vocab_size, dtype=self.probs.dtype)
        return out.scatter_(1, self.indices, self.probs)

    def dense_row(self, i: int) -> torch.Tensor:
        if self.indices is None:
            return self.probs[i]
        return torch.zeros(self.vocab_size, dtype=self.probs.dtype).index_put_(
            (self.indices[i],), self.probs[i], accumulate=True)

    def prob_of(self, tokens: torch.Tensor) -> torch.Tensor:
        """Row i's probability of ``tokens[i]``."""
        k = len(tokens)
        if self.indices is None:
            return self.probs[torch.arange(k), tokens]
        return (self.probs[:k] * (self.indices[:k] == tokens[:, None])).sum(dim=1)

    def sample(self, generator: torch.Generator | None = None, rows: slice = slice(None)) -> torch.Tensor:
        """One token per row (``rows`` of them)."""
        if self.indices is None:
            return sample(self.probs[rows], generator)
        if self.indices.shape[1] == 1:  # greedy: nothing to draw
            return self.indices[rows, 0]
        # Few candidates: one multinomial call is the cheapest draw.
        picked = torch.multinomial(self.probs[rows], 1, generator=generator)
        return self.indices[rows].gather(1, picked).squeeze(1)


def warp(
    logits: torch.Tensor,
    config: SamplingConfig,
    sequence: torch.Tensor | None = None,
    first_position: int = 0,
) -> Warped:
    """Warp ``logits`` [n, vocab] under ``config``: penalty, temperature, top-k, top-p.

    Row i is the distribution of the token at position ``first_position + i`` of ``sequence``
    (needed only for the repetition penalty).
    """
    logits = logits.float()
    vocab = logits.shape[1]
    if sequence is not None and config.repetition_penalty != 1.0:
        logits = apply_repetition_penalty(
            logits, sequence, first_position, config.repetition_penalty, config.repetition_window
        )
    if config.greedy:
        top = logits.argmax(dim=1, keepdim=True)
        return Warped(torch.ones(top.shape, dtype=logits.dtype), top, vocab)
    if config.temperature != 1.0:
        logits = logits / config.temperature
    if config.top_k and config.top_k < vocab:
        values, indices = logits.topk(config.top_k, dim=1)  # sorted, descending
    elif config.top_p < 1.0:
        values, indices = logits.sort(dim=1, descending=True)
    else:
        return Warped(torch.softmax(logits, dim=1), None, vocab)
    kept = torch.softmax(values, dim=1)
    if config.top_p < 1.0:
        # Drop a token when the mass before it already reaches top_p (the first always stays).
        mass_before = kept.cumsum(dim=1) - kept
        kept = kept.masked_fill(mass_before >= config.top_p, 0.0)
        kept = kept / kept.sum(dim=1, keepdim=True)
    return Warped(kept, indices, vocab)


def logits_to_probs(
    logits: torch.Tensor,
    config: SamplingConfig,
    sequence: torch.Tensor | None = None,
    first_position: int = 0,
) -> torch.Tensor:
    """Warp ``logits`` [n, vocab] into dense probabilities [n, vocab] (see ``warp``)."""
    return warp(logits, config, sequence, first_position).dense()


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of ``probs`` [n, vocab] -> [n] long, by inverting the CDF.

    torch.multinomial draws per vocabulary entry and costs milliseconds on a 262k vocabulary;
    one uniform and a float64 cumulative sum cost microseconds and never pick a zero entry."""
    cdf = probs.double().cumsum(dim=1)
    u = torch.rand(probs.shape[0], 1, generator=generator, dtype=torch.float64) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=probs.shape[1] - 1)


def residual(target_row: torch.Tensor, draft_row: torch.Tensor) -> torch.Tensor:
    """norm(max(0, q - p)): where to resample after a rejection (Leviathan et al., Alg. 1)."""
    r = (target_row - draft_row).clamp_(min=0.0)
    total = r.sum()
    if total <= 0:  # q == p up to rounding: a rejection is then a measure-zero event
        return target_row
    return r / total
