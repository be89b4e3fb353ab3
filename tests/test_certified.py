"""The certified output head (``forward.certified``): each row's k largest logits bit for bit
those of the full bf16 head, on the default model over real text in every paper language, and
a loosened bound that this comparison catches; the engine under it decodes as under the full
head, greedy and sampled, and speculative sampling follows the target's distribution."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from edge import OPTIONS
from stats import LeanModel, chi_square_pvalue, exact_pair_distribution, sampled_pairs
from tiny import tiny_gemma3

from babelspec.bench.head import bound_only, needed_logits_differ
from babelspec.data import LANGUAGES, parallel
from babelspec.data.corpus import languages_with_data
from babelspec.drafters import make_drafter
from babelspec.engine import generate, head_request
from babelspec.forward import ForwardOptions, HeadRequest
from babelspec.forward.certified import can_certify
from babelspec.models import DEFAULT_TARGET, load_model
from babelspec.sampling import SamplingConfig, warp
from babelspec.target import Target, load_target

pytestmark = [pytest.mark.extended, pytest.mark.skipif(not can_certify(torch.zeros(2, 2, dtype=torch.bfloat16)),
                                reason="the certified head needs oneDNN's int8 product")]  # fmt: skip

PAPER = SamplingConfig.paper()
BLOCK = 9  # a verification block's rows (gamma 8 and the pending token)


@pytest.fixture(scope="module")
def default_model():
    return load_model(DEFAULT_TARGET, dtype="bfloat16")


def _texts(tokenizer, per_language: int) -> dict[str, list[int]]:
    """``per_language`` + 1 token ids of each paper language's bundled text."""
    out = {}
    for code in languages_with_data():
        text = " ".join(pair[1] for pair in parallel(code)[:40])
        out[code] = tokenizer(text)["input_ids"][: per_language + 1]
    return out


def _requests(chunk: list[int], i: int) -> HeadRequest:
    """The requests the engine makes, in turn: greedy, the paper's top-k with its penalty's
    tokens, and edge cases (tokens to compute exactly that hold the top logit, or repeat)."""
    cases = [HeadRequest(1), HeadRequest(100, tuple(chunk)), HeadRequest(40),
             HeadRequest(100, (2, 2, 0, 262143) + tuple(chunk[:3])), HeadRequest(1, tuple(chunk))]  # fmt: skip
    return cases[i % len(cases)]


def _compare(full: Target, certified: Target, texts: dict[str, list[int]]) -> tuple[int, int]:
    """Decode every text in blocks through both targets; (rows, rows whose certified logits
    differ from the full head's where the request needs them)."""
    rows = wrong = 0
    for ids in texts.values():
        full.reset(), certified.reset()
        for n, start in enumerate(range(0, len(ids) - 1, BLOCK)):
            chunk = ids[start : start + BLOCK]
            request = _requests(chunk, n)
            expected, got = full.forward(chunk), certified.forward(chunk, head=request)
            rows += len(got)
            wrong += sum(needed_logits_differ(row, want, request) for row, want in zip(got, expected))
    return rows, wrong


def test_the_certified_head_gives_the_full_heads_top_k_bit_for_bit_on_real_text_in_every_paper_language(default_model):
    model, tokenizer = default_model
    # every row of every block certified: the speed limits (rows per block, estimated bounds) off
    full, certified = Target(model, tokenizer, options=OPTIONS), bound_only(model, tokenizer, BLOCK, options=OPTIONS)
    assert certified.certifies_head and not full.certifies_head
    assert Target(model, tokenizer, options=replace(OPTIONS, head="certified")).certifies_head
    texts = _texts(tokenizer, 90)
    assert len(texts) == 11 and all(len(ids) == 91 for ids in texts.values())
    rows, wrong = _compare(full, certified, texts)
    assert rows == 11 * 90 and wrong == 0
    stats = certified.impl.logits_of.certified.stats.summary()
    assert stats["rows_certified"] > rows // 2 and stats["candidates_median"] < 2000
    # and so the paper's warped distribution, row for row
    full.reset(), certified.reset()
    ids = texts["yor"][:BLOCK]
    want = warp(full.forward(ids), PAPER, torch.tensor(ids), 1)
    got = warp(certified.forward(ids, head=HeadRequest(100, tuple(ids))), PAPER, torch.tensor(ids), 1)
    for i in range(BLOCK):
        assert np.array_equal(want.support(i)[0], got.support(i)[0])
        assert np.array_equal(want.support(i)[1], got.support(i)[1])


