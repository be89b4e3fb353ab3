"""The [data] section of run configs: where prompts, few-shot examples and training text come
from, never overlapping, and how a bad section is reported. Synthetic sets in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_data_layouts import EN, KAB, make_root, sib_tsv, write

from babelspec.experiments.config import ConfigError, DrafterSetting, dump_toml, load_config
from babelspec.experiments.prepare import PrepareRequest, _monolingual_train
from babelspec.experiments.worker import prompt_data, task_prompts

REAL = """
languages = ["ber", "npi"]
tasks = ["translation"]
[data.ber]
test = "sib200:sib200@test"
shots = "sib200:sib200@dev"
monolingual = ["sib200:sib200@train", "sib200:sib200@dev"]
[[drafters]]
name = "bigram-ui"
kind = "ngram"
corpus = "bundled"
[[drafters]]
name = "bigram-real"
kind = "ngram"
"""


class WordTokenizer:
    """Whitespace 'tokens': enough for the prompt budget of base templates."""

    chat_template = None
    name_or_path = "words"

    def __call__(self, texts, add_special_tokens=False):
        if isinstance(texts, str):
            return {"input_ids": list(range(len(texts.split())))}
        return {"input_ids": [list(range(len(t.split()))) for t in texts]}


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    return make_root(tmp_path / "corpora")


def config(tmp_path: Path, text: str, root: Path | None = None):
    path = write(tmp_path / "run.toml", text)
    return load_config(path, data_root=root)


def test_data_section_round_trip_and_defaults(tmp_path: Path, root: Path) -> None:
    cfg = config(tmp_path, REAL, root)
    assert cfg.data.root == str(root.resolve())
    test, shots, mono = cfg.data.sources("ber")
    assert (test.split, shots.split, [m.split for m in mono]) == ("test", "dev", ["train", "dev"])
    assert test.path == str(root.resolve() / "sib200")
    assert [str(s) for s in cfg.data.sources("npi")[:2]] == ["bundled@test", "bundled@train"]  # no table: bundled
    again = load_config(write(tmp_path / "dumped.toml", dump_toml(cfg)))
    assert again.data == cfg.data


@pytest.mark.parametrize("table, message", [
    ('test = "sib200:s@test"\nshots = "sib200:s@test"', r"shots and test are the same sentences .*@dev"),
    ('test = "sib200:s@test"\nmonolingual = ["sib200:s@train", "sib200:s/@test"]',
     r"monolingual source sib200:s/@test is the test split; count n-grams and distil on train splits"),
    ('test = "text:a.txt"', r"test = 'text:a.txt' has no English side"),
    ('tests = "sib200:s@test"', r"\[data.ber\]: unknown key\(s\) 'tests'"),
    ('test = "sib200:s@devtest"', r"\[data.ber\]: source 'sib200:s@devtest': sib200 splits are train, dev, test"),
    ('monolingual = []', r"monolingual must be a non-empty list"),
])
def test_bad_data_tables(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(tmp_path, f'languages = ["ber"]\n[data.ber]\n{table}\n')


def no_corpora_folder(monkeypatch, tmp_path: Path) -> None:
    """Neither $BABELSPEC_CORPORA nor a user corpora folder: only --data-root gives a root."""
    monkeypatch.delenv("BABELSPEC_CORPORA", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "user-data"))


def test_relative_sources_need_a_root(tmp_path: Path, root: Path, monkeypatch) -> None:
    no_corpora_folder(monkeypatch, tmp_path)
    with pytest.raises(ConfigError, match=r"\[data.ber\]: .*no data root was given; pass --data-root"):
        config(tmp_path, REAL)
    monkeypatch.setenv("BABELSPEC_CORPORA", str(root))  # a corpora folder found is the root
    assert config(tmp_path, REAL).data.root == str(root.resolve())
    with pytest.raises(ConfigError, match="is not a folder; pass --data-root"):
        config(tmp_path, REAL, tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"\[data.xx\]: unknown language 'xx'"):
        config(tmp_path, '[data.xx]\ntest = "bundled@test"\n')


def test_prompts_translate_the_test_split_with_shots_from_dev(tmp_path: Path, root: Path) -> None:
    ann = root / "sib200/data/annotated"
    # dev holds 4 sentences, one of them a test sentence again: it must never be a shot
    for code, texts in (("eng_Latn", EN), ("kab_Latn", KAB)):
        write(ann / code / "dev.tsv", sib_tsv([4, 6, 7, 8], [texts[3], texts[4], texts[0], texts[1]]))
    cfg = config(tmp_path, REAL, root)
    data = prompt_data(cfg.data, "ber")
    assert [r["text"] for r in data.test] == [KAB[4]] and len(data.shots) == 4
    prompts = task_prompts("translation", "ber", WordTokenizer(), 5, cfg.data)
    assert len(prompts) == 1  # the test split holds one sentence
    text = prompts[0].text
    assert text.endswith(f"English: {EN[4]}\nBerber:")
    shots = text.rsplit("\n\nEnglish:", 1)[0]
    assert EN[4] not in shots and KAB[4] not in shots  # the duplicate in dev was dropped
    assert all(f"English: {EN[i]}\nBerber: {KAB[i]}" in shots for i in (0, 1, 3))
    assert prompt_data(cfg.data, "npi") is None  # bundled


def test_training_text_follows_the_setting_and_never_holds_a_test_sentence(tmp_path: Path, root: Path) -> None:
    cfg = config(tmp_path, REAL, root)
    ann = root / "sib200/data/annotated/kab_Latn"
    write(ann / "dev.tsv", sib_tsv([4, 5], [KAB[3], KAB[4]]))  # the test sentence again, in dev
    logs: list[str] = []

    def request(setting: DrafterSetting) -> PrepareRequest:
        return PrepareRequest(setting, "ber", "t", None, tmp_path / "art", log=logs.append, data=cfg.data)

    ui, real = (request(d) for d in cfg.drafters)
    real_texts = _monolingual_train(real)
    assert sorted(real_texts) == sorted([KAB[0], KAB[1], KAB[2], KAB[3]])
    assert logs == ["bigram-real ber: dropped 1 training texts that are test sentences"]
    from babelspec.data.corpus import monolingual

    assert _monolingual_train(ui)[:50] == [t for t in monolingual("ber", "train") if t != KAB[4]][:50]
    assert ui.artifact_path(".ngram").name != real.artifact_path(".ngram").name


def test_report_says_which_text_each_number_came_from(tmp_path: Path, root: Path) -> None:
    from babelspec.data.sources import provenance
    from babelspec.report.blocks import to_markdown
    from babelspec.report.provenance import provenance_blocks

    cfg = config(tmp_path, REAL, root)
    data = provenance(cfg.to_dict())
    ber = data["ber"]
    assert ber["test"] == {"sources": ["sib200:sib200@test"], "domains": [ber["test"]["domains"][0]],
                           "sentences": 1, "words": 3}
    assert ber["settings"]["bigram-real"]["sentences"] == 4  # train 3 + dev 1, no test sentence
    assert ber["settings"]["bigram-ui"]["sources"] == ["bundled@train"]
    assert data["npi"]["test"]["sources"] == ["bundled@test"]
    settings = [{"language": "ber", "task": "translation", "gamma": 3, "drafter": d, "alpha_mean": al,
                 "alpha_std": 0.1, "speedup": sp, "speedup_low": sp - 0.2, "speedup_high": sp + 0.1,
                 "n_prompts": 3} for d, al, sp in
                (("bigram-ui", 0.2, 0.9), ("bigram-real", 0.4, 1.1))]
    md = to_markdown(provenance_blocks({"data": data, "settings": settings}))
    assert "sib200:sib200@train, sib200:sib200@dev: 4 texts, 10 words (FLORES-200" in md
    assert "| ber | translation | 3 | 0.40 ± 0.10 | 1.10x [0.90, 1.20] (n=3) | 0.20 ± 0.10 | 0.90x [0.70, 1.00] (n=3) |" in md
    assert provenance_blocks({"data": {}}) == []


def test_run_cli_needs_the_data_root(tmp_path: Path, monkeypatch) -> None:
    no_corpora_folder(monkeypatch, tmp_path)
    from typer.testing import CliRunner

    from babelspec.cli import app

    path = write(tmp_path / "run.toml", REAL)
    res = CliRunner().invoke(app, ["run", "--config", str(path), "-o", str(tmp_path / "run")])
    assert res.exit_code == 2 and "pass --data-root" in res.output
    assert not (tmp_path / "run").exists()  # nothing started
