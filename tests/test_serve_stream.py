"""Streamed text is the non-streamed text: incremental detokenisation of each accepted block,
with the tokenizers the project ships, in all 11 languages, with and without stop strings."""

from __future__ import annotations

import random

import pytest

from babelspec.data.corpus import monolingual
from babelspec.data.languages import PAPER_LANGUAGES
from babelspec.models import load_tokenizer
from babelspec.serve.protocol import TextStream

TOKENIZERS = ["gemma-3-270m", "qwen3.5"]


@pytest.fixture(scope="module", params=TOKENIZERS)
def tokenizer(request):
    return load_tokenizer(request.param)


def texts() -> list[str]:
    """A few test-split texts per language, English and emoji included."""
    out = ["Hello, world! 👋🏽 Ça va?  Two  spaces\nand a line."]
    for lang in PAPER_LANGUAGES:
        out += monolingual(lang, "test")[:3]
    return out


def blocks(ids: list[int], rng: random.Random) -> list[list[int]]:
    """The ids cut as a speculative engine emits them: blocks of 1 to 5 tokens."""
    out, i = [], 0
    while i < len(ids):
        n = rng.randint(1, 5)
        out.append(ids[i : i + n])
        i += n
    return out


def test_the_streamed_deltas_add_up_to_the_decoded_text(tokenizer):
    rng = random.Random(0)
    for text in texts():
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        final = tokenizer.decode(ids, skip_special_tokens=True)
        stream = TextStream(tokenizer, ())
        deltas = [stream.push(block) for block in blocks(ids, rng)]
        assert "".join(deltas) == final  # nothing held back without stop strings
        assert all("\ufffd" not in d for d in deltas) or "\ufffd" in final  # no half characters sent
        assert stream.finish(final) == ""


def test_a_stop_string_is_never_streamed_and_the_rest_arrives_at_the_end(tokenizer):
    rng = random.Random(1)
    for text in texts()[1:]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        full = tokenizer.decode(ids, skip_special_tokens=True)
        if len(full) < 12:
            continue
        stop = full[len(full) // 2 : len(full) // 2 + 3]
        final = full[: full.find(stop)]  # what the engine returns: cut before the stop string
        stream = TextStream(tokenizer, (stop,))
        sent = "".join(stream.push(block) for block in blocks(ids, rng))
        assert stop not in sent and final.startswith(sent)
        assert sent + stream.finish(final) == final
