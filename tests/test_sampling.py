"""Warping matches Hugging Face's logits processors; sampling never picks a zero entry."""

import pytest
import torch
from transformers.generation.logits_process import (
    RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper,
)

from babelspec.sampling import SamplingConfig, logits_to_probs, residual, sample


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
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.25, 0.25, 0.0]]).repeat(20000, 1)
    draws = sample(probs, torch.Generator().manual_seed(0))
    counts = torch.bincount(draws, minlength=6).float() / len(draws)
    assert counts[[0, 2, 5]].sum() == 0
    torch.testing.assert_close(counts, probs[0], atol=0.015, rtol=0)


def test_residual_is_the_normalised_positive_part():
    q = torch.tensor([0.5, 0.3, 0.2])
    p = torch.tensor([0.2, 0.6, 0.2])
    torch.testing.assert_close(residual(q, p), torch.tensor([1.0, 0.0, 0.0]))
    torch.testing.assert_close(residual(q, q.clone()), q)  # nothing to correct
