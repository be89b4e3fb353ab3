"""``babelspec ngram train --corpus LANG`` for a FLORES-200 language beyond the bundled 11: its
real training text from the corpora folder (--data-root, else $BABELSPEC_CORPORA), never a test
sentence; and without a corpora folder, one line that says where it looked."""

from __future__ import annotations

from pathlib import Path

from test_data_layouts import sib_tsv, write
from typer.testing import CliRunner

from babelspec.cli import app
from babelspec.ngram.model import NgramModel

HAU = ["Ina kwana.", "Ruwan sama ya zo.", "Mun tafi gida.", "Tsuntsaye suna waka.", "Teku yana da fadi."]


def corpora(tmp_path: Path) -> Path:
    root = tmp_path / "corpora"
    ann = root / "sib200" / "data" / "annotated" / "hau_Latn"
    write(ann / "train.tsv", sib_tsv([1, 2, 3], HAU[:3]))
    write(ann / "dev.tsv", sib_tsv([4, 5], [HAU[3], HAU[0]]))  # HAU[0] is a test sentence too
    write(ann / "test.tsv", sib_tsv([6], [HAU[0]]))
    write(ann.parent / "eng_Latn" / "test.tsv", sib_tsv([6], ["Good morning."]))  # SIB-200 joins on English
    return root


def test_a_language_beyond_the_11_counts_its_real_training_text(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BABELSPEC_CORPORA", raising=False)
    root = corpora(tmp_path)
    res = CliRunner().invoke(app, ["ngram", "train", "--corpus", "hau", "--data-root", str(root), "-o", "a.ngram"])
    assert res.exit_code == 0, res.output
    model = NgramModel.load(tmp_path / "a.ngram")
    assert model.training["texts"] == 3  # train and dev, each text once, without the test sentence
    monkeypatch.setenv("BABELSPEC_CORPORA", str(root))  # the folder found, with no option
    res = CliRunner().invoke(app, ["ngram", "train", "--corpus", "hau_Latn", "-o", "b.ngram"])
    assert res.exit_code == 0 and NgramModel.load(tmp_path / "b.ngram").training["texts"] == 3
    monkeypatch.delenv("BABELSPEC_CORPORA")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "user-data"))
    res = CliRunner().invoke(app, ["ngram", "train", "--corpus", "hau", "-o", "c.ngram"])
    assert res.exit_code == 2 and "no corpora folder holding its real sets (SIB-200) was found" in res.stderr
    assert str(tmp_path / "user-data" / "babelspec" / "corpora") in res.stderr
