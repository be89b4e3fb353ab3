"""A restricted head's rows on the real default tokenizer: the language's corpus tokens and the
most frequent English source tokens, cached, and bad counts refused."""

from __future__ import annotations

import numpy as np
import pytest

from babelspec.data.corpus import monolingual
from babelspec.drafters.vocab import corpus_token_ids, frequent_token_ids, language_token_ids
from babelspec.models import DEFAULT_TARGET, load_tokenizer


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
