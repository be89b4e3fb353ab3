"""Shared pieces of the bf16 exactness tests (``test_exact_*.py``): the real default model in
bf16, 4-shot translation prompts from the bundled corpora (no corpora folder needed: a clone
without one checks the headline claim too), corpus bigrams of the paper's languages, torch's
thread count per test, and the skip where oneDNN's bf16 kernels are missing (an AVX2-only CPU,
where the plan says the path is not exact)."""

from __future__ import annotations

import pytest
from edge import OPTIONS

from babelspec.drafters import make_drafter
from babelspec.engine import generate
from babelspec.experiments.worker import task_prompts
from babelspec.forward.kernels import onednn_packs_bf16
from babelspec.models import DEFAULT_TARGET, load_model
from babelspec.sampling import SamplingConfig
from babelspec.target import Target

MARKS = [
    pytest.mark.skipif(not onednn_packs_bf16(), reason="bf16 products need oneDNN's packed kernels (AVX-512)"),
]
GREEDY = SamplingConfig(greedy=True)
NEW_TOKENS = 64


def load_bf16():
    """(model, tokenizer, target) of the default model in bf16."""
    model, tokenizer = load_model(DEFAULT_TARGET, dtype="bfloat16")
    return model, tokenizer, Target(model, tokenizer, options=OPTIONS)


def prompt_ids(tokenizer, lang: str, index: int = 0) -> list[int]:
    """The token ids of the ``index``-th 4-shot translation prompt of ``lang`` on the bundled
    corpus's test split."""
    return task_prompts("translation", lang, tokenizer, index + 1)[index].ids



def train_bigrams(folder, langs) -> dict:
    """A corpus bigram of each language's bundled training text (the target's tokenizer)."""
    from babelspec.data.corpus import monolingual
    from babelspec.models import load_tokenizer
    from babelspec.ngram import CountConfig, train

    tokenizer = load_tokenizer(DEFAULT_TARGET)
    out = {}
    for lang in langs:
        out[lang] = folder / f"{lang}.ngram"
        train(monolingual(lang, "train"), tokenizer, CountConfig(order=2)).save(out[lang])
    return out


def plain(target: Target, prompt: list[int], past_eos: bool = True) -> list[int]:
    """Plain greedy decoding's ``NEW_TOKENS`` tokens: past any end-of-sequence token, so that every
    one of them is compared whichever path the arithmetic takes, or (``past_eos=False``) up to it,
    as a server answers."""
    return generate(target, make_drafter("none", target), prompt, max_new_tokens=NEW_TOKENS, sampling=GREEDY,
                    eos_token_ids=() if past_eos else None).token_ids  # fmt: skip


def assert_drafters_decode_as_plain(target: Target, prompt: list[int], table) -> None:
    """64 new tokens after ``prompt``: the chain, the default tree and a recycling tree of the
    bigram ``table`` give plain greedy decoding's tokens, and keep drafts on the way."""
    expected = plain(target, prompt)
    assert len(expected) == NEW_TOKENS  # no stop: every token compared
    accepted = 0
    for options in ("tree=0", "", "tree=12,recycle=8"):
        spec = f"ngram:{table}" + (f",{options}" if options else "")
        out = generate(target, make_drafter(spec, target), prompt, gamma=4, max_new_tokens=NEW_TOKENS, sampling=GREEDY,
                       eos_token_ids=())  # fmt: skip
        assert out.token_ids == expected, spec
        accepted += out.accepted
    assert accepted > 0  # drafts were kept, so blocks longer than one row were compared
