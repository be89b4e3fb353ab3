"""Sequences sharing the target's forwards (``babelspec.batching``) each give exactly what they
give alone: greedy and seeded sampled outputs, chains, trees and plain decoding, joined and left
at different steps; a batch never holds more rows than the products keep row-invariant."""

from __future__ import annotations

import pytest
import torch
from batch_helpers import alone, batched
from ngram_tiny import CORPUS, word_tokenizer
from tiny import tiny_gemma3

from babelspec.batching import EngineLoop
from babelspec.drafters import make_drafter
from babelspec.engine import generate
from babelspec.ngram import CountConfig, train
from babelspec.sampling import SamplingConfig
from babelspec.target import Target

PROMPTS = [[1, 2, 3, 1, 2], [2, 5, 5, 8, 1, 3, 1, 2, 6], [9, 9, 2], [4, 5, 30, 1, 2, 3]]


@pytest.fixture(scope="module")
def bigram(tmp_path_factory) -> str:
    """A bigram over the first 7 ids (a word-level corpus): drafts that the target sometimes takes."""
    path = tmp_path_factory.mktemp("ngram") / "tiny.ngram"
    train(CORPUS, word_tokenizer(), CountConfig(order=2)).save(path)
    return str(path)


def _model(dtype: torch.dtype) -> torch.nn.Module:
    model = tiny_gemma3(vocab=64, layers=3, sliding_window=4, seed=1).to(dtype)
    model.set_attn_implementation("eager")
    return model


