"""Exact in bf16, on the real default model and real prompts: every row of a verification chain,
a token tree, a prefill chunk or a batched slot is ``torch.equal`` to the same row computed by a
one-token step after the same cache, so speculative greedy output is plain greedy output, through
``generate`` and through ``babelspec serve`` with concurrent requests, in every language of the
paper that has FLORES-200 text. (The tiny float32 models of the other tests cannot show this:
float32 products there hide the rounding that bf16 exposes.)"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from serve_helpers import Server

from babelspec.bench.exact import PAPER_FLORES, chain_grid, flores_prompts, prefill_chunks, tree_grid
from babelspec.data.real import corpora_root
from babelspec.drafters import make_drafter
from babelspec.engine import generate
from babelspec.forward import ForwardOptions
from babelspec.forward.kernels import onednn_packs_bf16
from babelspec.machine import EXACT_BF16, execution_plan
from babelspec.models import DEFAULT_TARGET, load_model
from babelspec.sampling import SamplingConfig
from babelspec.target import Target

ROOT = corpora_root(None)
pytestmark = [
    pytest.mark.skipif(ROOT is None, reason="the real corpora (BABELSPEC_CORPORA or ../shared/corpora) are not here"),
    pytest.mark.skipif(not onednn_packs_bf16(), reason="bf16 products need oneDNN's packed kernels (AVX-512)"),
]
GREEDY = SamplingConfig(greedy=True)
NEW_TOKENS = 64


@pytest.fixture(scope="module")
def bf16():
    model, tokenizer = load_model(DEFAULT_TARGET, dtype="bfloat16")
    return model, tokenizer, Target(model, tokenizer)


@pytest.fixture(scope="module")
def long_prompt(bf16):
    """Three 4-shot FLORES-200 prompts end to end: past the 512-token sliding window."""
    ids = bf16[1]("".join(flores_prompts(ROOT, lang, bf16[1])[0] for lang in ("amh", "yor", "npi"))).input_ids
    assert len(ids) > 560
    return ids


def test_the_target_records_that_its_bf16_rows_are_invariant(bf16):
    target = bf16[2]
    assert target.lean is not None and target.lean.exact
    assert execution_plan(target)["exact"] == EXACT_BF16


def test_every_row_of_every_chain_equals_its_one_token_step(bf16, long_prompt):
    """Contexts from 3 tokens to past the sliding window, times blocks of 1-16 tokens."""
    grid = chain_grid(bf16[2].lean, long_prompt, (3, 24, 130, 297, 505, 530))
    assert grid["cells"] == 6 * 16
    assert grid["differ"] == 0, grid["differing"]


def test_every_node_of_a_token_tree_equals_the_steps_along_its_path(bf16, long_prompt):
    grid = tree_grid(bf16[2].lean, long_prompt, (7, 297, 530))
    assert grid["cells"] == 3 * 16 and grid["differ"] == 0, grid["differing"]


def test_a_prompt_prefilled_in_chunks_caches_and_continues_as_prefilled_whole(bf16, long_prompt):
    """Whole against 2 and 3 chunks: the cached keys and values and the next rows' logits."""
    result = prefill_chunks(bf16[2].lean, long_prompt, (297, 540))
    assert result["cells"] == 6 and result["differ"] == 0, result["differing"]


@pytest.fixture(scope="module")
def bigrams(tmp_path_factory):
    """A corpus bigram of each language's bundled training text (the target's tokenizer)."""
    from babelspec.data.corpus import monolingual
    from babelspec.models import load_tokenizer
    from babelspec.ngram import CountConfig, train

    folder = tmp_path_factory.mktemp("exact")
    tokenizer = load_tokenizer(DEFAULT_TARGET)
    out = {}
    for lang in PAPER_FLORES:
        out[lang] = folder / f"{lang}.ngram"
        train(monolingual(lang, "train"), tokenizer, CountConfig(order=2)).save(out[lang])
    return out


@pytest.mark.parametrize("lang", PAPER_FLORES)
def test_speculative_greedy_equals_plain_greedy_on_a_flores_prompt(bf16, bigrams, lang):
    """64 new tokens after a 4-shot FLORES-200 prompt: the chain, the default tree and a
    recycling tree give plain greedy decoding's tokens."""
    target = bf16[2]
    prompt = bf16[1](flores_prompts(ROOT, lang, bf16[1], seed=1)[0]).input_ids
    plain = generate(target, make_drafter("none", target), prompt, max_new_tokens=NEW_TOKENS, sampling=GREEDY)
    assert len(plain.token_ids) == NEW_TOKENS  # no stop: every token compared
    accepted = 0
    for options in ("tree=0", "", "tree=12,recycle=8"):
        spec = f"ngram:{bigrams[lang]}" + (f",{options}" if options else "")
        out = generate(target, make_drafter(spec, target), prompt, gamma=4, max_new_tokens=NEW_TOKENS, sampling=GREEDY)
        assert out.token_ids == plain.token_ids, spec
        accepted += out.accepted
    assert accepted > 0  # drafts were kept, so blocks longer than one row were compared


def test_the_server_with_4_concurrent_requests_answers_plain_greedy_tokens(bf16, bigrams, tmp_path):
    """`babelspec serve` drafting with a bigram chain and a bigram tree, 4 requests at once
    sharing the target's forwards: each request's tokens are plain greedy decoding's."""
    target = bf16[2]
    langs = ("amh", "yor", "npi", "zgh")
    prompts = [flores_prompts(ROOT, lang, bf16[1], seed=2)[0] for lang in langs]
    expected = [generate(target, make_drafter("none", target), bf16[1](p).input_ids, max_new_tokens=NEW_TOKENS,
                         sampling=GREEDY).token_ids for p in prompts]  # fmt: skip
    server = Server("--target", DEFAULT_TARGET, "--batch", "4", "--drafter", f"chain=ngram:{bigrams['amh']},tree=0",
                    "--drafter", f"tree=ngram:{bigrams['yor']}", log=tmp_path / "serve.log")  # fmt: skip
    try:
        client = server.wait().client()

        def complete(args: tuple[str, str]) -> list[int]:
            prompt, drafter = args
            r = client.completions.create(model=DEFAULT_TARGET, prompt=prompt, max_tokens=NEW_TOKENS, temperature=0,
                                          extra_body={"drafter": drafter})  # fmt: skip
            return r.model_extra["babelspec"]["token_ids"]

        jobs = list(zip(prompts, ["chain", "tree", "chain", "tree"]))
        with ThreadPoolExecutor(len(jobs)) as pool:
            got = list(pool.map(complete, jobs))
        assert got == expected
    finally:
        server.close()


def test_a_bf16_block_is_exact_in_torch_operations_too(bf16, long_prompt):
    """Without the C glue (``native=False``) the exact path keeps the property: attention row by
    row in torch operations with a decode step's shapes."""
    lean = Target(bf16[0], bf16[1], options=ForwardOptions(native=False)).lean
    assert lean.exact and lean.glue is None
    grid = chain_grid(lean, long_prompt, (297,), max_block=8)
    assert grid["differ"] == 0, grid["differing"]
