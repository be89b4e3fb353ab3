"""The real sets in ../shared/corpora (or $BABELSPEC_CORPORA), read in place: counts and
alignment of each layout, and babelspec/profiles/real.toml's sources never overlapping. Skipped where the
folder is absent (the sets are never copied into the repository)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from babelspec.data.languages import FLORES_LANGUAGES
from babelspec.data.loaders import layout_file, load_layout, load_layout_pairs, load_sib200_rows

REPO = Path(__file__).resolve().parents[1]
CORPORA = Path(os.environ.get("BABELSPEC_CORPORA") or REPO.parent / "shared" / "corpora")
pytestmark = pytest.mark.skipif(not CORPORA.is_dir(), reason=f"no real corpora at {CORPORA} (set BABELSPEC_CORPORA)")

SIB_LANGS = ["amh", "ber", "grn", "ibo", "npi", "oci", "que", "yor", "zgh"]


def test_sib200_counts_and_index_id_alignment() -> None:
    eng = {s: [i for i, _, _ in load_sib200_rows(CORPORA, "eng", s)] for s in ("train", "dev", "test")}
    assert {s: len(v) for s, v in eng.items()} == {"train": 701, "dev": 99, "test": 204}
    assert not set(eng["train"]) & set(eng["dev"]) and not set(eng["dev"]) & set(eng["test"])
    for lang in SIB_LANGS:
        for split, ids in eng.items():
            recs = load_layout_pairs("sib200", CORPORA, lang, split)
            assert [r["id"] for r in recs] == ids, (lang, split)  # same ids, same order
    # the join pairs each row with English's row of the same id, not of the same line
    first = load_layout_pairs("sib200", CORPORA, "ber", "dev")[0]
    eng_first = load_sib200_rows(CORPORA, "eng", "dev")[0]
    assert (first["id"], first["en"]) == (eng_first[0], eng_first[2]) and first["text"] != first["en"]


@pytest.mark.parametrize("layout, lang, split, n", [
    ("ntrex", "amh", "all", 1997), ("ntrex", "ibo", "all", 1997), ("ntrex", "npi", "all", 1997),
    ("ntrex", "yor", "all", 1997), ("oldi-seed", "grn", "all", 6193), ("oldi-seed", "zgh", "all", 6193),
    ("flores-v1", "npi", "dev", 2559), ("flores-v1", "npi", "devtest", 2835), ("flores-v1", "npi", "test", 2924),
    ("tatoeba-laser", "amh", "all", 168), ("tatoeba-laser", "ber", "all", 1000),
    ("tatoeba-laser", "oci", "all", 1000), ("hornmt", "amh", "all", 2030),
])  # fmt: skip
def test_line_aligned_counts(layout: str, lang: str, split: str, n: int) -> None:
    recs = load_layout_pairs(layout, CORPORA, lang, split)
    assert len(recs) == n and all(r["en"] and r["text"] for r in recs)


def test_codes_name_the_published_files() -> None:
    assert layout_file("ntrex", CORPORA, "npi", "all").name == "newstest2019-ref.nep.txt"
    assert layout_file("sib200", CORPORA, "zgh", "test").parent.name == "tzm_Tfng"
    assert layout_file("oldi-seed", CORPORA, "zgh", "all").name == "zgh_Tfng"
    assert layout_file("ntrex", CORPORA, "swh_Latn", "all").name == "newstest2019-ref.swa.txt"
    assert layout_file("oldi-seed", CORPORA, "nqo_Nkoo", "all").name == "nqo_Nkoo"
    for lang in FLORES_LANGUAGES:  # every FLORES-200 language, by the language table's codes
        assert len(load_layout("sib200", CORPORA, lang, "test")) == 204


def test_real_config_never_overlaps() -> None:
    from babelspec.data.sources import monolingual_texts, parallel_records, without
    from babelspec.experiments.config import load_config

    cfg = load_config(profile="real", data_root=CORPORA)
    assert cfg.languages == SIB_LANGS
    for lang in ("grn", "npi", "zgh"):  # the three with the most training text
        test, shots, mono = cfg.data.sources(lang)
        test_texts = [r["text"] for r in parallel_records(test, lang)]
        shot_texts = [r["text"] for r in parallel_records(shots, lang)]
        assert (len(test_texts), len(shot_texts)) == (204, 99)
        assert not set(test_texts) & set(shot_texts)
        training = [t for s in mono for t in monolingual_texts(s, lang)]
        kept, _ = without(training, test_texts)
        assert len(kept) > 6000 and not set(kept) & set(test_texts)


def test_bench_peers_flores_prompts_translate_held_out_test_sentences() -> None:
    """``bench peers --task flores``: each prompt ends with a FLORES-200 test sentence in English
    to translate, none from the train split; an unknown folder is a clear error."""
    from babelspec.bench.peers import benchmark_prompts
    from babelspec.models import DEFAULT_TARGET, load_tokenizer

    tokenizer = load_tokenizer(DEFAULT_TARGET)
    items = benchmark_prompts(tokenizer, ["amh", "yor"], 2, "flores", data_root=str(CORPORA))
    assert [i.lang for i in items] == ["amh", "amh", "yor", "yor"]
    english = {s: {r["text"] for r in load_layout_pairs("sib200", CORPORA, "eng", s)} for s in ("train", "test")}
    for item in items:
        assert sum(sentence in item.text for sentence in english["test"]) == 1, item.text
        assert not any(sentence in item.text for sentence in english["train"])
    with pytest.raises(ValueError, match="not a folder"):
        benchmark_prompts(tokenizer, ["amh"], 1, "flores", data_root=str(CORPORA / "missing"))


def test_bench_peers_real_bigram_is_built_from_the_real_sets_with_its_options() -> None:
    """``real-bigram@,OPTIONS``: the language's bigram of the real monolingual sets (no test
    sentence counted), as a drafter with those options, trees where the target verifies them."""
    from babelspec.bench.peers import _build_drafter, drafter_spec_for
    from babelspec.target import load_target

    target = load_target("gemma-3-270m", dtype="float32")
    full = drafter_spec_for("real-bigram@,tree=12,recycle=4", "yor")
    assert full == "real-bigram@yor,tree=12,recycle=4"
    drafter = _build_drafter("real-bigram@,tree=12,recycle=4", full, target, "yor", str(CORPORA))
    assert (drafter.config.tree, drafter.config.recycle, drafter.observes_top) == (12, 4, 4)
    assert drafter.trees_verified and drafter.preferred_gamma == 12 and drafter.name == full
    assert drafter.model.training["corpus"] == "yor:real" and drafter.model.training["texts"] > 1_000
    with pytest.raises(ValueError, match="unknown n-gram drafter option"):
        _build_drafter("real-bigram@,depth=3", "real-bigram@yor,depth=3", target, "yor", str(CORPORA))
