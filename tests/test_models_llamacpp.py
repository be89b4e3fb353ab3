"""The llama.cpp peer of `bench peers`: the default model's own GGUF, decoded from token ids."""

from __future__ import annotations

import pytest

from babelspec.models import DEFAULT_TARGET, load_tokenizer
from babelspec.models.llamacpp import LlamaCppUnavailable, gguf_for, open_llama_cpp

pytestmark = pytest.mark.peers
pytest.importorskip("llama_cpp", reason="the llamacpp extra (make test-peers installs it)")


@pytest.fixture(scope="module")
def llama():
    try:
        model = open_llama_cpp(DEFAULT_TARGET, threads=1, n_ctx=256)
    except LlamaCppUnavailable as err:  # e.g. built for instructions this machine lacks
        pytest.skip(str(err))
    yield model
    model.close()


def test_greedy_continues_the_prompt_ids_deterministically(llama) -> None:
    tok = load_tokenizer(DEFAULT_TARGET)
    ids = tok("English: Good morning.\nFrench:")["input_ids"]
    first = llama.generate(ids, 8, greedy=True)
    assert len(first) == 8 and all(0 <= t < len(tok) for t in first)
    assert llama.generate(ids, 8, greedy=True) == first  # no state carried between prompts
    assert tok.decode(first, skip_special_tokens=True).strip()
    assert "llama-cpp-python" in llama.description and "1 threads" in llama.description


def test_sampling_is_seeded(llama) -> None:
    ids = load_tokenizer(DEFAULT_TARGET)("Once upon a time")["input_ids"]
    assert llama.generate(ids, 6, greedy=False, seed=3) == llama.generate(ids, 6, greedy=False, seed=3)


def test_a_model_without_a_gguf_is_refused_with_a_reason(tmp_path) -> None:
    with pytest.raises(LlamaCppUnavailable, match="has no GGUF file"):
        gguf_for("qwen3.5-9b", tmp_path)


def test_the_prompt_lookup_peer_decodes_greedily_as_plain_llama_cpp(llama) -> None:
    """llama-cpp-python's own speculative prompt lookup, the peer babelspec is measured against:
    under greedy decoding it must give plain llama.cpp's tokens (a repetitive prompt, so drafts
    are found and tried)."""
    lookup = open_llama_cpp(DEFAULT_TARGET, threads=1, n_ctx=256, lookup=5)
    try:
        ids = load_tokenizer(DEFAULT_TARGET)("one two three four, one two three four, one two three")["input_ids"]
        assert lookup.generate(ids, 12, greedy=True) == llama.generate(ids, 12, greedy=True)
        assert "LlamaPromptLookupDecoding drafting 5 tokens" in lookup.description
    finally:
        lookup.close()


def test_teacher_forced_top_tokens_are_llama_cpps_own_greedy_choices(llama) -> None:
    """``top_tokens`` (the yardstick of a lower-precision target's agreement): fed the prompt and
    llama.cpp's own greedy continuation, its arg-max at each position is that continuation. Its
    first position comes from the prompt's forward, as the continuation's first token did; later
    ones from one block, which llama.cpp may round otherwise than its one-token steps (on an
    AVX2-only CPU one position of 8 differed), while a shift by one position would miss most."""
    ids = load_tokenizer(DEFAULT_TARGET)("English: Good morning.\nFrench:")["input_ids"]
    forced = open_llama_cpp(DEFAULT_TARGET, threads=1, n_ctx=256, logits_all=True)
    try:
        tokens = forced.generate(ids, 8, greedy=True)
        top = forced.top_tokens(ids, tokens)
        assert len(top) == len(tokens) and top[0] == tokens[0]
        assert sum(a == b for a, b in zip(top, tokens)) >= 6
        assert forced.top_tokens(ids, tokens[:3])[0] == tokens[0]
    finally:
        forced.close()
