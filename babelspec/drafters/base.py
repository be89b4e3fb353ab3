"""The one interface every drafter implements.

The speculative loop (``babelspec.engine``) drives a drafter with three calls:

* ``start(context_ids, sampling, generator)`` -- a new generation begins on ``context_ids``
  (the prompt). The drafter may build any state it needs (a KV cache, a lookup table).
* ``propose(gamma)`` -- draft up to ``gamma`` tokens continuing the current context. Return
  fewer (even zero) when the drafter has nothing confident to say.
* ``commit(n_accepted, next_token)`` -- the verifier kept the first ``n_accepted`` drafted
  tokens and then appended ``next_token`` (a correction on rejection, a bonus token when all
  were accepted). The drafter rolls its state back to ``context + accepted + [next_token]``.

Drafters know nothing about verification: they only report, for each drafted token, the
distribution it was sampled from, so the rejection sampler can stay lossless.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch

from babelspec.sampling import SamplingConfig


@dataclass
class SparseProbs:
    """Draft distributions on a few tokens each: row i puts ``probs[i, j]`` on ``indices[i, j]``.

    Rows are padded with probability 0 (any index) when they hold fewer entries.
    """

    indices: torch.Tensor  # [k, m] long
    probs: torch.Tensor  # [k, m] float, each row sums to 1

    def dense_row(self, i: int, vocab_size: int) -> torch.Tensor:
        row = torch.zeros(vocab_size, dtype=torch.float32)
        row.index_add_(0, self.indices[i], self.probs[i].to(torch.float32))
        return row

    def prob_of(self, tokens: torch.Tensor) -> torch.Tensor:
        """p_i(tokens[i]) for each row i."""
        hit = self.indices[: len(tokens)] == tokens[:, None]
        return (self.probs[: len(tokens)] * hit).sum(dim=1)


DraftProbs = torch.Tensor | SparseProbs | None
"""Dense ``[k, vocab]`` rows, sparse rows, or ``None`` for a point-mass draft."""


@dataclass
class Draft:
    tokens: torch.Tensor  # [k] long, k <= gamma (k may be 0)
    probs: DraftProbs = None  # distribution each token was drawn from; None = point mass
    forwards: int = 0  # draft forwards (model calls or table walks) spent on this proposal
    seconds: float = 0.0  # wall time spent drafting, filled in by the engine

    def __len__(self) -> int:
        return int(self.tokens.numel())

    @staticmethod
    def empty() -> "Draft":
        return Draft(tokens=torch.empty(0, dtype=torch.long))


class Drafter(ABC):
    """Base class for drafters. ``name`` appears in results and reports."""

    name: str = "drafter"
    #: Vocabulary the drafter's token ids index into; None when it adapts to any target.
    vocab_size: int | None = None

    @abstractmethod
    def start(
        self, context_ids: list[int], sampling: SamplingConfig, generator: torch.Generator
    ) -> None: ...

    @abstractmethod
    def propose(self, gamma: int) -> Draft: ...

    @abstractmethod
    def commit(self, n_accepted: int, next_token: int) -> None: ...

    def forward_seconds(self) -> list[float]:
        """Time of each draft forward of the last generation (for c = t_draft / t_target)."""
        return []


class NoDrafter(Drafter):
    """The empty drafter: plain autoregressive decoding through the speculative loop.

    Every step proposes nothing, so the target forwards one token and samples one token:
    the baseline for every wall-clock speedup, measured through the same code path.
    """

    name = "none"

    def start(self, context_ids, sampling, generator) -> None:  # noqa: D401
        pass

    def propose(self, gamma: int) -> Draft:
        return Draft.empty()

    def commit(self, n_accepted: int, next_token: int) -> None:
        pass


@dataclass
class DrafterInfo:
    """What a drafter spec resolved to, for results and reports."""

    spec: str
    kind: str
    details: dict = field(default_factory=dict)
