"""N-gram counting, the file format and its failure modes, the tokenizer fingerprint."""

from __future__ import annotations

import json

import numpy as np
import pytest
from ngram_tiny import CORPUS, WORDS, ids, word_tokenizer

from babelspec.models.tokenizers import tokenizer_fingerprint
from babelspec.ngram import CountConfig, NgramFileError, NgramModel, TokenizerMismatchError, count_ngrams, train
from babelspec.ngram.corpus import tokenize_texts


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer()


@pytest.fixture(scope="module")
def trigram(tokenizer):
    return train(CORPUS, tokenizer, CountConfig(order=3), corpus_name="hand-made")


def named(model: NgramModel, context: str) -> dict[str, float]:
    return {WORDS[t]: p for t, p in model.probabilities(ids(context)).items()}


def test_exact_counts_and_probabilities(trigram):
    tokens, counts = trigram.continuations(ids("b"))
    assert [WORDS[t] for t in tokens] == ["c", "d"] and counts.tolist() == [2, 1]
    assert named(trigram, "a") == {"b": 1.0}
    assert named(trigram, "b") == pytest.approx({"c": 2 / 3, "d": 1 / 3})
    assert named(trigram, "a b") == pytest.approx({"c": 2 / 3, "d": 1 / 3})
    assert named(trigram, "c a") == {"b": 1.0}
    assert named(trigram, "d e") == {"f": 1.0}
    assert named(trigram, "") == pytest.approx(
        {"a": 4 / 15, "b": 4 / 15, "c": 3 / 15, "d": 2 / 15, "e": 1 / 15, "f": 1 / 15}
    )
    # n-grams never cross a line: "b d" ends line 1, "a" starts line 2
    assert named(trigram, "f") == {} and named(trigram, "b d") == {} and named(trigram, "d a") == {}
    assert [t.n_entries for t in trigram.tables] == [6, 6, 5]
    assert trigram.training["tokens"] == 15 and trigram.training["documents"] == 4
    assert trigram.training["corpus"] == "hand-made"


def test_rows_are_sorted_by_count_and_pruning_applies():
    tokens = np.array([1, 2, 1, 3, 1, 3, 1, 4, 1, 3, 1, 2, 1, 5])
    full = count_ngrams(tokens, config=CountConfig(order=2))
    assert full.continuations([1])[0].tolist() == [3, 2, 4, 5]  # 3×3, 2×2, then 1 each by id
    pruned = count_ngrams(tokens, config=CountConfig(order=2, min_count=2))
    assert pruned.continuations([1])[0].tolist() == [3, 2]
    assert pruned.probabilities([1]) == pytest.approx({3: 0.6, 2: 0.4})  # renormalised
    capped = count_ngrams(tokens, config=CountConfig(order=2, max_continuations=1))
    assert capped.probabilities([1]) == {3: 1.0}
    assert pruned.probabilities([]) == full.probabilities([])  # the unigram is never pruned


def test_counting_matches_a_reference_count_on_random_text():
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 50, size=5000) ** 2  # sparse ids: exercises the dense remap
    lengths = np.array([1000, 1, 0, 2999, 1000])
    model = count_ngrams(tokens, lengths, CountConfig(order=3))
    ref: dict[tuple, int] = {}
    start = 0
    for n in lengths:
        doc = tokens[start : start + n].tolist()
        start += n
        for i in range(2, len(doc)):
            key = tuple(doc[i - 2 : i + 1])
            ref[key] = ref.get(key, 0) + 1
    got = {}
    for ctx in {k[:2] for k in ref}:
        for t, c in zip(*model.continuations(list(ctx))):
            got[(*ctx, int(t))] = int(c)
    assert got == ref


def test_bad_counting_input():
    with pytest.raises(ValueError, match="order must be >= 1"):
        CountConfig(order=0)
    with pytest.raises(ValueError, match="min_count"):
        CountConfig(min_count=0)
    with pytest.raises(ValueError, match="sum to"):
        count_ngrams(np.arange(5), np.array([2, 2]))
    with pytest.raises(ValueError, match="use order <= "):
        count_ngrams(np.arange(70000), config=CountConfig(order=5))