def test_a_bound_without_the_weights_rounding_is_caught_by_the_same_comparison(default_model):
    """A bound that leaves out the weights' rounding (|e_r| |h_R| and the outliers' term) is
    wrong; the comparison above must find rows where it drops one of the k largest."""
    model, tokenizer = default_model
    certified = bound_only(model, tokenizer, BLOCK, terms=("activations", "rounding"), options=OPTIONS)
    rows, wrong = _compare(Target(model, tokenizer, options=OPTIONS), certified, _texts(tokenizer, 45))
    assert wrong > 0, f"a loosened bound went unseen on {rows} rows"


def test_the_engine_decodes_the_default_model_as_under_the_full_head_greedy_and_sampled(default_model):
    model, tokenizer = default_model
    full, certified = Target(model, tokenizer, options=OPTIONS), Target(model, tokenizer, options=replace(OPTIONS, head="certified"))
    prompt = tokenizer("English: The children are playing in the garden.\nYoruba:")["input_ids"]
    greedy = SamplingConfig(greedy=True)
    plain = generate(full, make_drafter("none", full), prompt, max_new_tokens=24, sampling=greedy).token_ids
    for sampling in (greedy, PAPER):
        for drafter in ("none", "self:4"):  # a sample is the same sample: the same numbers drawn on the same rows
            runs = [generate(t, make_drafter(drafter, t), prompt, gamma=3, max_new_tokens=24, sampling=sampling)
                    for t in (full, certified)]  # fmt: skip
            assert runs[0].token_ids == runs[1].token_ids, (sampling, drafter)
            assert sampling != greedy or runs[1].token_ids == plain
    stats = certified.impl.logits_of.certified.stats
    assert stats.certified > 0 and stats.full == 0


def test_head_requests_follow_the_sampling_settings(default_model):
    model, tokenizer = default_model
    certified = Target(model, tokenizer, options=replace(OPTIONS, head="certified"))
    seq = np.array([5, 6, 7, 5, 9], dtype=np.int64)
    assert head_request(certified, SamplingConfig(greedy=True), seq, 5, [3]) == HeadRequest(1)
    assert head_request(certified, PAPER, seq, 5, [3, 4]) == HeadRequest(100, (3, 4, 5, 6, 7, 9))
    assert head_request(certified, PAPER, seq, 5, [3], observes_top=8) == HeadRequest(100, (3, 5, 6, 7, 9))
    assert head_request(certified, SamplingConfig(top_k=8), seq, 5, [3], observes_top=20) == HeadRequest(20)
    assert head_request(certified, SamplingConfig(top_p=0.9), seq, 5, [3]) is None  # needs the normaliser
    assert head_request(certified, SamplingConfig(top_k=101), seq, 5, [3]) is None
    assert head_request(Target(model, tokenizer, options=OPTIONS), PAPER, seq, 5, [3]) is None


