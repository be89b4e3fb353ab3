"""A restricted head's rows on the real default tokenizer: the language's corpus tokens and the
most frequent English source tokens, cached, and bad counts refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from babelspec.data.corpus import monolingual
from babelspec.drafters.vocab import corpus_token_ids, frequent_token_ids, language_token_ids, predicted_token_ids
from babelspec.errors import UserError
from babelspec.models import DEFAULT_TARGET, load_tokenizer
from babelspec.target import load_target


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(DEFAULT_TARGET)


def test_frequent_token_ids_keeps_the_most_frequent(tokenizer) -> None:
    ids = lambda word: tokenizer(word, add_special_tokens=False)["input_ids"]  # noqa: E731
    the, cat, dog = ids(" the")[0], ids(" cat")[0], ids(" dog")[0]
    texts = [" the the the cat cat dog", " the cat"]
    assert frequent_token_ids(texts, tokenizer, 2).tolist() == sorted([the, cat])
    assert set(frequent_token_ids(texts, tokenizer, 10).tolist()) == {the, cat, dog}  # only seen tokens


def test_language_rows_are_its_corpus_and_frequent_english(tokenizer) -> None:
    corpus = language_token_ids("zgh", tokenizer, source_tokens=0)
    assert np.array_equal(corpus, corpus_token_ids(monolingual("zgh", "train"), tokenizer))
    widened = language_token_ids("zgh", tokenizer, source_tokens=500)
    the = tokenizer(" the", add_special_tokens=False)["input_ids"][0]
    assert the in widened and the not in corpus  # Tifinagh text has no English "the"
    assert np.isin(corpus, widened).all() and len(corpus) < len(widened) <= len(corpus) + 500
    assert np.array_equal(widened, np.unique(widened))  # sorted, no repeats
    assert np.array_equal(language_token_ids("zgh", tokenizer, source_tokens=500), widened)  # from the cache


def test_negative_source_tokens_are_refused(tokenizer) -> None:
    with pytest.raises(ValueError, match="source_tokens must be >= 0"):
        language_token_ids("zgh", tokenizer, source_tokens=-1)


def test_the_targets_likely_tokens_widen_the_rows_it_samples_from() -> None:
    """On the real model: the tokens it finds likely teacher-forced on Occitan text hold most of
    the text's own and many more; tokens the text's rows miss in the model's own Occitan (its
    greedy continuation of a held-out sentence) are fewer with them; bad counts are refused."""
    target = load_target(DEFAULT_TARGET)
    tokenizer, texts = target.tokenizer, monolingual("oci", "train")
    corpus = corpus_token_ids(texts, tokenizer)
    likely = predicted_token_ids(target.model, tokenizer, texts, tokens=256)
    assert np.array_equal(likely, np.unique(likely)) and len(np.setdiff1d(likely, corpus)) > 1000
    assert len(predicted_token_ids(target.model, tokenizer, texts, tokens=0)) == 0
    written = []
    for text in monolingual("oci", "test")[:2]:
        ids = tokenizer(text)["input_ids"][:12]
        out = target.model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)[0, len(ids):]
        written += out.tolist()
    missed = np.isin(written, corpus, invert=True).sum()
    assert np.isin(written, np.union1d(corpus, likely), invert=True).sum() < missed
    with pytest.raises(UserError, match="0 < threshold < 1"):
        predicted_token_ids(target.model, tokenizer, texts, threshold=0.0)
