"""A Hugging Face causal LM with its own KV cache, timed forwards and rollback.

``CausalLM`` is shared by the verifier (``Target``) and by neural drafters: it forwards a block
of new tokens on top of its cache and returns their logits, and crops the cache back to an
accepted prefix. It knows nothing about drafting or verification.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import torch
from transformers import DynamicCache

from babelspec.errors import UserError
from babelspec.forward import Forward, ForwardOptions, build_forward
from babelspec.forward.hf import TREE_ATTENTION


class ForwardTimer:
    """Per-forward wall time: CUDA events on a GPU (read lazily), perf_counter on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._seconds: list[float] = []
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self._start: float | torch.cuda.Event = 0.0

    def start(self) -> None:
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._start = time.perf_counter()

    def stop(self) -> None:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._events.append((self._start, end))
        else:
            self._seconds.append(time.perf_counter() - self._start)

    @property
    def seconds(self) -> list[float]:
        if self._events:
            torch.cuda.synchronize()
            self._seconds.extend(s.elapsed_time(e) / 1000.0 for s, e in self._events)
            self._events.clear()
        return self._seconds

    def pop_last(self) -> float:
        """Remove the last forward's time and return it."""
        return self.seconds.pop()

    def reset(self) -> None:
        self._seconds = []
        self._events = []


def output_vocab_size(model: torch.nn.Module) -> int:
    head = model.get_output_embeddings()
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    return int(model.config.get_text_config().vocab_size)


def context_window(model: torch.nn.Module) -> int | None:
    config = model.config.get_text_config()
    return getattr(config, "max_position_embeddings", None)


