"""``load_target(precision="w8a8")``: a lower-precision target mode, int8 weights and int8
activations (``lean.quantize_w8a8``). It is another model than the bf16 one, close to it; the
engine stays lossless with respect to it: its block rows are its decode rows, greedy speculation
equals its plain greedy decoding, samples follow its own distribution, and requests batched as the
server batches them get the tokens they get alone."""

from __future__ import annotations

import pytest
import torch
from batch_helpers import alone, batched
from stats import LeanModel, chi_square_pvalue, exact_pair_distribution, sampled_pairs
from tiny import ScriptedDrafter, tiny_gemma3, tiny_qwen3

from babelspec.bench.agreement import greedy_agreement, teacher_forced_agreement
from babelspec.drafters import make_drafter
from babelspec.engine import generate
from babelspec.forward.quantize import W8A8Linear, w8a8_activation_levels, w8a8_available
from babelspec.forward.w8a8 import quantize_w8a8
from babelspec.machine import describe, execution_info
from babelspec.sampling import SamplingConfig
from babelspec.target import PRECISIONS, Target, calibration_texts, load_target

pytestmark = [pytest.mark.extended, pytest.mark.skipif(not w8a8_available(), reason="this torch has no oneDNN qlinear_pointwise")]


def _w8a8_target(vocab: int = 64, layers: int = 3, seed: int = 0, keep: tuple[str, ...] = ("down",)) -> Target:
    model = tiny_gemma3(vocab=vocab, layers=layers, sliding_window=4, seed=seed).to(torch.bfloat16)
    model.set_attn_implementation("eager")
    target = Target(model)
    calibration = torch.arange(1, vocab).view(1, -1) % vocab
    quantize_w8a8(target.lean, lambda: target.lean.forward(calibration, target.lean.new_cache()), keep=keep)
    target.reset()
    return target


def test_w8a8_integer_sums_are_exact_at_the_activation_range_it_chose() -> None:
    """The probed activation range never overflows oneDNN's sums on this CPU: products of the
    largest operands, and of random ones, equal the integer product computed exactly."""
    levels = w8a8_activation_levels()
    assert levels in (63, 127)
    g = torch.Generator().manual_seed(0)
    weight = torch.randint(-127, 128, (32, 256), generator=g, dtype=torch.int8)
    weight[0] = 127
    x = torch.randint(-levels, levels + 1, (5, 256), generator=g)
    x[0] = levels
    packed = torch.ops.onednn.qlinear_prepack(weight, [1, 256])
    out = torch.ops.onednn.qlinear_pointwise((x + levels + 1).to(torch.uint8), 1.0, levels + 1, packed,
                                             torch.ones(32), torch.zeros(32, dtype=torch.long), None, 1.0, 0,
                                             torch.float32, "none", [], "")  # fmt: skip
    assert torch.equal(out.double(), (x.long() @ weight.long().T).double())


def test_w8a8_product_is_close_to_the_float_product_and_its_rows_do_not_depend_on_the_block() -> None:
    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(48, 32, generator=g).bfloat16(), torch.randn(16, 32, generator=g).bfloat16()]
    x = torch.randn(1, 9, 32, generator=g)
    x[..., 3] *= 30  # an outlier channel, as activations carry: smoothing moves it into the weights
    x = x.bfloat16()
    product = W8A8Linear(weights, x.float().abs().amax((0, 1)), alpha=0.5)
    first, second = product(x)
    out = torch.cat([first, second], -1).float()
    expected = x.float() @ torch.cat(weights).float().T
    assert out.dtype == torch.float32 and first.shape == (1, 9, 48) and second.shape == (1, 9, 16)
    assert float((out - expected).norm() / expected.norm()) < 0.03
    assert not torch.equal(out, expected)  # int8: another product, close to the float one
    for i in range(9):  # exact integer sums under per-row scales: a row alone gets the same bits
        assert torch.equal(product.stacked(x[:, i : i + 1])[0, 0], product.stacked(x)[0, i])


