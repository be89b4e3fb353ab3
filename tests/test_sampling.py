"""Warping matches Hugging Face's logits processors; sampling never picks a zero entry."""

import numpy as np
import pytest
import torch
from transformers.generation.logits_process import (
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from babelspec.sampling import Probs, SamplingConfig, logits_to_probs, warp


@pytest.mark.parametrize("first_position", [3, 12, 40])
def test_windowed_repetition_penalty_matches_hugging_face_on_each_window(first_position):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 50, generator=g) * 3
    sequence = torch.randint(0, 50, (first_position + 4,), generator=g)
    config = SamplingConfig(repetition_penalty=1.3, repetition_window=8)
    ours = logits_to_probs(logits, config, sequence, first_position)
    hf = RepetitionPenaltyLogitsProcessor(1.3)
    for i in range(4):
        end = first_position + i
        window = sequence[max(0, end - 8) : end][None]
        expected = torch.softmax(hf(window, logits[i : i + 1].clone()), dim=1)
        torch.testing.assert_close(ours[i : i + 1], expected)


def test_temperature_top_k_top_p_match_hugging_face():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 300, generator=g) * 2
    config = SamplingConfig(temperature=0.7, top_k=40, top_p=0.8)
    ours = logits_to_probs(logits, config)
    x = TemperatureLogitsWarper(0.7)(None, logits.clone())
    x = TopKLogitsWarper(40)(None, x)
    x = TopPLogitsWarper(0.8)(None, x)
    torch.testing.assert_close(ours, torch.softmax(x, dim=1))


def test_greedy_is_a_point_mass_at_the_arg_max():
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 2.9]])
    probs = logits_to_probs(logits, SamplingConfig(greedy=True))
    assert probs.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


def test_sample_never_picks_a_zero_probability_token_and_follows_the_row():
    row = torch.tensor([0.0, 0.5, 0.0, 0.25, 0.25, 0.0])
    for probs in (Probs(row.repeat(20000, 1)), Probs(row[[1, 0, 3, 4, 5]].repeat(20000, 1), torch.tensor([[1, 0, 3, 4, 5]] * 20000))):
        draws = probs.sample(torch.Generator().manual_seed(0))
        counts = np.bincount(draws, minlength=6) / len(draws)
        assert counts[[0, 2, 5]].sum() == 0
        np.testing.assert_allclose(counts, row.numpy(), atol=0.015)


def test_the_residual_is_the_normalised_positive_part():
    q = Probs(torch.tensor([[0.5, 0.3, 0.2]]))
    p = Probs(torch.tensor([[0.6, 0.2]]), torch.tensor([[1, 0]]))  # p = (0.2, 0.6, 0) in full ids
    draws = [q.draw_residual(0, p, u) for u in np.arange(50) / 50 + 0.01]
    assert set(draws) == {0, 2}  # r = norm(0.3, 0, 0.2) = (0.6, 0, 0.4)
    assert draws.count(0) == 30
    assert q.draw_residual(0, q, 0.7) == q.draw(0, 0.7)  # nothing to correct: q itself


@pytest.mark.parametrize("vocab", [300, 262_144])
@pytest.mark.parametrize("config", [SamplingConfig(top_k=40, top_p=0.8, repetition_penalty=1.3, repetition_window=8),
                                    SamplingConfig(greedy=True, repetition_penalty=0.7, repetition_window=8),
                                    SamplingConfig(top_k=0, top_p=0.5, repetition_penalty=1.3, repetition_window=8)])