class CausalLM:
    """A causal LM with a KV cache over the tokens forwarded so far (batch size 1)."""

    def __init__(self, model: torch.nn.Module, device: torch.device | None = None,
                 forward: str | None = None, quantize: str | None = None, impl: Forward | None = None,
                 options: ForwardOptions | None = None) -> None:  # fmt: skip
        self.model = model.eval()
        self.device = device or next(model.parameters()).device
        # The lean forward where the family has one (Gemma-3: same logits, less framework);
        # ``forward="hf"`` keeps Hugging Face's. ``quantize`` (a
        # drafter's) runs the layers on int8 copies of their weights, in the lean forward only.
        # ``options``: how the lean forward computes (``ForwardOptions``; the measured defaults).
        # ``impl``: a forward to use instead (a slot of a batch: ``babelspec.batching``).
        self.impl: Forward = impl if impl is not None else build_forward(model, self.device, forward, quantize, options)
        self.forward_name, self.options = forward, options  # as passed in, for ``sibling``
        self.vocab_size = output_vocab_size(model)
        self.max_context = context_window(model)
        self.timer = ForwardTimer(self.device)
        self.forward_tokens: list[int] = []  # tokens in each forward, beside timer.seconds
        self.reset()

    def sibling(self, model: torch.nn.Module, quantize: str | None = None) -> CausalLM:
        """A drafter's ``CausalLM`` over ``model`` that computes as this one does: the same forward
        and options, with the full output head (a drafter samples from every logit)."""
        options = replace(self.options, head="full") if self.options is not None else None
        if quantize == "gguf":  # the layers on this gguf target's own products (``gguf:LANG``)
            if self.lean is None:
                raise UserError("a drafter on the GGUF's blocks needs the lean forward of a target in the gguf mode")
            impl = self.lean.sharing_blocks(model.body, model.logits_of, options)
            return CausalLM(model, None, self.forward_name, impl=impl, options=options)
        return CausalLM(model, None, self.forward_name, quantize, options=options)

    def reset(self) -> None:
        self.cache = self._new_cache()
        # Recurrent layers (e.g. Qwen3.5's linear attention) cannot be cropped: rollback then
        # restores a checkpoint and replays the kept tokens.
        self.croppable = bool(getattr(self.cache, "is_croppable", True))
        self._tree_window = self.impl.tree_capacity(self.cache)
        self.cached_len = 0
        self.tokens: list[int] = []  # the ids in the cache, for replay
        self._checkpoint: RecurrentSnapshot | None = None
        self.timer.reset()
        self.forward_tokens = []
        self.replay_seconds: list[float] = []  # rollback replays (not in forward_seconds)

    def _new_cache(self) -> Any:
        return self.impl.new_cache()

    @property
    def lean(self) -> Any:
        """The lean forward, or None under Hugging Face's (for tests and benchmarks that tune it)."""
        return self.impl if self.impl.kind == "lean" else None

    @property
    def forward_seconds(self) -> list[float]:
        return self.timer.seconds

    @property
    def supports_trees(self) -> bool:
        """Whether ``forward`` takes token trees (``parents``): the lean forward always, Hugging
        Face's on attention-only caches (``verifies_tree`` says for each block)."""
        return self._tree_window is not None

    def verifies_tree(self, n: int) -> bool:
        """Whether a tree of ``n`` tokens can be verified in one forward now: always with the lean
        forward; with Hugging Face's while the context stays within every sliding window, where
        one mask over the whole context serves every layer."""
        return self._tree_window is not None and self.cached_len + n <= self._tree_window

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor | list[int], logits_to_keep: int = 0,
                parents: torch.Tensor | None = None, head: Any = None) -> torch.Tensor:  # fmt: skip
        """Forward ``ids`` [n] after the cached tokens; float32 CPU logits of the last
        ``logits_to_keep`` positions (all when 0; none with the lean forward's ``CACHE_ONLY``),
        shape [n or logits_to_keep, vocab].
        ``parents`` [n] makes the block a token tree (``lean.LeanGemma3.forward``; with Hugging
        Face's forward, a mask and positions by depth where ``verifies_tree``); the cache then
        holds every node until ``keep_path``. ``head`` (a ``HeadRequest``): what the caller needs of
        each row's logits, which a certified head computes alone (others as -inf)."""
        ids = torch.as_tensor(ids, dtype=torch.long, device=self.device).view(1, -1)
        if parents is not None and not self.verifies_tree(ids.shape[1]):
            raise UserError(self._no_tree_reason(ids.shape[1]))
        self.timer.start()
        logits = self.impl(ids, self.cache, logits_to_keep, parents, self.cached_len, head).float()
        self.timer.stop()
        # Sampling and the rejection test run on the CPU whatever the model's device: a few
        # rows of logits are cheap to move, and one generator then serves every device.
        logits = logits.cpu()
        self.forward_tokens.append(ids.shape[1])
        self.cached_len += ids.shape[1]
        self.tokens.extend(ids[0].tolist())
        return logits

    @property
    def steps_layers(self) -> bool:
        """Whether the forward can run its layers alone (``forward_hidden``, ``head_logits``)."""
        return hasattr(self.impl, "hidden_states")

    @torch.inference_mode()
    def forward_hidden(self, ids: list[int]) -> torch.Tensor:
        """Forward ``ids`` after the cached tokens through the layers alone (where
        ``steps_layers``): their final normed hidden states [1, n, hidden], cached as ``forward``
        caches them, for ``head_logits`` to score. Not timed as a forward: the caller's cost."""
        ids_t = torch.as_tensor(ids, dtype=torch.long, device=self.device).view(1, -1)
        hidden = self.impl.hidden_states(ids_t, self.cache)
        self.cached_len += ids_t.shape[1]
        self.tokens.extend(int(t) for t in ids)
        return hidden

    @torch.inference_mode()
    def head_logits(self, hidden: torch.Tensor, head: Any = None) -> torch.Tensor:
        """The output head's float32 CPU logits [n, vocab] of ``forward_hidden``'s rows, each row's
        bits as ``forward`` gives them; timed as a forward of n tokens."""
        self.timer.start()
        logits = self.impl.head_logits(hidden, head).float()
        self.timer.stop()
        self.forward_tokens.append(hidden.shape[1])
        return logits.cpu()

    def _no_tree_reason(self, n: int) -> str:
        if self._tree_window is None:
            kind = getattr(self.model.config, "model_type", type(self.model).__name__)
            return (f"this {kind} model cannot verify token trees: its cache has recurrent or non-attention layers, "
                    f"or its attention ({getattr(self.model.config, '_attn_implementation', None)}) takes no "
                    f"custom mask (use one of {', '.join(TREE_ATTENTION)})")
        return (f"a token tree of {n} tokens after {self.cached_len} cached ones passes the model's sliding window "
                f"({int(self._tree_window) + 1} tokens); verify its first chain instead")

    def checkpoint(self) -> None:
        """Remember the recurrent state as it is now, as the point a later ``crop_or_replay``
        may return to. Needed only when the cache cannot be cropped; free otherwise.

        Only the recurrent states are copied (a few fixed-size tensors per linear-attention
        layer): attention keys and values and the causal-convolution windows crop as they are."""
        if not self.croppable:
            self._checkpoint = RecurrentSnapshot.take(self.cache, self.cached_len)

    @torch.inference_mode()
    def keep_path(self, past: int, indices: list[int]) -> None:
        """After a token tree's forward: keep the first ``past`` tokens and the block's nodes at
        ``indices`` (ascending, the accepted path), a gather of the cached keys and values."""
        self.impl.keep_path(self.cache, past, torch.as_tensor(indices, dtype=torch.long))
        self.tokens = self.tokens[:past] + [self.tokens[past + i] for i in indices]
        self.cached_len = past + len(indices)

    def crop_or_replay(self, length: int) -> None:
        """Roll the cache back so that it holds exactly the first ``length`` tokens.

        A crop when the cache allows one. Otherwise (recurrent layers) the checkpoint's state is
        restored and the kept tokens after it are replayed: a forward, timed apart from the
        decode forwards in ``replay_seconds``."""
        if length > self.cached_len:
            raise ValueError(f"cannot crop a cache of {self.cached_len} tokens to {length}")
        if self.croppable:
            self.cache.crop(length - self.cached_len)  # negative: number of tokens to remove
        elif length < self.cached_len:
            snap, self._checkpoint = self._checkpoint, None
            if snap is not None and snap.length <= length:
                self.cache.crop(snap.length - self.cached_len)  # attention and conv windows
                snap.restore()
                start = snap.length
            else:  # no usable checkpoint: rebuild from the start
                self.cache, start = self._new_cache(), 0
            replay = self.tokens[start:length]
            self.tokens, self.cached_len = self.tokens[:start], start
            if replay:
                self._replay(replay)
        self.tokens = self.tokens[:length]
        self.cached_len = length

    def _replay(self, tokens: list[int]) -> None:
        """Forward ``tokens`` to rebuild the cache; timed as a replay, not a decode forward."""
        self.forward(tokens, logits_to_keep=1)
        self.forward_tokens.pop()
        self.replay_seconds.append(self.timer.pop_last())


@dataclass
class RecurrentSnapshot:
    """Copies of the recurrent states of a cache's linear-attention layers at ``length`` tokens."""

    length: int
    states: list[tuple[object, dict[int, torch.Tensor]]]  # (layer, state index -> copy)

    @staticmethod
    @torch.inference_mode()
    def take(cache: DynamicCache, length: int) -> RecurrentSnapshot:
        states = []
        for layer in cache.layers:
            recurrent = getattr(layer, "recurrent_states", None)
            if recurrent:
                states.append((layer, {i: t.clone() for i, t in recurrent.items() if t is not None}))
        return RecurrentSnapshot(length, states)

    @torch.inference_mode()
    def restore(self) -> None:
        for layer, copies in self.states:
            for i, t in copies.items():
                layer.recurrent_states[i].copy_(t)  # in place: the layer keeps its tensors
