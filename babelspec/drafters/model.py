"""A neural drafter: any Hugging Face causal LM that shares the target's vocabulary."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from babelspec.drafters.base import Draft, Drafter, Verdict
from babelspec.errors import UserError
from babelspec.lm import CausalLM
from babelspec.sampling import Probs, SamplingConfig, warp
from babelspec.target import Target


def _numpy_rng(generator: torch.Generator) -> np.random.Generator:
    """A NumPy generator seeded by one draw from the engine's: reproducible, and a uniform
    costs a fraction of a microsecond instead of a torch call."""
    return np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=generator)))


class ModelDrafter(Drafter):
    """Drafts autoregressively with its own KV cache; rolls back to the accepted prefix."""

    def __init__(self, model: torch.nn.Module | CausalLM, name: str = "model") -> None:
        self.lm = model if isinstance(model, CausalLM) else CausalLM(model)
        self.name = name
        self.vocab_size = self.lm.vocab_size
        self.ids: list[int] = []

    def start(self, context_ids: list[int], sampling: SamplingConfig, generator: torch.Generator) -> None:
        self.sampling, self.generator = sampling, generator
        self.rng = _numpy_rng(generator)
        self.ids = list(context_ids)
        self.lm.reset()
        if len(self.ids) > 1:
            self.lm.forward(self.ids[:-1], logits_to_keep=1)
        self.lm.timer.reset()  # c compares decode forwards only

    def next_probs(self, pending: list[int], sequence: np.ndarray, position: int) -> Probs:
        """Forward the pending tokens; distribution (one row) of the token at ``position``.

        The per-row hook a drafter with another output head overrides (``vocabhead``)."""
        logits = self.lm.forward(pending, logits_to_keep=1)
        return warp(logits, self.sampling, sequence, first_position=position)

    def propose(self, gamma: int) -> Draft:
        self.lm.checkpoint()  # rollback point for caches that cannot be cropped
        pending = self.ids[self.lm.cached_len :]
        sequence = np.array(self.ids + [0] * gamma, dtype=np.int64)
        tokens: list[int] = []
        rows: list[Probs] = []
        for i in range(gamma):
            p = self.next_probs(pending, sequence, len(self.ids) + i)
            token = p.draw(0, self.rng.random())
            tokens.append(token)
            rows.append(p)
            sequence[len(self.ids) + i] = token
            pending = [token]
        return Draft(tokens=torch.tensor(tokens, dtype=torch.long), probs=Probs.cat(rows), forwards=gamma)

    def commit(self, verdict: Verdict) -> None:
        keep = len(self.ids) + len(verdict.kept)
        self.ids = self.ids + list(verdict.kept) + [int(verdict.next_token)]
        if self.lm.cached_len > keep:
            self.lm.crop_or_replay(keep)

    def forward_seconds(self) -> list[float]:
        return list(self.lm.forward_seconds)


def load_causal_lm(spec: str, target: Target) -> torch.nn.Module:
    """A drafter model by preset name, local path or hub name, on the target's device/dtype."""
    from babelspec.models import load_model

    model, _ = load_model(spec, device=target.device, dtype=next(target.model.parameters()).dtype)
    return model


def model_drafter(arg: str, target: Target, context: dict[str, Any]) -> Drafter:
    if not arg:
        raise UserError("the drafter spec 'model:' needs a preset, local path or hub name, "
                         "e.g. model:qwen3.5-0.8b")
    return ModelDrafter(target.sibling(load_causal_lm(arg, target)), name=f"model:{arg}")
