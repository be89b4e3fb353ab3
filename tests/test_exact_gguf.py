"""The gguf target mode, the default of the real default model on a CPU: every
product and the output head on the packaged GGUF's own blocks. Exact as the bf16 target is: every
row of a verification chain, a token tree or a prefill chunk is ``torch.equal`` to its one-token
step after the same cache, at 1, 2 and 3 threads, and speculative greedy decoding gives plain
greedy decoding's tokens. Long prompts come from the bundled corpora (no corpora folder needed)."""

from __future__ import annotations

import pytest
import torch
from edge import OPTIONS
from exact_real import NEW_TOKENS, plain
from serve_helpers import Server, completions_at_once

from babelspec.bench.agreement import teacher_forced_agreement
from babelspec.bench.exact import chain_grid, prefill_chunks, tree_grid
from babelspec.data import LANGUAGES
from babelspec.data.corpus import monolingual
from babelspec.drafters import make_drafter
from babelspec.drafters.stackhead import StackHeadDrafter
from babelspec.drafters.vocabhead import restricted_drafter
from babelspec.engine import generate
from babelspec.errors import UserError
from babelspec.experiments.divergence import language_divergence
from babelspec.forward.qmm import QProduct
from babelspec.machine import EXACT_BF16, execution_plan
from babelspec.models import DEFAULT_TARGET
from babelspec.ngram import CountConfig, train
from babelspec.sampling import SamplingConfig
from babelspec.target import load_target


@pytest.fixture(scope="module")
def gguf():
    target = load_target(DEFAULT_TARGET, options=OPTIONS)  # make test-glue-off: without the C glue
    assert target.precision == "gguf"  # the default mode of a GGUF model on a CPU
    return target


@pytest.fixture(scope="module")
def long_prompt(gguf):
    """Amharic, Yoruba and Nepali training text end to end: past the 512-token sliding window."""
    text = "\n".join(line for lang in ("amh", "yor", "npi") for line in monolingual(lang)[:12])
    ids = gguf.tokenizer(text)["input_ids"][:600]
    assert len(ids) == 600
    return ids


def test_the_plan_says_the_products_run_on_the_files_blocks(gguf):
    plan = execution_plan(gguf)
    assert plan["precision"] == "gguf" and plan["weights"] == "gguf" and plan["exact"] == EXACT_BF16
    # a decode step's layers run in C, two calls a layer (the grids below hold its rows to a block's)
    assert plan["row_steps"] == ("block" if OPTIONS.native is False else "c")
    layer = gguf.lean.layers[0]
    assert all(isinstance(p, QProduct) for p in (layer.qkv, layer.o, layer.gate_up, layer.down, gguf.lean.logits_of.project))
    assert [w.kind for w in layer.qkv.parts] == ["Q5_0", "Q5_0", "Q8_0"] and layer.o.parts[0].kind == "Q4_K"


@pytest.mark.parametrize("threads", [1, 2, 3], indirect=True)
def test_every_row_of_every_chain_equals_its_one_token_step(gguf, long_prompt, threads):
    """A one-token step runs each layer in two C calls, a block the glued layers: equal rows."""
    grid = chain_grid(gguf.lean, long_prompt, (3, 297, 530), max_block=12)
    assert grid["cells"] == 3 * 12 and grid["differ"] == 0, grid["differing"]


@pytest.mark.parametrize("threads", [1, 3], indirect=True)
def test_trees_and_prefill_chunks_are_exact(gguf, long_prompt, threads):
    tree = tree_grid(gguf.lean, long_prompt, (297,))
    assert tree["cells"] == 16 and tree["differ"] == 0, tree["differing"]
    chunks = prefill_chunks(gguf.lean, long_prompt, (297, 540))
    assert chunks["cells"] == 6 and chunks["differ"] == 0, chunks["differing"]


@pytest.mark.parametrize("threads", [2, 3], indirect=True)
def test_speculative_greedy_is_plain_greedy(gguf, tmp_path, threads):
    """The bigram's chain and tree on an Amharic and a Nepali prompt: 64 tokens each."""
    for lang in ("amh", "npi"):
        table = tmp_path / f"{lang}.ngram"
        train(monolingual(lang), gguf.tokenizer, CountConfig(order=2)).save(table)
        prompt = gguf.tokenizer(f"English: The rain stopped at noon.\n{LANGUAGES[lang].name}:")["input_ids"]
        expected = plain(gguf, prompt)
        assert len(expected) == NEW_TOKENS
        for spec in (f"ngram:{table},tree=0", f"ngram:{table}"):
            out = generate(gguf, make_drafter(spec, gguf), prompt, gamma=4, max_new_tokens=NEW_TOKENS,
                           sampling=SamplingConfig(greedy=True), eos_token_ids=())  # fmt: skip
            assert out.token_ids == expected, (lang, spec)
            assert out.accepted > 0


