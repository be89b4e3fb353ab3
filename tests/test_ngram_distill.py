"""Distilled n-grams: weighted counting, and soft counts of a real (tiny random) model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ngram_tiny import word_tokenizer
from tiny import tiny_qwen3

from babelspec.distill.ngram_distill import DistillConfig, Observations, distil, score
from babelspec.ngram import CountConfig, count_ngrams
from babelspec.ngram.counting import count_weighted
from babelspec.sampling import SamplingConfig, logits_to_probs
from babelspec.target import Target


def _fields(table):
    return [getattr(table, f).astype(np.int64) for f in ("keys", "offsets", "next_tokens", "counts")]


@pytest.mark.parametrize("order", [1, 2, 3])
def test_unit_weights_count_what_running_text_counts(order):
    rng = np.random.default_rng(order)
    tokens = rng.integers(0, 40, size=3000) * 5
    m1 = count_ngrams(tokens, None, CountConfig(order=order))
    ctx = np.stack([np.concatenate([np.full(j, -1), tokens[:-j]]) for j in range(order - 1, 0, -1)], 1) \
        if order > 1 else np.zeros((len(tokens), 0))  # fmt: skip
    m2 = count_weighted(ctx, tokens, np.ones(len(tokens), dtype=np.int64), CountConfig(order=order))
    assert np.array_equal(m1.vocab_map, m2.vocab_map)
    for k in range(order):
        for a, b in zip(_fields(m1.tables[k]), _fields(m2.tables[k])):
            assert np.array_equal(a, b)


def test_weights_add_up_per_context_and_rows_sort_by_weight():
    ctx = np.array([[5], [5], [5], [7], [-1]])
    nxt = np.array([1, 2, 1, 1, 5])
    m = count_weighted(ctx, nxt, np.array([3, 10, 4, 2, 9]), CountConfig(order=2))
    tokens, counts = m.continuations([5])
    assert tokens.tolist() == [2, 1] and counts.tolist() == [10, 7]
    tokens, counts = m.continuations([])
    assert dict(zip(tokens.tolist(), counts.tolist())) == {1: 9, 2: 10, 5: 9}  # the unigram takes all
    assert m.continuations([1]) is None  # 1 never was a context


@pytest.mark.parametrize("bad, message", [
    (dict(weights=np.array([1.5, 1.0])), "non-negative integers"),
    (dict(weights=np.array([1, -1])), "non-negative integers"),
    (dict(next_tokens=np.array([1, -2])), "next token ids must be >= 0"),
    (dict(weights=np.array([1, 1, 1])), "same observations"),
])
def test_bad_observations_are_refused(bad, message):
    args = dict(contexts=np.array([[3], [4]]), next_tokens=np.array([1, 2]), weights=np.array([1, 1]))
    args.update(bad)
    with pytest.raises(ValueError, match=message):
        count_weighted(args["contexts"], args["next_tokens"], args["weights"], CountConfig(order=2))


def test_soft_counts_are_the_models_top_k_probabilities():
    model = tiny_qwen3(vocab=64, seed=3)
    ids = [0, 5, 9, 5, 11, 5, 9, 30]
    sampling = SamplingConfig.paper()
    config = DistillConfig(top_k=6, scale=1000)
    out = Observations(2)
    score(model, ids, 1, sampling, config, out)
    m = out.model(CountConfig(order=2), {}, {})
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids[:-1]])).logits[0].float()
    q = logits_to_probs(logits, sampling, torch.tensor(ids), first_position=1)  # q[t] predicts ids[t + 1]
    expected: dict[int, dict[int, int]] = {}
    for t in range(len(ids) - 1):  # the context of position t + 1 is ids[t]
        p, top = q[t].topk(6)
        for tok, w in zip(top.tolist(), np.rint(p.numpy() * 1000).astype(int).tolist()):
            if w:
                row = expected.setdefault(ids[t], {})
                row[tok] = row.get(tok, 0) + w
    for context, row in expected.items():
        tokens, counts = m.continuations([context])
        assert dict(zip(tokens.tolist(), counts.tolist())) == row
    assert out.positions == len(ids) - 1


def test_greedy_soft_counts_are_the_argmax_continuations():
    model = tiny_qwen3(vocab=64, seed=4)
    ids = [0, 8, 3, 8, 3, 8]
    out = Observations(2)
    score(model, ids, 1, SamplingConfig(greedy=True), DistillConfig(scale=7), out)
    m = out.model(CountConfig(order=2), {}, {})
    with torch.inference_mode():
        argmax = model(input_ids=torch.tensor([ids[:-1]])).logits[0].argmax(-1).tolist()
    for t, a in enumerate(argmax):
        tokens, counts = m.continuations([ids[t]])
        assert a in tokens.tolist() and set(counts.tolist()) <= {7, 14, 21}


def test_distil_general_and_task_modes_record_what_they_scored():
    tok = word_tokenizer()
    target = Target(tiny_qwen3(vocab=len(tok), seed=5), tok)
    texts = [tok("a b c a b d a b")["input_ids"], tok("d e f a b")["input_ids"]]
    response = (tok("a b c d")["input_ids"], 2)
    config = DistillConfig(max_tokens=6, chunk=4, corpus_weight=0.5, scale=100)
    m = distil(target, sampling=SamplingConfig.paper(), config=config, monolingual=texts, responses=[response])
    assert m.training["general_positions"] == 6  # max_tokens, in chunks of 4
    assert m.training["task_positions"] == 2
    assert m.training["sampling"]["top_k"] == 100 and m.training["distilled"]["corpus_weight"] == 0.5
    # the corpus counts are in: 50 per occurrence on top of the soft counts
    tokens, counts = m.continuations([tok.convert_tokens_to_ids("d")])
    assert int(counts.sum()) >= 2 * 50
    with pytest.raises(ValueError, match="no text"):
        distil(target, sampling=SamplingConfig.paper(), config=config)


def test_bad_distil_config_names_the_option():
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        DistillConfig(top_k=0)
    with pytest.raises(ValueError, match="corpus_weight must be >= 0"):
        DistillConfig(corpus_weight=-1)
