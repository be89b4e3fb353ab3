"""The lean Gemma-3 forward gives Hugging Face's logits: bit for bit where the key sets agree,
through prefill, decode, verification blocks, crops and cache growth (in bf16 with its merges
off; with them on, the same distributions up to rare last-bit changes); and greedy decoding
through it equals decoding through Hugging Face's forward, on the real default model too."""

from __future__ import annotations

import pytest
import torch
from edge import OPTIONS
from tiny import UNPACKED, tiny_gemma3, tiny_qwen3
from transformers import DynamicCache

from babelspec.drafters import make_drafter
from babelspec.engine import generate
from babelspec.forward import ForwardOptions, lean_forward
from babelspec.forward.cache import LeanCache
from babelspec.forward.kernels import onednn_packs_bf16
from babelspec.lm import CausalLM
from babelspec.machine import cpu_flags
from babelspec.models import DEFAULT_TARGET
from babelspec.sampling import SamplingConfig
from babelspec.target import Target, load_target

# (tokens forwarded, tokens cropped after): prefill, decodes, verified blocks, rollbacks
SCHEDULE = [(5, 0), (1, 0), (4, 2), (1, 0), (3, 1), (9, 3), (1, 0), (1, 0), (6, 5), (2, 0), (1, 0)]


def _eager(model):
    model.set_attn_implementation("eager")
    return model


def _both(model, schedule, seed: int = 0, fuse: bool = True, glue: bool = True):
    """Logits of HF's forward and of the lean one over ``schedule``, pairwise; ``glue=False``
    keeps the torch operations between the products and bf16 attention (``ForwardOptions.native``)."""
    lean = lean_forward(model, options=ForwardOptions(fuse=fuse, native=glue))
    assert lean is not None
    lean.capacity = 4  # grow the buffers several times on the way
    lean_cache = lean.new_cache()
    hf_cache = DynamicCache(config=model.config)
    hf_cache.activate_past_recording()
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for n, crop in schedule:
        ids = torch.randint(0, model.config.vocab_size, (1, n), generator=g)
        with torch.inference_mode():
            pairs.append((model(input_ids=ids, cache=hf_cache, use_cache=True).logits[0], lean(ids, lean_cache)))
        if crop:
            hf_cache.crop(-crop)
            lean_cache.crop(-crop)
        assert lean_cache.get_seq_length() == hf_cache.get_seq_length()
    return pairs


def _mean_tv(pairs) -> float:
    """The mean over rows of the total-variation distance between the two softmaxes of a row."""
    tv = [0.5 * (a.float().softmax(-1) - b.float().softmax(-1)).abs().sum(-1) for a, b in pairs]
    return torch.cat(tv).mean().item()


