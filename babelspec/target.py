"""Model runners: a Hugging Face causal LM with its own KV cache, timed forwards and rollback.

``CausalLM`` is shared by the verifier (``Target``) and by neural drafters: it forwards a block
of new tokens on top of its cache and returns their logits, and crops the cache back to an
accepted prefix. It knows nothing about drafting or verification.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch
from transformers import DynamicCache


def pick_device(device: str | torch.device | None = None) -> torch.device:
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def pick_dtype(device: torch.device, dtype: torch.dtype | str | None = None) -> torch.dtype:
    """bf16 on a CUDA device that supports it, fp32 otherwise (CPU bf16 matmuls are slow)."""
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    if dtype is not None:
        return dtype
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


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

    def __init__(self, model: torch.nn.Module, device: torch.device | None = None) -> None:
        self.model = model.eval()
        self.device = device or next(model.parameters()).device
        self.vocab_size = output_vocab_size(model)
        self.max_context = context_window(model)
        self.timer = ForwardTimer(self.device)
        self.forward_tokens: list[int] = []  # tokens in each forward, beside timer.seconds
        self.reset()

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)
        # Sliding-window layers keep their past until the next crop, so rollback stays possible.
        self.cache.activate_past_recording()
        self.cached_len = 0
        self.timer.reset()
        self.forward_tokens = []

    @property
    def forward_seconds(self) -> list[float]:
        return self.timer.seconds

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor | list[int], logits_to_keep: int = 0) -> torch.Tensor:
        """Forward ``ids`` [n] after the cached tokens; float32 logits of the last
        ``logits_to_keep`` positions (all when 0), shape [n or logits_to_keep, vocab]."""
        ids = torch.as_tensor(ids, dtype=torch.long, device=self.device).view(1, -1)
        self.timer.start()
        out = self.model(input_ids=ids, cache=self.cache, use_cache=True, logits_to_keep=logits_to_keep)
        logits = out.logits[0].float()
        self.timer.stop()
        self.forward_tokens.append(ids.shape[1])
        self.cached_len += ids.shape[1]
        return logits

    def crop(self, length: int) -> None:
        """Roll the cache back so that it holds exactly the first ``length`` tokens."""
        if length > self.cached_len:
            raise ValueError(f"cannot crop a cache of {self.cached_len} tokens to {length}")
        self.cache.crop(length - self.cached_len)  # negative: number of tokens to remove
        self.cached_len = length

    def snapshot(self) -> "CacheSnapshot":
        """A copy of the cache, for models whose cache cannot be cropped (recurrent layers)."""
        return CacheSnapshot(copy.deepcopy(self.cache), self.cached_len)

    def restore(self, snap: "CacheSnapshot") -> None:
        self.cache, self.cached_len = snap.cache, snap.length

    @property
    def croppable(self) -> bool:
        return bool(getattr(self.cache, "is_croppable", True))


@dataclass
class CacheSnapshot:
    cache: DynamicCache
    length: int


class Target(CausalLM):
    """The verifier: prefill the prompt, verify drafted blocks in one forward, roll back."""

    def __init__(self, model: torch.nn.Module, tokenizer=None, device: torch.device | None = None):
        super().__init__(model, device)
        self.tokenizer = tokenizer
        self.name = getattr(model.config, "name_or_path", "") or type(model).__name__

    @classmethod
    def from_pretrained(
        cls, path_or_name: str, device: str | None = None, dtype: torch.dtype | str | None = None
    ) -> "Target":
        """Load any Hugging Face causal LM (local path or hub name) and its tokenizer."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        dev = pick_device(device)
        model = AutoModelForCausalLM.from_pretrained(path_or_name, dtype=pick_dtype(dev, dtype))
        tokenizer = AutoTokenizer.from_pretrained(path_or_name)
        return cls(model.to(dev), tokenizer, dev)

    def prefill(self, ids: list[int]) -> None:
        """Start a new sequence: cache ``ids`` (the caller keeps the last token pending)."""
        self.reset()
        started = time.perf_counter()
        if ids:
            self.forward(ids, logits_to_keep=1)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.prefill_seconds = time.perf_counter() - started
        self.timer.reset()  # prefill is timed apart from the decode forwards
        self.forward_tokens = []

    def verify(self, tokens: list[int] | torch.Tensor) -> torch.Tensor:
        """Logits [len(tokens), vocab] after each of ``tokens``: the pending token followed by
        the drafted ones, so row i judges draft i and the last row gives the bonus token."""
        return self.forward(tokens)
