"""self:K and the vocabulary-restricted head, on tiny models: shared weights, exact layer
truncation, normalised sparse distributions, and a lossless engine."""

from __future__ import annotations

import pytest
import torch
from tiny import tiny_gemma3, tiny_qwen3, tiny_qwen35

from babelspec.drafters import make_drafter
from babelspec.drafters.base import Verdict
from babelspec.drafters.model import ModelDrafter
from babelspec.drafters.selfdraft import truncated_model
from babelspec.drafters.vocabhead import RestrictedHeadLM, VocabHeadDrafter
from babelspec.engine import generate
from babelspec.sampling import SamplingConfig, logits_to_probs
from babelspec.target import Target


def _tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {**dict(model.named_parameters()), **dict(model.named_buffers())}


@pytest.mark.parametrize("make", [lambda: tiny_gemma3(layers=4), lambda: tiny_qwen3(layers=4)])
def test_self_k_shares_storage_and_equals_the_first_k_layers(make) -> None:
    model = make()
    draft = truncated_model(model, 2)
    full = {t.data_ptr() for t in _tensors(model).values()}
    assert all(t.data_ptr() in full for t in _tensors(draft).values())  # nothing copied
    assert draft.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert len(draft.model.layers) == 2 and draft.config.num_hidden_layers == 2
    assert model.config.num_hidden_layers == 4  # the target's config is untouched
    if hasattr(model.config, "layer_types"):
        assert draft.config.layer_types == model.config.layer_types[:2]

    ids = torch.tensor([[1, 5, 9, 3, 7, 2, 8, 4, 6, 11]])  # longer than the sliding window
    with torch.inference_mode():
        out = model(ids, output_hidden_states=True)
        expected = model.lm_head(model.model.norm(out.hidden_states[2]))
        got = draft(ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_self_k_rejects_bad_layer_counts() -> None:
    from babelspec.drafters import make_drafter

    target = Target(tiny_gemma3(layers=3))
    for spec, message in [("self:0", "1 <= K <= 3"), ("self:4", "1 <= K <= 3"), ("self:x", "integer")]:
        with pytest.raises(ValueError, match=message):
            make_drafter(spec, target)
    with pytest.raises(ValueError, match="needs a language"):
        make_drafter("head", target)


def _head_drafter(model: torch.nn.Module, keep: list[int], layers: int | None = None,
                  target: Target | None = None) -> VocabHeadDrafter:
    body = truncated_model(model, layers) if layers else model
    return VocabHeadDrafter(RestrictedHeadLM(body, torch.tensor(keep)), name="head:test", target=target)


def test_self_k_on_linear_attention_layers_only_is_refused_with_the_smallest_k_that_works() -> None:
    target = Target(tiny_qwen35(layers=8))  # linear, linear, linear, full, ...
    for spec in ("self:2", "self:3"):
        with pytest.raises(ValueError, match="only linear-attention layers.*use self:4 or more"):
            make_drafter(spec, target)
    result = generate(target, make_drafter("self:4", target), [1, 2, 3], gamma=2, max_new_tokens=6,
                      sampling=SamplingConfig(greedy=True))
    assert result.n_tokens == 6 and result.proposed > 0


def test_restricted_head_is_normalised_and_zero_outside_its_tokens() -> None:
    model = tiny_gemma3(vocab=64, layers=3)
    keep = [0, 3, 4, 10, 17, 33, 40, 63]
    drafter = _head_drafter(model, keep)
    prompt = [0, 5, 7, 3]  # 5 and 7 join the kept set for this generation (prompt tokens)
    sampling = SamplingConfig(temperature=1.0)
    drafter.start(prompt, sampling, torch.Generator().manual_seed(0))
    draft = drafter.propose(3)
    assert draft.probs.ids is not None  # compact rows in full-vocabulary ids
    allowed = set(keep) | set(prompt)
    for i in range(len(draft)):
        row = draft.probs.dense(64)[i]
        assert row.sum().item() == pytest.approx(1.0, abs=1e-5)
        assert set(row.nonzero().squeeze(1).tolist()) <= allowed
        assert int(draft.tokens[i]) in allowed
    # With all layers and no warping the first row is the target's softmax renormalised on the set.
    with torch.inference_mode():
        logits = model(torch.tensor([prompt])).logits[0, -1]
    cols = torch.tensor(sorted(allowed))
    expected = torch.zeros(64)
    expected[cols] = torch.softmax(logits[cols], 0)
    torch.testing.assert_close(draft.probs.dense(64)[0], expected, rtol=1e-4, atol=1e-6)


def test_restricted_head_keeps_top_k_sparse_and_applies_penalty_in_its_columns() -> None:
    model = tiny_qwen3(vocab=64, layers=2)
    keep = list(range(0, 64, 2))
    drafter = _head_drafter(model, keep)
    sampling = SamplingConfig(top_k=5, top_p=0.9, repetition_penalty=1.3, repetition_window=4)
    prompt = [2, 4, 6, 8]
    drafter.start(prompt, sampling, torch.Generator().manual_seed(1))
    draft = drafter.propose(2)
    assert len(draft.probs) == 2 and draft.probs.width <= 5
    with torch.inference_mode():
        logits = model(torch.tensor([prompt])).logits[0, -1:]
    masked = torch.full_like(logits, float("-inf"))
    masked[:, keep] = logits[:, keep]
    seq = torch.tensor(prompt + [0, 0])
    expected = logits_to_probs(masked, sampling, seq, first_position=len(prompt))[0]
    torch.testing.assert_close(draft.probs.dense(64)[0], expected, rtol=1e-4, atol=1e-6)


def test_self_draft_starts_from_a_copy_of_the_targets_prefill() -> None:
    model = tiny_gemma3(vocab=64, layers=4, sliding_window=4)
    target = Target(model)
    prompt = [1, 7, 3, 9, 4, 2, 8, 5]
    shared, own = make_drafter("self:2", target), ModelDrafter(truncated_model(model, 2))
    target.prefill(prompt[:-1])
    sampling = SamplingConfig(greedy=True)
    shared.start(prompt, sampling, torch.Generator())
    own.start(prompt, sampling, torch.Generator())
    assert shared.lm.forward_seconds == []  # no draft forward spent on the prompt
    assert shared.lm.cached_len == own.lm.cached_len == len(prompt) - 1
    for a, b in zip(shared.lm.cache.layers, own.lm.cache.layers):
        torch.testing.assert_close(a.keys, b.keys)
        torch.testing.assert_close(a.values, b.values)
    assert shared.propose(3).tokens.tolist() == own.propose(3).tokens.tolist()
    # the copy is the drafter's own: drafting did not touch the target's cache
    assert target.cache.layers[0].keys.shape[-2] == len(prompt) - 1


@pytest.mark.parametrize("spec", ["self", "head", "self+head"])
def test_greedy_speculation_with_self_drafts_equals_plain_greedy(spec: str) -> None:
    model = tiny_gemma3(vocab=64, layers=4, sliding_window=4)
    target = Target(model)
    if spec == "self":
        drafter = make_drafter("self:2", target)
    else:
        drafter = _head_drafter(model, list(range(0, 64, 3)), layers=2 if spec == "self+head" else None,
                                target=target)
    prompt = [1, 7, 3, 9, 4]
    plain = model.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False,
                           eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    for gamma in (1, 3, 5):
        result = generate(target, drafter, prompt, gamma=gamma, max_new_tokens=20,
                          sampling=SamplingConfig(greedy=True))
        assert result.token_ids == plain


def test_restricted_head_scores_the_tokens_the_target_wrote_outside_it() -> None:
    model = tiny_gemma3(vocab=64, layers=2)
    keep = [0, 3, 4, 10]
    drafter = _head_drafter(model, keep)
    drafter.start([0, 3], SamplingConfig(temperature=1.0), torch.Generator().manual_seed(0))
    drafter.propose(2)
    assert 50 not in drafter.head.index.tolist()
    drafter.commit(Verdict([], 50))  # the target rejected the draft and wrote 50, which no row scored
    assert 50 in drafter.head.index.tolist()
    draft = drafter.propose(1)
    row = draft.probs.dense(64)[0]
    assert row[50] > 0 and row.sum().item() == pytest.approx(1.0, abs=1e-5)
    assert set(row.nonzero().squeeze(1).tolist()) <= {0, 3, 4, 10, 50}
    drafter.commit(Verdict(draft.tokens.tolist(), 3))  # a token the head scores already adds nothing
    assert sorted(drafter.head.index.tolist()) == [0, 3, 4, 10, 50]
    drafter.start([0, 3], SamplingConfig(temperature=1.0), torch.Generator().manual_seed(0))
    assert 50 not in drafter.head.index.tolist()  # a new generation starts from its prompt's rows


@pytest.mark.parametrize("gamma", [2, 1])
def test_restricted_head_keeps_sampling_lossless(gamma: int) -> None:
    # First two generated tokens: their empirical joint law must be the target's, although the
    # draft puts zero mass on most of the vocabulary. At γ = 1 the second token is drafted after
    # a commit, by a head that has taken the first token's row where the target wrote one outside.
    vocab = 16
    model = tiny_gemma3(vocab=vocab, layers=2, seed=3)
    target = Target(model)
    drafter = _head_drafter(model, [0, 1, 2, 3, 5, 8])
    prompt = [4, 6]
    with torch.inference_mode():
        first = torch.softmax(model(torch.tensor([prompt])).logits[0, -1], 0)
        nexts = torch.stack([torch.softmax(model(torch.tensor([prompt + [t]])).logits[0, -1], 0)
                             for t in range(vocab)])
    exact = first[:, None] * nexts  # [first token, second token]
    counts = torch.zeros(vocab, vocab)
    n = 1200
    for seed in range(n):
        cfg = SamplingConfig(temperature=1.0, seed=seed)
        out = generate(target, drafter, prompt, gamma=gamma, max_new_tokens=2, sampling=cfg).token_ids
        counts[out[0], out[1]] += 1
    tv = 0.5 * (counts / n - exact).abs().sum().item()
    assert tv < 0.1, f"total variation {tv:.3f} between speculative samples and the target"
