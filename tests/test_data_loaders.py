"""Loaders for the user's own corpora: each format on small files, each bad file's error."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from babelspec.data.loaders import (
    DataFormatError,
    detect_format,
    load_corpus,
    load_flores,
    load_flores_pairs,
    load_hf_dataset,
    load_jsonl,
    load_leipzig,
    load_tatoeba_pairs,
    load_tatoeba_sentences,
    load_text,
)


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_plain_text(tmp_path: Path) -> None:
    p = write(tmp_path / "a.txt", "\ufeffपहिलो वाक्य।\n\n  दोस्रो वाक्य  \r\n")
    assert load_text(p) == ["पहिलो वाक्य।", "दोस्रो वाक्य"]


def test_gzip_text(tmp_path: Path) -> None:
    p = write(tmp_path / "a.txt.gz", gzip.compress(b"one\ntwo\n"))
    assert load_text(p) == ["one", "two"]


def test_bad_encoding_names_file_and_line(tmp_path: Path) -> None:
    p = write(tmp_path / "latin.txt", "good line\nalso good\ncaf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(DataFormatError, match=r"latin\.txt:3: not valid utf-8 .*iconv"):
        load_text(p)


def test_empty_file(tmp_path: Path) -> None:
    p = write(tmp_path / "empty.txt", "\n \n")
    with pytest.raises(DataFormatError, match=r"empty\.txt: empty file"):
        load_text(p)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="no such file"):
        load_text(tmp_path / "nope.txt")


def test_tatoeba_pairs_four_and_two_columns(tmp_path: Path) -> None:
    p4 = write(tmp_path / "pairs.tsv", "1\tHello.\t77\tNamaste.\n2\tThanks.\t78\tDhanyabad.\n")
    assert load_tatoeba_pairs(p4) == [("Hello.", "Namaste."), ("Thanks.", "Dhanyabad.")]
    assert load_tatoeba_pairs(p4, reverse=True)[0] == ("Namaste.", "Hello.")
    p2 = write(tmp_path / "pairs2.tsv", "Hello.\tNamaste.\n")
    assert load_tatoeba_pairs(p2) == [("Hello.", "Namaste.")]


def test_tatoeba_pairs_missing_columns(tmp_path: Path) -> None:
    p = write(tmp_path / "bad.tsv", "1\tHello.\t77\tNamaste.\nonly one column here\n")
    with pytest.raises(DataFormatError, match=r"bad\.tsv:2: expected 4 tab-separated columns .* found 1"):
        load_tatoeba_pairs(p)


def test_tatoeba_sentences_by_language(tmp_path: Path) -> None:
    p = write(tmp_path / "sentences.csv", "1\teng\tHello.\n2\tyor\tẸ n lẹ.\n3\tyor\tO dabọ.\n4\tnpi\tनमस्ते\n")
    assert load_tatoeba_sentences(p, "yo") == ["Ẹ n lẹ.", "O dabọ."]
    assert load_tatoeba_sentences(p, "ne") == ["नमस्ते"]
    assert len(load_tatoeba_sentences(p)) == 4
    with pytest.raises(DataFormatError, match="no sentences for language 'haw'"):
        load_tatoeba_sentences(p, "haw")
    bad = write(tmp_path / "s2.csv", "1\teng\n")
    with pytest.raises(DataFormatError, match=r"s2\.csv:1: expected 3 tab-separated columns"):
        load_tatoeba_sentences(bad)


def test_jsonl_field(tmp_path: Path) -> None:
    p = write(tmp_path / "c.jsonl", "\n".join(json.dumps(o, ensure_ascii=False) for o in
                                          [{"text": "a", "id": 1}, {"text": "b"}, {"sentence": "x", "text": "c"}]))
    assert load_jsonl(p) == ["a", "b", "c"]
    q = write(tmp_path / "d.jsonl", '{"sentence": "ọjọ́"}\n')
    assert load_jsonl(q, "sentence") == ["ọjọ́"]


def test_jsonl_errors(tmp_path: Path) -> None:
    missing = write(tmp_path / "m.jsonl", '{"text": "a"}\n{"body": "b"}\n')
    with pytest.raises(DataFormatError, match=r"m\.jsonl:2: missing field 'text' \(fields here: body\)"):
        load_jsonl(missing)
    broken = write(tmp_path / "b.jsonl", '{"text": "a"}\n{"text": \n')
    with pytest.raises(DataFormatError, match=r"b\.jsonl:2: not valid JSON"):
        load_jsonl(broken)
    typed = write(tmp_path / "t.jsonl", '{"text": 3}\n')
    with pytest.raises(DataFormatError, match=r"t\.jsonl:1: field 'text' is int"):
        load_jsonl(typed)
    notobj = write(tmp_path / "n.jsonl", '["text"]\n')
    with pytest.raises(DataFormatError, match=r"n\.jsonl:1: expected a JSON object"):
        load_jsonl(notobj)


def test_leipzig_file_folder_and_archive(tmp_path: Path) -> None:
    body = "1\tỌmọ náà ń ṣeré.\n2\tMo fẹ́ràn oúnjẹ.\n"
    f = write(tmp_path / "yor_community_2017" / "yor_community_2017-sentences.txt", body)
    write(tmp_path / "yor_community_2017" / "yor_community_2017-words.txt", "1\tọmọ\t10\n")
    assert load_leipzig(f) == ["Ọmọ náà ń ṣeré.", "Mo fẹ́ràn oúnjẹ."]
    assert load_leipzig(f.parent) == ["Ọmọ náà ń ṣeré.", "Mo fẹ́ràn oúnjẹ."]
    archive = tmp_path / "yor.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        data = body.encode()
        info = tarfile.TarInfo("yor_community_2017/yor_community_2017-sentences.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    assert load_leipzig(archive) == ["Ọmọ náà ń ṣeré.", "Mo fẹ́ràn oúnjẹ."]
    assert detect_format(archive) == "leipzig"


def test_leipzig_bad_line(tmp_path: Path) -> None:
    f = write(tmp_path / "x-sentences.txt", "1\tok\nnot numbered\n")
    with pytest.raises(DataFormatError, match=r"x-sentences\.txt:2: expected 'number<TAB>sentence'"):
        load_leipzig(f)


def _flores(tmp_path: Path) -> Path:
    root = tmp_path / "flores"
    write(root / "devtest" / "eng_Latn.devtest", "The cat sleeps.\nIt rains.\n")
    write(root / "devtest" / "npi_Deva.devtest", "बिरालो सुत्छ।\nपानी पर्छ।\n")
    write(root / "dev" / "eng_Latn.dev", "One.\n")
    write(root / "dev" / "npi_Deva.dev", "एक।\nदुई।\n")
    return root


def test_flores(tmp_path: Path) -> None:
    root = _flores(tmp_path)
    assert load_flores(root, "ne") == ["बिरालो सुत्छ।", "पानी पर्छ।"]
    assert load_flores_pairs(root, "npi")[1] == ("It rains.", "पानी पर्छ।")
    assert load_corpus(root, lang="npi", split="test") == ["बिरालो सुत्छ।", "पानी पर्छ।"]
    with pytest.raises(DataFormatError, match="must be line-aligned"):
        load_flores_pairs(root, "npi", "dev")
    with pytest.raises(DataFormatError, match="no file for 'yor_Latn'"):
        load_flores(root, "yor")
    with pytest.raises(DataFormatError, match="pass lang="):
        load_corpus(root)


def test_hf_dataset(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": ["Bawo ni?", "  ", "O dabọ."], "n": [1, 2, 3]})
    ds.save_to_disk(str(tmp_path / "ds"))
    assert load_hf_dataset(tmp_path / "ds") == ["Bawo ni?", "O dabọ."]
    assert load_corpus(tmp_path / "ds") == ["Bawo ni?", "O dabọ."]
    with pytest.raises(DataFormatError, match=r"no column 'sentence' \(columns: text, n\)"):
        load_hf_dataset(tmp_path / "ds", "sentence")


def test_hf_dataset_without_datasets_says_what_to_install(tmp_path: Path, monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(DataFormatError, match=r"pip install 'babelspec\[hf\]'"):
        load_hf_dataset(tmp_path)


def test_load_corpus_dispatch(tmp_path: Path) -> None:
    assert load_corpus("haw", split="test")  # a bundled language
    assert load_corpus("bundled:kab") == load_corpus("ber")
    j = write(tmp_path / "x.jsonl", '{"t": "a"}\n')
    assert load_corpus(f"jsonl:{j}", field="t") == ["a"]
    t = write(tmp_path / "p.tsv", "Hello.\tNamaste.\n")
    assert load_corpus(t) == ["Namaste."]
    with pytest.raises(DataFormatError, match="neither a file or folder nor a language code"):
        load_corpus(str(tmp_path / "missing.txt"))
