"""`babelspec serve --precision w8a8` on the real default model: concurrent requests share the
W8A8 target's forwards (batched) and each gets the tokens that the same server's target gives it
alone. (The engine's own W8A8 decoding is checked against speculation in test_target_w8a8.py.)"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from serve_helpers import Server

from babelspec.forward.quantize import w8a8_available

pytestmark = pytest.mark.skipif(not w8a8_available(), reason="this torch has no oneDNN qlinear_pointwise")

PROMPTS = ["Ẹ kú àárọ̀, báwo ni", "The weather is nice today and", "እያንዳንዱ ሰው የዘር የቀለም"]


def test_concurrent_greedy_completions_on_a_w8a8_target_equal_its_own_decoding(tmp_path):
    from babelspec.models import DEFAULT_TARGET

    server = Server("--target", DEFAULT_TARGET, "--precision", "w8a8", "--batch", "4", log=tmp_path / "serve.log")
    try:
        client = server.wait().client()

        def complete(prompt: str) -> list[int]:
            r = client.completions.create(model=DEFAULT_TARGET, prompt=prompt, max_tokens=16, temperature=0)
            return r.model_extra["babelspec"]["token_ids"]

        alone = [complete(p) for p in PROMPTS]  # one request at a time: nothing shares its forwards
        assert all(len(ids) == 16 for ids in alone) and len({tuple(ids) for ids in alone}) == len(PROMPTS)
        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            got = list(pool.map(complete, PROMPTS))
        assert got == alone
        assert server.health()["status"] == "ok"
    finally:
        server.close()
