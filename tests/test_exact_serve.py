"""`babelspec serve` in bf16 (``--dtype bfloat16``, whatever auto picks on this CPU; the gguf
default: ``test_exact_gguf.py``) on the real default model, 4 requests at once sharing the target's
forwards, each drafting with its language's bigram (a chain, the default tree, a recycling tree):
each request's tokens are plain greedy decoding's, bit for bit: the server at 2 threads, the
reference in this process at 1. The bf16 mode is an option beside the gguf default, whose server
test runs in ``make test``; this one is ``make test-extended`` (its engine-level exactness grid,
``test_exact_bf16.py``, stays in ``make test``)."""

from __future__ import annotations

import pytest
from exact_real import MARKS, NEW_TOKENS, load_bf16, plain, prompt_ids, train_bigrams
from serve_helpers import Server, completions_at_once

from babelspec.models import DEFAULT_TARGET

pytestmark = [*MARKS, pytest.mark.extended]
LANGS = ("amh", "yor", "npi", "zgh")


def test_the_server_with_4_concurrent_requests_answers_plain_greedy_tokens(tmp_path):
    _, tokenizer, target = load_bf16()
    bigrams = train_bigrams(tmp_path, LANGS)
    prompts = [prompt_ids(tokenizer, lang, index=2) for lang in LANGS]  # sent as token ids
    expected = [plain(target, p, past_eos=False) for p in prompts]  # the server stops at EOS
    offers = {"amh": f"ngram:{bigrams['amh']},tree=0", "yor": f"ngram:{bigrams['yor']}",
              "npi": f"ngram:{bigrams['npi']},tree=12,recycle=8", "zgh": f"ngram:{bigrams['zgh']},tree=0"}  # fmt: skip
    args = [a for lang, spec in offers.items() for a in ("--drafter", f"{lang}={spec}")]
    server = Server("--target", DEFAULT_TARGET, "--dtype", "bfloat16", "--batch", "4", "--threads", "2", *args, log=tmp_path / "serve.log")
    try:
        client = server.wait().client()
        got = completions_at_once(client, DEFAULT_TARGET, list(zip(prompts, LANGS)), NEW_TOKENS)
        assert got == expected
    finally:
        server.close()
