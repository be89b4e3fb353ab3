"""Output checks: script share, the character n-gram classifier, repetition loops."""

from __future__ import annotations

import pytest

from babelspec.data.langid import (
    CharNgramClassifier,
    OutputChecker,
    repeated_ngram_ratio,
    script_score,
)


def test_script_score_counts_letters_of_the_language_script():
    assert script_score("ሰላም ለዓለም።", "amh") == pytest.approx(1.0)
    assert script_score("नमस्ते संसार", "npi") == pytest.approx(1.0)
    assert script_score("ⴰⵣⵓⵍ ⴼⵍⵍⴰⵡⵏ", "zgh") == pytest.approx(1.0)
    assert script_score("hello ሰላም", "amh") == pytest.approx(3 / 8)
    assert script_score("Ẹnì kọ̀ọ̀kan ló ní", "yor") == pytest.approx(1.0)
    assert script_score("12, 3!", "yor") == 0.0


def test_repeated_ngram_ratio_separates_loops_from_text():
    text = "the quick brown fox jumps over the lazy dog while a cat sleeps in the warm sun"
    assert repeated_ngram_ratio(text) == 0.0
    loop = "I went to the market. " * 8
    assert repeated_ngram_ratio(loop) > 0.7
    assert repeated_ngram_ratio("") == 0.0


def test_classifier_learns_languages_from_text():
    clf = CharNgramClassifier().fit({
        "a": ["kalo kalo mena tika", "mena kalo tika tika"] * 20,
        "b": ["zzyx qwwz yxxq", "qwwz zzyx"] * 20,
    })
    assert clf.predict("tika mena") == "a"
    assert clf.predict("yxxq zzyx") == "b"
    assert clf.predict("   ") == ""


@pytest.fixture(scope="module")
def checker():
    return OutputChecker.from_corpora(["yor", "amh", "npi"])


def test_bundled_corpora_classifier_on_held_out_text(checker):
    from babelspec.data import corpus

    hits = total = 0
    for lang in ("yor", "oci", "grn", "npi", "amh"):
        for text in corpus.monolingual(lang, "test")[:20]:
            if len(text) >= 30:
                total += 1
                hits += checker.classifier.predict(text) == lang
    assert total > 40 and hits / total > 0.8


def test_check_flags_wrong_language_and_loops(checker):
    yoruba = "Gbogbo ènìyàn ni a bí ní òmìnira; iyì àti ẹ̀tọ́ kọ̀ọ̀kan sì dọ́gba."
    ok = checker.check(yoruba, "yor")
    assert ok.in_language and not ok.looped
    english = checker.check("Everyone has the right to life, liberty and security of person.", "yor")
    assert not english.in_language and english.classifier_language == "eng"
    assert not checker.check("ሰላም ለዓለም ሁሉም ሰዎች", "yor").in_language  # wrong script
    assert checker.check("ẹ kú àárọ̀ " * 12, "yor").looped
