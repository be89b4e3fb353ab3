"""babelspec's drafters for a transformers model (``babelspec.integrations.transformers``): the
real default model's greedy output equals transformers' own ``generate`` token for token with a
Yoruba n-gram drafting, the sampled first two tokens follow the distribution transformers' own
warpers give, and a batch of prompts is refused with a message."""

from __future__ import annotations

import itertools

import pytest
import torch
from scipy.stats import chisquare
from tiny import tiny_qwen3
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from babelspec.data import corpus
from babelspec.drafters.model import ModelDrafter
from babelspec.integrations.transformers import generate, generate_with_stats
from babelspec.ngram import CountConfig, train
from babelspec.target import load_target


def test_greedy_equals_transformers_generate_on_the_default_model(tmp_path):
    target = load_target("gemma-3-270m", dtype="float32")
    model, tokenizer = target.model, target.tokenizer
    table = tmp_path / "yor.ngram"
    train(corpus.monolingual("yor", "train")[:400], tokenizer, CountConfig(order=2)).save(table)
    prompt = "Translate from English to Yoruba.\nEnglish: The children went to the market.\nYoruba:"
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        theirs = model.generate(ids, max_new_tokens=32, do_sample=False)
    ours, result = generate_with_stats(model, ids, tokenizer=tokenizer, drafter=f"ngram:{table}", max_new_tokens=32)
    assert ours.tolist() == theirs.tolist()
    assert result.proposed > 0 and result.steps < len(result.token_ids)  # it drafted, and drafts were kept


def _warped(model, prompt: list[int], temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """transformers' own warping of the next token: temperature, top-k, top-p."""
    warp = LogitsProcessorList([TemperatureLogitsWarper(temperature), TopKLogitsWarper(top_k), TopPLogitsWarper(top_p)])
    with torch.inference_mode():
        ids = torch.tensor([prompt])
        logits = model(ids).logits[:, -1].float()
    return warp(ids, logits).softmax(-1)[0]


def test_sampled_tokens_follow_transformers_warped_distribution():
    model, draft = tiny_qwen3(vocab=16, seed=5), tiny_qwen3(vocab=16, seed=6)
    prompt, settings = [3, 7, 1], {"temperature": 0.8, "top_k": 6, "top_p": 0.9}
    first = _warped(model, prompt, **settings)
    # the pair's exact probability: the first token's, times the second's after it
    exact = {(a, b): first[a].item() * _warped(model, prompt + [a], **settings)[b].item()
             for a, b in itertools.product(range(16), repeat=2) if first[a] > 0}  # fmt: skip
    counts = dict.fromkeys(exact, 0)
    drafter = ModelDrafter(draft)
    runs = 1500
    for seed in range(runs):
        out = generate(model, [prompt], drafter=drafter, gamma=2, max_new_tokens=2, do_sample=True, seed=seed,
                       eos_token_id=[], **settings)  # fmt: skip
        counts[tuple(out[0, 3:].tolist())] += 1
    keys = [k for k in exact if exact[k] > 0]
    assert sum(counts[k] for k in keys) == runs  # nothing outside the warped support
    assert len(keys) >= 10  # the pairs are varied enough to tell distributions apart
    assert _chisquare_p(counts, exact, runs) > 1e-3
    # the control: the same samples against the distribution warped at another temperature fail
    hotter = {**settings, "temperature": 1.6}
    first_hot = _warped(model, prompt, **hotter)
    other = {(a, b): first_hot[a].item() * _warped(model, prompt + [a], **hotter)[b].item()
             for a, b in itertools.product(range(16), repeat=2) if first_hot[a] > 0}  # fmt: skip
    assert _chisquare_p(counts, other, runs) < 1e-3


def _chisquare_p(counts: dict, exact: dict, runs: int) -> float:
    """Chi-square p-value of sampled pair ``counts`` against pair probabilities ``exact``: cells
    whose expected count is under 5 pooled into one; a sampled pair ``exact`` gives no mass makes
    the test fail outright (p = 0)."""
    if any(n and exact.get(k, 0.0) <= 0 for k, n in counts.items()):
        return 0.0
    keys = [k for k in exact if exact[k] > 0]
    expected = torch.tensor([exact[k] for k in keys], dtype=torch.float64)
    expected = expected / expected.sum() * runs
    pooled = expected < 5  # rare pairs pooled into one cell
    observed = torch.tensor([counts.get(k, 0) for k in keys], dtype=torch.float64)
    f_obs, f_exp = observed[~pooled], expected[~pooled]
    if pooled.any():
        f_obs, f_exp = torch.cat([f_obs, observed[pooled].sum()[None]]), torch.cat([f_exp, expected[pooled].sum()[None]])
    return float(chisquare(f_obs.numpy(), f_exp.numpy()).pvalue)


def test_a_batch_of_prompts_is_refused_with_a_message():
    model = tiny_qwen3(vocab=16)
    with pytest.raises(ValueError, match=r"input_ids must be one non-empty sequence .* got shape \(2, 3\)"):
        generate(model, torch.tensor([[1, 2, 3], [4, 5, 6]]))


def test_bench_transformers_names_a_bad_option():
    from typer.testing import CliRunner

    from babelspec.cli import app

    res = CliRunner().invoke(app, ["bench", "transformers", "--prompts-per-lang", "0"])
    assert res.exit_code != 0 and "--prompts-per-lang" in res.output
    res = CliRunner().invoke(app, ["bench", "transformers", "--langs", "haw", "--data-root", "/nonexistent"])
    assert res.exit_code == 2 and "error:" in res.output
