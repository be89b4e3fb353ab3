"""With eager attention (the loader's default) a bf16 forward of k tokens gives bit for bit the
logits of k one-token forwards on small models: the linear layers are row-invariant in bf16, and
eager attention computes each query row alone. (On the real model most blocks, not all, are
bit-identical, so bf16 remains the fast mode; in fp32 the CPU BLAS picks kernels by row count
and the two agree to ~1e-5.)"""

from __future__ import annotations

import pytest
import torch
from tiny import tiny_gemma3, tiny_qwen3

from babelspec.lm import CausalLM


@pytest.mark.parametrize("make", [tiny_gemma3, tiny_qwen3])
def test_a_bf16_block_forward_equals_one_token_forwards(make) -> None:
    model = make(vocab=64, seed=1).to(torch.bfloat16)
    model.config._attn_implementation = "eager"
    lm = CausalLM(model)
    prompt, block = [1, 5, 9, 2, 7, 3, 11, 4], [8, 12, 6, 10, 13]
    lm.forward(prompt)
    together = lm.forward(block)
    lm.crop_or_replay(len(prompt))
    one_by_one = torch.cat([lm.forward([t]) for t in block])
    assert torch.equal(together, one_by_one)
