"""The one interface every drafter implements.

The speculative loop (``babelspec.engine``) drives a drafter with three calls:

* ``start(context_ids, sampling, generator)`` -- a new generation begins on ``context_ids``
  (the prompt). The drafter may build any state it needs (a KV cache, a lookup table).
* ``propose(gamma)`` -- draft up to ``gamma`` tokens in a row continuing the current context:
  a ``Draft``, whose nodes each name a parent. A chain is the draft where each node's parent
  is the one before; a token tree (``Draft.tree``) has paths of at most ``gamma`` tokens.
  Return fewer (even zero) when the drafter has nothing confident to say.
* ``commit(verdict)`` -- what the verifier decided (``Verdict``): the drafted tokens it kept
  (one path), the token it appended and, for drafters whose ``observes_top`` > 0, the target's
  most likely tokens on every row it verified. The drafter rolls its state back to
  ``context + kept + [next_token]``.

What a drafter can do is declared by the drafter (``observes_top``, ``preferred_gamma``) or
given to it when it is built (whether the verifier takes trees), never set from outside. A
drafter that wraps another (``DrafterWrapper``, e.g. the router's ``auto``) forwards the whole
contract, so it cannot drop a part of it.

Drafters know nothing about verification: they only report, for each drafted token, the
distribution it was sampled from (``sampling.Probs``), so the rejection sampler can stay
lossless.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
import torch

from babelspec.errors import UserError
from babelspec.sampling import Probs, SamplingConfig

_NO_PROBS = Probs.point([])


@dataclass
class Draft:
    """Drafted tokens: a chain, or a token tree when ``parents`` is given.

    In a tree, ``parents[i]`` is the index of node i's parent, -1 for a child of the pending
    token; nodes come in topological order, and children of one node in the order the verifier
    tries them. Children of one node are either point masses (distinct candidates) or i.i.d.
    draws from one distribution, given as each child's row of ``probs``."""

    tokens: torch.Tensor  # [k] long (k may be 0); a chain holds at most gamma tokens
    probs: Probs  # the distribution each token was drawn from (a point mass: rows of width one)
    forwards: int = 0  # draft forwards (model calls or table walks) spent on this proposal
    parents: np.ndarray | None = None  # [k] int64; None at construction means a chain
    # [1, k + 1, hidden]: the target's own final hidden states of the pending token and of each
    # drafted one, where the drafter computed them on the target's layers and cache (a chain of
    # ``drafters.stackhead``): the target's cache holds their rows, so verification is its head alone
    hidden: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.parents is None:  # a chain: each node's parent is the one before
            self.parents = np.arange(-1, int(self.tokens.numel()) - 1, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.tokens.numel())

    @property
    def is_tree(self) -> bool:
        """A tree that is not a chain (a chain is parents = [-1, 0, 1, ...])."""
        return not bool((self.parents == np.arange(-1, len(self) - 1)).all())

    @staticmethod
    def tree(tokens: torch.Tensor | list[int], parents, probs: Probs, forwards: int = 0) -> Draft:
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        parents = np.asarray(parents, dtype=np.int64).reshape(-1)
        if len(parents) != len(tokens) or len(probs) != len(tokens):
            raise ValueError(f"a tree of {len(tokens)} tokens needs as many parents and probability rows "
                             f"(got {len(parents)} and {len(probs)})")
        if len(parents) and not bool(((parents >= -1) & (parents < np.arange(len(parents)))).all()):
            raise ValueError(f"tree parents {parents.tolist()} must point back: node i's parent is -1 or < i")
        return Draft(tokens=tokens, probs=probs, forwards=forwards, parents=parents)

    def depth(self) -> int:
        """Tokens on the tree's longest path (the length, for a chain)."""
        if not self.is_tree:
            return len(self)
        depth = np.zeros(len(self), dtype=np.int64)
        for i, p in enumerate(self.parents.tolist()):
            depth[i] = depth[p] + 1 if p >= 0 else 1
        return int(depth.max(initial=0))

    def first_chain(self) -> Draft:
        """The chain of first children from the root: what a verifier without trees checks."""
        if not self.is_tree:
            return self
        chain, node = [], -1
        for i, p in enumerate(self.parents.tolist()):
            if p == node:
                chain.append(i)
                node = i
        return Draft(tokens=self.tokens[chain], probs=self.probs.rows(chain), forwards=self.forwards)

    @staticmethod
    def empty() -> Draft:
        return Draft(tokens=torch.empty(0, dtype=torch.long), probs=_NO_PROBS)

    @staticmethod
    def point(tokens: torch.Tensor | list[int], forwards: int = 0) -> Draft:
        """Tokens drafted with certainty (a greedy draft, an n-gram's top-1, a lookup)."""
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        return Draft(tokens=tokens, probs=Probs.point(tokens), forwards=forwards)