@pytest.mark.parametrize("threads", [2, 3], indirect=True)
def test_the_gguf_self_drafter_drafts_from_the_targets_own_steps_and_decodes_as_plain(gguf, threads):
    """``gguf:LANG``: the target's own one-token steps on the target's own cache, under the
    language's restricted head on the file's rows. The rows verification judges are the target's
    one-token steps bit for bit, and greedy speculation gives plain greedy decoding's tokens in
    Amharic and Nepali; the drafter reads the target's hidden states, so most drafts are kept."""
    drafter = make_drafter("gguf:amh", gguf)
    assert isinstance(drafter, StackHeadDrafter)
    # its head's rows are the file's too: the language's tokens get the target's logits bit for bit
    hidden = torch.randn(1, 3, gguf.lean.body.config.hidden_size, generator=torch.Generator().manual_seed(0)).bfloat16()
    head = drafter.head
    assert torch.equal(head.base_product(hidden), gguf.lean.logits_of.project.stacked(hidden)[..., head.base_ids])
    prompt = gguf.tokenizer("English: The rain stopped at noon.\nAmharic:")["input_ids"]
    # one proposal's rows against the one-token steps of the same tokens after the same cache
    gguf.prefill(prompt[:-1])
    drafter.start(prompt, SamplingConfig(greedy=False, top_k=100, seed=1), torch.Generator().manual_seed(1))
    draft = drafter.propose(4)
    judged = gguf.head_logits(draft.hidden)
    gguf.prefill(prompt[:-1])
    steps = [gguf.forward([t])[0] for t in [prompt[-1]] + draft.tokens.tolist()]
    assert len(steps) == 5 and all(torch.equal(judged[i], steps[i]) for i in range(5))
    for lang in ("amh", "npi"):
        prompt = gguf.tokenizer(f"English: The rain stopped at noon.\n{LANGUAGES[lang].name}:")["input_ids"]
        expected = plain(gguf, prompt)
        out = generate(gguf, make_drafter(f"gguf:{lang}", gguf), prompt, gamma=4, max_new_tokens=NEW_TOKENS,
                       sampling=SamplingConfig(greedy=True), eos_token_ids=())  # fmt: skip
        assert out.token_ids == expected, lang
        assert out.accepted / out.proposed > 0.6, (lang, out.accepted, out.proposed)


def test_the_gguf_self_drafter_of_its_own_cache_shares_the_targets_blocks(gguf):
    """With a cache of its own (``own_steps=False``, and ``gguf:K@LANG``'s first K layers) the
    drafter runs the target's own layer products (the same objects: no copy of a weight), and
    greedy speculation gives plain greedy decoding's tokens."""
    drafter = restricted_drafter(gguf, k=None, lang="amh", name="gguf:amh", quantize="gguf", own_steps=False)
    mine, theirs = drafter.lm.impl.layers, gguf.lean.layers
    assert all(a.gate_up is b.gate_up and a.qkv is b.qkv for a, b in zip(mine, theirs))
    prompt = gguf.tokenizer("English: The rain stopped at noon.\nAmharic:")["input_ids"]
    out = generate(gguf, drafter, prompt, gamma=4, max_new_tokens=NEW_TOKENS, sampling=SamplingConfig(greedy=True),
                   eos_token_ids=())  # fmt: skip
    assert out.token_ids == plain(gguf, prompt)
    shallow = make_drafter("gguf:9@amh", gguf)
    assert len(shallow.lm.impl.layers) == 9 and shallow.lm.impl.layers[8].down is theirs[8].down


def test_the_gguf_self_drafter_needs_a_gguf_target():
    bf16 = load_target("gemma-3-270m", dtype="bfloat16")
    with pytest.raises(UserError, match="needs a target in the gguf mode"):
        make_drafter("gguf:amh", bf16)


@pytest.mark.extended  # the mode's quality, not its exactness (make test-extended)
def test_the_files_model_follows_the_float_model_as_closely_as_bf16(gguf, long_prompt):
    """Teacher-forced top-1 agreement with the float32 forward over 200 tokens of real text: the
    file's model with int8 rows, near the bf16 rounding of it."""
    reference = load_target("gemma-3-270m", dtype="float32")
    bf16 = load_target("gemma-3-270m", dtype="bfloat16")
    ids, tokens = long_prompt[:100], long_prompt[100:300]
    of_gguf = teacher_forced_agreement(reference, gguf, ids, tokens)
    of_bf16 = teacher_forced_agreement(reference, bf16, ids, tokens)
    assert of_gguf >= 0.85 and of_gguf >= of_bf16 - 0.06, (of_gguf, of_bf16)  # 0.90 against 0.93 without the glue


def test_the_server_on_the_default_mode_answers_plain_greedy_tokens(gguf, tmp_path):
    """``babelspec serve`` as it starts by default (the gguf mode), 3 requests at once sharing
    its forwards, one drafting with a bigram tree and one with the target's own steps under
    Nepali's head (``gguf:npi``): each gets plain greedy decoding's tokens."""
    table = tmp_path / "npi.ngram"
    train(monolingual("npi"), gguf.tokenizer, CountConfig(order=2)).save(table)
    texts = ("The rain stopped at noon.", "We walked home.", "The market opens at dawn.")
    prompts = [gguf.tokenizer(f"English: {text}\nNepali:")["input_ids"] for text in texts]
    expected = [plain(gguf, p, past_eos=False) for p in prompts]
    server = Server("--target", DEFAULT_TARGET, "--batch", "3", "--threads", "3", "--drafter", "plain=none", "--drafter", f"npi=ngram:{table}", "--drafter", "self=gguf:npi",
                    log=tmp_path / "serve.log")  # fmt: skip
    try:
        client = server.wait().client()
        got = completions_at_once(client, DEFAULT_TARGET, list(zip(prompts, ("npi", "plain", "self"))), NEW_TOKENS)
        assert got == expected
    finally:
        server.close()


def test_the_divergence_of_the_self_drafter_on_the_targets_steps(gguf):
    """The study's divergence measurement drives a drafter outside the engine's loop; the drafter
    on the target's own steps then has the target's cache cropped to its pending token after each
    proposal, as verification would: every position is judged, and its distribution is close to
    the target's (the target's own hidden states under the language's rows)."""
    drafter = make_drafter("gguf:amh", gguf)
    result = language_divergence(gguf, drafter, monolingual("amh")[:2], SamplingConfig(greedy=False, top_k=100, top_p=0.9),
                                 "amh", "gguf", max_tokens=24)  # fmt: skip
    assert result.n_tokens == 48 and result.covered == 1.0
    assert result.expected_alpha > 0.6, result
