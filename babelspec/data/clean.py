"""Cleaning and parsing of the raw sources: UDHR HTML, gettext catalogs, Mozilla langpacks.

Pure functions over text, so the tests can check them on small inputs they write.
"""

from __future__ import annotations

import html
import re
import unicodedata
from html.parser import HTMLParser

# --- UI strings -------------------------------------------------------------------------------

# Product names that UI strings reference through a variable; substituting the name keeps the
# sentence instead of dropping it.
_PRODUCT_NAMES = {
    "%PRODUCTNAME": "LibreOffice",
    "{ -brand-short-name }": "Firefox",
    "{ -brand-shorter-name }": "Firefox",
    "{ -brand-full-name }": "Mozilla Firefox",
    "{ -brand-product-name }": "Firefox",
    "{ -vendor-short-name }": "Mozilla",
    "{ -app-name }": "Thunderbird",
    "&brandShortName;": "Firefox",
    "&brandFullName;": "Mozilla Firefox",
}

# Anything that stands for text filled in at run time: printf (%s, %1$s, %(name)s, %MOD1),
# Qt/LibreOffice ($1, $(ARG1)), Fluent/Python/ICU ({ $x }, {0}, {name}), shell-like ${x},
# Mozilla #1 plural slots, XML entities (&foo;) and HTML/XML tags.
PLACEHOLDER_RE = re.compile(
    r"%(\d+\$)?[-+ #0]*\d*(\.\d+)?(hh|h|ll|l|L|z|j|t|I64|I32)?[diouxXeEfFgGaAcsSpn@]"
    r"|%\([^)]*\)[a-zA-Z]"
    r"|%[A-Z][A-Z0-9_]+%?"
    r"|%\d+"
    r"|\$\(?[A-Za-z0-9_]+\)?"
    r"|\{[^{}]*\}"
    r"|#\d"
    r"|&[A-Za-z][A-Za-z0-9._-]*;"
    r"|</?[A-Za-z][^<>]*>"
)

_ACCEL_TILDE = re.compile(r"~(?=\w)")
_ACCEL_UNDERSCORE = re.compile(r"(?<![\w_])_(?=\w)")
_ACCEL_AMP = re.compile(r"&(?=\w)(?![A-Za-z][A-Za-z0-9._-]*;)")
# Accelerator written as a bracketed key after a translation, e.g. "ፋይል (_F)" or "Fichièr(&F)".
_ACCEL_BRACKET = re.compile(r"\s*\((?:_|&|~)\w\)")
_WS = re.compile(r"\s+")
# Standard HTML entities are text (&amp; is "&"); other entities (&brandShortName;) are variables.
_HTML_ENTITY = re.compile(r"&(amp|lt|gt|quot|apos|nbsp|#\d+|#x[0-9a-fA-F]+);")


def strip_accelerators(text: str) -> str:
    """Remove keyboard-accelerator marks: ``~File``, ``_File``, ``&File``, ``Fichièr (_F)``."""
    text = _ACCEL_BRACKET.sub("", text)
    text = _ACCEL_TILDE.sub("", text)
    text = _ACCEL_UNDERSCORE.sub("", text)
    text = _ACCEL_AMP.sub("", text)
    return text


def collapse_ws(text: str) -> str:
    return _WS.sub(" ", text).strip()


def has_placeholder(text: str) -> bool:
    return PLACEHOLDER_RE.search(text) is not None


def clean_ui_string(text: str) -> str | None:
    """One UI string made into plain text, or None when it is not usable as text.

    Substitutes product-name variables, strips accelerator marks, drops strings that still hold
    placeholders or markup (they are templates, not text), collapses whitespace.
    """
    if not text:
        return None
    text = text.replace("\\n", " ").replace("\\t", " ")
    for var, name in _PRODUCT_NAMES.items():
        text = text.replace(var, name)
    text = _HTML_ENTITY.sub(lambda m: html.unescape(m.group(0)), text)
    text = strip_accelerators(text)
    if has_placeholder(text):
        return None
    text = unicodedata.normalize("NFC", collapse_ws(text))
    if not any(ch.isalpha() for ch in text):
        return None
    if len(text) > 1000 or "://" in text or text.startswith(("-", "--")):
        return None
    return text


_SENTENCE_END = (".", "!", "?", "…")


def is_sentence_like(english: str) -> bool:
    """The English side reads as a sentence: ≥ 5 words, ends in . ! ? (DATA_SOURCES.md)."""
    return len(english.split()) >= 5 and english.rstrip().endswith(_SENTENCE_END)


def clean_pair(english: str, target: str) -> tuple[str, str] | None:
    """A cleaned (english, target) UI pair, or None (placeholders, untranslated, empty)."""
    en = clean_ui_string(english)
    tgt = clean_ui_string(target)
    if en is None or tgt is None:
        return None
    if en.casefold() == tgt.casefold():  # untranslated, or a name that is not text of the language
        return None
    return en, tgt