def test_a_w8a8_targets_block_rows_equal_its_decode_rows() -> None:
    target = _w8a8_target()
    lean = target.lean
    assert all(not isinstance(layer.down, W8A8Linear) and isinstance(layer.qkv, W8A8Linear) for layer in lean.layers)
    assert isinstance(lean.logits_of.project, W8A8Linear) and lean.quantize == "w8a8"
    ids = [5, 9, 2, 7, 11, 3, 8]
    block = lean.forward(torch.tensor([ids]), lean.new_cache())
    cache = lean.new_cache()
    lean.forward(torch.tensor([ids[:3]]), cache)
    rows = [lean.forward(torch.tensor([[t]]), cache)[0] for t in ids[3:]]
    assert all(torch.equal(block[3 + i], row) for i, row in enumerate(rows))
    bf16 = Target(target.model)  # the model it was made from
    assert not torch.equal(bf16.forward(ids), target.forward(ids))


def test_greedy_speculation_on_a_w8a8_target_equals_its_plain_greedy_decoding() -> None:
    target = _w8a8_target()
    greedy = SamplingConfig(greedy=True)
    prompt = [1, 7, 3, 9, 4]
    plain = generate(target, make_drafter("none", target), prompt, max_new_tokens=24, sampling=greedy).token_ids
    for gamma, spoil in ((1, 0), (4, 3), (6, 2)):
        result = generate(target, ScriptedDrafter(plain, 64, spoil_every=spoil), prompt, gamma=gamma,
                          max_new_tokens=24, sampling=greedy)  # fmt: skip
        assert result.token_ids == plain
        assert result.accepted > 0 and (spoil == 0 or result.accepted < result.proposed)


def test_speculative_sampling_on_a_w8a8_target_follows_the_w8a8_distribution() -> None:
    vocab = 12
    target = _w8a8_target(vocab=vocab, layers=2, seed=3)
    prompt = [4, 6, 4]
    config = SamplingConfig(temperature=0.9, top_k=6, top_p=0.9, repetition_penalty=1.5, repetition_window=3)
    exact = exact_pair_distribution(LeanModel(target.lean), prompt, config)
    bf16 = exact_pair_distribution(target.model, prompt, config)
    counts, proposed, accepted = sampled_pairs(target, make_drafter("self:1", target), prompt, config,
                                               range(3000, 5500), vocab)  # fmt: skip
    assert 0 < accepted < proposed
    assert chi_square_pvalue(counts, exact) > 1e-3
    # the same samples tell apart a distribution that differs: the bf16 model's where W8A8 moved
    # it far enough for 2,500 samples to see (on the Xeon with VNNI; 7-bit activations on an
    # AVX2-only CPU keep closer to it), and always the W8A8 model's own at another temperature
    if 0.5 * float((exact - bf16).abs().sum()) > 0.05:
        assert chi_square_pvalue(counts, bf16) < 1e-9
    hotter = exact_pair_distribution(LeanModel(target.lean), prompt, SamplingConfig(**{**config.to_dict(), "temperature": 1.3}))
    assert chi_square_pvalue(counts, hotter) < 1e-9


