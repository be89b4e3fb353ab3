"""Output checks, as the paper made them: is a text in the requested language, is it looping?

* script check: the share of a text's letters that lie in the language's script (the language
  table's ISO 15924 code, as Unicode's script property);
* a character 1-3-gram naive-Bayes classifier trained on the bundled monolingual corpora, and on
  SIB-200's train split for every other language asked for when a corpora folder is at hand
  (hashed counts, one NumPy gather per text);
* where ``py3langid`` is installed and covers the language (am, ne, oc, qu), its choice too;
* a repetition loop: the repeated word n-gram ratio 1 - distinct / total.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import numpy as np

# Unicode script values of the ISO 15924 codes that are not one (Chinese, Japanese, Korean text).
_SCRIPT_VALUES: dict[str, tuple[str, ...]] = {
    "Hans": ("Han",), "Hant": ("Han",), "Jpan": ("Han", "Hiragana", "Katakana"), "Kore": ("Hangul", "Han"),
    "Hang": ("Hangul", "Han"),
}
# py3langid's ISO 639-1 codes for the languages it covers.
LANGID_CODES: dict[str, str] = {"amh": "am", "npi": "ne", "oci": "oc", "que": "qu", "eng": "en"}

_WORD_SPLIT = re.compile(r"[\s\u1361\u1362\u1363\u1364.,;:!?\"()\[\]«»“”]+")


def _codepoints(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


def _letters(cp: np.ndarray) -> np.ndarray:
    # Letters of any script: ASCII letters and everything above Latin-1 punctuation, minus
    # general punctuation, symbols and emoji blocks (what a language check should ignore).
    ascii_letter = ((cp >= 0x41) & (cp <= 0x5A)) | ((cp >= 0x61) & (cp <= 0x7A))
    high = cp >= 0xC0
    ignored = (
        ((cp >= 0x2000) & (cp <= 0x2BFF)) | ((cp >= 0x3000) & (cp <= 0x303F))
        | (cp >= 0x1F000) | (cp == 0xD7) | (cp == 0xF7) | ((cp >= 0xFE00) & (cp <= 0xFE0F))
        | (cp == 0x1361) | (cp == 0x1362) | (cp == 0x1363) | (cp == 0x1364)
    )  # fmt: skip
    return (ascii_letter | high) & ~ignored


@cache
def _script_pattern(script: str):
    import regex

    values = _SCRIPT_VALUES.get(script, (script,))
    # combining marks (Yoruba's tones, Devanagari's vowel signs) inherit the script of their letter
    return regex.compile("|".join(rf"\p{{Script={v}}}" for v in values) + r"|\p{Script=Inherited}|’")


def script_score(text: str, lang: str) -> float:
    """Share of the text's letters written in the language's script; 0 for no letters."""
    from babelspec.data.languages import get_language

    cp = _codepoints(text)
    letters = _letters(cp)
    n = int(letters.sum())
    if n == 0:
        return 0.0
    script = "Latn" if lang == "eng" else get_language(lang).script
    pattern = _script_pattern(script)
    inside = np.fromiter((pattern.match(ch) is not None for ch in text), bool, len(text))
    return float((inside & letters).sum() / n)


def repeated_ngram_ratio(text: str, n: int = 4) -> float:
    """1 - distinct/total word n-grams (characters when the text has too few words).

    Natural text scores near 0; a generation stuck in a loop approaches 1.
    """
    units: list[str] = [w for w in _WORD_SPLIT.split(text) if w]
    if len(units) < 2 * n:  # scripts written without spaces, or very short outputs
        units = [ch for ch in text if not ch.isspace()]
        n = 3 * n
    total = len(units) - n + 1
    if total <= 1:
        return 0.0
    grams = {tuple(units[i : i + n]) for i in range(total)}
    return 1.0 - len(grams) / total


class CharNgramClassifier:
    """Multinomial naive Bayes over hashed character 1..3-grams of each language's corpus."""

    def __init__(self, order: int = 3, buckets: int = 1 << 18) -> None:
        self.order = order
        self.buckets = buckets
        self.languages: list[str] = []
        self.log_probs: np.ndarray | None = None  # [L, buckets]

    def _hashes(self, text: str) -> np.ndarray:
        cp = _codepoints(" " + text.lower() + " ").astype(np.uint64)
        parts = [cp % self.buckets]
        h = cp.copy()
        for k in range(1, self.order):
            if len(cp) <= k:
                break
            h = h[:-1] * np.uint64(1_000_003) + cp[k:]  # rolling hash of the (k+1)-grams
            parts.append((h + np.uint64(k)) % np.uint64(self.buckets))
        return np.concatenate(parts).astype(np.int64)

    def fit(self, texts_by_language: dict[str, list[str]]) -> CharNgramClassifier:
        langs = [lang for lang, texts in texts_by_language.items() if texts]
        counts = np.ones((len(langs), self.buckets), dtype=np.float32)  # add-one smoothing
        for i, lang in enumerate(langs):
            h = self._hashes("\n".join(texts_by_language[lang]))
            counts[i] += np.bincount(h, minlength=self.buckets)
        self.languages = langs
        self.log_probs = (np.log(counts) - np.log(counts.sum(axis=1, keepdims=True))).astype(
            np.float32
        )
        return self

    def scores(self, text: str) -> dict[str, float]:
        assert self.log_probs is not None, "fit() first"
        s = self.log_probs[:, self._hashes(text)].sum(axis=1)
        return dict(zip(self.languages, s.tolist()))

    def predict(self, text: str) -> str:
        if not text.strip() or self.log_probs is None:
            return ""
        s = self.log_probs[:, self._hashes(text)].sum(axis=1)
        return self.languages[int(np.argmax(s))]


