"""``int8:[K@]LANG``: the target's own layers on weight-only int8 copies, under its restricted head
in the model's own dtype.
Its products are what they claim, its drafts are close to the full-precision drafter's, and the
engine stays exact with it: greedy equal to plain greedy, samples following the target."""

from __future__ import annotations

import pytest
import torch
from stats import chi_square_pvalue, exact_pair_distribution
from tiny import tiny_gemma3, tiny_qwen3

from babelspec.drafters import make_drafter
from babelspec.drafters.base import Verdict
from babelspec.drafters.vocabhead import RestrictedHeadLM, VocabHeadDrafter
from babelspec.engine import generate
from babelspec.forward.quantize import Int8Linear, quantize_int8
from babelspec.lm import CausalLM
from babelspec.sampling import SamplingConfig
from babelspec.target import Target


def _gemma(vocab: int = 64, layers: int = 4, seed: int = 0, dtype: torch.dtype = torch.float32):
    model = tiny_gemma3(vocab=vocab, layers=layers, sliding_window=4, seed=seed).to(dtype)
    model.set_attn_implementation("eager")  # the lean forward's arithmetic
    return model


def _int8_drafter(model: torch.nn.Module, target: Target, keep: torch.Tensor | None = None) -> VocabHeadDrafter:
    keep = torch.arange(model.config.vocab_size) if keep is None else keep
    return VocabHeadDrafter(RestrictedHeadLM(model, keep, quantize="int8"), name="int8:test", target=target)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_product_is_the_dequantised_weights_product(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(48, 32, generator=g).to(dtype), torch.randn(16, 32, generator=g).to(dtype) * 10]
    rows, scales = quantize_int8(torch.cat(weights))
    assert rows.dtype == torch.int8 and int(rows.abs().max()) == 127  # each row spans the int8 range
    dequantised = rows.float() * scales.float()[:, None]
    torch.testing.assert_close(dequantised, torch.cat(weights).float(), atol=float(scales.max()) / 2 + 1e-2, rtol=0.02)
    x = torch.randn(1, 3, 32, generator=g).to(dtype)
    first, second = Int8Linear(weights)(x)  # stacked, then split
    expected = x.float() @ dequantised.T
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
    torch.testing.assert_close(torch.cat([first, second], -1).float(), expected, rtol=tol, atol=tol * 10)
    assert first.shape == (1, 3, 48) and second.shape == (1, 3, 16)


def test_int8_forward_is_close_to_the_full_precision_drafter() -> None:
    model = _gemma(layers=3)
    ids = list(range(1, 12))
    full = CausalLM(RestrictedHeadLM(model, torch.arange(64))).forward(ids)
    int8 = CausalLM(RestrictedHeadLM(model, torch.arange(64), quantize="int8"), quantize="int8").forward(ids)
    assert not torch.equal(full, int8)  # it is another model ...
    assert (full.argmax(-1) == int8.argmax(-1)).float().mean() >= 0.8  # ... close to the target's own
    torch.testing.assert_close(torch.softmax(int8, -1), torch.softmax(full, -1), atol=0.05, rtol=0.5)


def test_the_restricted_head_stays_in_the_models_dtype_under_int8_layers() -> None:
    """An int8 head cost the non-Latin scripts most of their acceptance: only the layers are int8."""
    model = _gemma(dtype=torch.bfloat16)
    head = RestrictedHeadLM(model, torch.arange(0, 64, 2), quantize="int8")
    hidden = torch.randn(1, 3, model.config.hidden_size).bfloat16()
    weight = model.get_output_embeddings().weight[torch.arange(0, 64, 2)]
    assert weight.dtype == torch.bfloat16
    assert torch.equal(head.base_product(hidden), torch.nn.functional.linear(hidden, weight))
    lm = CausalLM(head, quantize="int8")
    assert all(isinstance(layer.down, Int8Linear) for layer in lm.lean.layers)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_speculation_with_int8_drafts_equals_plain_greedy(dtype: torch.dtype) -> None:
    model = _gemma(dtype=dtype)
    target = Target(model)
    drafter = _int8_drafter(model, target)
    prompt = [1, 7, 3, 9, 4]
    plain = generate(target, make_drafter("none", target), prompt, gamma=1, max_new_tokens=24,
                     sampling=SamplingConfig(greedy=True)).token_ids
    for gamma in (1, 3, 5):
        result = generate(target, drafter, prompt, gamma=gamma, max_new_tokens=24, sampling=SamplingConfig(greedy=True))
        assert result.token_ids == plain
        assert result.accepted > 0  # it drafts the target's own choices


