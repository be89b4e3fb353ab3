"""Decode and verify round alike in bf16: with eager attention, one forward of k tokens gives bit
for bit the logits of k one-token forwards, so greedy speculative output equals greedy plain
output in the fast mode too (the model loader picks eager attention for this). In fp32 the CPU
BLAS picks kernels by row count, so there the two agree only to ~1e-5 (near-ties may flip)."""

from __future__ import annotations

import pytest
import torch

from babelspec.lm import CausalLM
from tiny import tiny_gemma3, tiny_qwen3


@pytest.mark.parametrize("make", [tiny_gemma3, tiny_qwen3])
def test_a_bf16_block_forward_equals_one_token_forwards(make) -> None:
    model = make(vocab=64, seed=1).to(torch.bfloat16)
    model.config._attn_implementation = "eager"
    lm = CausalLM(model)
    prompt, block = [1, 5, 9, 2, 7, 3, 11, 4], [8, 12, 6, 10, 13]
    lm.forward(prompt)
    together = lm.forward(block)
    lm.crop(len(prompt))
    one_by_one = torch.cat([lm.forward([t]) for t in block])
    assert torch.equal(together, one_by_one)
