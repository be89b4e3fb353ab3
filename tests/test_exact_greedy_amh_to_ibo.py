"""Speculative greedy equals plain greedy, bit for bit, in bf16 on the real default model: 64 new
tokens after a 4-shot translation prompt (bundled corpora) in amh, ber, grn, ibo (the paper's languages are
split over two files, so the suite's two processes share them), for an n-gram
chain, the default tree and a recycling tree."""

from __future__ import annotations

import pytest
from exact_real import MARKS, assert_drafters_decode_as_plain, load_bf16, prompt_ids, train_bigrams

pytestmark = MARKS
LANGS = ('amh', 'ber', 'grn', 'ibo')


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return load_bf16(), train_bigrams(tmp_path_factory.mktemp("exact"), LANGS)


@pytest.mark.parametrize("lang", LANGS)
def test_speculative_greedy_equals_plain_greedy_on_a_4_shot_prompt(setup, lang):
    (_, tokenizer, target), bigrams = setup
    assert_drafters_decode_as_plain(target, prompt_ids(tokenizer, lang, index=1), bigrams[lang])


def test_the_adaptive_int8_self_drafter_decodes_as_plain_greedy(setup):
    """Each step's gamma follows this generation's measured acceptance and costs; the blocks of
    every length it verifies give plain greedy decoding's tokens."""
    import torch
    from exact_real import GREEDY, NEW_TOKENS, plain

    from babelspec.drafters import make_drafter
    from babelspec.engine import generate

    (_, tokenizer, target), _ = setup
    prompt = prompt_ids(tokenizer, "ibo", index=2)
    expected = plain(target, prompt)
    drafter = make_drafter("adaptive:int8:ibo", target)
    out = generate(target, drafter, prompt, gamma=6, max_new_tokens=NEW_TOKENS, sampling=GREEDY, eos_token_ids=())
    assert torch.equal(torch.tensor(out.token_ids), torch.tensor(expected))
    assert out.accepted > 0 and drafter.gammas  # a step with no room left for a draft asks for none
