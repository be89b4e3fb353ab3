"""The bundled corpora: monolingual text and English→language pairs, with fixed splits.

The data live in the package's ``babelspec/bundled/`` folder (built by ``babelspec data build``):
``corpus/<lang>.jsonl.gz`` holds one record per text with its split. Set
``BABELSPEC_DATA_DIR`` to read another copy.

Split policy (decided at build time from a content hash, so it never changes between runs):
the parallel test split is a third of the UDHR paragraphs plus up to a quarter of the
sentence-like software-UI pairs (≤ 200 pairs); the monolingual test split is the parallel
test's target side plus ~3 % of the remaining texts (≤ 800). Training records that duplicate
any test text exactly or nearly (see :mod:`babelspec.data.splits`) were dropped, so no test
text reaches a training split, monolingual or parallel.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from functools import cache
from importlib import resources
from pathlib import Path

from babelspec.data.languages import PAPER_LANGUAGES, Language, get_language
from babelspec.errors import UserError

SPLITS = ("train", "test")

# Ethiopic word space and punctuation (፡ ። ፣ ፤ ፥ ፦ ፧ ፨) separate Amharic words as spaces do.
_WORD_SEP = re.compile(r"[\s\u1361-\u1368]+")


def count_words(text: str) -> int:
    """Whitespace/Ethiopic-punctuation separated tokens that contain a letter."""
    return sum(1 for w in _WORD_SEP.split(text) if any(ch.isalpha() for ch in w))


class DataNotFoundError(FileNotFoundError):
    """The bundled dataset is missing; says where it was looked for and how to get it."""


def data_dir() -> Path:
    """The bundled dataset's folder: ``$BABELSPEC_DATA_DIR`` (a rebuilt copy), else the one the
    package carries, ``babelspec/bundled`` (read through ``importlib.resources``: the checkout's
    folder, or the installed wheel's)."""
    env = os.environ.get("BABELSPEC_DATA_DIR")
    if env:
        return Path(env)
    return Path(str(resources.files("babelspec") / "bundled"))


def _check_split(split: str) -> str:
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    return split


@cache
def _records(code: str, root: str) -> tuple[dict, ...]:
    path = Path(root) / "corpus" / f"{code}.jsonl.gz"
    if not path.exists():
        raise DataNotFoundError(
            f"bundled corpus {path} is missing; it ships inside the babelspec package (babelspec/bundled/): "
            "reinstall babelspec, or rebuild it with `babelspec data build -o DIR` and point BABELSPEC_DATA_DIR at DIR"
        )
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return tuple(json.loads(line) for line in f)


def records(lang: str | Language, split: str | None = None) -> list[dict]:
    """Raw records (text, en, source, domain, sent, split) of a language, optionally one split."""
    language = get_language(lang)
    if not language.bundled:
        from babelspec.data.real import corpora_searched

        raise DataNotFoundError(
            f"the bundled dataset holds only the paper's 11 languages, not {language.name} ({language.code}), "
            f"and no corpora folder holding its real sets (SIB-200) was found; looked at: "
            f"{', '.join(corpora_searched())}. Unpack SIB-200 into one of them as sib200/, or pass --data-root DIR"
        )
    code = language.code
    recs = _records(code, str(data_dir().resolve()))
    if split is None:
        return list(recs)
    _check_split(split)
    return [r for r in recs if r["split"] == split]


def monolingual(lang: str | Language, split: str = "train") -> list[str]:
    """Unique target-language texts of a split (sentences, UI strings, paragraphs), in file order."""
    return list(dict.fromkeys(r["text"] for r in records(lang, split)))


def parallel(lang: str | Language, split: str = "train") -> list[tuple[str, str]]:
    """(english, target) pairs of a split."""
    return [(r["en"], r["text"]) for r in records(lang, split) if r["en"]]


def parallel_records(lang: str | Language, split: str = "train") -> list[dict]:
    """The pair records of a split, with their source, domain and sentence-likeness."""
    return [r for r in records(lang, split) if r["en"]]


def corpus_stats(lang: str | Language) -> dict:
    """Sizes per split (texts, words, pairs), per source, and the domains of a language."""
    language = get_language(lang)
    out: dict = {"lang": language.code, "name": language.name, "notes": language.notes, "splits": {}}
    for split in SPLITS:
        recs = records(language, split)
        mono = list(dict.fromkeys(r["text"] for r in recs))
        pairs = [r for r in recs if r["en"]]
        out["splits"][split] = {
            "monolingual_sentences": len(mono),
            "monolingual_words": sum(count_words(t) for t in mono),
            "monolingual_chars": sum(len(t) for t in mono),
            "parallel_pairs": len(pairs),
            "parallel_target_words": sum(count_words(r["text"]) for r in pairs),
            "parallel_sentence_like": sum(1 for r in pairs if r.get("sent")),
        }
    by_source: dict[str, dict] = {}
    for r in records(language):
        s = by_source.setdefault(r["source"], {"domain": r["domain"], "records": 0, "words": 0,
                                               "train": 0, "test": 0})
        s["records"] += 1
        s["words"] += count_words(r["text"])
        s[r["split"]] += 1
    out["sources"] = by_source
    out["domains"] = sorted({s["domain"] for s in by_source.values()})
    return out


def languages_with_data() -> list[str]:
    """Codes whose corpus file is present in the dataset folder."""
    root = data_dir() / "corpus"
    return [c for c in PAPER_LANGUAGES if (root / f"{c}.jsonl.gz").exists()]


def manifest() -> dict:
    """The dataset's MANIFEST.json (sources, versions, sha256, licences, counts)."""
    path = data_dir() / "MANIFEST.json"
    if not path.exists():
        raise DataNotFoundError(f"{path} is missing; rebuild with `babelspec data build`")
    return json.loads(path.read_text(encoding="utf-8"))


__all__ = [
    "SPLITS", "DataNotFoundError", "corpus_stats", "count_words", "data_dir", "manifest",
    "monolingual", "parallel", "parallel_records", "records", "languages_with_data",
]