def test_w8a8_refuses_what_it_cannot_quantize(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown target precision 'int4'; use one of w8a8"):
        load_target("no-such-model", precision="int4")  # refused before any model loads
    model = tiny_gemma3(layers=2)
    model.set_attn_implementation("eager")
    float32 = Target(model)
    with pytest.raises(ValueError, match="bfloat16 target; this one is torch.float32"):
        quantize_w8a8(float32.lean, lambda: None)
    model = model.to(torch.bfloat16)
    target = Target(model)
    with pytest.raises(ValueError, match=r"cannot keep \['mlp'\] in bf16; products are qkv, o, gate_up, down"):
        quantize_w8a8(target.lean, lambda: None, keep=("mlp",))
    with pytest.raises(ValueError, match="calibration ran no forward"):
        quantize_w8a8(target.lean, lambda: None)
    assert all(not isinstance(layer.qkv, W8A8Linear) for layer in target.lean.layers)  # left as it was
    with pytest.raises(ValueError, match="a w8a8 target needs the lean forward"):
        load_target(str(_save(tiny_qwen3(), tmp_path)), dtype="bfloat16", precision="w8a8")
    assert PRECISIONS == ("w8a8", "gguf")


def _save(model, root):
    model.save_pretrained(root / "qwen3")
    return root / "qwen3"


def test_calibration_text_covers_every_bundled_language_from_its_training_pairs() -> None:
    from babelspec.data import LANGUAGES, parallel
    from babelspec.data.corpus import languages_with_data

    texts = calibration_texts(pairs_per_lang=3)
    assert len(texts) == len(languages_with_data()) == 11
    for code, text in zip(languages_with_data(), texts):
        assert text.count(f"\n{LANGUAGES[code].name}: ") == 3 and text.startswith("English: ")
        assert parallel(code)[0][1] in text  # the split's first pair, then spread over it


def test_the_default_model_in_w8a8_decodes_speculatively_as_it_decodes_plainly_and_follows_bf16(tmp_path) -> None:
    """The real target in W8A8 with a real bigram: greedy speculation equals its plain decoding,
    and its arg-max agrees with the bf16 model's on most of the bf16 model's own continuation."""
    from babelspec.data.corpus import monolingual
    from babelspec.models import DEFAULT_TARGET, load_tokenizer
    from babelspec.ngram import CountConfig, train

    target = load_target(DEFAULT_TARGET, dtype="bfloat16", precision="w8a8")
    assert target.name.endswith("(w8a8)") and target.precision == "w8a8"
    assert execution_info(target)["precision"] == "w8a8" and "w8a8 target" in describe(execution_info(target))
    if target.lean.batch_rows(9) < 9:
        pytest.skip("this CPU's bf16 products (the kept down-projections) round rows by their block")
    bigram = tmp_path / "yor.ngram"
    train(monolingual("yor", "train"), load_tokenizer(DEFAULT_TARGET), CountConfig(order=2)).save(bigram)
    greedy = SamplingConfig(greedy=True)
    prompt = target.tokenizer("Ẹnì kọ̀ọ̀kan ló ní ẹ̀tọ́ láti").input_ids
    plain = generate(target, make_drafter("none", target), prompt, max_new_tokens=24, sampling=greedy)
    tree = generate(target, make_drafter(f"ngram:{bigram},tree=12", target), prompt, gamma=4, max_new_tokens=24,
                    sampling=greedy)  # fmt: skip
    assert tree.token_ids == plain.token_ids and tree.accepted > 0
    bf16 = Target(target.model, target.tokenizer)
    english = target.tokenizer("The old town stands on a hill above the river, and").input_ids
    result = greedy_agreement(bf16, {"w8a8": target, "bf16": bf16}, [("yor", prompt), ("eng", english)],
                              max_new_tokens=16)  # fmt: skip
    assert result["w8a8"]["tokens"] == 32 and set(result["w8a8"]["per_lang"]) == {"yor", "eng"}
    assert 0.6 <= result["w8a8"]["agreement"] <= 1.0
    assert result["bf16"]["agreement"] == 1.0
    assert teacher_forced_agreement(bf16, bf16, prompt, plain.token_ids) == 1.0
    _batched_requests_equal_each_alone(target, bigram)


def _batched_requests_equal_each_alone(target: Target, bigram) -> None:
    """Requests decoded at once share the W8A8 target's forwards (as ``babelspec serve --precision
    w8a8 --batch`` runs them) and each gets the tokens it gets alone, greedy and sampled."""
    from babelspec.batching import EngineLoop

    texts = ["Ẹ kú àárọ̀, báwo ni", "The weather is nice today and", "እያንዳንዱ ሰው የዘር የቀለም"]
    prompts = [target.tokenizer(t).input_ids for t in texts]
    jobs = [(f"ngram:{bigram}", SamplingConfig(greedy=True), 16), ("none", SamplingConfig(greedy=True), 16),
            ("none", SamplingConfig.paper(seed=5), 16)]  # fmt: skip
    each = alone(target, prompts, jobs, gamma=4)
    loop = EngineLoop(target, batch=len(jobs))
    assert loop.max_rows >= 2  # the W8A8 products are row-invariant: a batch shares them
    assert batched(loop, prompts, jobs, gamma=4) == each
    assert max(loop.stats.sizes) == len(jobs)
