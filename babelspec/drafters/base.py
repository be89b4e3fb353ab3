"""The one interface every drafter implements.

The speculative loop (``babelspec.engine``) drives a drafter with three calls:

* ``start(context_ids, sampling, generator)`` -- a new generation begins on ``context_ids``
  (the prompt). The drafter may build any state it needs (a KV cache, a lookup table).
* ``propose(gamma)`` -- draft up to ``gamma`` tokens in a row continuing the current context:
  a chain, or a token tree (``Draft.tree``) whose paths hold at most ``gamma`` tokens. Return
  fewer (even zero) when the drafter has nothing confident to say.
* ``settle(verdict)`` -- what the verifier decided (``Verdict``): the drafted tokens it kept,
  the token it appended and, for drafters with ``observes_top`` > 0, the target's top
  candidates on every row it verified. The drafter rolls its state back to
  ``context + kept + [next_token]``.

``Drafter.settle`` hands the verdict on to the finer calls a drafter implements: ``observe``
(the target's candidates, Token Recycling's source of drafts), then ``commit`` after a chain
or ``commit_path`` after a tree. A drafter that wraps another (``DrafterWrapper``, e.g. the
router's ``auto``) forwards the whole contract, so it cannot drop a part of it.

Drafters know nothing about verification: they only report, for each drafted token, the
distribution it was sampled from (``sampling.Probs``), so the rejection sampler can stay
lossless.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
import torch

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
    parents: np.ndarray | None = None  # [k] int64 for a token tree; None for a chain

    def __len__(self) -> int:
        return int(self.tokens.numel())

    @property
    def is_tree(self) -> bool:
        """A tree that is not a chain (a chain is parents = [-1, 0, 1, ...])."""
        return self.parents is not None and not bool((self.parents == np.arange(-1, len(self) - 1)).all())

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
        if self.parents is None:
            return len(self)
        depth = np.zeros(len(self), dtype=np.int64)
        for i, p in enumerate(self.parents.tolist()):
            depth[i] = depth[p] + 1 if p >= 0 else 1
        return int(depth.max(initial=0))

    def first_chain(self) -> Draft:
        """The chain of first children from the root: what a verifier without trees checks."""
        if self.parents is None:
            return self
        chain, node = [], -1
        for i, p in enumerate(self.parents.tolist()):
            if p == node:
                chain.append(i)
                node = i
        return Draft(tokens=self.tokens[chain], probs=self.probs.rows(chain), forwards=self.forwards,
                     parents=np.arange(-1, len(chain) - 1, dtype=np.int64))

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
    """What one verification decided about a draft, as the drafter hears it (``settle``)."""

    kept: list[int]  # the drafted tokens the verifier kept, in order (one path of a tree)
    next_token: int  # the token it appended: a correction after a rejection, else a bonus
    tree: bool = False  # the draft had parents (a tree, or a chain given as one)
    inputs: list[int] = field(default_factory=list)  # what the verifier read: pending token, then each node
    top: tuple[np.ndarray, np.ndarray] | None = None  # (ids, probs) [rows, observes_top], when asked for
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
    #: How many of the target's most likely tokens per verified row ``observe`` wants (0: none).
    observes_top: int = 0

    @abstractmethod
    def start(
        self, context_ids: list[int], sampling: SamplingConfig, generator: torch.Generator
    ) -> None: ...

    @abstractmethod
    def propose(self, gamma: int) -> Draft: ...

    @abstractmethod
    def commit(self, n_accepted: int, next_token: int) -> None: ...

    def settle(self, verdict: Verdict) -> None:
        """After a verification: the target's candidates to ``observe`` (when ``observes_top``
        asked for them), then ``commit`` (a chain) or ``commit_path`` (a tree)."""
        if verdict.top is not None and self.observes_top:
            self.observe(verdict.inputs, *verdict.top)
        if verdict.tree:
            self.commit_path(verdict.kept, verdict.next_token)
        else:
            self.commit(len(verdict.kept), verdict.next_token)

    def commit_path(self, accepted: list[int], next_token: int) -> None:
        """After a token tree: the verifier kept the drafted tokens ``accepted`` (one path of the
        tree) and appended ``next_token``. Drafters that propose trees override this."""
        raise NotImplementedError(f"drafter {self.name!r} proposed a token tree but cannot commit one")

    def observe(self, inputs: list[int], ids: np.ndarray, probs: np.ndarray) -> None:
        """After a verification, when ``observes_top`` > 0: row r of the target's forward read
        ``inputs[r]`` (the pending token, then each drafted node) and ranked ``ids[r]`` most
        likely next, with probabilities ``probs[r]`` renormalised over them ([rows, observes_top]
        each; ``sampling.top_rows``). Rows of rejected nodes come too: they are the target's own
        predictions after those tokens. Called by ``settle`` before ``commit``/``commit_path``."""
        return None

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

    def settle(self, verdict: Verdict) -> None:
        self.inner.settle(verdict)

    def commit(self, n_accepted: int, next_token: int) -> None:
        self.inner.commit(n_accepted, next_token)

    def commit_path(self, accepted: list[int], next_token: int) -> None:
        self.inner.commit_path(accepted, next_token)

    def observe(self, inputs: list[int], ids: np.ndarray, probs: np.ndarray) -> None:
        self.inner.observe(inputs, ids, probs)

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
        raise ValueError(
            f"drafter {name or drafter.name!r} has a vocabulary of {drafter.vocab_size} tokens but "
            f"the target has {target.vocab_size}; a drafter must use the target's tokenizer"
        )

