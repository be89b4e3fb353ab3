"""llama.cpp's own server reads babelspec's exported n-gram cache: with it as the static cache
(``--spec-type ngram-cache --lookup-cache-static FILE``), llama-server drafts more and has more
drafts accepted, by its own counters, than with no static cache (its ``ngram-cache`` also drafts
from the context, so the comparison is against that, on one greedy prompt)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from serve_helpers import post

from babelspec.bench.processes import serving
from babelspec.models import DEFAULT_TARGET, load_tokenizer
from babelspec.models.llamacpp import gguf_for
from babelspec.ngram import CountConfig, train
from babelspec.ngram.llamacpp import export_llamacpp

pytestmark = pytest.mark.peers
SERVER = Path(sys.prefix) / "bin" / "llama-server"
# A story opening: the model's greedy continuation is not in the prompt, so the context alone
# drafts nothing here (on a translation prompt the 270M model repeats the prompt, which the
# context cache drafts already)
PROMPT = "Once upon a time, in a small village by the river, there lived an old fisherman who"


def _complete(gguf: Path, static: Path | None) -> dict:
    """One greedy completion of PROMPT by a fresh llama-server (stopped after)."""
    args = [str(SERVER), "-m", str(gguf), "--host", "127.0.0.1", "-t", "2", "-c", "1024", "-np", "1",
            "--spec-type", "ngram-cache"]  # fmt: skip
    if static is not None:
        args += ["--lookup-cache-static", str(static)]
    with serving(args, "llama-server") as port:
        body = json.dumps({"prompt": PROMPT, "n_predict": 48, "temperature": 0, "cache_prompt": False}).encode()
        status, answer, _ = post(f"http://127.0.0.1:{port}/completion", body)
        assert status == 200, answer
        return answer


@pytest.mark.skipif(not SERVER.exists(), reason="llama-server is built by `make test-peers`")
def test_llama_server_drafts_from_babelspecs_exported_cache(tmp_path):
    gguf = gguf_for(DEFAULT_TARGET, tmp_path)
    plain = _complete(gguf, None)
    continuation = plain["content"]
    assert len(continuation.split()) >= 5 and continuation.strip() not in PROMPT
    # a trigram counted on the model's own continuation, in the target's token ids
    table = train([continuation], load_tokenizer(DEFAULT_TARGET), CountConfig(order=3))
    static = tmp_path / "yor.lookup"
    assert export_llamacpp(table, static)["contexts"] > 0
    cached = _complete(gguf, static)
    before, after = plain["timings"], cached["timings"]
    assert after.get("draft_n", 0) > before.get("draft_n", 0)
    assert after.get("draft_n_accepted", 0) > before.get("draft_n_accepted", 0)