def test_compact_warping_equals_the_dense_definition(vocab, config):
    """Candidates first (large vocabularies: the best chunks only), then penalty, temperature,
    top-k, top-p: the same distribution as applying each to the full row."""
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(3, vocab, generator=g) * 3
    sequence = torch.randint(0, vocab, (30,), generator=g)
    sequence[20:28] = logits[0].topk(8).indices  # the penalty hits the best tokens of row 0
    expected = logits.clone()
    for i in range(3):
        window = sequence[max(0, 20 + i - 8) : 20 + i].unique()
        x = expected[i, window]
        expected[i, window] = torch.where(x > 0, x / config.repetition_penalty, x * config.repetition_penalty)
    before = logits.clone()
    ours = logits_to_probs(logits, config, sequence, first_position=20)
    assert torch.equal(logits, before)  # the caller's logits are left as they were
    if config.greedy:
        assert ours.argmax(1).tolist() == expected.argmax(1).tolist() and (ours.sum(1) == 1).all()
        return
    x = TopKLogitsWarper(config.top_k)(None, expected) if config.top_k else expected
    x = TopPLogitsWarper(config.top_p)(None, x)
    if config.top_k:
        torch.testing.assert_close(ours, torch.softmax(x, dim=1), rtol=1e-4, atol=1e-6)
    else:  # a float32 cumulative sum over the whole vocabulary moves the cut by a few tokens
        assert (ours - torch.softmax(x, dim=1)).abs().sum(1).max() < 2e-3


def test_top_p_without_top_k_samples_by_the_cdf_not_multinomial(monkeypatch):
    """torch.multinomial over a full-width row costs milliseconds on a 262k vocabulary."""
    def refuse(*args, **kwargs):
        raise AssertionError("torch.multinomial was called")

    monkeypatch.setattr(torch, "multinomial", refuse)
    logits = torch.randn(1, 5000, generator=torch.Generator().manual_seed(0))
    probs = warp(logits, SamplingConfig(top_p=0.9))
    token = int(probs.sample(torch.Generator().manual_seed(1))[0])
    assert logits_to_probs(logits, SamplingConfig(top_p=0.9))[0, token] > 0


def test_top_k_keeps_every_tie_of_the_kth_value_whatever_the_rest_of_the_row_holds():
    """bf16 logits tie often at the 100th value: the warper keeps every entry tied with the k-th
    (as transformers' TopKLogitsWarper does), so its choice depends on the values only, and a row
    whose other entries are -inf (the certified head's) selects what the full row selects."""
    from babelspec.sampling import _top_candidates

    rng = np.random.default_rng(0)
    for _ in range(200):
        vocab = int(rng.choice([50, 1000, 262144]))
        x = np.round(rng.normal(size=vocab).astype(np.float32) * 4) / 4  # many ties
        k = int(rng.integers(1, min(101, vocab)))
        want = np.flatnonzero(x >= np.sort(x)[-k])  # the k-th largest value and all at or above it
        got = _top_candidates(x, k)
        assert np.array_equal(got, want) and len(got) >= k
        sparse = np.full_like(x, -np.inf)
        sparse[want] = x[want]
        assert np.array_equal(_top_candidates(sparse, k), want)


@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_top_k_with_ties_on_both_sides_warps_as_transformers(top_k):
    """Logits [3, 2, 2, 1, 0.5] at top_k 2 keep both entries tied at 2 (0.576, 0.212, 0.212),
    and ties above and below the k-th change nothing: transformers' TopKLogitsWarper, exactly."""
    from transformers import TopKLogitsWarper

    for row in ([3.0, 2.0, 2.0, 1.0, 0.5], [3.0, 3.0, 2.0, 2.0, 2.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]):
        logits = torch.tensor([row])
        want = TopKLogitsWarper(top_k)(None, logits.clone()).softmax(-1)
        got = logits_to_probs(logits, SamplingConfig(top_k=top_k))
        assert torch.allclose(got, want, atol=1e-6), (row, got, want)
    got = logits_to_probs(torch.tensor([[3.0, 2.0, 2.0, 1.0, 0.5]]), SamplingConfig(top_k=2))[0]
    assert torch.allclose(got, torch.tensor([0.5761, 0.2119, 0.2119, 0.0, 0.0]), atol=1e-4)
