"""Tiny randomly initialised Hugging Face models for tests of the mechanics, and test drafters
whose exact distributions are known."""

from __future__ import annotations

import torch
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    Qwen3_5ForCausalLM,
    Qwen3_5TextConfig,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from babelspec.drafters.base import Draft, Drafter, Verdict
from babelspec.sampling import Probs

# why the tests of packed bf16 products skip where there are none
UNPACKED = "oneDNN does not prepack bf16 here (no oneDNN in this torch, or a CPU without AVX-512)"


def tiny_qwen3(vocab: int = 64, seed: int = 0, layers: int = 2, max_positions: int = 256):
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        max_position_embeddings=max_positions, initializer_range=0.3, tie_word_embeddings=True,
        bos_token_id=0, eos_token_id=None, pad_token_id=None,
    )
    return Qwen3ForCausalLM(config).eval()


def tiny_gemma3(vocab: int = 64, seed: int = 0, layers: int = 3, sliding_window: int = 4):
    """Gemma-3 layout: sliding-window layers beside a full-attention one, tied head."""
    torch.manual_seed(seed)
    config = Gemma3TextConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
        sliding_window=sliding_window, layer_types=["sliding_attention"] * (layers - 1) + ["full_attention"],
        initializer_range=0.3, bos_token_id=0, eos_token_id=None, pad_token_id=None,
    )
    return Gemma3ForCausalLM(config).eval()


def tiny_qwen35(vocab: int = 64, seed: int = 0, layers: int = 4):
    """Qwen3.5 layout (the paper's verifier): linear-attention layers whose recurrent state
    cannot be cropped, beside a full-attention one."""
    torch.manual_seed(seed)
    config = Qwen3_5TextConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
        initializer_range=0.3, tie_word_embeddings=True, bos_token_id=0, eos_token_id=None, pad_token_id=None,
    )
    return Qwen3_5ForCausalLM(config).eval()


class FixedDrafter(Drafter):
    """Drafts every token from one fixed distribution (dense, sparse, or its arg-max as a
    point mass): the draft distribution is known exactly, whatever the context."""

    def __init__(self, probs: torch.Tensor, form: str = "dense") -> None:
        self.p = probs / probs.sum()
        self.form = form
        self.vocab_size = len(probs)
        self.name = f"fixed-{form}"

    def start(self, context_ids, sampling, generator) -> None:
        self.generator = generator

    def propose(self, gamma: int) -> Draft:
        if self.form == "point":
            return Draft.point(self.p.argmax().repeat(gamma), forwards=gamma)
        tokens = torch.multinomial(self.p, gamma, replacement=True, generator=self.generator)
        if self.form == "dense":
            return Draft(tokens=tokens, probs=Probs(self.p.repeat(gamma, 1)), forwards=gamma)
        support = self.p.nonzero().squeeze(1)
        return Draft(tokens=tokens, probs=Probs(self.p[support].repeat(gamma, 1), support.repeat(gamma, 1)),
                     forwards=gamma)

    def commit(self, verdict: Verdict) -> None:
        pass


class ScriptedDrafter(Drafter):
    """Proposes a known continuation (right, wrong, or right with some tokens spoiled)."""

    def __init__(self, continuation: list[int], vocab_size: int, spoil_every: int = 0, always_wrong: bool = False):
        self.continuation, self.vocab_size = continuation, vocab_size
        self.spoil_every, self.always_wrong = spoil_every, always_wrong
        self.name = "scripted"

    def start(self, context_ids, sampling, generator) -> None:
        self.prompt_len, self.produced = len(context_ids), 0

    def propose(self, gamma: int) -> Draft:
        tokens = list(self.continuation[self.produced : self.produced + gamma])
        for i in range(len(tokens)):
            pos = self.produced + i
            if self.always_wrong or (self.spoil_every and pos % self.spoil_every == 0):
                tokens[i] = (tokens[i] + 1) % self.vocab_size
        self.last = len(tokens)
        return Draft.point(tokens, forwards=len(tokens))

    def commit(self, verdict: Verdict) -> None:
        self.produced += len(verdict.kept) + 1
