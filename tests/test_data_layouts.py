"""The published layouts of the real sets (SIB-200, NTREX-128, OLDI Seed, FLoRes v1, LASER
Tatoeba, HornMT) on small synthetic files: language codes, alignment, and each broken file's
error naming the file and line. The real files are read in test_data_real.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from babelspec.data.languages import get_language
from babelspec.data.loaders import (
    DataFormatError,
    layout_catalogue,
    layout_code,
    load_corpus,
    load_layout,
    load_layout_pairs,
)
from babelspec.data.sources import monolingual_texts, parallel_records, parse_source, without

EN = ["The cat sleeps.", "It rains today.", "We walk home.", "Birds sing.", "The sea is wide."]
KAB = ["Amcic yeṭṭes.", "Ikkat ugeffur ass-a.", "Nteddu s axxam.", "Ifrax ccnan.", "Ill d ameqqran."]


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def sib_tsv(ids: list[int], texts: list[str], cat: str = "science") -> str:
    return "index_id\tcategory\ttext\n" + "".join(f"{i}\t{cat}\t{t}\n" for i, t in zip(ids, texts))


def make_root(root: Path) -> Path:
    """A corpora folder with every layout, in its published file names."""
    ann = root / "sib200" / "data" / "annotated"
    # train ids 1-3, dev 4, test 5; the target rows come in another order than English's
    for code, texts in (("eng_Latn", EN), ("kab_Latn", KAB)):
        order = [0, 1, 2] if code == "eng_Latn" else [2, 0, 1]
        write(ann / code / "train.tsv", sib_tsv([order_i + 1 for order_i in order], [texts[i] for i in order]))
        write(ann / code / "dev.tsv", sib_tsv([4], [texts[3]]))
        write(ann / code / "test.tsv", sib_tsv([5], [texts[4]]))
    nt = root / "ntrex" / "NTREX-128"
    write(nt / "newstest2019-src.eng.txt", "\r\n".join(EN[:3]) + "\r\n")
    write(nt / "newstest2019-ref.nep.txt", "बिरालो सुत्छ।\r\nआज पानी पर्छ।\r\nहामी घर हिँड्छौं।\r\n")
    seed = root / "nllb_oldi_seed" / "seed"
    write(seed / "eng_Latn", "\n".join(EN[:2]) + "\n")
    write(seed / "zgh_Tfng", "ⴰⵎⵛⵛⵉⵛ ⵉⴳⵏ.\nⵉⴽⴽⴰⵜ ⵓⵏⵥⴰⵕ.\n")
    write(seed / "grn_Latn", "Mbarakaja oke.\nOky ko árape.\n")
    fl = root / "flores_v1" / "flores_test_sets"
    for split, n in (("dev", 2), ("devtest", 3), ("test", 1)):
        write(fl / f"wikipedia.{split}.ne-en.en", "".join(f"Sentence {i}.\n" for i in range(n)))
        write(fl / f"wikipedia.{split}.ne-en.ne", "".join(f"वाक्य {i}।\n" for i in range(n)))
    tl = root / "tatoeba_laser" / "data" / "tatoeba" / "v1"
    write(tl / "tatoeba.oci-eng.oci", "Bonjorn.\nMercé.\n")
    write(tl / "tatoeba.oci-eng.eng", "Hello.\nThanks.\n")
    hm = root / "hornmt" / "data"
    write(hm / "amh.txt", "ሰላም ነው።\n")
    write(hm / "eng.txt", "It is peace.\n")
    return root


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    return make_root(tmp_path / "corpora")


def test_language_codes_of_each_layout() -> None:
    assert [layout_code(lay, "npi") for lay in ("sib200", "ntrex", "flores-v1")] == ["npi_Deva", "nep", "ne"]
    assert layout_code("sib200", "ber") == "kab_Latn"
    assert layout_code("sib200", "zgh") == "tzm_Tfng"  # Central Atlas Tamazight stands in
    assert layout_code("oldi-seed", "zgh") == "zgh_Tfng"
    assert layout_code("sib200", "que") == "quy_Latn"
    assert layout_code("ntrex", "ne") == "nep"  # aliases resolve first
    with pytest.raises(DataFormatError, match=r"ntrex has no Guarani \(grn\); it holds: amh, ibo, npi, yor"):
        layout_code("ntrex", "grn")
    with pytest.raises(DataFormatError, match="sib200 has no Cherokee"):
        layout_code("sib200", "chr")
    # the published codes are accepted wherever a language is
    assert [get_language(c).code for c in ("npi_Deva", "nep", "kab_Latn", "tzm_Tfng", "zgh_Tfng", "quy_Latn",
                                           "gug_Latn")] == ["npi", "npi", "ber", "zgh", "zgh", "que", "grn"]


def test_sib200_joins_on_index_id_not_on_line(root: Path) -> None:
    recs = load_layout_pairs("sib200", root, "ber", "train")
    assert [(r["id"], r["en"], r["text"]) for r in recs] == [
        ("3", EN[2], KAB[2]), ("1", EN[0], KAB[0]), ("2", EN[1], KAB[1])]
    assert recs[0]["domain"].endswith(": science") and recs[0]["source"] == "sib200"
    assert [len(load_layout_pairs("sib200", root, "kab_Latn", s)) for s in ("train", "dev", "test")] == [3, 1, 1]
    # the root may be the corpora folder, the set's folder or its data folder
    assert load_layout("sib200", root / "sib200" / "data" / "annotated", "ber", "test") == [KAB[4]]


def test_line_aligned_layouts(root: Path) -> None:
    nep = load_layout_pairs("ntrex", root, "npi", "all")
    assert len(nep) == 3 and nep[1]["en"] == EN[1] and nep[1]["text"] == "आज पानी पर्छ।"  # CRLF stripped
    assert [r["text"] for r in load_layout_pairs("oldi-seed", root, "zgh", "all")] == ["ⴰⵎⵛⵛⵉⵛ ⵉⴳⵏ.", "ⵉⴽⴽⴰⵜ ⵓⵏⵥⴰⵕ."]
    assert [len(load_layout_pairs("flores-v1", root, "npi", s)) for s in ("dev", "devtest", "test")] == [2, 3, 1]
    assert load_layout_pairs("tatoeba-laser", root, "oci", "all")[1]["en"] == "Thanks."
    assert load_layout_pairs("hornmt", root, "amh", "all")[0]["en"] == "It is peace."
    assert load_corpus(f"oldi-seed:{root}", lang="grn") == ["Mbarakaja oke.", "Oky ko árape."]
    assert load_corpus(f"sib200:{root}", lang="ber", split="dev") == [KAB[3]]


def test_catalogue_counts_every_split(root: Path) -> None:
    rows = {(r["lang"], r["layout"], r["split"]): r for r in layout_catalogue(root)}
    assert rows[("ber", "sib200", "train")]["sentences"] == 3
    assert rows[("ber", "sib200", "train")]["words"] == 8  # Amcic yeṭṭes / Ikkat ugeffur ass-a / Nteddu s axxam
    assert rows[("npi", "ntrex", "all")]["sentences"] == 3
    assert rows[("npi", "flores-v1", "devtest")]["sentences"] == 3
    assert {k[0] for k in rows} == {"amh", "ber", "grn", "npi", "oci", "zgh"}


# --- broken files: each error names the file and the line ------------------------------------


def test_sib200_bad_header(root: Path) -> None:
    p = write(root / "sib200/data/annotated/kab_Latn/dev.tsv", "id\ttext\n4\tAzul\n")
    with pytest.raises(DataFormatError, match=rf"{p}:1: expected the header 'index_id<TAB>category<TAB>text'"):
        load_layout("sib200", root, "ber", "dev")


def test_sib200_wrong_column_count(root: Path) -> None:
    p = write(root / "sib200/data/annotated/kab_Latn/test.tsv", "index_id\tcategory\ttext\n5\tscience\tone\ttwo\n")
    with pytest.raises(DataFormatError, match=rf"{p}:2: expected 3 tab-separated columns .* found 4"):
        load_layout("sib200", root, "ber", "test")


def test_sib200_bad_and_repeated_ids_and_empty_text(root: Path) -> None:
    p = write(root / "sib200/data/annotated/kab_Latn/dev.tsv", sib_tsv([4], ["Azul"]) + "x7\tsports\tAzul\n")
    with pytest.raises(DataFormatError, match=rf"{p}:3: index_id 'x7' is not a number"):
        load_layout("sib200", root, "ber", "dev")
    write(p, sib_tsv([4, 6, 4], ["a", "b", "c"]))
    with pytest.raises(DataFormatError, match=rf"{p}:4: index_id 4 repeats line 2"):
        load_layout("sib200", root, "ber", "dev")
    write(p, "index_id\tcategory\ttext\n4\tsports\t \n")
    with pytest.raises(DataFormatError, match=rf"{p}:2: empty text for index_id 4"):
        load_layout("sib200", root, "ber", "dev")


def test_sib200_ids_that_do_not_join(root: Path) -> None:
    write(root / "sib200/data/annotated/kab_Latn/test.tsv", sib_tsv([9], ["Azul"]))
    with pytest.raises(DataFormatError, match=r"kab_Latn/test.tsv and .*eng_Latn/test.tsv do not join on "
                                              r"index_id: ids 9 only in the first; ids 5 only in the second"):
        load_layout_pairs("sib200", root, "ber", "test")


def test_sib200_bad_encoding(root: Path) -> None:
    p = write(root / "sib200/data/annotated/kab_Latn/dev.tsv", b"index_id\tcategory\ttext\n4\tx\tcaf\xe9\n")
    with pytest.raises(DataFormatError, match=rf"{p}:2: not valid utf-8"):
        load_layout("sib200", root, "ber", "dev")


def test_line_counts_must_match(root: Path) -> None:
    p = write(root / "ntrex/NTREX-128/newstest2019-ref.nep.txt", "एक\nदुई\n")
    with pytest.raises(DataFormatError, match=rf"{p} has 2 lines but .*newstest2019-src.eng.txt has 3; .*line-aligned"):
        load_layout_pairs("ntrex", root, "npi", "all")


def test_blank_line_inside_an_aligned_file(root: Path) -> None:
    p = write(root / "nllb_oldi_seed/seed/zgh_Tfng", "ⴰⵣⵓⵍ\n\nⵜⴰⵏⵎⵎⵉⵔⵜ\n")
    with pytest.raises(DataFormatError, match=rf"{p}:2: blank line in a line-aligned file"):
        load_layout_pairs("oldi-seed", root, "zgh", "all")


def test_missing_layout_split_and_file(root: Path, tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match=r"no ntrex files here; expected ntrex/NTREX-128/"):
        load_layout("ntrex", tmp_path / "empty", "npi", "all")
    with pytest.raises(DataFormatError, match="sib200 has no split 'devtest'; its splits: train, dev, test"):
        load_layout("sib200", root, "ber", "devtest")
    with pytest.raises(DataFormatError, match=r"grn_Latn/test.tsv: no such file"):
        load_layout("sib200", root, "grn", "test")


# --- source strings ---------------------------------------------------------------------------


def test_source_strings(root: Path) -> None:
    s = parse_source("sib200:sib200@test")
    assert (s.format, s.path, s.split) == ("sib200", "sib200", "test") and str(s) == "sib200:sib200@test"
    assert parse_source("ntrex:ntrex").split == "all" and parse_source("bundled").split == "train"
    recs = parallel_records(s.resolve(root), "ber")
    assert [r["text"] for r in recs] == [KAB[4]]
    assert monolingual_texts(parse_source("oldi-seed:nllb_oldi_seed").resolve(root), "grn") == [
        "Mbarakaja oke.", "Oky ko árape."]
    with pytest.raises(ValueError, match="sib200 splits are train, dev, test"):
        parse_source("sib200:x@devtest")
    with pytest.raises(ValueError, match="FORMAT one of"):
        parse_source("csv:x.csv")
    with pytest.raises(ValueError, match="bundled dataset takes no path"):
        parse_source("bundled:x@train")
    with pytest.raises(DataFormatError, match="no data root was given; pass --data-root"):
        s.resolve(None)
    with pytest.raises(DataFormatError, match="holds no English side"):
        parallel_records(parse_source("text:a.txt").resolve(root), "ber")
    assert without(["A  b.", "c"], ["a b."]) == (["c"], 1)


def test_data_list_cli(root: Path) -> None:
    from typer.testing import CliRunner

    from babelspec.cli import app

    res = CliRunner().invoke(app, ["data", "list", "--data-root", str(root)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert any(line.split()[:6] == ["ber", "sib200", "kab_Latn", "train", "3", "8"] for line in lines)
    assert any(line.split()[:5] == ["npi", "ntrex", "nep", "all", "3"] for line in lines)
    assert "no set here for: chr, haw, ibo, que, yor" in res.output
    res = CliRunner().invoke(app, ["data", "list", "--data-root", str(root), "--json"])
    data = json.loads(res.output)
    assert {"lang": "zgh", "layout": "oldi-seed", "code": "zgh_Tfng", "split": "all", "sentences": 2} == {
        k: v for k, v in next(r for r in data["sets"] if r["layout"] == "oldi-seed" and r["lang"] == "zgh").items()
        if k in ("lang", "layout", "code", "split", "sentences")}
    write(root / "sib200/data/annotated/kab_Latn/dev.tsv", "index_id\tcategory\ttext\n4\tx\n")
    res = CliRunner().invoke(app, ["data", "list", "--data-root", str(root)])
    assert res.exit_code == 2 and "kab_Latn/dev.tsv:2: expected 3 tab-separated columns" in res.output


def test_a_set_folder_is_recognised(root: Path) -> None:
    from babelspec.data.loaders import detect_format

    assert [detect_format(root / d) for d in ("sib200", "ntrex", "nllb_oldi_seed", "flores_v1")] == [
        "sib200", "ntrex", "oldi-seed", "flores-v1"]
    assert load_corpus(root / "ntrex", lang="npi")[0] == "बिरालो सुत्छ।"
