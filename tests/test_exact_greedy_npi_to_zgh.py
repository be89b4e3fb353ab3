"""Speculative greedy equals plain greedy, bit for bit, in bf16 on the real default model: 64 new
tokens after a 4-shot translation prompt (bundled corpora) in npi, oci, que, yor, zgh (the paper's languages are
split over two files, so the suite's two processes share them), for an n-gram
chain, the default tree and a recycling tree."""

from __future__ import annotations

import pytest
from exact_real import MARKS, assert_drafters_decode_as_plain, load_bf16, prompt_ids, train_bigrams

pytestmark = MARKS
LANGS = ('npi', 'oci', 'que', 'yor', 'zgh')


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return load_bf16(), train_bigrams(tmp_path_factory.mktemp("exact"), LANGS)


@pytest.mark.parametrize("lang", LANGS)
def test_speculative_greedy_equals_plain_greedy_on_a_4_shot_prompt(setup, lang):
    (_, tokenizer, target), bigrams = setup
    assert_drafters_decode_as_plain(target, prompt_ids(tokenizer, lang, index=1), bigrams[lang])


@pytest.mark.parametrize("threads", [3], indirect=True)
def test_speculative_greedy_equals_plain_greedy_at_3_threads(setup, threads):
    """The user's thread count, not the suite's 1: the chain and both trees at 3 threads (more
    than this 2-core machine has), against plain greedy decoding at 3 threads."""
    (_, tokenizer, target), bigrams = setup
    assert_drafters_decode_as_plain(target, prompt_ids(tokenizer, "yor", index=3), bigrams["yor"])
