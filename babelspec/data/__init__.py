"""Languages, corpora and tasks: the 11 languages' bundled data, the user's own data, prompts."""

from babelspec.data.corpus import corpus_stats, monolingual, parallel
from babelspec.data.languages import LANGUAGES, Language, UnknownLanguageError, get_language

__all__ = [
    "LANGUAGES", "Language", "UnknownLanguageError", "corpus_stats", "get_language", "monolingual",
    "parallel",
]
