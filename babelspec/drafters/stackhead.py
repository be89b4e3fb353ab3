"""``gguf:LANG`` on a gguf target: the target's own layers, stepped on the target's own cache, under
a head restricted to the language's tokens; verification is the target's output head alone.

The drafter's layers are the target's, computed by the target's forward one token at a time, as
plain decoding computes them: the final hidden state of each drafted token *is* the target's, and
its keys and values are the rows the target's cache would hold. So the drafter does not keep a
cache of its own, and the target does not run its layers again to verify: it scores the hidden
states the draft left with its full output head, in one product over the block's rows (the head
is 180 MB of the file's 247, so that product is most of a plain step's bytes, read once for the
block). A step of γ tokens costs γ + 1 one-token passes through the layers, γ restricted heads and
one full head over γ + 1 rows, where the own-cache drafter paid the layers twice. Each row's
logits are the target's bits (the head's product is row-invariant), so verification is exactly
the target's: greedy output is plain greedy output, and a sampled draft is judged on the target's
own distribution by Leviathan/Chen's rule, as any draft is.

After a rejection the engine crops the target's cache to the kept tokens, as after any
verification; the drafter only keeps the ids (``commit``).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from babelspec.drafters.base import Draft, Drafter, Verdict
from babelspec.drafters.columns import HeadColumns
from babelspec.drafters.model import _numpy_rng
from babelspec.sampling import Probs, SamplingConfig
from babelspec.target import Target


class StackHeadDrafter(Drafter):
    """Drafts with ``head`` (a ``vocabhead.RestrictedHeadLM`` over the target's full stack) from the hidden
    states of the target's own one-token steps; hands them to the verifier with the draft."""

    def __init__(self, head: torch.nn.Module, target: Target, name: str) -> None:
        if not target.steps_layers:
            raise ValueError("a drafter on the target's own steps needs a forward that runs its layers alone")
        self.head, self.target, self.name = head, target, name
        self.vocab_size = head.vocab_size
        self.ids: list[int] = []
        self._seconds: list[float] = []
        self.columns = HeadColumns(head)

    def start(self, context_ids: list[int], sampling: SamplingConfig, generator: torch.Generator) -> None:
        self.sampling, self.rng = sampling, _numpy_rng(generator)
        self.ids = list(context_ids)
        self._seconds = []
        self.columns.start(context_ids)

    def propose(self, gamma: int) -> Draft:
        """γ tokens, each drawn from the restricted head over the target's hidden state after the
        token before; then the last drafted token's own step, whose row gives the bonus token."""
        target = self.target
        if target.cached_len != len(self.ids) - 1:
            raise RuntimeError(f"the target caches {target.cached_len} tokens, the drafter expected "
                               f"{len(self.ids) - 1}: a drafter on the target's steps follows the engine's loop")  # fmt: skip
        sequence = np.array(self.ids + [0] * gamma, dtype=np.int64)
        token, tokens, rows, hidden = self.ids[-1], [], [], []
        for i in range(gamma + 1):
            t0 = time.perf_counter()
            h = target.forward_hidden([token])
            hidden.append(h)
            if i < gamma:
                p = self._probs(h, sequence, len(self.ids) + i)
                token = p.draw(0, self.rng.random())
                tokens.append(token)
                rows.append(p)
                sequence[len(self.ids) + i] = token
            self._seconds.append(time.perf_counter() - t0)
        probs = Probs.cat(rows) if rows else Draft.empty().probs
        return Draft(tokens=torch.tensor(tokens, dtype=torch.long), probs=probs, forwards=gamma + 1,
                     hidden=torch.cat(hidden, 1))  # fmt: skip

    @torch.inference_mode()
    def _probs(self, hidden: torch.Tensor, sequence: np.ndarray, position: int) -> Probs:
        """One row over the head's columns, in full-vocabulary ids (zero outside them)."""
        return self.columns.probs(self.head.logits_of(hidden)[0], self.sampling, sequence, position)

    def commit(self, verdict: Verdict) -> None:
        """Keep the ids (the engine cropped the target's cache); where the target wrote a token
        outside the head's rows, the head scores it from the next draft on (as ``head:LANG``)."""
        self.ids = self.ids + list(verdict.kept) + [int(verdict.next_token)]
        self.columns.keep_stray(int(verdict.next_token))

    def forward_seconds(self) -> list[float]:
        return list(self._seconds)