def test_speculative_sampling_with_a_certified_target_and_verifier_follows_the_target_distribution():
    vocab = 12
    model = tiny_gemma3(vocab=vocab, layers=2, sliding_window=4, seed=3).to(torch.bfloat16)
    model.set_attn_implementation("eager")
    target = Target(model, options=replace(OPTIONS, head="certified"))
    prompt = [4, 6, 4]
    config = SamplingConfig(temperature=0.9, top_k=6, top_p=0.9, repetition_penalty=1.5, repetition_window=3)
    exact = exact_pair_distribution(LeanModel(Target(model, options=OPTIONS).lean), prompt, config)  # the full head's
    counts, proposed, accepted = sampled_pairs(target, make_drafter("self:1", target), prompt, config,
                                               range(3000, 5500), vocab)  # fmt: skip
    assert 0 < accepted < proposed
    assert target.impl.logits_of.certified.stats.certified > 0
    assert chi_square_pvalue(counts, exact) > 1e-3
    hotter = exact_pair_distribution(LeanModel(Target(model, options=OPTIONS).lean), prompt, SamplingConfig(**{**config.to_dict(), "temperature": 1.3}))
    assert chi_square_pvalue(counts, hotter) < 1e-9


def test_bad_head_settings_are_refused_with_what_to_use():
    with pytest.raises(ValueError, match="unknown output head 'fast'; use one of full, certified"):
        ForwardOptions(head="fast")
    with pytest.raises(ValueError, match="unknown output head 'int8'"):
        load_target(head="int8")
    with pytest.raises(ValueError, match="without precision='w8a8'"):
        load_target(head="certified", precision="w8a8")
    with pytest.raises(ValueError, match="k must be a positive whole number"):
        HeadRequest(0)
    model = tiny_gemma3(vocab=16, layers=1)  # float32
    model.set_attn_implementation("eager")
    with pytest.raises(ValueError, match="dtype='bfloat16' or use head='full'"):
        Target(model, options=replace(OPTIONS, head="certified"))
    assert LANGUAGES["yor"].name


def test_rows_asking_for_more_candidates_than_the_head_certifies_count_as_full(default_model):
    """A row whose request asks for more than CERTIFIED_TOP_K takes the full head: counted so, as a
    row without a request is, and never as certified or skipped."""
    from babelspec.forward.certified import CERTIFIED_TOP_K

    model, tokenizer = default_model
    target = Target(model, tokenizer, options=replace(OPTIONS, head="certified"))
    head = target.impl.logits_of
    hidden = torch.randn(1, 3, model.config.hidden_size, generator=torch.Generator().manual_seed(0)).bfloat16()
    head.certified.stats.reset()
    logits = head(hidden, [HeadRequest(CERTIFIED_TOP_K + 1), None, HeadRequest(1)])
    stats = head.certified.stats.summary()
    assert stats["rows_full"] == 2 and stats["rows_certified"] + stats["rows_fallback"] + stats["rows_skipped"] == 1
    assert torch.isfinite(logits[0, 0]).all() and torch.isfinite(logits[0, 1]).all()  # full rows: every logit


def test_a_long_block_under_the_certified_head_gives_each_row_the_bits_of_the_row_alone(default_model):
    """A block longer than the exact path's small blocks (16 rows: a long tree, a batch) takes the
    certified head's fallback, the full head: it goes in the same row-invariant pieces as without
    requests, so each row's logits are the full head's row alone after the same cache."""
    model, tokenizer = default_model
    target = Target(model, tokenizer, options=replace(OPTIONS, head="certified"))
    lean = target.impl
    ids = _texts(tokenizer, 60)["amh"]
    prompt, block = torch.tensor([ids[:20]]), torch.tensor([ids[20:60]])  # 40 rows
    small = lean.exact_rows()[0]
    assert block.shape[1] > small
    request = HeadRequest(1)
    cache = lean.new_cache()
    lean.forward(prompt, cache, logits_to_keep=-1)
    whole = lean.forward(block, cache, head=request)
    for i in range(block.shape[1]):
        cache.crop(-(cache.get_seq_length() - 20 - i))
        alone = lean.forward(block[:, i : i + 1], cache)[0]  # the full head's row, as the fallback's
        assert torch.equal(whole[i], alone), i