def test_int8_drafts_keep_sampling_lossless_under_the_papers_warping() -> None:
    vocab = 12
    model = _gemma(vocab=vocab, layers=2, seed=3)
    target = Target(model)
    drafter = _int8_drafter(model, target, keep=torch.tensor([0, 1, 2, 3, 5, 8, 9]))
    prompt = [4, 6, 4]
    config = SamplingConfig(temperature=0.9, top_k=6, top_p=0.9, repetition_penalty=1.5, repetition_window=3)
    exact = exact_pair_distribution(model, prompt, config)
    counts = torch.zeros(vocab * vocab)
    proposed = accepted = 0
    for seed in range(1500):
        result = generate(target, drafter, prompt, gamma=2, max_new_tokens=2,
                          sampling=SamplingConfig(**{**config.to_dict(), "seed": seed}))
        counts[result.token_ids[0] * vocab + result.token_ids[1]] += 1
        proposed, accepted = proposed + result.proposed, accepted + result.accepted
    assert 0 < accepted < proposed  # acceptance and rejection both exercised
    assert chi_square_pvalue(counts, exact) > 1e-3


def test_int8_specs_name_layers_and_language_and_refuse_what_they_cannot_run() -> None:
    target = Target(_gemma(layers=3))
    with pytest.raises(ValueError, match="needs a language"):
        make_drafter("int8", target)
    for spec, message in [("int8:0@npi", "1 <= K <= 3"), ("int8:x@npi", "integer")]:
        with pytest.raises(ValueError, match=message):
            make_drafter(spec, target)
    with pytest.raises(ValueError, match="int8 weights need the lean forward.*this qwen3 model"):
        VocabHeadDrafter(RestrictedHeadLM(tiny_qwen3(), torch.arange(64), quantize="int8"), name="int8:x")


def test_a_commit_takes_the_targets_keys_and_values_of_the_kept_tokens() -> None:
    # After a fully accepted draft the drafter never forwarded its last drafted token: with the
    # target's rows it drafts on from the one new token instead of two, and every row it holds
    # is the target's. The caches start small, so forwards grow them (into inference tensors,
    # which the commit, outside any forward, must still write).
    model = _gemma()
    target = Target(model)
    target.lean.capacity = 4
    drafter = _int8_drafter(model, target)
    prompt = [1, 7, 3, 9, 4]
    target.prefill(prompt[:-1])
    drafter.start(prompt, SamplingConfig(greedy=True), torch.Generator())
    drafted = drafter.propose(3).tokens.tolist()
    own_before = [r.clone() for r in drafter.lm.cache.layers[0].rows(len(prompt) - 1, len(prompt) + 2)]
    target.checkpoint_and_verify([prompt[-1]] + drafted)
    target.crop_or_replay(len(prompt) + 3)  # all three kept, as the engine crops
    drafter.commit(Verdict(drafted, 11))
    mine, theirs = drafter.lm.cache.layers[0], target.cache.layers[0]
    assert drafter.lm.cached_len == target.cached_len == len(prompt) + 3
    for a, b in zip(mine.rows(0, target.cached_len), theirs.rows(0, target.cached_len)):
        assert torch.equal(a, b.to(a.dtype))
    # the rows of the tokens the drafter forwarded itself (int8) were replaced by the target's
    assert not torch.equal(own_before[1], mine.rows(len(prompt) - 1, len(prompt) + 2)[1])
    drafter.propose(1)
    assert drafter.lm.forward_tokens[-1] == 1


def test_int8_drafts_after_commits_that_take_the_targets_rows_keep_sampling_lossless() -> None:
    # At γ 1 over four tokens the second and third are drafted after a commit (a rejection, or
    # a fully accepted draft whose last token the drafter never forwarded): their joint law
    # must be the target's.
    vocab = 8
    model = _gemma(vocab=vocab, layers=2, seed=5)
    target = Target(model)
    drafter = _int8_drafter(model, target)
    prompt = [4, 6, 4]
    config = SamplingConfig(temperature=1.0)
    with torch.no_grad():
        def probs(seq: list[int]) -> torch.Tensor:
            return torch.softmax(model(torch.tensor([seq])).logits[0, -1].float(), 0)

        exact = torch.zeros(vocab, vocab)  # P(t2, t3)
        for t1, p1 in enumerate(probs(prompt).tolist()):
            for t2, p2 in enumerate(probs(prompt + [t1]).tolist()):
                exact[t2] += p1 * p2 * probs(prompt + [t1, t2])
    counts = torch.zeros(vocab, vocab)
    synced = 0
    for seed in range(1500):
        result = generate(target, drafter, prompt, gamma=1, max_new_tokens=4,
                          sampling=SamplingConfig(**{**config.to_dict(), "seed": seed}))
        counts[result.token_ids[1], result.token_ids[2]] += 1
        synced += drafter._follows_target
    assert synced == 1500  # every commit took the target's rows
    assert chi_square_pvalue(counts.flatten(), exact.flatten()) > 1e-3