def test_save_load_round_trip(tmp_path, trigram):
    path = tmp_path / "m.ngram"
    size = trigram.save(path)
    assert size == path.stat().st_size
    loaded = NgramModel.load(path)
    assert isinstance(loaded.tables[1].keys, np.memmap) or loaded.tables[1].keys.base is not None  # mapped
    assert loaded.order == 3 and loaded.tokenizer == trigram.tokenizer and loaded.training == trigram.training
    for a, b in zip(trigram.tables, loaded.tables):
        for name in ("keys", "offsets", "next_tokens", "counts"):
            assert np.array_equal(getattr(a, name), getattr(b, name))
            assert getattr(a, name).dtype == getattr(b, name).dtype
    for context in ["", "a", "b", "a b", "d e", "f"]:
        assert named(loaded, context) == named(trigram, context)
    assert not list(tmp_path.glob(".*tmp"))  # the atomic write left no temporary file


def test_file_is_compact_on_a_real_sized_corpus(tmp_path):
    rng = np.random.default_rng(0)
    tokens = (rng.zipf(1.3, 200_000) % 30000).astype(np.int64)
    model = count_ngrams(tokens, config=CountConfig(order=2))
    size = model.save(tmp_path / "z.ngram")
    assert size <= 2 * model.raw_triples_bytes()


def test_truncated_and_corrupted_files_fail_clearly(tmp_path, trigram):
    path = tmp_path / "m.ngram"
    trigram.save(path)
    data = path.read_bytes()
    (tmp_path / "short").write_bytes(data[:-10])
    with pytest.raises(NgramFileError, match="truncated"):
        NgramModel.load(tmp_path / "short")
    (tmp_path / "tiny").write_bytes(data[:5])
    with pytest.raises(NgramFileError, match="truncated"):
        NgramModel.load(tmp_path / "tiny")
    flipped = bytearray(data)
    flipped[-3] ^= 0xFF
    (tmp_path / "flip").write_bytes(bytes(flipped))
    with pytest.raises(NgramFileError, match="checksum"):
        NgramModel.load(tmp_path / "flip")
    (tmp_path / "long").write_bytes(data + b"x")
    with pytest.raises(NgramFileError, match="trailing"):
        NgramModel.load(tmp_path / "long")
    (tmp_path / "other").write_bytes(b"PK\x03\x04" + data[4:])
    with pytest.raises(NgramFileError, match="not a babelspec n-gram file"):
        NgramModel.load(tmp_path / "other")
    with pytest.raises(NgramFileError, match="does not exist"):
        NgramModel.load(tmp_path / "missing.ngram")
    header_len = int.from_bytes(data[12:16], "little")
    bad_header = bytearray(data)
    bad_header[16 + header_len // 2] = 0xFF
    (tmp_path / "head").write_bytes(bytes(bad_header))
    with pytest.raises(NgramFileError, match="corrupted header"):
        NgramModel.load(tmp_path / "head")
    newer = bytearray(data)
    newer[8:12] = (99).to_bytes(4, "little")
    (tmp_path / "newer").write_bytes(bytes(newer))
    with pytest.raises(NgramFileError, match="newer"):
        NgramModel.load(tmp_path / "newer")
    assert issubclass(NgramFileError, ValueError)


def test_tokenizer_fingerprint_detects_another_vocabulary(tokenizer, trigram):
    same = tokenizer_fingerprint(word_tokenizer())
    trigram.check_tokenizer(same)  # an equal vocabulary passes
    swapped = tokenizer_fingerprint(word_tokenizer(["<unk>", "a", "b", "c", "d", "f", "e"]))
    assert swapped["vocab_size"] == same["vocab_size"] and swapped["vocab_sha256"] != same["vocab_sha256"]
    with pytest.raises(TokenizerMismatchError, match="retrain it"):
        trigram.check_tokenizer(swapped)
    bigger = tokenizer_fingerprint(word_tokenizer(WORDS + ["g"]))
    with pytest.raises(TokenizerMismatchError, match="vocabulary 8"):
        trigram.check_tokenizer(bigger)


def test_tokenize_texts_batches_and_skips_blank_lines(tokenizer):
    texts = ["a b", "", "  ", "c d e"] * 3
    tokens, lengths, sizes = tokenize_texts(texts, tokenizer, batch_size=2)
    assert lengths.tolist() == [2, 3] * 3 and tokens.tolist() == (ids("a b") + ids("c d e")) * 3
    assert sizes["texts"] == 6


def test_header_is_json_with_metadata(tmp_path, trigram):
    path = tmp_path / "m.ngram"
    trigram.save(path)
    data = path.read_bytes()
    header = json.loads(data[16 : 16 + int.from_bytes(data[12:16], "little")])
    assert header["format_version"] == 1 and header["order"] == 3
    assert header["tokenizer"]["vocab_size"] == len(WORDS)
    assert {"corpus", "tokens", "min_count", "max_continuations"} <= set(header["training"])
