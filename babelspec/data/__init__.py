"""Languages, corpora and tasks: every FLORES-200 language, the 11 paper languages' bundled data, the user's own data, prompts."""

from babelspec.data.corpus import corpus_stats, monolingual, parallel
from babelspec.data.languages import (
    FLORES_LANGUAGES,
    LANGUAGES,
    PAPER_LANGUAGES,
    Language,
    UnknownLanguageError,
    get_language,
)
from babelspec.data.loaders import DataFormatError, load_corpus
from babelspec.data.tasks import Prompt, Task, get_task, register_task

__all__ = [
    "FLORES_LANGUAGES", "LANGUAGES", "PAPER_LANGUAGES", "DataFormatError", "Language", "Prompt", "Task", "UnknownLanguageError", "corpus_stats",
    "get_language", "get_task", "load_corpus", "monolingual", "parallel", "register_task",
]
