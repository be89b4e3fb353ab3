"""Loaders for the user's own corpora, in the formats researchers in this field hold.

* plain text — one sentence or document per line (:func:`load_text`)
* Tatoeba — sentence-pair TSV exports (``id, text, id, text`` or ``text, text``) and the
  ``sentences.csv`` list (``id, lang, text``) (:func:`load_tatoeba_pairs`, :func:`load_tatoeba_sentences`)
* JSONL with a chosen field (:func:`load_jsonl`)
* Leipzig corpora ``*-sentences.txt`` (``id<TAB>sentence``), also inside the downloaded
  ``.tar.gz`` (:func:`load_leipzig`)
* FLORES+/FLORES-200 per-language files under ``dev/`` and ``devtest/`` (:func:`load_flores`,
  :func:`load_flores_pairs`)
* Hugging Face ``datasets`` saved with ``save_to_disk`` (:func:`load_hf_dataset`; needs the
  optional ``datasets`` package)
* the published layouts of the real evaluation sets, English-aligned (:func:`load_layout_pairs`):
  SIB-200's FLORES-200 TSVs (``sib200``), NTREX-128 (``ntrex``), OLDI Seed (``oldi-seed``),
  FLoRes v1 (``flores-v1``), LASER's Tatoeba test sets (``tatoeba-laser``) and HornMT
  (``hornmt``); the code each
  layout uses for each of our languages is in :data:`LAYOUT_CODES`

Every file may be gzip-compressed (``.gz``). Problems raise :class:`DataFormatError` naming the
file and line and saying what to do. :func:`load_corpus` picks the loader from a source string.
"""

from __future__ import annotations

import gzip
import json
import tarfile
from collections.abc import Collection, Iterator
from functools import cache
from pathlib import Path

from babelspec.data.languages import LANGUAGES, Language, get_language
from babelspec.errors import UserError


class DataFormatError(UserError):
    """A user data file that cannot be read as the format asked for."""


def _open_bytes(path: Path) -> bytes:
    path = Path(path)
    if not path.exists():
        raise DataFormatError(f"{path}: no such file")
    if path.is_dir():
        raise DataFormatError(f"{path}: is a folder, expected a file")
    raw = path.read_bytes()
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise DataFormatError(f"{path}: not a valid gzip file ({err})") from None
    return raw


