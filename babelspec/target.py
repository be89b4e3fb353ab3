"""The verifier: a ``CausalLM`` that prefills the prompt and verifies drafted blocks."""

from __future__ import annotations

import time
from typing import Any

import torch

from babelspec.lean import CACHE_ONLY
from babelspec.lm import CausalLM
from babelspec.models import DEFAULT_TARGET, load_model


class Target(CausalLM):
    """The verifier: prefill the prompt, verify drafted blocks in one forward, roll back."""

    def __init__(self, model: torch.nn.Module, tokenizer=None, device: torch.device | None = None,
                 forward: str | None = None, lean: Any = None):  # fmt: skip
        super().__init__(model, device, forward, lean=lean)
        self.tokenizer = tokenizer
        self.name = getattr(model.config, "name_or_path", "") or type(model).__name__

    def prefill(self, ids: list[int]) -> None:
        """Start a new sequence: cache ``ids`` (the caller keeps the last token pending)."""
        self.reset()
        started = time.perf_counter()
        if ids:  # its logits are not used: the lean forward skips the output head
            self.forward(ids, logits_to_keep=CACHE_ONLY if self.lean is not None else 1)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.prefill_seconds = time.perf_counter() - started
        self.timer.reset()  # prefill is timed apart from the decode forwards
        self.forward_tokens = []

    def checkpoint_and_verify(self, tokens: list[int] | torch.Tensor) -> torch.Tensor:
        """Logits [len(tokens), vocab] after each of ``tokens``: the pending token followed by
        the drafted ones, so row i judges draft i and the last row gives the bonus token.

        Takes the rollback point first when a drafted token may be rejected (a block of more
        than one token on a cache that cannot be cropped); plain decoding never needs one."""
        if len(tokens) > 1:
            self.checkpoint()
        return self.forward(tokens)

    def verify_tree(self, tokens: list[int], parents: torch.Tensor) -> torch.Tensor:
        """Logits [len(tokens), vocab] of a token tree in one forward: the pending token (parent
        -1) and the drafted nodes, each seeing only its ancestors (where ``verifies_tree``)."""
        return self.forward(tokens, parents=parents)


def load_target(
    spec: str = DEFAULT_TARGET,
    *,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    attention: str = "eager",
) -> Target:
    """The verifier for a model spec (a preset, local path or hub name; see ``models.load_model``)."""
    model, tokenizer = load_model(spec, device=device, dtype=dtype, attention=attention)
    return Target(model, tokenizer)
