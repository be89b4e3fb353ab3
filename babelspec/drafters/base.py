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
distribution it was sampled from (``sampling.Probs``), so the rejection sampler can stay
lossless.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch

from babelspec.sampling import Probs, SamplingConfig

_NO_PROBS = Probs.point([])


@dataclass
class Draft:
    tokens: torch.Tensor  # [k] long, k <= gamma (k may be 0)
    probs: Probs  # the distribution each token was drawn from (a point mass: rows of width one)
    forwards: int = 0  # draft forwards (model calls or table walks) spent on this proposal
    seconds: float = 0.0  # wall time spent drafting, filled in by the engine

    def __len__(self) -> int:
        return int(self.tokens.numel())

    @staticmethod
    def empty() -> Draft:
        return Draft(tokens=torch.empty(0, dtype=torch.long), probs=_NO_PROBS)

    @staticmethod
    def point(tokens: torch.Tensor | list[int], forwards: int = 0) -> Draft:
        """Tokens drafted with certainty (a greedy draft, an n-gram's top-1, a lookup)."""
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        return Draft(tokens=tokens, probs=Probs.point(tokens), forwards=forwards)


class Drafter(ABC):
    """Base class for drafters. ``name`` appears in results and reports."""

    name: str = "drafter"
    #: Vocabulary the drafter's token ids index into; None when it adapts to any target.
    vocab_size: int | None = None
    #: γ the drafter was chosen with (the router's, for ``auto``); None leaves it to the caller.
    preferred_gamma: int | None = None

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


DEFAULT_GAMMA = 4  # tokens drafted per step when neither the request nor the drafter says


def resolve_gamma(requested: int | None, drafter: Drafter) -> int:
    """The γ to draft with: the one asked for, else the drafter's preferred one (``auto``: the
    router's), else ``DEFAULT_GAMMA``."""
    return requested or getattr(drafter, "preferred_gamma", None) or DEFAULT_GAMMA


def check_vocabulary(drafter: Drafter, target, *, name: str | None = None) -> None:
    """Raise ``ValueError`` unless the drafter drafts in the target's vocabulary."""
    if drafter.vocab_size is not None and drafter.vocab_size != target.vocab_size:
        raise ValueError(
            f"drafter {name or drafter.name!r} has a vocabulary of {drafter.vocab_size} tokens but "
            f"the target has {target.vocab_size}; a drafter must use the target's tokenizer"
        )


@dataclass
class DrafterInfo:
    """What a drafter spec resolved to, for results and reports."""

    spec: str
    kind: str
    details: dict = field(default_factory=dict)