def _lines(path: Path, raw: bytes | None = None, *, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """(line number, text) of every line, decoded strictly so a bad byte is reported where it is."""
    raw = _open_bytes(path) if raw is None else raw
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    for number, line in enumerate(raw.split(b"\n"), start=1):
        try:
            text = line.decode(encoding)
        except UnicodeDecodeError as err:
            raise DataFormatError(
                f"{path}:{number}: not valid {encoding} (byte {line[err.start]:#04x} at column "
                f"{err.start + 1}); convert the file to UTF-8 (e.g. `iconv -f LATIN1 -t UTF-8`) "
                f"or pass encoding="
            ) from None
        yield number, text.rstrip("\r")


def _nonempty(path: Path, items: list, what: str) -> list:
    if not items:
        raise DataFormatError(f"{path}: empty file (no {what} found)")
    return items


def load_text(path: str | Path, *, encoding: str = "utf-8") -> list[str]:
    """Non-blank lines of a plain-text file, stripped."""
    path = Path(path)
    return _nonempty(path, [t.strip() for _, t in _lines(path, encoding=encoding) if t.strip()], "text lines")


def _tsv_rows(path: Path, encoding: str) -> Iterator[tuple[int, list[str]]]:
    for number, line in _lines(path, encoding=encoding):
        if line.strip():
            yield number, line.split("\t")


def load_tatoeba_pairs(path: str | Path, *, reverse: bool = False, encoding: str = "utf-8") -> list[tuple[str, str]]:
    """Sentence pairs from a Tatoeba export: 4 columns (``id, text, id, text``) or 2 (``text, text``).

    Pairs come as (first text, second text), or swapped with ``reverse=True``: give (english,
    target) to match :func:`babelspec.data.corpus.parallel`.
    """
    path = Path(path)
    out = []
    for number, cols in _tsv_rows(path, encoding):
        if len(cols) >= 4:
            a, b = cols[1], cols[3]
        elif len(cols) == 2:
            a, b = cols
        else:
            raise DataFormatError(
                f"{path}:{number}: expected 4 tab-separated columns (id, text, id, text) or 2 "
                f"(text, text), found {len(cols)}; is the file tab-separated?"
            )
        a, b = a.strip(), b.strip()
        if not a or not b:
            raise DataFormatError(f"{path}:{number}: empty sentence in a pair")
        out.append((b, a) if reverse else (a, b))
    return _nonempty(path, out, "sentence pairs")


def _lang_codes(lang: str | Language) -> set[str]:
    try:
        language = get_language(lang)
    except ValueError:
        return {str(lang).lower()}
    return {language.code, language.udhr.lower(), *(a.lower() for a in language.aliases)}


def load_tatoeba_sentences(path: str | Path, lang: str | Language | None = None, *,
                           encoding: str = "utf-8") -> list[str]:
    """Sentences from Tatoeba's ``sentences.csv`` (``id<TAB>lang<TAB>text``), optionally one language."""
    path = Path(path)
    codes = _lang_codes(lang) if lang is not None else None
    out = []
    for number, cols in _tsv_rows(path, encoding):
        if len(cols) < 3:
            raise DataFormatError(
                f"{path}:{number}: expected 3 tab-separated columns (id, lang, text), found {len(cols)}"
            )
        if codes is None or cols[1].strip().lower() in codes:
            if cols[2].strip():
                out.append(cols[2].strip())
    if not out and lang is not None:
        raise DataFormatError(f"{path}: no sentences for language {lang!r} (codes tried: {sorted(codes or [])})")
    return _nonempty(path, out, "sentences")


def load_jsonl(path: str | Path, field: str = "text", *, encoding: str = "utf-8") -> list[str]:
    """The string ``field`` of every JSON object, one object per line."""
    path = Path(path)
    out = []
    for number, line in _lines(path, encoding=encoding):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataFormatError(f"{path}:{number}: not valid JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(obj, dict):
            raise DataFormatError(f"{path}:{number}: expected a JSON object, found {type(obj).__name__}")
        if field not in obj:
            keys = ", ".join(sorted(obj)) or "none"
            raise DataFormatError(f"{path}:{number}: missing field {field!r} (fields here: {keys}); pass field=")
        value = obj[field]
        if not isinstance(value, str):
            raise DataFormatError(f"{path}:{number}: field {field!r} is {type(value).__name__}, expected a string")
        if value.strip():
            out.append(value.strip())
    return _nonempty(path, out, f"records with {field!r}")


def _leipzig_lines(path: Path, raw: bytes, encoding: str) -> list[str]:
    out = []
    for number, line in _lines(path, raw, encoding=encoding):
        if not line.strip():
            continue
        cols = line.split("\t", 1)
        if len(cols) != 2 or not cols[0].strip().isdigit():
            raise DataFormatError(
                f"{path}:{number}: expected 'number<TAB>sentence' (a Leipzig *-sentences.txt file)"
            )
        if cols[1].strip():
            out.append(cols[1].strip())
    return _nonempty(path, out, "sentences")


def load_leipzig(path: str | Path, *, encoding: str = "utf-8") -> list[str]:
    """Sentences of a Leipzig corpus: the ``*-sentences.txt`` file, its folder, or the ``.tar.gz``."""
    path = Path(path)
    if path.is_dir():
        found = sorted(path.rglob("*-sentences.txt"))
        if not found:
            raise DataFormatError(f"{path}: no *-sentences.txt file in this folder")
        return [s for f in found for s in load_leipzig(f, encoding=encoding)]
    if path.name.endswith((".tar.gz", ".tgz", ".tar")):
        try:
            with tarfile.open(path) as tar:
                members = [m for m in tar.getmembers() if m.name.endswith("-sentences.txt")]
                if not members:
                    raise DataFormatError(f"{path}: archive holds no *-sentences.txt file")
                out = []
                for m in members:
                    f = tar.extractfile(m)
                    out += _leipzig_lines(Path(f"{path}!{m.name}"), f.read() if f else b"", encoding)
                return out
        except tarfile.TarError as err:
            raise DataFormatError(f"{path}: not a readable tar archive ({err})") from None
    return _leipzig_lines(path, _open_bytes(path), encoding)


# FLORES+ files a language under its FLORES-200 code (the language table's), and adds codes
# FLORES-200 lacks: Standard Moroccan Tamazight (zgh_Tfng, where FLORES-200 has tzm_Tfng),
# Cherokee and Hawaiian.
_FLORES_PLUS_CODES = {"zgh": "zgh_Tfng", "chr": "chr_Cher", "haw": "haw_Latn", "eng": "eng_Latn"}


def _flores_code(code: str) -> str:
    return _FLORES_PLUS_CODES.get(code) or LANGUAGES[code].flores or code


def _flores_file(root: Path, code: str, split: str) -> Path:
    folder = root / split
    if not folder.is_dir():
        raise DataFormatError(f"{root}: no {split}/ folder; expected FLORES layout <root>/{{dev,devtest}}/<lang_Script>…")
    prefix = _flores_code(code)
    found = sorted(p for p in folder.iterdir() if p.is_file() and p.name.split(".")[0] == prefix)
    if not found:
        names = ", ".join(sorted(p.name for p in folder.iterdir())[:8])
        raise DataFormatError(f"{folder}: no file for {prefix!r} (found: {names or 'nothing'})")
    return found[0]


def _read_flores_file(path: Path, encoding: str) -> list[str]:
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DataFormatError(f"{path}: reading parquet needs pyarrow (`pip install pyarrow`)") from None
        table = pq.read_table(path)
        col = "text" if "text" in table.column_names else None
        if col is None:
            raise DataFormatError(f"{path}: no 'text' column (columns: {', '.join(table.column_names)})")
        return _nonempty(path, [str(x) for x in table.column(col).to_pylist()], "sentences")
    if path.suffix in (".jsonl",) or path.name.endswith(".jsonl.gz"):
        return load_jsonl(path, "text", encoding=encoding)
    # plain text, one sentence per line, blank lines kept out only at the end (alignment matters)
    lines = [t for _, t in _lines(path, encoding=encoding)]
    while lines and not lines[-1].strip():
        lines.pop()
    return _nonempty(path, [t.strip() for t in lines], "sentences")


def load_flores(root: str | Path, lang: str | Language, split: str = "devtest", *, encoding: str = "utf-8") -> list[str]:
    """One language's sentences from a FLORES+ / FLORES-200 folder (``dev`` or ``devtest``)."""
    if split not in ("dev", "devtest"):
        raise UserError(f"FLORES split must be 'dev' or 'devtest', got {split!r}")
    code = "eng" if str(lang).lower() in ("eng", "en", "english") else get_language(lang).code
    return _read_flores_file(_flores_file(Path(root), code, split), encoding)


def load_flores_pairs(root: str | Path, lang: str | Language, split: str = "devtest", *,
                      encoding: str = "utf-8") -> list[tuple[str, str]]:
    """(english, target) pairs aligned by line between ``eng_Latn`` and the language."""
    en = load_flores(root, "eng", split, encoding=encoding)
    tgt = load_flores(root, lang, split, encoding=encoding)
    if len(en) != len(tgt):
        raise DataFormatError(
            f"{root}/{split}: eng_Latn has {len(en)} lines but {_flores_code(get_language(lang).code)} has "
            f"{len(tgt)}; FLORES files must be line-aligned"
        )
    return list(zip(en, tgt))


# --- published layouts of real evaluation sets ------------------------------------------------

# The code each layout gives each language. SIB-200, NTREX-128 and OLDI Seed hold many languages:
# their codes are columns of the language table (Language.flores, .ntrex, .oldi, from
# flores200.tsv). The smaller layouts hold only some of the paper's languages, listed here.
# Stand-ins, stated: ber is Kabyle (kab_Latn); zgh is Central Atlas Tamazight in Tifinagh
# (tzm_Tfng) in FLORES-200 / SIB-200, and Standard Moroccan Tamazight (zgh_Tfng) in OLDI Seed; que
# is Ayacucho Quechua (quy_Latn); grn is Paraguayan Guarani; npi is "nep" in NTREX and "ne" in
# FLoRes v1. Nothing here has chr or haw.
_TABLE_LAYOUTS = {"sib200": "flores", "ntrex": "ntrex", "oldi-seed": "oldi"}
LAYOUT_CODES: dict[str, dict[str, str]] = {
    "sib200": {"eng": "eng_Latn"},
    "ntrex": {"eng": "eng"},
    "oldi-seed": {"eng": "eng_Latn"},
    "flores-v1": {"npi": "ne", "eng": "en"},
    "tatoeba-laser": {"amh": "amh", "ber": "kab", "oci": "oci", "eng": "eng"},
    "hornmt": {"amh": "amh", "eng": "eng"},
}
# Splits of each layout; "all" where the set is one file per language.
LAYOUT_SPLITS: dict[str, tuple[str, ...]] = {
    "sib200": ("train", "dev", "test"), "ntrex": ("all",), "oldi-seed": ("all",),
    "flores-v1": ("dev", "devtest", "test"), "tatoeba-laser": ("all",), "hornmt": ("all",),
}
# What each layout's text is, for the reports.
LAYOUT_DOMAINS: dict[str, str] = {
    "sib200": "FLORES-200 (Wikinews, Wikijunior, Wikivoyage)", "ntrex": "news (WMT19 newstest)",
    "oldi-seed": "Wikipedia (encyclopedic)", "flores-v1": "Wikipedia",
    "tatoeba-laser": "Tatoeba (short conversational sentences)", "hornmt": "news (HornMT)",
}
# The layout's folder under a corpora root (the user's corpora folder), and inside it.
_LAYOUT_DIRS: dict[str, tuple[str, str]] = {
    "sib200": ("sib200", "data/annotated"), "ntrex": ("ntrex", "NTREX-128"),
    "oldi-seed": ("nllb_oldi_seed", "seed"), "flores-v1": ("flores_v1", "flores_test_sets"),
    "tatoeba-laser": ("tatoeba_laser", "data/tatoeba/v1"), "hornmt": ("hornmt", "data"),
}
LAYOUTS = tuple(LAYOUT_CODES)


@cache
def _layout_codes(layout: str) -> dict[str, str]:
    """Our code -> the layout's code, for every language the layout can hold."""
    column = _TABLE_LAYOUTS.get(layout)
    if column is None:
        return LAYOUT_CODES[layout]
    return {**{c: getattr(lang, column) for c, lang in LANGUAGES.items() if getattr(lang, column)},
            **LAYOUT_CODES[layout]}


def layout_code(layout: str, lang: str | Language) -> str:
    """The code ``layout`` files ``lang`` under (``npi`` -> ``nep`` in NTREX); DataFormatError if absent."""
    codes = _layout_codes(layout)
    key = "eng" if str(lang).lower() in ("eng", "en", "english") else get_language(lang).code
    if key not in codes:
        held = [c for c in codes if c != "eng"]
        listed = ", ".join(held[:12]) + (f" and {len(held) - 12} more" if len(held) > 12 else "")
        raise DataFormatError(f"{layout} has no {get_language(key).name} ({key}); it holds: {listed}")
    return codes[key]


def layout_dir(layout: str, root: str | Path) -> Path:
    """The folder holding the layout's files, given it, the set's folder or a corpora root."""
    root = Path(root)
    top, inner = _LAYOUT_DIRS[layout]
    for cand in (root / top / inner, root / inner, root):
        if cand.is_dir() and _layout_files(layout, cand):
            return cand
    raise DataFormatError(
        f"{root}: no {layout} files here; expected {top}/{inner}/ (or the folder itself) with "
        f"{_layout_pattern(layout)}"
    )


def _layout_pattern(layout: str) -> str:
    return {"sib200": "<lang_Script>/{train,dev,test}.tsv", "ntrex": "newstest2019-{src.eng,ref.LANG}.txt",
            "oldi-seed": "one file per language named eng_Latn, grn_Latn, ...",
            "flores-v1": "wikipedia.{dev,devtest,test}.ne-en.{ne,en}",
            "tatoeba-laser": "tatoeba.LANG-eng.{LANG,eng}", "hornmt": "amh.txt, eng.txt"}[layout]


def _layout_files(layout: str, folder: Path) -> list[Path]:
    if layout == "sib200":
        return sorted(folder.glob("*_*/test.tsv"))
    if layout == "ntrex":
        return sorted(folder.glob("newstest2019-*.txt"))
    if layout == "oldi-seed":
        return sorted(p for p in folder.glob("*_*") if p.is_file() and "." not in p.name)
    if layout == "flores-v1":
        return sorted(folder.glob("wikipedia.*.*-en.*"))
    if layout == "hornmt":
        return [p for p in (folder / "eng.txt",) if p.is_file()]
    return sorted(folder.glob("tatoeba.*-eng.*"))


def _check_split(layout: str, split: str) -> str:
    if split not in LAYOUT_SPLITS[layout]:
        raise DataFormatError(
            f"{layout} has no split {split!r}; its splits: {', '.join(LAYOUT_SPLITS[layout])}"
        )
    return split


def layout_file(layout: str, root: str | Path, lang: str | Language, split: str) -> Path:
    """The file of one language and split of a layout (which need not exist yet)."""
    folder, code = layout_dir(layout, root), layout_code(layout, lang)
    _check_split(layout, split)
    if layout == "sib200":
        return folder / code / f"{split}.tsv"
    if layout == "ntrex":
        return folder / ("newstest2019-src.eng.txt" if code == "eng" else f"newstest2019-ref.{code}.txt")
    if layout == "oldi-seed":
        if code == "grn_Latn" and not (folder / code).exists() and (folder / "gug_Latn").exists():
            return folder / "gug_Latn"  # renamed in later Seed releases, same content
        return folder / code
    if layout == "flores-v1":
        return folder / f"wikipedia.{split}.ne-en.{code}"
    if layout == "hornmt":
        return folder / f"{code}.txt"
    if code == "eng":
        raise DataFormatError(f"{folder}: tatoeba-laser keeps one English file per language pair; "
                              f"ask for the pairs of a language instead")
    return folder / f"tatoeba.{code}-eng.{code}"


def _aligned_lines(path: Path, encoding: str = "utf-8") -> list[str]:
    """Every line of a line-aligned file; a blank line inside breaks the alignment and is an error."""
    lines = [t for _, t in _lines(path, encoding=encoding)]
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            raise DataFormatError(
                f"{path}:{number}: blank line in a line-aligned file (line N of every language "
                f"translates line N of English); remove the line here and in its parallel files"
            )
    return _nonempty(path, [t.strip() for t in lines], "sentences")


def load_sib200_rows(root: str | Path, lang: str | Language, split: str = "test", *,
                     encoding: str = "utf-8") -> list[tuple[str, str, str]]:
    """(index_id, category, text) rows of one SIB-200 ``<lang_Script>/<split>.tsv``."""
    path = layout_file("sib200", root, lang, split)
    out: list[tuple[str, str, str]] = []
    seen: dict[str, int] = {}
    for number, line in _lines(path, encoding=encoding):
        if number == 1:
            if line.split("\t") != ["index_id", "category", "text"]:
                raise DataFormatError(
                    f"{path}:1: expected the header 'index_id<TAB>category<TAB>text', found {line[:60]!r}"
                )
            continue
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) != 3:
            raise DataFormatError(
                f"{path}:{number}: expected 3 tab-separated columns (index_id, category, text), "
                f"found {len(cols)}; a tab inside a sentence must be removed"
            )
        index_id, category, text = (c.strip() for c in cols)
        if not index_id.isdigit():
            raise DataFormatError(f"{path}:{number}: index_id {index_id!r} is not a number")
        if not text:
            raise DataFormatError(f"{path}:{number}: empty text for index_id {index_id}")
        if index_id in seen:
            raise DataFormatError(f"{path}:{number}: index_id {index_id} repeats line {seen[index_id]}")
        seen[index_id] = number
        out.append((index_id, category, text))
    return _nonempty(path, out, "rows")


def load_layout(layout: str, root: str | Path, lang: str | Language, split: str, *,
                encoding: str = "utf-8") -> list[str]:
    """One language's sentences of a layout's split, in file order."""
    if layout == "sib200":
        return [text for _, _, text in load_sib200_rows(root, lang, split, encoding=encoding)]
    return _aligned_lines(layout_file(layout, root, lang, split), encoding)


def load_layout_pairs(layout: str, root: str | Path, lang: str | Language, split: str, *,
                      encoding: str = "utf-8") -> list[dict]:
    """English-aligned records ``{"id", "en", "text", "source", "domain", "sent"}`` of a split.

    SIB-200 rows are joined on ``index_id`` with ``eng_Latn`` (every id must be on both sides);
    the other layouts are line-aligned (both files must have the same number of lines).
    """
    domain = LAYOUT_DOMAINS[layout]
    if layout == "sib200":
        tgt = load_sib200_rows(root, lang, split, encoding=encoding)
        en_path = layout_file(layout, root, "eng", split)
        en = {i: t for i, _, t in load_sib200_rows(root, "eng", split, encoding=encoding)}
        tgt_path = layout_file(layout, root, lang, split)
        missing = [i for i, _, _ in tgt if i not in en]
        if missing or len(en) != len(tgt):
            extra = sorted(set(en) - {i for i, _, _ in tgt}, key=int)
            raise DataFormatError(
                f"{tgt_path} and {en_path} do not join on index_id: "
                + (f"ids {', '.join(missing[:5])} only in the first" if missing else "")
                + ("; " if missing and extra else "")
                + (f"ids {', '.join(extra[:5])} only in the second" if extra else "")
                + "; both files must hold the same sentences"
            )
        return [{"id": i, "en": en[i], "text": t, "source": layout, "domain": f"{domain}: {cat}",
                 "sent": True} for i, cat, t in tgt]
    tgt_path = layout_file(layout, root, lang, split)
    if layout == "tatoeba-laser":
        en_path = tgt_path.with_name(tgt_path.name.rsplit(".", 1)[0] + ".eng")
    else:
        en_path = layout_file(layout, root, "eng", split)
    tgt, en = _aligned_lines(tgt_path, encoding), _aligned_lines(en_path, encoding)
    if len(tgt) != len(en):
        raise DataFormatError(
            f"{tgt_path} has {len(tgt)} lines but {en_path} has {len(en)}; the files must be "
            f"line-aligned (line N translates line N)"
        )
    return [{"id": str(n), "en": e, "text": t, "source": layout, "domain": domain, "sent": True}
            for n, (e, t) in enumerate(zip(en, tgt), start=1)]


def layout_languages(layout: str, root: str | Path) -> list[str]:
    """Our language codes whose files are present in a layout folder."""
    out = []
    for code in _layout_codes(layout):
        if code == "eng":
            continue
        try:
            split = LAYOUT_SPLITS[layout][-1]
            if layout_file(layout, root, code, split).is_file():
                out.append(code)
        except DataFormatError:
            continue
    return out


def layout_catalogue(root: str | Path, languages: Collection[str] | None = None) -> list[dict]:
    """Per language, layout and split under a corpora root: sentences and words (both sides);
    only ``languages`` (our codes) where given.

    A layout absent from ``root`` is left out; a broken file raises DataFormatError.
    """
    from babelspec.data.corpus import count_words

    rows = []
    for layout in LAYOUTS:
        try:
            layout_dir(layout, root)
        except DataFormatError:
            continue
        for lang in layout_languages(layout, root):
            if languages is not None and lang not in languages:
                continue
            for split in LAYOUT_SPLITS[layout]:
                recs = load_layout_pairs(layout, root, lang, split)
                rows.append({"lang": lang, "layout": layout, "code": layout_code(layout, lang),
                             "split": split, "sentences": len(recs),
                             "words": sum(count_words(r["text"]) for r in recs),
                             "english_words": sum(count_words(r["en"]) for r in recs),
                             "domain": LAYOUT_DOMAINS[layout]})
    return rows


def load_hf_dataset(path: str | Path, field: str = "text", split: str | None = None) -> list[str]:
    """The string ``field`` of a Hugging Face dataset saved with ``save_to_disk``."""
    try:
        import datasets
    except ImportError:
        raise DataFormatError(
            f"{path}: reading a Hugging Face dataset needs the optional `datasets` package; "
            "install it with `pip install 'babelspec[hf]'` (or `pip install datasets`)"
        ) from None
    path = Path(path)
    if not path.exists():
        raise DataFormatError(f"{path}: no such folder")
    try:
        ds = datasets.load_from_disk(str(path))
    except FileNotFoundError as err:
        raise DataFormatError(f"{path}: not a dataset saved with save_to_disk ({err})") from None
    if isinstance(ds, datasets.DatasetDict):
        if split is None:
            if len(ds) != 1:
                raise DataFormatError(f"{path}: holds splits {', '.join(ds)}; pass split=")
            split = next(iter(ds))
        if split not in ds:
            raise DataFormatError(f"{path}: no split {split!r} (splits: {', '.join(ds)})")
        ds = ds[split]
    if field not in ds.column_names:
        raise DataFormatError(f"{path}: no column {field!r} (columns: {', '.join(ds.column_names)}); pass field=")
    out = [t.strip() for t in ds[field] if isinstance(t, str) and t.strip()]
    return _nonempty(path, out, f"rows with {field!r}")


FORMATS = ("text", "jsonl", "tatoeba", "tatoeba-sentences", "leipzig", "flores", "hf", "bundled", *LAYOUTS)


def detect_format(path: Path) -> str:
    """The format a path most likely holds, from its name and layout."""
    name = path.name
    if path.is_dir():
        if (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists() or (path / "state.json").exists():
            return "hf"
        if (path / "devtest").is_dir() or (path / "dev").is_dir():
            return "flores"
        if any(path.rglob("*-sentences.txt")):
            return "leipzig"
        for layout in LAYOUTS:  # the set's own folder (a corpora root holds several: name one)
            top, inner = _LAYOUT_DIRS[layout]
            if any(c.is_dir() and _layout_files(layout, c) for c in (path / inner, path)):
                return layout
        raise DataFormatError(f"{path}: cannot tell the format of this folder; use FORMAT:PATH with one of {', '.join(FORMATS)}")
    if name.endswith(("-sentences.txt", ".tar.gz", ".tgz")):
        return "leipzig"
    if name.endswith((".jsonl", ".jsonl.gz", ".ndjson")):
        return "jsonl"
    if name.endswith((".tsv", ".tsv.gz")):
        return "tatoeba"
    if name in ("sentences.csv", "sentences.csv.gz"):
        return "tatoeba-sentences"
    return "text"


def load_corpus(source: str | Path, *, lang: str | Language | None = None, split: str = "train",
                field: str = "text") -> list[str]:
    """Monolingual texts from a source string.

    ``npi`` / ``bundled:npi`` — the bundled corpus (``split``); ``FORMAT:PATH`` — a file or folder
    in a named format (see :data:`FORMATS`); a bare path — the format guessed from the name. A
    Tatoeba pair file gives its second column (the target side); FLORES needs ``lang``.
    """
    from babelspec.data import corpus

    s = str(source)
    fmt, _, rest = s.partition(":")
    if fmt not in FORMATS or not rest or (len(fmt) == 1 and Path(s).exists()):  # "C:\..." paths
        fmt, rest = "", s
    if not fmt:
        path = Path(rest)
        if not path.exists():
            try:
                language = get_language(rest)
            except ValueError:
                raise DataFormatError(
                    f"{rest!r} is neither a file or folder nor a language code; give a path, "
                    f"FORMAT:PATH ({', '.join(FORMATS)}), or a language code"
                ) from None
            return corpus.monolingual(language, split)
        fmt = detect_format(path)
    path = Path(rest)
    if fmt == "bundled":
        return corpus.monolingual(rest, split)
    if fmt == "text":
        return load_text(path)
    if fmt == "jsonl":
        return load_jsonl(path, field)
    if fmt == "tatoeba":
        return [tgt for _, tgt in load_tatoeba_pairs(path)]
    if fmt == "tatoeba-sentences":
        return load_tatoeba_sentences(path, lang)
    if fmt == "leipzig":
        return load_leipzig(path)
    if fmt == "flores":
        if lang is None:
            raise DataFormatError(f"{path}: a FLORES folder holds every language; pass lang=")
        return load_flores(path, lang, "dev" if split == "train" else "devtest")
    if fmt == "hf":
        return load_hf_dataset(path, field)
    if fmt in LAYOUTS:
        if lang is None:
            raise DataFormatError(f"{path}: a {fmt} folder holds several languages; pass lang=")
        splits = LAYOUT_SPLITS[fmt]
        return load_layout(fmt, path, lang, "all" if split not in splits and "all" in splits else split)
    raise AssertionError(fmt)
