"""Languages, corpora and tasks: the 11 languages' bundled data, the user's own data, prompts."""

from babelspec.data.corpus import corpus_stats, monolingual, parallel
from babelspec.data.languages import LANGUAGES, Language, UnknownLanguageError, get_language
from babelspec.data.loaders import DataFormatError, load_corpus
from babelspec.data.tasks import Prompt, Task, get_task, register_task

__all__ = [
    "LANGUAGES", "DataFormatError", "Language", "Prompt", "Task", "UnknownLanguageError", "corpus_stats",
    "get_language", "get_task", "load_corpus", "monolingual", "parallel", "register_task",
]
