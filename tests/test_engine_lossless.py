"""Speculative sampling is lossless: its outputs follow the target's distribution exactly."""

import numpy as np
import pytest
import torch
from stats import chi_square_pvalue, exact_joint_distribution, exact_pair_distribution
from tiny import FixedDrafter, tiny_qwen3

from babelspec.drafters.base import Draft
from babelspec.engine import accept_or_reject, generate
from babelspec.sampling import Probs, SamplingConfig
from babelspec.target import Target

VOCAB = 8
PROMPT = [1, 5, 2]
SAMPLES = 1200


DRAFT_P = torch.tensor([0.30, 0.02, 0.25, 0.03, 0.15, 0.05, 0.0, 0.20])
CONFIGS = {
    "plain": SamplingConfig(),
    "warped": SamplingConfig(temperature=0.8, top_k=5, top_p=0.85, repetition_penalty=1.5, repetition_window=2),
}


@pytest.fixture(scope="module")
def target_model():
    return tiny_qwen3(vocab=VOCAB, seed=3)


@pytest.mark.parametrize(
    "form,config_name", [("dense", "plain"), ("dense", "warped"), ("sparse", "warped"), ("point", "warped")]
)
def test_speculative_samples_follow_the_target_distribution(target_model, form, config_name):
    config = CONFIGS[config_name]
    target = Target(target_model)
    exact = exact_pair_distribution(target_model, PROMPT, config)
    if form == "point":  # a point mass on the target's second choice: accepted now and then
        drafter = FixedDrafter(torch.eye(VOCAB)[exact.view(VOCAB, VOCAB).sum(1).argsort()[-2]], form)
    else:
        drafter = FixedDrafter(DRAFT_P, form)
    counts = torch.zeros(VOCAB * VOCAB)
    proposed = accepted = 0
    for seed in range(SAMPLES):
        cfg = SamplingConfig(**{**config.to_dict(), "seed": seed})
        result = generate(target, drafter, PROMPT, gamma=3, max_new_tokens=2, sampling=cfg)
        t1, t2 = result.token_ids
        counts[t1 * VOCAB + t2] += 1
        proposed += result.proposed
        accepted += result.accepted
    assert proposed > 0 and 0 < accepted < proposed  # both branches of the rule were exercised
    assert chi_square_pvalue(counts, exact) > 1e-3


def test_the_chi_square_check_detects_a_wrong_distribution(target_model):
    """The check above has power: pairs drawn from the draft alone are rejected."""
    g = torch.Generator().manual_seed(0)
    pairs = torch.multinomial(DRAFT_P, 2 * SAMPLES, replacement=True, generator=g).view(-1, 2)
    counts = torch.bincount(pairs[:, 0] * VOCAB + pairs[:, 1], minlength=VOCAB * VOCAB).float()
    exact = exact_pair_distribution(target_model, PROMPT, CONFIGS["plain"])
    assert chi_square_pvalue(counts, exact) < 1e-6


@pytest.mark.parametrize("form", ["dense", "sparse", "point"])
def test_one_judged_token_follows_the_target_row(form):
    """The first token out of the rejection sampler is distributed as q[0] (Leviathan Thm 1)."""
    q = torch.tensor([[0.05, 0.40, 0.10, 0.30, 0.15], [0.2, 0.2, 0.2, 0.2, 0.2]])
    p = torch.tensor([0.50, 0.10, 0.30, 0.00, 0.10])
    g = torch.Generator().manual_seed(1)
    rng = np.random.default_rng(1)
    counts = torch.zeros(5)
    for _ in range(20000):
        if form == "point":
            draft = Draft.point([0])
        else:
            token = torch.multinomial(p, 1, generator=g)
            probs = Probs(p[None]) if form == "dense" else Probs(p[[0, 1, 2, 4]][None], torch.tensor([[0, 1, 2, 4]]))
            draft = Draft(tokens=token, probs=probs)
        n, nxt = accept_or_reject(Probs(q), draft, rng)
        counts[int(draft.tokens[0]) if n == 1 else nxt] += 1
    assert chi_square_pvalue(counts, q[0]) > 1e-3


# The joint law of 4 tokens drafted at γ = 3: every draft position is judged (and its residual
# drawn from), under top-k, top-p, temperature and a repetition penalty whose window (2) is
# shorter than the draft, so the penalised ids move inside one verification.
JOINT_VOCAB, JOINT_TOKENS, JOINT_SAMPLES = 5, 4, 2500
JOINT_CONFIG = SamplingConfig(temperature=1.2, top_k=4, top_p=0.95, repetition_penalty=1.5, repetition_window=2)
JOINT_P = torch.tensor([0.10, 0.10, 0.50, 0.20, 0.10])  # near the target's rows: positions 0-2 judged
JOINT_PROMPT = [1, 4, 2]


class MisreportedAtTwo(FixedDrafter):
    """Draws as ``FixedDrafter`` (dense) but reports its row at draft position 2 as a point mass
    on its most likely token: there the judgement and the residual draw use a wrong draft
    distribution (a lossless check must see it)."""

    def propose(self, gamma: int) -> Draft:
        draft = super().propose(gamma)
        if len(draft) < 3:
            return draft
        rows = self.p.repeat(len(draft), 1)
        rows[2] = torch.eye(len(self.p))[int(self.p.argmax())]
        return Draft(tokens=draft.tokens, probs=Probs(rows), forwards=draft.forwards)


def _joint_counts(target, drafter, each=None) -> tuple[torch.Tensor, int]:
    """Counts of each 4-token output over JOINT_SAMPLES seeds, and how many generations judged
    draft position 2 in their first step; ``each(result)`` sees every generation."""
    counts = torch.zeros(JOINT_VOCAB**JOINT_TOKENS)
    deep = 0  # generations whose first step judged draft position 2
    for seed in range(JOINT_SAMPLES):
        cfg = SamplingConfig(**{**JOINT_CONFIG.to_dict(), "seed": seed})
        result = generate(target, drafter, JOINT_PROMPT, gamma=3, max_new_tokens=JOINT_TOKENS, sampling=cfg)
        index = 0
        for t in result.token_ids:
            index = index * JOINT_VOCAB + t
        counts[index] += 1
        deep += result.accepted_per_step[0] >= 2
        if each is not None:
            each(result)
    return counts, deep


@pytest.fixture(scope="module")
def joint_model():
    return tiny_qwen3(vocab=JOINT_VOCAB, seed=5)


@pytest.fixture(scope="module")
def joint_exact(joint_model):
    return exact_joint_distribution(joint_model, JOINT_PROMPT, JOINT_CONFIG, JOINT_TOKENS)


@pytest.mark.parametrize("form", ["dense", "point"])
def test_four_tokens_at_gamma_three_follow_the_target_joint_law(joint_model, joint_exact, form):
    if form == "point":  # the target's most likely first token, as a point mass at every position
        drafter = FixedDrafter(torch.eye(JOINT_VOCAB)[joint_exact.view(JOINT_VOCAB, -1).sum(1).argmax()], form)
    else:
        drafter = FixedDrafter(JOINT_P, form)
    counts, deep = _joint_counts(Target(joint_model), drafter)
    assert deep > JOINT_SAMPLES // 20  # draft position 2 was judged often
    assert chi_square_pvalue(counts, joint_exact) > 1e-3


def test_the_joint_check_sees_a_wrong_residual_at_draft_position_two(joint_model, joint_exact):
    counts, deep = _joint_counts(Target(joint_model), MisreportedAtTwo(JOINT_P, "dense"))
    assert deep > JOINT_SAMPLES // 20
    assert chi_square_pvalue(counts, joint_exact) < 1e-6
