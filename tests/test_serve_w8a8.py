"""`babelspec serve --precision w8a8` on the real default model: concurrent requests share the
W8A8 target's forwards (batched) and each gets the tokens that the same target gives alone."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from serve_helpers import Server

from babelspec.forward.quantize import w8a8_available

pytestmark = pytest.mark.skipif(not w8a8_available(), reason="this torch has no oneDNN qlinear_pointwise")

PROMPTS = ["Ẹ kú àárọ̀, báwo ni", "The weather is nice today and", "እያንዳንዱ ሰው የዘር የቀለም"]


def test_concurrent_greedy_completions_on_a_w8a8_target_equal_its_own_decoding(tmp_path):
    from babelspec.drafters import make_drafter
    from babelspec.engine import generate
    from babelspec.models import DEFAULT_TARGET
    from babelspec.sampling import SamplingConfig
    from babelspec.target import load_target

    server = Server("--target", DEFAULT_TARGET, "--precision", "w8a8", "--batch", "4", log=tmp_path / "serve.log")
    try:
        target = load_target(DEFAULT_TARGET, precision="w8a8")
        expected = [generate(target, make_drafter("none", target), target.tokenizer(p).input_ids, max_new_tokens=16,
                             sampling=SamplingConfig(greedy=True)).token_ids for p in PROMPTS]  # fmt: skip
        client = server.wait().client()

        def complete(prompt: str) -> list[int]:
            r = client.completions.create(model=DEFAULT_TARGET, prompt=prompt, max_tokens=16, temperature=0)
            return r.model_extra["babelspec"]["token_ids"]

        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            got = list(pool.map(complete, PROMPTS))
        assert got == expected
        assert server.health()["status"] == "ok"
    finally:
        server.close()