# --- UDHR -------------------------------------------------------------------------------------


class _UDHRParser(HTMLParser):
    """Collects the paragraphs of each section: the preamble (``<header>``) and every article."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: dict[str, list[str]] = {}
        self._section: str | None = None
        self._buf: list[str] | None = None
        self._title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "header":
            self._section = "preamble"
        elif tag == "article":
            self._section = f"article-{dict(attrs).get('data-number', len(self.sections))}"
        elif tag in ("p", "li") and self._section is not None:
            self._buf = []
        elif tag in ("h1", "h2", "h3", "h4"):
            self._title = True

    def handle_endtag(self, tag: str) -> None:
        if tag in ("p", "li") and self._buf is not None:
            text = collapse_ws("".join(self._buf))
            if text and self._section is not None:
                self.sections.setdefault(self._section, []).append(text)
            self._buf = None
        elif tag in ("header", "article"):
            self._section = None
        elif tag in ("h1", "h2", "h3", "h4"):
            self._title = False

    def handle_data(self, data: str) -> None:
        if self._buf is not None and not self._title:
            self._buf.append(data)


def parse_udhr_html(text: str) -> dict[str, list[str]]:
    """Paragraphs per section (``preamble``, ``article-1`` … ``article-30``) of a UDHR page."""
    parser = _UDHRParser()
    parser.feed(text)
    parser.close()
    return {k: [unicodedata.normalize("NFC", p) for p in v] for k, v in parser.sections.items()}


def align_udhr(english: dict[str, list[str]], target: dict[str, list[str]]) -> list[tuple[str, str]]:
    """Paragraph-aligned pairs; a section whose paragraph counts differ becomes one joined pair."""
    pairs: list[tuple[str, str]] = []
    for section, en_pars in english.items():
        tgt_pars = target.get(section)
        if not tgt_pars:
            continue
        if len(en_pars) == len(tgt_pars):
            pairs.extend(zip(en_pars, tgt_pars))
        else:
            pairs.append((" ".join(en_pars), " ".join(tgt_pars)))
    return pairs


# --- Mozilla langpacks ------------------------------------------------------------------------

# Fluent attributes that hold text; others (.accesskey, .style, .key …) do not.
_FTL_TEXT_ATTRS = {"label", "title", "value", "placeholder", "tooltiptext", "aria-label", "alt",
                   "message", "heading", "description", "aria-description", "text"}


def parse_ftl(text: str) -> dict[str, str]:
    """Message and text-attribute values of a Fluent file, keyed ``id`` and ``id.attr``.

    A simple reader: values that contain selectors or variables survive here as ``{ … }`` and are
    dropped later by :func:`clean_ui_string`.
    """
    out: dict[str, str] = {}
    key: str | None = None
    msg_id: str | None = None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            if not line.strip():
                continue
            key = None if not line.startswith(" ") else key
            continue
        if not line[0].isspace():
            m = re.match(r"^(-?[A-Za-z][\w-]*)\s*=\s?(.*)$", line)
            if m is None:
                key = msg_id = None
                continue
            msg_id = m.group(1)
            key = None if msg_id.startswith("-") else msg_id  # terms are not UI text
            if key is not None:
                out[key] = m.group(2).strip()
            continue
        stripped = line.strip()
        attr = re.match(r"^\.([\w-]+)\s*=\s?(.*)$", stripped)
        if attr is not None and msg_id is not None and not msg_id.startswith("-"):
            name = attr.group(1)
            key = f"{msg_id}.{name}" if name in _FTL_TEXT_ATTRS else None
            if key is not None:
                out[key] = attr.group(2).strip()
        elif key is not None:
            out[key] = (out[key] + " " + stripped).strip()
    return {k: v for k, v in out.items() if v}


def parse_properties(text: str) -> dict[str, str]:
    """``key = value`` lines of a Java-style .properties file (Mozilla's older string format)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"^([^=:\s]+)\s*[=:]\s*(.*)$", line)
        if m is None:
            continue
        value = m.group(2)
        if value.endswith(("accesskey", "commandkey")):
            continue
        key = m.group(1)
        if key.endswith((".accesskey", ".commandkey", ".key", ".accessKey")):
            continue
        value = re.sub(r"\\u([0-9a-fA-F]{4})", lambda g: chr(int(g.group(1), 16)), value)
        out[key] = value
    return out


# --- normalisation for duplicate detection -----------------------------------------------------

_NON_LETTER = re.compile(r"[\W\d_]+", re.UNICODE)


def norm_key(text: str) -> str:
    """Case-, punctuation-, digit- and space-insensitive key: exact duplicates up to trivia."""
    return _NON_LETTER.sub("", unicodedata.normalize("NFKC", text).casefold())
