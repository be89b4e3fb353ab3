"""``self:K``: draft with the target's own first K layers, its final norm and its output head.

The draft model is a view of the target: every parameter and buffer is the target's tensor
(no copy, no extra memory), only the config says "K layers". It needs no training and no
second model, which is the closest stand-in for a small same-family drafter when none exists
(no Gemma-3 smaller than 270M is available offline).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from babelspec.drafters.base import Verdict
from babelspec.drafters.model import ModelDrafter, _numpy_rng
from babelspec.errors import UserError
from babelspec.lm import CausalLM
from babelspec.sampling import SamplingConfig
from babelspec.target import Target


def _layers_of(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.ModuleList]:
    """The decoder stack (``model.model`` for HF causal LMs) and its list of layers."""
    base = getattr(model, "model", None)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise UserError(
            f"self-drafting needs a decoder with model.model.layers; {type(model).__name__} "
            "has none (use model:PATH with a separate small model instead)"
        )
    return base, layers


def num_layers(model: torch.nn.Module) -> int:
    return len(_layers_of(model)[1])


def truncated_config(config: Any, k: int) -> Any:
    """The config of the first ``k`` layers: per-layer lists (Gemma-3's sliding/full
    ``layer_types``) are cut to ``k``; rotary and window settings are kept as they are."""
    cfg = copy.deepcopy(config)
    text = cfg.get_text_config()
    text.num_hidden_layers = k
    for name in ("layer_types", "mlp_layer_types", "attention_type_per_layer"):
        value = getattr(text, name, None)
        if isinstance(value, (list, tuple)) and len(value) >= k:
            setattr(text, name, list(value[:k]))
    return cfg


def _check_has_attention(config: Any, k: int) -> None:
    """The first k layers must hold an attention layer: Hugging Face measures a cache's length
    on one, and a cache of linear-attention layers only has none (Qwen3.5 starts linear,
    linear, linear, full)."""
    kinds = getattr(config.get_text_config(), "layer_types", None)
    if not kinds or any("linear" not in kind for kind in kinds[:k]):
        return
    first = next((i + 1 for i, kind in enumerate(kinds) if "linear" not in kind), None)
    hint = f"use self:{first} or more" if first else "this model has no attention layer to draft with"
    raise UserError(
        f"self:{k} would keep only linear-attention layers (the first attention layer is layer "
        f"{first}), and a cache without an attention layer has no length to continue from; {hint}"
    )


def truncated_model(model: torch.nn.Module, k: int) -> torch.nn.Module:
    """A model made of ``model``'s first ``k`` decoder layers, sharing all its tensors.

    The skeleton is built on the meta device (no memory), then every submodule is replaced by
    the target's own: embeddings, the first k layers, the final norm, the rotary embedding
    (its frequencies do not depend on depth) and the output head (tied to the embeddings in
    Gemma-3).
    """
    base, layers = _layers_of(model)
    n = len(layers)
    if not 1 <= k <= n:
        raise UserError(f"self:K needs 1 <= K <= {n} (the target's layer count); got K = {k}")
    _check_has_attention(model.config, k)
    cfg = truncated_config(model.config, k)
    with torch.device("meta"):
        draft = type(model)(cfg)
    draft_base, _ = _layers_of(draft)
    for name, child in base.named_children():
        setattr(draft_base, name, torch.nn.ModuleList(list(layers[:k])) if name == "layers" else child)
    for name, child in model.named_children():
        if name != "model":
            setattr(draft, name, child)
    left = [name for name, t in [*draft.named_parameters(), *draft.named_buffers()] if t.is_meta]
    if left:
        raise RuntimeError(f"truncated model has unshared tensors left on meta: {left[:5]}")
    draft.generation_config = copy.deepcopy(model.generation_config)
    draft.eval()
    return draft


class SelfDrafter(ModelDrafter):
    """A neural drafter whose first ``n_shared`` layers are the target's own.

    Those layers' KV cache after the prompt is exactly the target's, so ``start`` copies it
    from the target's prefill (a few MB) instead of running the prompt through the draft
    again: the draft's prefill costs nothing.
    """

    def __init__(self, model: torch.nn.Module, target: Target | None, n_shared: int, name: str) -> None:
        if target is not None and not isinstance(model, CausalLM):
            model = target.sibling(model)  # computes as the target does
        super().__init__(model, name=name)
        self.target = target
        self.n_shared = n_shared
        self._follows_target = False  # whether commits take the target's rows (its cache was copied at start)

    def start(self, context_ids: list[int], sampling: SamplingConfig, generator: torch.Generator) -> None:
        target = self.target
        # The engine prefills the target with context[:-1] right before starting the drafter.
        can_copy = (target is not None and target.croppable
                    and type(target.cache) is type(self.lm.cache))  # both lean, or both HF  # fmt: skip
        if can_copy and len(context_ids) > 1 and target.cached_len == len(context_ids) - 1:
            self.sampling, self.generator = sampling, generator
            self.rng = _numpy_rng(generator)
            self.ids = list(context_ids)
            self.lm.reset()
            shared = target.cache.layers[: self.n_shared]
            # in the drafter's cache dtype and layout (the int8 one's differ)
            self.lm.cache.layers = [self.lm.impl.cache_like(layer) for layer in shared]
            self.lm.cached_len = target.cached_len
            self.lm.timer.reset()
            self._follows_target = self.lm.impl.takes_target_rows
        else:
            super().start(context_ids, sampling, generator)
            self._follows_target = False

    def commit(self, verdict: Verdict) -> None:
        """As every drafter commits; then, where the prompt's cache came from the target, the
        draft's cache takes the target's keys and values for the tokens it just kept.

        After a fully accepted draft the draft has not forwarded its last drafted token; without
        the target's row for it the next draft starts with a two-token forward, which costs an
        int8 drafter 1.3-1.6 one-token forwards. The target's rows are also the keys and values
        the draft approximates: they replace the draft's own rows of the accepted tokens too, so
        the draft attends over exactly the target's context (taking only the missing row, or
        none, measured slower: docs/benchmarks.md). The draft's probabilities are those it
        drafts from, so verification stays lossless."""
        synced = len(self.ids) - 1  # the rows that were the target's: all but the pending token
        super().commit(verdict)
        if not self._follows_target:
            return
        if self.target.cached_len != len(self.ids) - 1:
            self._follows_target = False  # out of step with the target (never here in the engine's loop): stop
            return
        self._take_target_rows(synced)

    @torch.inference_mode()  # a cache grown inside a forward holds inference tensors
    def _take_target_rows(self, synced: int) -> None:
        target = self.target
        start = synced
        if start == target.cached_len:
            return
        if start < self.lm.cached_len:
            self.lm.crop_or_replay(start)
        layers = target.cache.layers[: self.n_shared]
        for mine, theirs in zip(self.lm.cache.layers, layers):
            mine.append(*theirs.rows(start, target.cached_len))
        self.lm.cached_len = target.cached_len
        self.lm.tokens = list(self.ids[: target.cached_len])


def parse_layers(text: str, target: Target) -> int:
    n = num_layers(target.model)
    try:
        k = int(text)
    except ValueError:
        raise UserError(
            f"self:K needs an integer layer count K in 1..{n} (e.g. self:6); got {text!r}"
        ) from None
    if not 1 <= k <= n:
        raise UserError(f"self:K needs 1 <= K <= {n} (the target's layer count); got K = {k}")
    return k