@dataclass
class Verdict:
    """What one verification decided about a draft, as the drafter hears it (``commit``)."""

    kept: list[int]  # the drafted tokens the verifier kept, in order (one path of a tree)
    next_token: int  # the token it appended: a correction after a rejection, else a bonus
    # What the verifier read (the pending token, then each drafted node), and when the drafter's
    # ``observes_top`` asked for them its most likely tokens after each of those: (ids, probs),
    # [rows, observes_top] each, probabilities renormalised over them (``sampling.top_rows``).
    # Rows of rejected nodes come too: they are the target's own predictions after those tokens.
    inputs: list[int] = field(default_factory=list)
    top: tuple[np.ndarray, np.ndarray] | None = None
    drafted: int = 0  # tokens (nodes) in the draft
    depth: int = 0  # tokens on the draft's longest path: at most this many could be kept
    rejected: bool = False  # a drafted token was judged and rejected (else the draft ran out)


class Drafter(ABC):
    """Base class for drafters. ``name`` appears in results and reports."""

    name: str = "drafter"
    #: Vocabulary the drafter's token ids index into; None when it adapts to any target.
    vocab_size: int | None = None
    #: γ the drafter was chosen with (the router's, for ``auto``); None leaves it to the caller.
    preferred_gamma: int | None = None
    #: How many of the target's most likely tokens per verified row ``commit`` wants (0: none).
    observes_top: int = 0

    @abstractmethod
    def start(
        self, context_ids: list[int], sampling: SamplingConfig, generator: torch.Generator
    ) -> None: ...

    @abstractmethod
    def propose(self, gamma: int) -> Draft: ...

    @abstractmethod
    def commit(self, verdict: Verdict) -> None: ...

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

    def commit(self, verdict: Verdict) -> None:
        pass


class DrafterWrapper(Drafter):
    """A drafter around another: every part of the contract goes to ``inner`` unless a subclass
    overrides it. ``tests/test_drafters_wrapper.py`` checks that this class forwards each
    public method and attribute of ``Drafter``, so a part added to the contract cannot be
    dropped by a wrapper."""

    def __init__(self, inner: Drafter) -> None:
        self.inner = inner
        self.name = inner.name
        self.vocab_size = inner.vocab_size
        self.preferred_gamma = inner.preferred_gamma

    @property
    def observes_top(self) -> int:  # type: ignore[override]
        return self.inner.observes_top

    def start(self, context_ids, sampling, generator) -> None:
        self.inner.start(context_ids, sampling, generator)

    def propose(self, gamma: int) -> Draft:
        return self.inner.propose(gamma)

    def commit(self, verdict: Verdict) -> None:
        self.inner.commit(verdict)

    def forward_seconds(self) -> list[float]:
        return self.inner.forward_seconds()


DEFAULT_GAMMA = 4  # tokens drafted per step when neither the request nor the drafter says


def resolve_gamma(requested: int | None, drafter: Drafter) -> int:
    """The γ to draft with: the one asked for, else the drafter's preferred one (``auto``: the
    router's), else ``DEFAULT_GAMMA``."""
    return requested or getattr(drafter, "preferred_gamma", None) or DEFAULT_GAMMA


def check_vocabulary(drafter: Drafter, target, *, name: str | None = None) -> None:
    """Raise ``ValueError`` unless the drafter drafts in the target's vocabulary."""
    if drafter.vocab_size is not None and drafter.vocab_size != target.vocab_size:
        raise UserError(
            f"drafter {name or drafter.name!r} has a vocabulary of {drafter.vocab_size} tokens but "
            f"the target has {target.vocab_size}; a drafter must use the target's tokenizer"
        )

