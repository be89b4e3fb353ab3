"""Where a language's text comes from: source strings of a run's ``[data]`` section.

A source is ``FORMAT:PATH@SPLIT`` (``sib200:sib200@test``, ``ntrex:ntrex``,
``text:hornmt/data/amh.txt``) or ``bundled@SPLIT`` (the committed dataset). A relative PATH is
resolved against the data root (``--data-root``); the language is the section's. Parallel
sources (translation prompts, few-shot examples) give English-aligned records; any source gives
monolingual text (n-gram counting, distillation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from babelspec.data import corpus
from babelspec.data.languages import get_language
from babelspec.data.loaders import (
    FORMATS,
    LAYOUT_SPLITS,
    LAYOUTS,
    DataFormatError,
    load_corpus,
    load_flores_pairs,
    load_layout_pairs,
    load_tatoeba_pairs,
)
from babelspec.errors import UserError

PARALLEL_FORMATS = ("bundled", "flores", "tatoeba", *LAYOUTS)


@dataclass(frozen=True)
class Source:
    format: str  # one of loaders.FORMATS
    path: str  # "" for bundled; as written (relative to the data root) otherwise
    split: str  # the split asked for; "" where the format has none

    def __str__(self) -> str:
        head = "bundled" if self.format == "bundled" else f"{self.format}:{self.path}"
        return f"{head}@{self.split}" if self.split else head

    def resolve(self, root: str | Path | None) -> Source:
        """The same source with its path made absolute against ``root``."""
        if self.format == "bundled" or Path(self.path).is_absolute():
            return self
        if not root:
            raise DataFormatError(
                f"source {self} has a relative path but no data root was given; pass --data-root "
                f"(the corpora folder it is relative to) or write an absolute path"
            )
        return Source(self.format, str((Path(root) / self.path).resolve()), self.split)

    def same_text(self, other: Source) -> bool:
        """True when both name the same file(s) and split: the same sentences."""
        return (self.format, self.path.rstrip("/"), self.split) == (other.format, other.path.rstrip("/"), other.split)


_SOURCE = re.compile(r"^(?P<fmt>[a-z][a-z0-9-]*)(?::(?P<path>[^@]+))?(?:@(?P<split>[a-z]+))?$")


def parse_source(text: str) -> Source:
    """A source string as a :class:`Source`; ValueError saying the accepted forms."""
    m = _SOURCE.match(str(text).strip())
    forms = "bundled@train, bundled@test, FORMAT:PATH or FORMAT:PATH@SPLIT"
    if not m or m["fmt"] not in FORMATS:
        raise UserError(f"source {text!r}: expected {forms} with FORMAT one of {', '.join(FORMATS)}")
    fmt, path, split = m["fmt"], m["path"] or "", m["split"] or ""
    if fmt == "bundled":
        if path:
            raise UserError(f"source {text!r}: the bundled dataset takes no path; write bundled@{split or 'train'}")
        split = split or "train"
        if split not in corpus.SPLITS:
            raise UserError(f"source {text!r}: the bundled splits are {', '.join(corpus.SPLITS)}")
    elif not path:
        raise UserError(f"source {text!r}: {fmt} needs a path, {fmt}:PATH")
    if fmt in LAYOUTS:
        splits = LAYOUT_SPLITS[fmt]
        split = split or ("all" if "all" in splits else "")
        if split not in splits:
            raise UserError(f"source {text!r}: {fmt} splits are {', '.join(splits)}; write {fmt}:{path}@SPLIT")
    if fmt == "flores":
        split = split or "devtest"
        if split not in ("dev", "devtest"):
            raise UserError(f"source {text!r}: FLORES splits are dev and devtest")
    return Source(fmt, path, split)


def parallel_records(source: Source, lang: str) -> list[dict]:
    """English-aligned records ``{"en", "text", "source", "domain", "sent"}`` of a resolved source."""
    code = get_language(lang).code
    if source.format == "bundled":
        return corpus.parallel_records(code, source.split)
    if source.format in LAYOUTS:
        return load_layout_pairs(source.format, source.path, code, source.split)
    if source.format == "flores":
        pairs = load_flores_pairs(source.path, code, source.split)
        domain = "FLORES"
    elif source.format == "tatoeba":
        pairs = load_tatoeba_pairs(source.path)
        domain = "Tatoeba"
    else:
        raise DataFormatError(
            f"source {source}: {source.format} holds no English side; translation prompts and "
            f"few-shot examples need one of {', '.join(PARALLEL_FORMATS)}"
        )
    return [{"en": en, "text": t, "source": source.format, "domain": domain, "sent": True} for en, t in pairs]


def monolingual_texts(source: Source, lang: str) -> list[str]:
    """Target-language texts of a resolved source."""
    code = get_language(lang).code
    if source.format == "bundled":
        return corpus.monolingual(code, source.split)
    return load_corpus(f"{source.format}:{source.path}", lang=code, split=source.split or "train")


BUNDLED_DOMAIN = "bundled: software UI strings, UDHR, CLDR names"


def domain(fmt: str) -> str:
    """What text a source format holds, for the reports."""
    from babelspec.data.loaders import LAYOUT_DOMAINS

    return BUNDLED_DOMAIN if fmt == "bundled" else LAYOUT_DOMAINS.get(fmt, f"{fmt} file")


def _key(text: str) -> str:
    return " ".join(text.split()).casefold()


def without(texts: list[str], held_out: list[str]) -> tuple[list[str], int]:
    """``texts`` minus any that equal (whitespace and case aside) a held-out text, and how many went."""
    banned = {_key(t) for t in held_out}
    kept = [t for t in texts if _key(t) not in banned]
    return kept, len(texts) - len(kept)


def training_texts(sources: list[Source], lang: str, test: Source | None) -> tuple[list[str], int]:
    """A language's monolingual texts from resolved ``sources``, each once, without any that is a
    sentence of its ``test`` source (None: nothing held out); and how many were dropped as test
    sentences. What an n-gram of the language counts, in a run and in the benches."""
    texts = [t for source in sources for t in monolingual_texts(source, lang)]
    dropped = 0
    if test is not None:
        texts, dropped = without(texts, [r["text"] for r in parallel_records(test, lang)])
    return list(dict.fromkeys(texts)), dropped


def real_training_texts(lang: str, root: str | Path) -> list[str]:
    """A language's monolingual real sets under the corpora folder ``root``, each text once and
    never one of its test sentences: what ``ngram train --corpus LANG`` counts for a language the
    bundled dataset does not hold. Sets not unpacked under ``root`` are left out."""
    from babelspec.data.real import real_data

    language = get_language(lang)
    entry = real_data(language.code, root)
    if entry is None:
        raise corpus.DataNotFoundError(f"no real sets of {language.name} ({language.code}) under {root}: it needs SIB-200 "
                                f"unpacked there as sib200/ (docs/study.md, \"Real sentences\")")  # fmt: skip
    # the sets the folder holds (SIB-200 at least; NTREX-128 and OLDI Seed where unpacked)
    sources = [s for s in (parse_source(m).resolve(str(root)) for m in entry.monolingual) if Path(s.path).is_dir()]
    texts, _ = training_texts(sources, language.code, parse_source(entry.test).resolve(str(root)))
    if not texts:
        raise corpus.DataNotFoundError(f"{root} holds no text of {language.name} ({language.code}) in its real sets "
                                f"({', '.join(entry.monolingual)})")  # fmt: skip
    return texts


__all__ = ["PARALLEL_FORMATS", "Source", "monolingual_texts", "parallel_records", "parse_source", "real_training_texts",
           "training_texts", "without"]


def provenance(config: dict) -> dict[str, dict]:
    """Per language of a run's config (as stored, ``ExperimentConfig.to_dict()``): which text the
    test prompts, the few-shot examples and each prepared drafter setting came from, with sizes.

    ``{lang: {"test": {"source", "sentences", "words"}, "shots": {...},
    "settings": {name: {"sources": [...], "texts", "words"}}}}``; a source that cannot be read
    (the data root moved) is reported with ``"error"`` instead of sizes.
    """
    from babelspec.data.corpus import count_words

    data = config.get("data") or {}
    root, tables = data.get("root", ""), data.get("languages", {})
    out: dict[str, dict] = {}

    def sized(sources: list[str], lang: str, parallel: bool, held_out: list[str] = ()) -> dict:
        entry: dict = {"sources": sources, "domains": [domain(parse_source(s).format) for s in sources]}
        try:
            texts: list[str] = []
            for s in sources:
                src = parse_source(s).resolve(root)
                texts += [r["text"] for r in parallel_records(src, lang)] if parallel else monolingual_texts(src, lang)
        except (ValueError, OSError) as exc:
            return {**entry, "error": str(exc)}
        texts = without(list(dict.fromkeys(texts)), list(held_out))[0]  # as the preparer trains
        return {**entry, "sentences": len(texts), "words": sum(count_words(t) for t in texts), "texts": texts}

    for lang in config.get("languages", []):
        table = tables.get(lang, {})
        test = table.get("test", "bundled@test")
        row = {"test": sized([test], lang, True), "shots": sized([table.get("shots", "bundled@train")], lang, True),
               "settings": {}}
        held_out = row["test"].pop("texts", []) if lang in tables else []
        row["shots"].pop("texts", None)
        for d in config.get("drafters", []):
            if d.get("kind") != "ngram" or (d.get("languages") and lang not in d["languages"]):
                continue  # distillation reads the bundled corpus (babelspec.distill.data)
            corpus_opt = d.get("options", {}).get("corpus", "data")
            sources = ["bundled@train"] if corpus_opt == "bundled" else table.get("monolingual", ["bundled@train"])
            entry = sized(list(sources), lang, False, held_out)
            entry.pop("texts", None)
            row["settings"][d["name"]] = entry
        out[lang] = row
    return out