def _max_tv(pairs) -> float:
    """The largest total-variation distance between the two softmaxes of a row."""
    return max(0.5 * (a.float().softmax(-1) - b.float().softmax(-1)).abs().sum(-1).max().item() for a, b in pairs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("seed", [0, 1])
def test_lean_logits_equal_hf_bit_for_bit(dtype, seed):
    model = _eager(tiny_gemma3(seed=seed, sliding_window=64)).to(dtype)
    for hf, lean in _both(model, SCHEDULE, seed, fuse=False):
        assert hf.dtype == lean.dtype and torch.equal(hf, lean)
    if dtype == torch.float32:  # float32 has no merges: the default forward is the same
        assert all(torch.equal(hf, lean) for hf, lean in _both(model, SCHEDULE, seed))
    else:  # bf16 merges: the same distributions, up to last-bit changes in a few shapes
        assert _max_tv(_both(model, SCHEDULE, seed)) < 0.05


def _merged_and_apart(model, schedule, seed: int = 0):
    """Logits of the lean forward with the q/k norm merge and without it, pairwise."""
    torch_ops = ForwardOptions(native=False)  # the torch operations on both sides: the merge alone
    merged, apart = lean_forward(model, options=torch_ops), lean_forward(model, options=torch_ops)
    assert all(layer.qk_norm is not None for layer in merged.layers)
    for layer in apart.layers:
        layer.qk_norm = None
    caches = merged.new_cache(), apart.new_cache()
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for n, crop in schedule:
        ids = torch.randint(0, model.config.vocab_size, (1, n), generator=g)
        pairs.append((merged(ids, caches[0]), apart(ids, caches[1])))
        for cache in caches:
            cache.crop(-crop)
    return pairs


@pytest.mark.parametrize("seed", [0, 1])
def test_bf16_queries_and_keys_normed_together_equal_normed_apart(seed):
    """The q/k norm and rotary merge of bf16 blocks changes no bit (unlike the product merges)."""
    model = _eager(tiny_gemma3(seed=seed, sliding_window=8)).to(torch.bfloat16)
    with torch.no_grad():  # norms start at scale 1: make q_norm's and k_norm's differ
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.normal_(0.0, 0.5)
    if not lean_forward(model).layers[0].qkv.fused:
        pytest.skip(UNPACKED)
    for merged, apart in _merged_and_apart(model, SCHEDULE + [(16, 0), (1, 0), (17, 0)], seed):
        assert torch.equal(merged, apart)
    float32 = lean_forward(_eager(tiny_gemma3(seed=seed)))
    assert all(layer.qk_norm is None for layer in float32.layers)  # float32 stacks no products


def test_lean_masks_the_sliding_window_as_hf_does():
    """A window shorter than the context: HF keeps only the window's keys, the lean cache keeps
    all and masks, so float32 sums differ in their last bits only."""
    model = _eager(tiny_gemma3(seed=2, sliding_window=4))
    for hf, lean in _both(model, SCHEDULE):
        torch.testing.assert_close(lean, hf, rtol=1e-5, atol=1e-5)


def test_lean_covers_eager_gemma3_only():
    assert lean_forward(tiny_gemma3()) is None  # SDPA attention: HF's forward
    assert lean_forward(_eager(tiny_qwen3())) is None  # another family
    assert lean_forward(_eager(tiny_gemma3()), "hf") is None
    with pytest.raises(ValueError, match="unknown forward 'fast'; use one of lean, hf"):
        lean_forward(_eager(tiny_gemma3()), "fast")


def test_the_forward_is_a_value_passed_in(monkeypatch):
    monkeypatch.setenv("BABELSPEC_FORWARD", "hf")  # read at the command line's edge only, never here
    assert CausalLM(_eager(tiny_gemma3())).lean is not None
    assert CausalLM(_eager(tiny_gemma3()), forward="hf").lean is None


def test_the_lean_cache_crops_only_backwards():
    cache = lean_forward(_eager(tiny_gemma3())).new_cache()
    with pytest.raises(ValueError, match="minus the number of tokens to remove"):
        cache.crop(3)


def _greedy(target, drafter_spec: str, prompt: list[int]) -> list[int]:
    drafter = make_drafter(drafter_spec, target)
    return generate(target, drafter, prompt, gamma=3, max_new_tokens=12,
                    sampling=SamplingConfig(greedy=True)).token_ids  # fmt: skip


@pytest.mark.parametrize("spec", ["none", "self:2"])
def test_greedy_through_the_lean_forward_equals_hf_forward(spec):
    model = _eager(tiny_gemma3(vocab=64, seed=3, layers=3, sliding_window=8))
    lean, hf = Target(model), Target(model, forward="hf")
    assert isinstance(lean.cache, LeanCache) and isinstance(hf.cache, DynamicCache)
    for prompt in ([1, 5, 9, 2], [7, 7, 3, 11, 40, 2, 9]):
        assert _greedy(lean, spec, prompt) == _greedy(hf, spec, prompt)


@pytest.fixture(scope="module")
def real_models():
    return {name: load_target(DEFAULT_TARGET, dtype=name, options=OPTIONS) for name in ("float32", "bfloat16")}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_default_model_runs_lean_with_hf_logits(real_models, dtype):
    target = real_models[dtype]
    assert target.lean is not None and isinstance(target.cache, LeanCache)
    schedule = [(40, 0), (1, 0), (5, 3), (1, 0), (9, 8), (1, 0)]
    for hf, lean in _both(target.model, schedule, fuse=dtype == "float32"):
        assert torch.equal(hf, lean)
    if dtype == "bfloat16":  # the exact path has its own arithmetic, row by row: as near float32 as HF's bf16
        reference = [hf for hf, _ in _both(real_models["float32"].model, schedule, fuse=False)]
        for glue in (True, False):
            pairs = _both(target.model, schedule, glue=glue)
            ours = _mean_tv([(ref, lean) for ref, (_, lean) in zip(reference, pairs)])
            theirs = _mean_tv([(ref, hf) for ref, (hf, _) in zip(reference, pairs)])
            assert ours < 1.25 * theirs + 0.01, (glue, ours, theirs)
        if onednn_packs_bf16():  # the merges stack packed products
            assert all(torch.equal(*pair) for pair in _merged_and_apart(target.model, schedule))


def test_the_exact_bf16_path_follows_float32_hugging_face_past_the_sliding_window(real_models):
    """An independent reference past the 512-token window: after 516 tokens, every row of the
    following blocks (a decode step, a verification of 6 cropped by 2, more steps) through the
    exact path, with the glue and without, is as near Hugging Face's float32 logits as Hugging
    Face's own bf16 forward is."""
    long = [(516, 0), (1, 0), (6, 2), (1, 0), (4, 0)]
    reference = [hf for hf, _ in _both(real_models["float32"].model, long, fuse=False)][1:]
    for glue in (True, False):
        pairs = _both(real_models["bfloat16"].model, long, glue=glue)[1:]  # the rows past 512
        ours = _mean_tv([(ref, lean) for ref, (_, lean) in zip(reference, pairs)])
        theirs = _mean_tv([(ref, hf) for ref, (hf, _) in zip(reference, pairs)])
        assert ours < 1.25 * theirs + 0.01, (glue, ours, theirs)


def test_bf16_weights_are_packed_once_and_multiply_as_f_linear_does():
    from babelspec.forward.kernels import Linear

    model = _eager(tiny_gemma3(seed=4)).to(torch.bfloat16)
    first, second = lean_forward(model), lean_forward(model)
    if first.layers[0].qkv.packed is None:
        pytest.skip(UNPACKED)
    assert first.layers[0].qkv.packed is second.layers[0].qkv.packed  # a drafter shares the target's
    weight = (torch.randn(48, 32) * 0.1).bfloat16()
    for shape in [(1, 32), (5, 32), (1, 7, 32)]:
        x = torch.randn(*shape).bfloat16()
        assert torch.equal(Linear(weight)(x), torch.nn.functional.linear(x, weight))
    assert Linear(weight.float()).packed is None  # float32 (the exact mode) keeps F.linear


def test_bf16_projections_stacked_into_one_product_split_into_each_product():
    from babelspec.forward.kernels import MERGE_MAX_TOKENS, Linears

    weights = [(torch.randn(n, 32) * 0.1).bfloat16() for n in (48, 16, 16)]  # q, k, v
    stacked = Linears(weights)
    if not stacked.fused:
        pytest.skip(UNPACKED)
    for shape in [(1, 32), (5, 32), (1, 7, 32), (1, MERGE_MAX_TOKENS + 1, 32)]:
        x = torch.randn(*shape).bfloat16()
        outs = stacked(x)
        assert [o.shape[-1] for o in outs] == [48, 16, 16]
        for o, w in zip(outs, weights):
            torch.testing.assert_close(o, torch.nn.functional.linear(x, w), rtol=1e-2, atol=1e-2)
        if shape[-2] > MERGE_MAX_TOKENS:  # a prefill: Hugging Face's products themselves
            assert all(torch.equal(o, torch.nn.functional.linear(x, w)) for o, w in zip(outs, weights))
    assert not Linears(weights, fuse=False).fused  # Hugging Face's structure, on request
    assert not Linears([w.float() for w in weights]).fused  # float32: MKL rounds by shape


def test_one_row_padding_follows_the_probe():
    """A one-row product is padded exactly where the probe finds single rows rounding otherwise,
    and a padded row is the first row of the block of the row twice."""
    from babelspec.forward.kernels import Linear, _packed_product, one_row_differs

    g = torch.Generator().manual_seed(5)
    weight = (torch.randn(640, 2048, generator=g) * 0.05).bfloat16()
    product = Linear(weight, pad_row=True)
    if product.packed is None:
        pytest.skip(UNPACKED)
    assert product.pad_row == one_row_differs(product.packed, (640, 2048))
    assert not Linear(weight).pad_row  # only where asked (the fast mode's blocks)
    x = torch.randn(1, 1, 2048, generator=g).bfloat16()
    assert torch.equal(_packed_product(x, product.packed, pad_row=True), _packed_product(torch.cat([x, x], 1), product.packed, False)[:, :1])
    # a second random sample agrees with the probe's verdict
    rows = (torch.randn(1, 16, 2048, generator=g) * 3).bfloat16()
    block = _packed_product(rows, product.packed, False)[0]
    alone = any(not torch.equal(_packed_product(rows[:, i : i + 1], product.packed, False)[0, 0], block[i]) for i in range(16))
    assert not alone or product.pad_row


@pytest.mark.skipif("avx512_bf16" not in cpu_flags() or "amx_bf16" in cpu_flags(),
                    reason="row invariance measured on CPUs with AVX-512 BF16 and no AMX (Zen 4) only")  # fmt: skip
def test_bf16_verification_rows_equal_decode_rows_on_the_default_model(real_models):
    """In the fast mode a drafted position's logits in a verification block are the logits a
    one-token decode step gives, bit for bit, so greedy speculative output is greedy plain output."""
    target = real_models["bfloat16"]
    g = torch.Generator().manual_seed(1)
    for length in (30, 100):
        prompt = torch.randint(1000, 50000, (length,), generator=g).tolist()
        block = torch.randint(1000, 50000, (9,), generator=g).tolist()
        target.prefill(prompt)
        decoded = [target.forward([token])[0] for token in block]
        target.crop_or_replay(length)
        for n in (2, 5, 9):
            logits = target.forward(block[:n])
            target.crop_or_replay(length)
            assert all(torch.equal(logits[i], decoded[i]) for i in range(n)), (length, n)


def test_the_merge_limit_is_an_option_of_one_forward():
    """A forward built with another merge limit merges only blocks that short; another forward
    over the same weights keeps the default (an option, not a module global)."""
    model = _eager(tiny_gemma3(seed=2)).to(torch.bfloat16)
    short, default = lean_forward(model, options=ForwardOptions(merge_max_tokens=2)), lean_forward(model)
    if not default.layers[0].qkv.fused:
        pytest.skip(UNPACKED)
    rows = torch.zeros(1, 3, model.config.hidden_size, dtype=torch.bfloat16)
    assert not short.layers[0].qkv.merges(rows) and default.layers[0].qkv.merges(rows)
    assert short.layers[0].qkv.merges(rows[:, :2])
    with pytest.raises(ValueError, match="merge_max_tokens must be a positive whole number"):
        ForwardOptions(merge_max_tokens=0)
