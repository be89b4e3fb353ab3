"""On the real default model, babelspec greedy equals Hugging Face ``generate`` greedy, token for
token, with no drafter and with each of the models drafters (the full set of >= 20 prompts
over the 11 languages is ``babelspec bench equivalence``, which also measures each drafter's
cost ratio c: speed is a benchmark's business, not a test's)."""

from __future__ import annotations

import pytest

from babelspec.data.corpus import monolingual
from babelspec.models import DEFAULT_TARGET, load_target
from babelspec.models.peers import PromptItem, equivalence


@pytest.fixture(scope="module")
def target():
    return load_target(DEFAULT_TARGET, dtype="float32")  # the exact mode


def _prompts(target, langs=("amh", "npi", "yor")) -> list[PromptItem]:
    items = []
    for lang in langs:
        text = " ".join(monolingual(lang, "test")[0].split()[:10])
        items.append(PromptItem(lang, target.tokenizer(text)["input_ids"], text))
    return items


def test_greedy_matches_hf_generate_for_every_drafter(target) -> None:
    report = equivalence(target, _prompts(target), ["none", "self:9", "head", "self:12@"],
                         max_new_tokens=8, gamma=3)
    assert report.compared == 12
    assert report.mismatches == []


def test_the_bf16_fast_mode_is_exact_too() -> None:
    """Eager attention makes a verification forward round like one-token decoding, so greedy
    speculative output equals greedy plain and HF greedy output in bf16 as well."""
    fast = load_target(DEFAULT_TARGET, dtype="bfloat16")
    report = equivalence(fast, _prompts(fast), ["none", "self:12@"], max_new_tokens=8, gamma=4)
    assert report.execution["mode"] == "fast" and report.attention == "eager"
    assert report.mismatches == [] and report.agreement_with_plain == 1.0
