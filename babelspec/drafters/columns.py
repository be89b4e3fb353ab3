"""A restricted head's columns in full-vocabulary ids: what ``head:LANG`` (``drafters.vocabhead``)
and ``gguf:LANG`` on the target's own steps (``drafters.stackhead``) share.

Column j of a ``vocabhead.RestrictedHeadLM``'s logits scores token ``head.index[j]``; one column
more, at -inf, stands for every id outside the set, so a draft's row is zero there. The repetition
penalty looks at past tokens through their columns. A token the target writes outside the set
gets a row from the next draft on: a 270M target's text in a language it writes poorly strays
into other scripts, and the strays repeat.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from babelspec.sampling import Probs, SamplingConfig, warp


class HeadColumns:
    """Token id <-> column maps of a restricted head (kept in step with its extra rows)."""

    def __init__(self, head: Any) -> None:
        self.head = head
        self._pad = torch.full((1, 1), float("-inf"))
        self._refresh()

    def _refresh(self) -> None:
        self.column_of = self.head.column.cpu().numpy()
        self.id_of = np.append(self.head.index.cpu().numpy(), 0)  # the -inf column: probability 0

    def start(self, context_ids: list[int]) -> None:
        """A generation's extra rows: the context's tokens outside the set."""
        self.head.set_extra(context_ids)
        self._refresh()

    def probs(self, logits: torch.Tensor, sampling: SamplingConfig, sequence: np.ndarray, position: int) -> Probs:
        """One row of the head's logits [1, columns] warped under ``sampling``, in full-vocabulary
        ids (zero outside the set); ``sequence`` the ids so far, ``position`` the drafted token's."""
        logits = torch.cat([logits.float(), self._pad], 1)
        return warp(logits, sampling, self.column_of[sequence], first_position=position).with_ids(self.id_of)

    def keep_stray(self, token: int) -> None:
        """Where ``token`` (the target's) has no row, score it from the next draft on (up to the
        head's limit of extra rows)."""
        outside = token < len(self.column_of) and self.column_of[token] == self.head.n_columns
        if outside and self.head.add_extra([token]):
            self._refresh()
