"""Bad requests fail at the boundary with a message that says what to change."""

import pytest
from tiny import tiny_qwen3

from babelspec.drafters import make_drafter
from babelspec.drafters.base import NoDrafter
from babelspec.drafters.model import ModelDrafter
from babelspec.engine import generate
from babelspec.sampling import SamplingConfig
from babelspec.target import Target


@pytest.fixture(scope="module")
def target():
    return Target(tiny_qwen3(vocab=64, max_positions=32))


def test_gamma_below_one(target):
    with pytest.raises(ValueError, match=r"gamma must be an integer >= 1 \(got 0\)"):
        generate(target, NoDrafter(), [1, 2], gamma=0, max_new_tokens=4)


def test_negative_max_new_tokens(target):
    with pytest.raises(ValueError, match=r"max_new_tokens must be an integer >= 0 \(got -1\)"):
        generate(target, NoDrafter(), [1, 2], max_new_tokens=-1)


def test_prompt_longer_than_the_context_window(target):
    with pytest.raises(ValueError, match="exceeds the model's context window of 32 tokens"):
        generate(target, NoDrafter(), list(range(30)), max_new_tokens=8)


def test_empty_prompt(target):
    with pytest.raises(ValueError, match="the prompt is empty"):
        generate(target, NoDrafter(), [], max_new_tokens=4)


def test_token_outside_the_vocabulary(target):
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 64\)"):
        generate(target, NoDrafter(), [1, 999], max_new_tokens=4)


def test_drafter_with_another_vocabulary(target):
    drafter = ModelDrafter(tiny_qwen3(vocab=100))
    with pytest.raises(ValueError, match="drafter 'model' has a vocabulary of 100 tokens but the target has 64"):
        generate(target, drafter, [1, 2], max_new_tokens=4)


def test_unknown_drafter_spec(target):
    with pytest.raises(ValueError, match="unknown drafter spec 'bogus:1'; known forms: .*model:"):
        make_drafter("bogus:1", target)


@pytest.mark.parametrize(
    "kwargs,message",
    [({"temperature": 0.0}, "temperature must be > 0"), ({"top_k": -1}, "top_k must be >= 0"),
     ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"), ({"repetition_penalty": 0}, "repetition_penalty must be > 0"),
     # where warping would overflow into NaN rows (every draft accepted): refused
     ({"temperature": 1e-40}, "temperature must be at least 0.001"),
     ({"repetition_penalty": 1e30}, r"repetition_penalty must be in \[0.001, 1000\]"),
     ({"seed": -1}, r"seed must be an integer in \[0, 2\*\*63\) \(got -1\)")],
)
def test_bad_sampling_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingConfig(**kwargs)


def test_generation_stops_at_the_budget_and_counts_tokens(target):
    result = generate(target, NoDrafter(), [1, 2, 3], max_new_tokens=5, sampling=SamplingConfig(seed=1))
    assert len(result.token_ids) == 5 and result.stop_reason == "length" and result.steps == 5
    assert generate(target, NoDrafter(), [1, 2, 3], max_new_tokens=0).token_ids == []


def test_eos_ends_generation(target):
    free = generate(target, NoDrafter(), [1, 2, 3], max_new_tokens=12, sampling=SamplingConfig(greedy=True))
    eos = free.token_ids[4]
    first = free.token_ids.index(eos)
    stopped = generate(target, NoDrafter(), [1, 2, 3], max_new_tokens=12, sampling=SamplingConfig(greedy=True),
                       eos_token_ids=[eos])
    assert stopped.token_ids == free.token_ids[: first + 1] and stopped.stop_reason == "eos"


def test_an_empty_stop_string_is_refused(target):
    with pytest.raises(ValueError, match="stop strings must be non-empty strings"):
        generate(target, NoDrafter(), [1, 2], max_new_tokens=4, stop_strings=("",))


@pytest.mark.parametrize("greedy", [True, False])
def test_a_row_of_logits_that_is_not_finite_stops_the_engine(greedy):
    """A NaN row would make every drafted token look accepted: warping refuses it."""
    import numpy as np
    import torch

    from babelspec.sampling import warp

    logits = torch.zeros(2, 64)
    logits[1, 5] = float("nan") if not greedy else float("inf")
    logits[1, 3] = float("nan")
    config = SamplingConfig(greedy=greedy, top_k=0 if greedy else 10)
    probs = warp(logits, config)
    assert np.isclose(sum(probs.prob(0, t) for t in range(64)), 1.0)  # the finite row is a distribution
    with pytest.raises(FloatingPointError, match="not a distribution"):
        probs.prob(1, 0)
