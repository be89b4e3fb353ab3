"""On the real default model, babelspec greedy equals Hugging Face ``generate`` greedy, token for
token, with no drafter and with each of the models drafters (the full set of >= 20 prompts
over the 11 languages is ``babelspec bench equivalence``, which also measures each drafter's
cost ratio c: speed is a benchmark's business, not a test's)."""

from __future__ import annotations

import pytest
from edge import OPTIONS

from babelspec.bench.peers import PromptItem, equivalence
from babelspec.data.corpus import monolingual
from babelspec.models import DEFAULT_TARGET
from babelspec.target import load_target


@pytest.fixture(scope="module")
def target():
    return load_target(DEFAULT_TARGET, dtype="float32")  # the exact mode


def _prompts(target, langs=("amh", "npi", "yor")) -> list[PromptItem]:
    items = []
    for lang in langs:
        text = " ".join(monolingual(lang, "test")[0].split()[:10])
        items.append(PromptItem(lang, target.tokenizer(text)["input_ids"], text))
    return items


@pytest.mark.extended  # about a minute: make test-extended (and make test-glue-off) run it
def test_greedy_matches_hf_generate_for_every_drafter(target) -> None:
    report = equivalence(target, _prompts(target), ["none", "self:9", "head", "self:12@", "bigram@"],
                         max_new_tokens=8, gamma=3)
    assert report.compared == 15
    assert report.mismatches == []


def test_the_bf16_target_reports_its_agreement_and_its_exact_mode() -> None:
    """bf16 on the lean forward is exact against its own plain decoding (rows invariant); against
    Hugging Face's greedy output, its agreement is measured and reported with its dtype and
    attention."""
    target = load_target(DEFAULT_TARGET, dtype="bfloat16", options=OPTIONS)
    report = equivalence(target, _prompts(target)[:2], ["none", "self:12@"], max_new_tokens=6, gamma=4).to_dict()
    assert report["execution"]["dtype"] == "bfloat16" and report["execution"]["mode"] == "exact"
    assert report["agreement_with_plain"] == 1.0
    assert report["attention"] == "eager" and report["compared"] == 4 and report["plain_compared"] == 2
    assert 0.0 <= report["agreement_rate"] <= 1.0 and 0.0 <= report["agreement_with_plain"] <= 1.0