def _jobs(path: str) -> list[tuple[str, SamplingConfig, int]]:
    """(drafter spec, sampling, max new tokens) per sequence: of different lengths, so they
    leave the batch at different steps."""
    return [(f"ngram:{path},tree=4", SamplingConfig(greedy=True), 30),
            ("self:1", SamplingConfig(temperature=1.0, top_k=20, seed=3), 17),
            ("none", SamplingConfig(temperature=0.8, seed=5), 25),
            (f"ngram:{path}", SamplingConfig(temperature=1.0, top_p=0.9, repetition_penalty=1.3, seed=7), 40)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_each_batched_sequence_equals_itself_alone(dtype: torch.dtype, bigram: str) -> None:
    model = _model(dtype)
    jobs = _jobs(bigram)
    each = alone(Target(model), PROMPTS, jobs, gamma=3)
    shared = EngineLoop(Target(model), batch=len(jobs))
    assert batched(shared, PROMPTS, jobs, gamma=3) == each
    if shared.max_rows == 1:  # float32: MKL rounds a lone row (gemv) otherwise than a block's
        assert set(shared.stats.sizes) == {1}
        pytest.skip(f"{dtype}: no row-invariant batch on this CPU, so nothing was shared (checked: outputs equal)")
    assert shared.stats.blocks > shared.stats.forwards  # forwards were shared ...
    assert max(shared.stats.sizes) >= 3
    # ... and sequences joining late (while others run) still equal themselves alone
    late = EngineLoop(Target(model), batch=len(jobs))
    assert batched(late, PROMPTS, jobs, gamma=3, join_at=[0, 2, 5, 1]) == each
    assert len(late.stats.sizes) >= 3  # forwards of 1 (job 0 alone), then of more as the others joined


def test_a_batch_holds_no_more_rows_than_allowed(bigram: str) -> None:
    model = _model(torch.bfloat16)
    shared = EngineLoop(Target(model), batch=3, max_rows=1)
    assert shared.max_rows == 1
    batched(shared, PROMPTS, _jobs(bigram)[:3], gamma=3)
    assert set(shared.stats.sizes) == {1}  # one block per forward: nothing shared


def test_batching_needs_the_lean_forward() -> None:
    from tiny import tiny_qwen3

    with pytest.raises(ValueError, match="batching needs the lean forward"):
        EngineLoop(Target(tiny_qwen3()), batch=2)


def test_a_shared_forward_gives_each_block_its_own_logits_and_cache_bit_for_bit() -> None:
    import copy

    from babelspec.forward.gemma3 import Block

    model = _model(torch.bfloat16)
    lean = Target(model).lean
    g = torch.Generator().manual_seed(0)
    caches = []
    for prefix in (5, 9, 3):  # three sequences at different lengths
        cache = lean.new_cache()
        lean.forward(torch.randint(0, 64, (1, prefix), generator=g), cache)
        caches.append(cache)
    blocks = [(torch.randint(0, 64, (1, 1), generator=g), 1, None),  # a decode step
              (torch.randint(0, 64, (1, 4), generator=g), 0, None),  # a verification block
              (torch.randint(0, 64, (1, 4), generator=g), 0, torch.tensor([-1, 0, 0, 1]))]  # a token tree
    rows = sum(ids.shape[1] for ids, _, _ in blocks)
    if lean.batch_rows(rows) < rows:
        pytest.skip(f"this CPU's bf16 products round rows otherwise in blocks of {rows}")
    alone_caches = [copy.deepcopy(c) for c in caches]
    apart = [lean.forward(ids, cache, keep, parents) for (ids, keep, parents), cache in zip(blocks, alone_caches)]
    shared = lean.forward_many([Block(ids, cache, keep, parents) for (ids, keep, parents), cache in zip(blocks, caches)])
    for mine, theirs in zip(shared, apart):
        assert torch.equal(mine, theirs)
    for mine, theirs in zip(caches, alone_caches):
        assert mine.get_seq_length() == theirs.get_seq_length()
        for a, b in zip(mine.layers, theirs.layers):
            n = a.length
            assert torch.equal(a.values[:, :, :n], b.values[:, :, :n])


def test_batched_requests_on_the_default_model_equal_each_alone(tmp_path) -> None:
    """The real target in its default dtype (bf16 where the CPU has it) and real drafters: four
    translation requests, greedy and under the paper's sampling, decoded at once sharing the
    forwards, give each the tokens it gives alone."""
    from babelspec.data.corpus import monolingual
    from babelspec.data.tasks import get_task
    from babelspec.models import DEFAULT_TARGET
    from babelspec.target import load_target

    target = load_target(DEFAULT_TARGET)
    bigram = tmp_path / "yor.ngram"
    train(monolingual("yor", "train"), target.tokenizer, CountConfig(order=2)).save(bigram)
    prompts = [target.tokenizer(p.text).input_ids for lang in ("yor", "npi", "amh", "yor")
               for p in get_task("translation").prompts(lang, target.tokenizer, 1)][:4]  # fmt: skip
    jobs = [(f"ngram:{bigram}", SamplingConfig.paper(seed=1, greedy=True), 24),
            (f"ngram:{bigram}", SamplingConfig.paper(seed=2), 24),
            ("self:6", SamplingConfig.paper(seed=3), 24),
            ("none", SamplingConfig.paper(seed=4), 24)]
    each = alone(target, prompts, jobs, gamma=4)
    loop = EngineLoop(target, batch=len(jobs))
    if loop.max_rows < 2:
        pytest.skip(f"{target.model.dtype}: no row-invariant batch on this CPU")
    assert batched(loop, prompts, jobs, gamma=4) == each
    assert loop.stats.blocks > loop.stats.forwards
    assert max(loop.stats.sizes) == len(jobs)  # every running sequence in one forward
    # a slot's plan says what the shared forward's rows are, not a bare forward's default
    from babelspec.machine import execution_plan

    plan, slot_plan = execution_plan(target), execution_plan(loop.slots[0])
    assert slot_plan["exact"] == plan["exact"] != "no" and "exact_why" not in slot_plan


def test_a_failing_generation_leaves_the_others_and_the_loop_running(caplog) -> None:
    """A block whose forward fails (a token id past the vocabulary) fails its own generation,
    with the forward's error where it called it; the sequences in the same forward, and those
    after it, are generated as alone."""
    model = _model(torch.bfloat16)
    alone_target = Target(model)
    want = [generate(alone_target, make_drafter("none", alone_target), p, gamma=3, max_new_tokens=12,
                     sampling=SamplingConfig(greedy=True)).token_ids for p in PROMPTS[:3]]  # fmt: skip
    loop = EngineLoop(Target(model), batch=3)
    if loop.max_rows < 3:
        pytest.skip("this CPU's bf16 products round rows otherwise in blocks of 3")
    outs: dict[int, object] = {}

    def task(i: int, prompt: list[int]):
        def body(index: int, slot: Target) -> None:
            try:
                outs[i] = generate(slot, make_drafter("none", slot), prompt, gamma=3, max_new_tokens=12,
                                   sampling=SamplingConfig(greedy=True)).token_ids  # fmt: skip
            except IndexError as err:
                outs[i] = err

        return body

    def bad_forward(index: int, slot: Target) -> None:
        try:  # 999: no such token in a 64-token vocabulary (past the engine's own checks)
            slot.lean(torch.tensor([[999]]), slot.lean.new_cache())
        except IndexError as err:
            outs[1] = err

    def escapes(index: int, slot: Target) -> None:
        raise RuntimeError("a task's own bug")

    loop.submit(task(0, PROMPTS[0]))
    loop.submit(bad_forward)
    loop.submit(escapes)
    loop.submit(task(2, PROMPTS[1]))
    loop.submit(task(3, PROMPTS[2]))
    loop.run(until_idle=True)
    assert isinstance(outs[1], IndexError)
    assert [outs[0], outs[2], outs[3]] == want
    assert "a task's own bug" in caplog.text  # logged with its traceback, and the loop went on
    assert loop.running == 0


def test_a_closed_loop_refuses_tasks_and_lets_running_ones_end() -> None:
    model = _model(torch.bfloat16)
    loop = EngineLoop(Target(model), batch=2)
    done: list[str] = []

    def long(index: int, slot: Target) -> None:
        generate(slot, make_drafter("none", slot), PROMPTS[0], gamma=3, max_new_tokens=50,
                 on_block=lambda ids: loop.closing)  # fmt: skip
        done.append("long")

    def closer(index: int, slot: Target) -> None:
        generate(slot, make_drafter("none", slot), PROMPTS[1], gamma=3, max_new_tokens=3)
        loop.close()  # as a server's SIGTERM: the long one stops at its next step
        done.append("closer")

    loop.submit(long)
    loop.submit(closer)
    loop.run()  # returns once closed and the running generations have ended
    assert sorted(done) == ["closer", "long"]
    with pytest.raises(RuntimeError, match="closed"):
        loop.submit(long)