@dataclass
class CheckResult:
    in_language: bool
    language_score: float
    classifier_language: str
    langid_language: str
    loop_ratio: float
    looped: bool


@lru_cache(maxsize=1)
def _langid():
    try:
        import py3langid  # type: ignore

        return py3langid
    except ImportError:
        return None


def langid_language(text: str, lang: str) -> str:
    """py3langid's choice (ISO 639-1) where it covers ``lang`` and is installed, else ''."""
    module = _langid()
    if module is None or lang not in LANGID_CODES or not text.strip():
        return ""
    return str(module.classify(text)[0])


def corpus_texts(lang: str, split: str = "train", max_chars: int = 400_000, root: Any = None) -> list[str]:
    """Up to ``max_chars`` of the bundled monolingual corpus of ``lang``; for a language the bundled
    data does not hold, SIB-200's ``split`` under the corpora folder ``root`` (empty if neither)."""
    from babelspec.data import corpus  # type: ignore
    from babelspec.data.languages import get_language

    if get_language(lang).bundled:
        items = corpus.monolingual(lang, split)
    elif root is not None:
        from babelspec.data.loaders import load_layout

        items = load_layout("sib200", root, lang, split)
    else:
        return []
    texts, total = [], 0
    for item in items:
        text = item if isinstance(item, str) else str(getattr(item, "text", item))
        texts.append(text)
        total += len(text)
        if total >= max_chars:
            break
    return texts


def english_texts(max_chars: int = 400_000) -> list[str]:
    """The English side of the bundled parallel train splits (empty if none)."""
    from babelspec.data import corpus  # type: ignore
    from babelspec.data.languages import PAPER_LANGUAGES

    texts, total = [], 0
    for lang in PAPER_LANGUAGES:
        try:
            pairs = corpus.parallel(lang, "train")
        except Exception:  # noqa: BLE001
            continue
        for en, _ in pairs[:2000]:
            texts.append(en)
            total += len(en)
        if total >= max_chars:
            break
    return list(dict.fromkeys(texts))


class OutputChecker:
    """Checks generated texts; ``classifier`` may be None (script check only)."""

    def __init__(
        self,
        classifier: CharNgramClassifier | None,
        loop_ngram: int = 4,
        loop_threshold: float = 0.5,
        min_language_score: float = 0.5,
        use_langid: bool = True,
    ) -> None:
        self.classifier = classifier
        self.loop_ngram = loop_ngram
        self.loop_threshold = loop_threshold
        self.min_language_score = min_language_score
        self.use_langid = use_langid

    @classmethod
    def from_corpora(cls, languages: list[str], root: Any = None, **kwargs) -> OutputChecker:
        """Train the classifier on every bundled language (not only the requested ones), and on
        the requested languages the bundled data lacks from SIB-200 under the corpora folder
        (``root``, else ``$BABELSPEC_CORPORA``) where there is one."""
        from babelspec.data.languages import PAPER_LANGUAGES, get_language
        from babelspec.data.real import corpora_root

        if any(not get_language(lang).bundled for lang in languages):
            root = corpora_root(root)
        texts = {}
        for lang in dict.fromkeys([*PAPER_LANGUAGES, *(get_language(x).code for x in languages)]):
            try:
                texts[lang] = corpus_texts(lang, root=root)
            except Exception:  # noqa: BLE001 - a language with no text here is left out
                texts[lang] = []
        # English too (the English side of the parallel data): a base model drifting into
        # English is the most common way to leave the requested language.
        texts["eng"] = english_texts()
        classifier = CharNgramClassifier().fit(texts) if any(texts.values()) else None
        return cls(classifier, **kwargs)

    def check(self, text: str, lang: str) -> CheckResult:
        score = script_score(text, lang)
        predicted = self.classifier.predict(text) if self.classifier else ""
        known = self.classifier is not None and lang in self.classifier.languages
        in_language = score >= self.min_language_score and (not known or predicted == lang)
        ratio = repeated_ngram_ratio(text, self.loop_ngram)
        return CheckResult(
            in_language=bool(in_language),
            language_score=score,
            classifier_language=predicted,
            langid_language=langid_language(text, lang) if self.use_langid else "",
            loop_ratio=ratio,
            looped=ratio >= self.loop_threshold,
        )


MIN_LINE_CHARS = 8  # shorter lines (labels, numbers) are not classified
MIN_SHARE = 0.1  # of the classified characters, for a language beside English to be the request's


def detect_language(classifier: Any, text: str) -> str | None:
    """The language of a request: line by line, the language other than English with the most
    characters, if it has ``MIN_SHARE`` of them; else English.

    A few-shot translation prompt is mostly English (instructions, source sentences), so the
    whole text classifies as English for 8 of the 11 languages' translation prompts; by
    lines, the task prompts of 10 of 11 (2 per task; haw reads as grn) come out right."""
    if classifier is None or not text.strip():
        return None
    chars: dict[str, int] = {}
    for line in text.splitlines():
        line = line.strip()
        if len(line) >= MIN_LINE_CHARS:
            lang = classifier.predict(line)
            chars[lang] = chars.get(lang, 0) + len(line)
    if not chars:
        return classifier.predict(text) or None
    other = max((lang for lang in chars if lang != "eng"), key=chars.get, default=None)
    if other is not None and chars[other] >= MIN_SHARE * sum(chars.values()):
        return other
    return "eng" if "eng" in chars else other
