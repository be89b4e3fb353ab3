"""The protocol every forward implements: what ``lm.CausalLM``, the batcher and the drafters use.

A forward computes the logits of a block of new tokens (a chain, or a token tree given by its
parents) on top of a cache it made, and keeps a tree's accepted path. What it can do beyond that
is declared as capabilities, never found out by checking which forward it is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch


class Forward(ABC):
    kind: str = ""  # "lean" or "hf", as execution plans record it
    batches: bool = False  # computes several sequences' blocks in one forward (``forward_many``)
    takes_target_rows: bool = False  # a drafter on it can take its target's cached rows (``cache_like``)
    prefills_without_logits: bool = False  # ``logits_to_keep=CACHE_ONLY`` caches a block and returns nothing
    certifies_head: bool = False  # ``head`` requests may leave logits a caller does not need at -inf
    exact: bool = False  # every row of a block gets the bits of the row alone (``not_exact_reason`` if not)

    @property
    def not_exact_reason(self) -> str:
        """Why this forward's rows are not bit-invariant, and what would make them so ("" where
        ``exact``): what a plan records and the engine's warning says."""
        return "" if self.exact else (
            "Hugging Face's forward computes a block's rows with the kernels its size picks, so a verification row "
            "can round otherwise than the decode step; the bit-exact path is the lean forward of a Gemma-3 model "
            "in bfloat16 (or its GGUF's products) on a CPU whose oneDNN packs bf16")  # fmt: skip

    @abstractmethod
    def new_cache(self) -> Any: ...

    @abstractmethod
    def forward(self, ids: torch.Tensor, cache: Any, logits_to_keep: int = 0,
                parents: torch.Tensor | None = None, past: int | None = None, head: Any = None) -> torch.Tensor:  # fmt: skip
        """Logits [n or logits_to_keep, vocab] of ``ids`` [1, n] after the ``past`` cached tokens;
        ``parents`` [n] makes the block a token tree (each node sees its ancestors only);
        ``head`` (a ``HeadRequest``): what the caller needs of every row's logits, where the
        forward ``certifies_head`` (others compute them all)."""

    def __call__(self, ids: torch.Tensor, cache: Any, logits_to_keep: int = 0,
                 parents: torch.Tensor | None = None, past: int | None = None, head: Any = None) -> torch.Tensor:  # fmt: skip
        return self.forward(ids, cache, logits_to_keep, parents, past, head)

    @abstractmethod
    def tree_capacity(self, cache: Any) -> float | None:
        """The most tokens ``cache`` may hold after a token tree's forward (inf: no limit), or
        None where this forward cannot verify trees on it."""

    @abstractmethod
    def keep_path(self, cache: Any, past: int, indices: torch.Tensor) -> None:
        """After a token tree's forward: keep the first ``past`` tokens and the block's nodes at
        ``indices`` (ascending, the accepted path)."""

    @abstractmethod
    def cache_like(self, layer: Any) -> Any:
        """A copy of one cached layer of another forward of the same kind, in this one's layout."""
