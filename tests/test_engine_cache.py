"""Rolling the KV cache back leaves each model exactly as a fresh prefill of the kept text."""

import pytest
import torch
from tiny import tiny_gemma3, tiny_qwen3, tiny_qwen35

from babelspec.drafters.base import Verdict
from babelspec.drafters.model import ModelDrafter
from babelspec.lm import CausalLM
from babelspec.sampling import SamplingConfig
from babelspec.target import Target


def fresh_next_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1].float()


@pytest.mark.parametrize("builder", [tiny_qwen3, tiny_gemma3, tiny_qwen35])
@pytest.mark.parametrize("keep", [0, 2, 5])
def test_target_crop_equals_fresh_prefill(builder, keep):
    model = builder(seed=0)
    target = Target(model)
    prompt = [4, 8, 15, 16, 23, 42, 7]  # longer than the gemma sliding window of 4
    target.prefill(prompt[:-1])
    block = [prompt[-1], 11, 12, 13, 14, 15]
    target.checkpoint_and_verify(block)
    target.crop_or_replay(len(prompt) + keep)
    kept = prompt + block[1 : 1 + keep]
    nxt = 33
    after_crop = target.checkpoint_and_verify([nxt])[-1]
    torch.testing.assert_close(after_crop, fresh_next_logits(model, kept + [nxt]), rtol=1e-4, atol=1e-4)
    assert target.cached_len == len(kept) + 1


@pytest.mark.parametrize("builder", [tiny_qwen3, tiny_gemma3, tiny_qwen35])
def test_drafter_rollback_equals_fresh_prefill(builder):
    model = builder(seed=2)
    drafter = ModelDrafter(model)
    context = [5, 9, 13, 2, 30, 31]
    drafter.start(context, SamplingConfig(greedy=True), torch.Generator())
    drafted = drafter.propose(4).tokens.tolist()
    drafter.commit(Verdict(drafted[:1], 44))  # kept one drafted token, then the verifier's correction
    kept = context + drafted[:1] + [44]
    assert drafter.ids == kept
    draft = drafter.propose(1)
    fresh = fresh_next_logits(model, kept).argmax()
    assert int(draft.tokens[0]) == int(fresh)
    assert drafter.lm.cached_len == len(kept)


def test_crop_cannot_grow_the_cache():
    lm = CausalLM(tiny_qwen3())
    lm.forward([1, 2, 3])
    with pytest.raises(ValueError, match="cannot crop a cache of 3 tokens to 5"):
        lm.crop_or_replay(5)
