"""Speculative greedy decoding reproduces plain greedy decoding token for token."""

import pytest
import torch
from tiny import ScriptedDrafter, tiny_gemma3, tiny_qwen3, tiny_qwen35

from babelspec.drafters.base import NoDrafter
from babelspec.drafters.model import ModelDrafter
from babelspec.engine import generate
from babelspec.sampling import SamplingConfig
from babelspec.target import Target

# The penalty keeps tiny random models out of one-token loops, so drafts are judged on varied text.
GREEDY = SamplingConfig(greedy=True, repetition_penalty=2.0, repetition_window=6)
PROMPT = [3, 17, 9, 40, 22]
NEW = 24
BUILDERS = {"qwen3": tiny_qwen3, "gemma3": tiny_gemma3, "qwen3.5": tiny_qwen35}
SEEDS = {"qwen3": 5, "gemma3": 4, "qwen3.5": 1}


def hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def family(request):
    model = BUILDERS[request.param](seed=SEEDS[request.param])
    reference = generate(Target(model), NoDrafter(), PROMPT, max_new_tokens=NEW, sampling=GREEDY).token_ids
    assert len(set(reference)) >= 8  # varied enough to tell drafters apart
    return request.param, model, reference


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_plain_decoding_matches_hugging_face_generate(name):
    model = BUILDERS[name](seed=SEEDS[name])
    ours = generate(Target(model), NoDrafter(), PROMPT, max_new_tokens=NEW, sampling=SamplingConfig(greedy=True))
    assert ours.token_ids == hf_greedy(model, PROMPT, NEW)


@pytest.mark.parametrize("gamma", [1, 2, 5])  # one token, a short chain, a long one
@pytest.mark.parametrize("kind", ["always_right", "never_right", "sometimes_right", "neural"])
def test_speculative_greedy_equals_plain_greedy(family, gamma, kind):
    name, model, reference = family
    if kind == "neural":  # another random model of the family: agrees now and then
        drafter = ModelDrafter(BUILDERS[name](seed=2, layers=4 if name == "qwen3.5" else 2))
    else:
        drafter = ScriptedDrafter(reference + [0] * 8, vocab_size=64, spoil_every=3 if kind == "sometimes_right" else 0,
                                  always_wrong=kind == "never_right")
    result = generate(Target(model), drafter, PROMPT, gamma=gamma, max_new_tokens=NEW, sampling=GREEDY)
    assert result.token_ids == reference
    if kind == "always_right":
        assert result.rejections == 0 and result.accepted == result.proposed > 0
        assert result.steps == -(-NEW // (gamma + 1))  # each step yields gamma + 1 tokens
    if kind == "never_right":
        assert result.accepted == 0 and result.rejections == sum(p > 0 for p in result.proposed_per_step)
    if kind == "sometimes_right":
        assert 0 < result.accepted < result.proposed


def test_statistics_follow_the_papers_definitions(family):
    name, model, reference = family
    drafter = ScriptedDrafter(reference + [0] * 8, vocab_size=64, spoil_every=4)
    r = generate(Target(model), drafter, PROMPT, gamma=4, max_new_tokens=NEW, sampling=GREEDY)
    assert r.proposed == sum(r.proposed_per_step) and r.accepted == sum(r.accepted_per_step)
    assert r.rejections == sum(a < p for a, p in zip(r.accepted_per_step, r.proposed_per_step))
    assert r.alpha == pytest.approx(r.accepted / (r.accepted + r.rejections))
    assert r.alpha_token == pytest.approx(r.accepted / r.proposed)
    assert len(r.token_ids) == sum(r.accepted_per_step) + r.steps == NEW
    assert r.wall_seconds >= r.target_seconds > 0
    # One verification forward per step; a cache that cannot be cropped replays after each
    # rejection, timed apart.
    assert len(r.target_forward_seconds) == r.steps
    assert len(r.target_replay_seconds) == (0 if name != "qwen3.5" else r.rejections)
