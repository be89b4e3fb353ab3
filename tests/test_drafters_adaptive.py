"""``adaptive:SPEC``: each step's gamma from the generation's acceptance and costs; the output
stays the target's (the joint law of 4 sampled tokens, greedy tokens bit for bit)."""

from __future__ import annotations

import math

import pytest
from stats import chi_square_pvalue, exact_joint_distribution
from test_engine_lossless import JOINT_CONFIG, JOINT_P, JOINT_PROMPT, JOINT_TOKENS, JOINT_VOCAB, _joint_counts
from tiny import FixedDrafter, tiny_qwen3

from babelspec.drafters import make_drafter
from babelspec.drafters.adaptive import AdaptiveDrafter, best_gamma
from babelspec.engine import generate
from babelspec.sampling import SamplingConfig
from babelspec.speedup import expected_tokens_per_step as expected_tokens
from babelspec.target import Target


def test_expected_tokens_of_a_step():
    assert expected_tokens(0.5, 0) == 1.0
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert expected_tokens(1.0, 4) == 5.0 and expected_tokens(0.0, 4) == 1.0


def test_the_gamma_that_pays_most():
    # a free draft: the longest always (more tokens can only add)
    assert best_gamma(0.05, 4, 0.0, 1.0, 1.0) == 4
    # alpha 0.9 at 0.55 plain steps per drafted token (the int8 self-drafter on this CPU)
    rates = {g: expected_tokens(0.9, g) / (1 + 0.55 * g) for g in range(1, 7)}
    assert best_gamma(0.9, 6, 0.55, 1.0, 1.0) == max(rates, key=rates.get) == 3
    # alpha 0.5 at 0.6 per token: no gamma makes a token cheaper than a plain step
    assert best_gamma(0.5, 4, 0.6, 1.0, 1.0) == 0
    # ... unless a plain step costs more than the rest of a drafted one
    assert best_gamma(0.5, 4, 0.6, 1.0, 2.0) > 0


@pytest.fixture(scope="module")
def joint_model():
    return tiny_qwen3(vocab=JOINT_VOCAB, seed=5)


def test_four_tokens_at_adaptive_gammas_follow_the_target_joint_law(joint_model):
    exact = exact_joint_distribution(joint_model, JOINT_PROMPT, JOINT_CONFIG, JOINT_TOKENS)
    # at 0.6 plain steps per drafted token, the estimate picks plain steps and drafted ones by turns
    drafter = AdaptiveDrafter(FixedDrafter(JOINT_P, "dense"), draft_cost=0.6, verify_cost=1.0,
                              warmup=1, probe_every=2)  # fmt: skip
    gammas: set[int] = set()
    counts, _ = _joint_counts(Target(joint_model), drafter, each=lambda r: gammas.update(drafter.gammas[1:]))
    assert 0 in gammas and gammas - {0}  # after the first step: plain steps and drafted ones
    assert chi_square_pvalue(counts, exact) > 1e-3


def test_a_costly_drafter_that_is_never_right_falls_to_plain_decoding_with_probes():
    from tiny import ScriptedDrafter

    model = tiny_qwen3(vocab=32, seed=1)
    target = Target(model)
    prompt = [1, 5, 2]
    expected = generate(target, make_drafter("none", target), prompt, max_new_tokens=40,
                        sampling=SamplingConfig(greedy=True)).token_ids  # fmt: skip
    wrong = ScriptedDrafter(expected, vocab_size=32, always_wrong=True)
    drafter = AdaptiveDrafter(wrong, draft_cost=0.5, verify_cost=1.0, warmup=2, probe_every=8)
    out = generate(target, drafter, prompt, gamma=4, max_new_tokens=40, sampling=SamplingConfig(greedy=True))
    assert out.token_ids == expected
    chosen = drafter.gammas[2:]
    assert chosen.count(0) >= len(chosen) * 3 // 4  # mostly plain steps once the estimate has spoken
    assert any(g > 0 for g in chosen)  # and the probes


def test_a_free_drafter_always_drafts_the_gamma_asked_for():
    from tiny import ScriptedDrafter

    model = tiny_qwen3(vocab=32, seed=1)
    target = Target(model)
    expected = generate(target, make_drafter("none", target), [1, 5, 2], max_new_tokens=30,
                        sampling=SamplingConfig(greedy=True)).token_ids  # fmt: skip
    fixed = generate(target, ScriptedDrafter(expected, vocab_size=32, spoil_every=3), [1, 5, 2], gamma=4,
                     max_new_tokens=30, sampling=SamplingConfig(greedy=True))  # fmt: skip
    drafter = AdaptiveDrafter(ScriptedDrafter(expected, vocab_size=32, spoil_every=3), draft_cost=0.0, verify_cost=1.0)
    out = generate(target, drafter, [1, 5, 2], gamma=4, max_new_tokens=30, sampling=SamplingConfig(greedy=True))
    assert out.token_ids == expected
    assert out.proposed_per_step == fixed.proposed_per_step and 4 in drafter.gammas  # every step as asked


@pytest.mark.parametrize(("spec", "message"), [
    ("adaptive:", "wraps a drafter spec"),
    ("adaptive:none", "wraps a drafter spec"),
    ("adaptive:adaptive:self:1", "wraps a drafter spec"),
])  # fmt: skip
def test_bad_adaptive_specs_say_what_to_write(spec, message):
    target = Target(tiny_qwen3(vocab=32, seed=1))
    with pytest.raises(ValueError, match=message):
        make_drafter(spec, target)


def test_bad_costs_are_refused():
    with pytest.raises(ValueError, match="draft_cost must be a finite cost"):
        AdaptiveDrafter(FixedDrafter(JOINT_P), draft_cost=math.nan)
    with pytest.raises(ValueError, match="warmup must be >= 0"):
        AdaptiveDrafter(FixedDrafter(JOINT_P), warmup=-1)
