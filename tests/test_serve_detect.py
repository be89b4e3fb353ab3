"""The server's language detection: the task prompts of a language come out as that language,
though a few-shot translation prompt is mostly English."""

import pytest

from babelspec.data.langid import OutputChecker, detect_language
from babelspec.data.tasks import get_task
from babelspec.models import load_tokenizer


@pytest.fixture(scope="module")
def classifier():
    return OutputChecker.from_corpora([], use_langid=False).classifier


@pytest.mark.parametrize("lang", ["amh", "npi", "yor"])
def test_task_prompts_are_detected_as_their_language(classifier, lang):
    tokenizer = load_tokenizer("gemma-3-270m")
    for task in ("translation", "story"):
        for p in get_task(task).prompts(lang, tokenizer, 2):
            assert detect_language(classifier, p.text) == lang


def test_english_stays_english(classifier):
    assert detect_language(classifier, "Write a short story about a fox.\nIt should be funny.") == "eng"
    assert detect_language(classifier, "   ") is None
