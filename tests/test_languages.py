"""Every FLORES-200 language is data: one table names it, any of its codes works wherever a
language is named, a bad code names its close matches, and a language beyond the paper's 11
runs end to end on its real sets without a test sentence in its training text or shots."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from experiments_fixtures import tiny_model_dir
from typer.testing import CliRunner

from babelspec.cli import app
from babelspec.data.languages import (
    FLORES_LANGUAGES,
    LANGUAGES,
    PAPER_LANGUAGES,
    UnknownLanguageError,
    get_language,
    language_set,
)
from babelspec.experiments.config import ConfigError, config_from_dict

CORPORA = Path(os.environ.get("BABELSPEC_CORPORA") or Path(__file__).resolve().parents[2] / "shared" / "corpora")
needs_corpora = pytest.mark.skipif(not (CORPORA / "sib200").is_dir(), reason=f"no real corpora at {CORPORA}")


def test_the_table_holds_flores200_and_the_paper_keeps_its_codes() -> None:
    assert len(FLORES_LANGUAGES) == len(set(FLORES_LANGUAGES)) == 204
    assert len(LANGUAGES) == 204 + 2  # FLORES-200's languages, and chr and haw of the paper's 11
    assert language_set("paper") == PAPER_LANGUAGES and len(PAPER_LANGUAGES) == 11
    # the paper's languages keep their codes; FLORES-200's codes are their aliases
    for alias, code in {"amh_Ethi": "amh", "kab_Latn": "ber", "tzm_Tfng": "zgh", "quy_Latn": "que",
                        "npi_Deva": "npi", "NPI_deva": "npi", "ne": "npi", "tzm": "zgh", "kab": "ber",
                        "Central Atlas Tamazight": "zgh", "Ayacucho Quechua": "que", "Kabyle": "ber"}.items():  # fmt: skip
        assert get_language(alias).code == code
    swahili = get_language("swahili")
    assert (swahili.code, swahili.script, swahili.family, swahili.ntrex) == ("swh_Latn", "Latn", "Atlantic-Congo", "swa")
    assert get_language("swh").code == "swh_Latn" and not swahili.bundled
    assert get_language("nqo_Nkoo").oldi == "nqo_Nkoo" and get_language("zgh").oldi == "zgh_Tfng"
    assert all(LANGUAGES[c].flores and LANGUAGES[c].family for c in FLORES_LANGUAGES)


@needs_corpora
def test_every_sib200_folder_is_a_known_language() -> None:
    folders = {p.name for p in (CORPORA / "sib200" / "data" / "annotated").iterdir() if p.is_dir()}
    assert folders - {"eng_Latn"} == {LANGUAGES[c].flores for c in FLORES_LANGUAGES}


@pytest.mark.parametrize("bad, close", [
    ("swh_Latm", "swh_Latn (Swahili)"),
    ("ace", "ace_Arab (Acehnese (Arabic script)), ace_Latn (Acehnese)"),  # one code, two scripts
    ("Yorubba", "yor (Yoruba)"),
])  # fmt: skip
def test_a_bad_code_names_its_close_matches(bad: str, close: str) -> None:
    with pytest.raises(UnknownLanguageError, match="close matches") as err:
        get_language(bad)
    assert close in str(err.value) and "babelspec data languages" in str(err.value)
    with pytest.raises(ConfigError, match=r"config: .*unknown language") as err:
        config_from_dict({"languages": ["amh", bad]})
    assert close in str(err.value)
    result = CliRunner().invoke(app, ["data", "prompts", bad, "--task", "translation", "-n", "1"])
    shown = " ".join(result.output.replace("│", " ").split())  # the error box wraps lines
    assert result.exit_code != 0 and close in shown


def test_a_named_set_of_languages_in_a_config() -> None:
    assert config_from_dict({"languages": "flores200", "data": {"default": "real"}}).languages == list(FLORES_LANGUAGES)
    with pytest.raises(ConfigError, match="names no set"):
        config_from_dict({"languages": "flores201"})
    with pytest.raises(ConfigError, match=r'default must be "bundled"'):
        config_from_dict({"data": {"default": "corpora"}})


def test_a_language_without_bundled_text_says_where_to_find_it() -> None:
    from babelspec.data.corpus import DataNotFoundError, monolingual

    with pytest.raises(DataNotFoundError, match=r"not Swahili \(swh_Latn\).*--data-root"):
        monolingual("swh_Latn")


@needs_corpora
def test_data_languages_and_the_real_sets_of_any_language() -> None:
    from babelspec.data.langid import OutputChecker, script_score

    out = CliRunner().invoke(app, ["data", "languages", "--set", "flores200"])
    assert out.exit_code == 0 and "swh_Latn" in out.output and "204 languages" in out.output
    listed = CliRunner().invoke(app, ["data", "list", "--data-root", str(CORPORA), "--json", "--lang", "swh_Latn",
                                      "--lang", "N'Ko"])  # fmt: skip
    assert listed.exit_code == 0, listed.output
    import json

    catalogue = json.loads(listed.output)
    sets = {(r["lang"], r["layout"], r["split"]): r["sentences"] for r in catalogue["sets"]}
    assert sets[("swh_Latn", "sib200", "test")] == 204 and sets[("swh_Latn", "ntrex", "all")] == 1997
    assert sets[("nqo_Nkoo", "oldi-seed", "all")] == 6193
    assert {lang for lang, _, _ in sets} == {"swh_Latn", "nqo_Nkoo"} and catalogue["languages_without_a_set"] == []
    wrong = CliRunner().invoke(app, ["data", "list", "--data-root", str(CORPORA), "--lang", "swahilli"])
    assert wrong.exit_code == 2 and "unknown language 'swahilli'" in wrong.output and "swh_Latn" in wrong.output
    # script checks and the language classifier know a language the bundled data lacks
    assert script_score("ߒߞߏ ߞߊ߲", "nqo_Nkoo") == 1.0 and script_score("hello", "nqo_Nkoo") == 0.0
    checker = OutputChecker.from_corpora(["swh_Latn", "ace_Arab"], root=CORPORA, use_langid=False)
    assert checker.check("Watoto wengi wanapenda kusoma vitabu shuleni kila siku.", "swh_Latn").in_language


@needs_corpora
def test_a_flores200_language_runs_end_to_end_without_test_sentences_in_training(tmp_path, monkeypatch) -> None:
    """dyu_Latn (Dyula, not among the paper's 11): its bigram counts SIB-200 train + dev, one
    sentence of which is also a test sentence, and that sentence is dropped; its prompts translate
    test sentences with dev-split shots; the report names the language."""
    from babelspec.data.sources import parallel_records
    from babelspec.experiments.analysis import analyse, open_store
    from babelspec.experiments.config import load_config
    from babelspec.experiments.runner import run_experiment
    from babelspec.experiments.worker import prompt_data

    monkeypatch.setenv("BABELSPEC_CACHE", str(tmp_path / "cache"))
    tiny_model_dir(tmp_path / "model")
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text(textwrap.dedent(f"""
        name = "one-flores-language"
        target = "model"
        languages = ["dyu_Latn"]
        tasks = ["translation"]
        gammas = [2]
        prompts_per_cell = 2
        max_new_tokens = 4

        [divergence]
        enabled = false

        [data]
        root = "{CORPORA}"
        default = "real"

        [[drafters]]
        name = "bigram"
        kind = "ngram"
        order = 2
    """))
    cfg = load_config(cfg_path)
    test, shots, mono = cfg.data.sources("dyu_Latn")
    assert [str(m).split("@")[-1] for m in mono] == ["train", "dev"]  # no NTREX or OLDI for Dyula
    data = prompt_data(cfg.data, "dyu_Latn")
    tests = {r["text"] for r in parallel_records(test, "dyu_Latn")}
    assert len(tests) == 204 and not tests & {r["text"] for r in data.shots}
    lines: list[str] = []
    result = run_experiment(cfg, tmp_path / "run", progress=False, log=lines.append)
    assert result.generated == 4 and not result.skipped
    assert any("bigram dyu_Latn: dropped 1 training texts that are test sentences" in line for line in lines)
    store = open_store(tmp_path / "run")
    try:
        a = analyse(store, min_languages=1)
        records = store.records()
    finally:
        store.close()
    assert {(r.language, r.drafter) for r in records} == {("dyu_Latn", "none"), ("dyu_Latn", "bigram")}
    across = a["across"]
    assert across["languages"] == 1 and across["rows"][0]["name"] == "Dyula"
    assert across["rows"][0]["train_tokens"] > 10_000 and across["rows"][0]["tokens_per_char"] > 0
    moscar = CORPORA.parent / "resources" / "mOSCAR.md"  # named without this machine's paths
    assert across["moscar"] == ("resources/mOSCAR.md" if moscar.is_file() else "")


def test_every_ntrex_and_oldi_file_of_the_table_is_in_its_languages_script() -> None:
    """A language's n-gram counts its NTREX-128 and OLDI Seed text: each file the table names must
    be written in the language's own script (``arb_Latn`` once counted Arabic-script NTREX)."""
    import pytest

    from babelspec.data.langid import script_score
    from babelspec.data.loaders import layout_file
    from babelspec.data.real import corpora_root

    root = corpora_root(None)
    if root is None:
        pytest.skip("the real corpora (BABELSPEC_CORPORA or ../shared/corpora) are not here")
    checked, wrong = 0, []
    for code, lang in LANGUAGES.items():
        for layout, name in (("ntrex", lang.ntrex), ("oldi-seed", lang.oldi)):
            if not name:
                continue
            path = layout_file(layout, root, code, "all")
            if not path.is_file():
                continue
            with open(path, encoding="utf-8") as handle:
                text = "".join(line for _, line in zip(range(40), handle))
            checked += 1
            if script_score(text, code) < 0.5:
                wrong.append(f"{code} {layout} {path.name}: {script_score(text, code):.2f} in {lang.script}")
    assert checked > 100 and not wrong, wrong
