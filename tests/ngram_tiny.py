"""A tiny real tokenizer and corpus for the n-gram tests (word-level, 7 entries)."""

from __future__ import annotations

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

WORDS = ["<unk>", "a", "b", "c", "d", "e", "f"]

# Hand-made corpus: "f" only ever ends a line, so the context "f" is never seen.
CORPUS = [
    "a b c a b d",
    "a b c",
    "c a b",
    "d e f",
]


def word_tokenizer(words: list[str] = WORDS) -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


def ids(text: str) -> list[int]:
    return [WORDS.index(w) for w in text.split()]
