"""Hugging Face's forward, for any family: its own cache (``DynamicCache``, past recording on so
a sliding window can roll back), and token trees as an additive 4-D mask with positions by depth
where every cache layer is attention the mask can reach."""

from __future__ import annotations

import copy
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from babelspec.forward.base import Forward
from babelspec.forward.trees import tree_ancestors, tree_mask

# Hugging Face attention implementations that take an arbitrary additive 4-D mask (a token tree's)
TREE_ATTENTION = ("eager", "sdpa")


class HFForward(Forward):
    kind = "hf"

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        self.model, self.device = model, device

    def new_cache(self) -> DynamicCache:
        cache = DynamicCache(config=self.model.config)
        # Sliding-window layers keep their past until the next crop, so rollback stays possible.
        cache.activate_past_recording()
        return cache

    def forward(self, ids: torch.Tensor, cache: Any, logits_to_keep: int = 0,
                parents: torch.Tensor | None = None, past: int | None = None, head: Any = None) -> torch.Tensor:  # fmt: skip
        tree = self._tree_inputs(parents, past or 0) if parents is not None else {}
        out = self.model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=logits_to_keep, **tree)
        return out.logits[0]

    def _tree_inputs(self, parents: torch.Tensor, past: int) -> dict[str, torch.Tensor]:
        """An additive mask [1, 1, n, past + n] (the cache and each node's ancestors) and
        positions by depth."""
        ancestors, depth = tree_ancestors(parents)
        mask = tree_mask(past, ancestors, depth, self.model.get_input_embeddings().weight.dtype, self.device)
        return {"attention_mask": mask[None, None], "position_ids": (past + depth).to(self.device)[None]}

    def tree_capacity(self, cache: Any) -> float | None:
        """Every cache layer must be plain attention (``DynamicLayer``; a sliding window while it
        is not yet full, so its keys are the whole context) under an attention that takes an
        arbitrary mask; recurrent layers (Qwen3.5's linear attention) read their tokens in order
        and cannot."""
        if not isinstance(cache, DynamicCache):
            return None
        if getattr(self.model.config, "_attn_implementation", None) not in TREE_ATTENTION:
            return None
        window = float("inf")
        for layer in cache.layers:
            if type(layer) is DynamicSlidingWindowLayer:
                window = min(window, layer.sliding_window - 1)
            elif type(layer) is not DynamicLayer:
                return None
        return window

    def keep_path(self, cache: Any, past: int, indices: torch.Tensor) -> None:
        keep = torch.cat([torch.arange(past), past + indices]).to(self.device)
        for layer in cache.layers:
            if layer.is_initialized and layer.keys.numel():
                layer.keys, layer.values = layer.keys[..., keep, :], layer.values[..., keep, :]
            if type(layer) is DynamicSlidingWindowLayer:
                layer.cumulative_length = past + len(indices)

    def cache_like(self, layer: Any) -> Any:
        return copy.deepcopy(layer)
