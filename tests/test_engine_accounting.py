"""What a step costs is counted where it belongs: rollback points only when something can be
rolled back, only the recurrent state copied, replays tagged apart from decode forwards, and
the drafter's commit counted as drafting."""

from __future__ import annotations

import time

import torch
from tiny import ScriptedDrafter, tiny_qwen35

from babelspec.drafters.base import NoDrafter
from babelspec.drafters.vocabhead import RestrictedHeadLM, VocabHeadDrafter
from babelspec.engine import generate
from babelspec.lm import CausalLM
from babelspec.sampling import SamplingConfig
from babelspec.target import Target

GREEDY = SamplingConfig(greedy=True, repetition_penalty=2.0, repetition_window=6)
PROMPT = [3, 17, 9, 40, 22, 5, 8, 13, 21, 34]


def test_plain_decoding_takes_no_rollback_point():
    # a rollback point on a recurrent cache stays until a rollback consumes it, and plain
    # decoding never rolls back: none may be there after it
    target = Target(tiny_qwen35(seed=1))
    assert not target.croppable
    result = generate(target, NoDrafter(), PROMPT, max_new_tokens=12, sampling=GREEDY)
    assert result.n_tokens == 12 and target._checkpoint is None
    target.checkpoint()
    assert target._checkpoint is not None  # what the check above would have seen


def test_the_rollback_point_copies_only_the_recurrent_state():
    sizes = []
    for n in (8, 64):
        lm = CausalLM(tiny_qwen35(seed=1))
        lm.forward([i % 60 + 1 for i in range(n)])
        lm.checkpoint()
        sizes.append(sum(t.numel() for _, copies in lm._checkpoint.states for t in copies.values()))
    assert sizes[0] == sizes[1] > 0  # fixed-size recurrent states, not the growing KV cache


def test_replays_are_tagged_apart_from_verification_forwards():
    target = Target(tiny_qwen35(seed=1))  # recurrent layers: a rejection replays the kept tokens
    reference = generate(target, NoDrafter(), PROMPT, max_new_tokens=16, sampling=GREEDY).token_ids
    drafter = ScriptedDrafter(reference + [0] * 8, vocab_size=64, always_wrong=True)
    result = generate(target, drafter, PROMPT, gamma=3, max_new_tokens=16, sampling=GREEDY)
    assert result.token_ids == reference and result.rejections > 0
    assert len(result.target_forward_seconds) == result.steps  # one verification forward per step
    assert len(result.target_replay_seconds) == result.rejections
    assert result.rollback_seconds >= sum(result.target_replay_seconds)


def test_a_head_drafter_on_a_recurrent_cache_replays_only_since_its_rollback_point():
    target = Target(tiny_qwen35(seed=1))
    drafter = VocabHeadDrafter(RestrictedHeadLM(tiny_qwen35(seed=2), torch.arange(64)), name="head")
    sizes: list[int] = []
    drafter.lm.model.register_forward_pre_hook(lambda m, args, kwargs: sizes.append(kwargs["input_ids"].shape[1]),
                                               with_kwargs=True)
    original_start = drafter.start

    def start(*args, **kwargs):
        original_start(*args, **kwargs)
        sizes.clear()  # the prefill of the prompt is not a step

    drafter.start = start
    result = generate(target, drafter, PROMPT, gamma=3, max_new_tokens=24, sampling=GREEDY)
    assert result.rejections > 0
    assert max(sizes) <= 3 + 1  # never the whole context again
    assert len(drafter.forward_seconds()) == result.proposed  # one draft forward per drafted token


class SlowCommit(ScriptedDrafter):
    def commit(self, verdict) -> None:
        time.sleep(0.01)
        super().commit(verdict)


def test_the_drafters_commit_is_counted_as_drafting():
    target = Target(tiny_qwen35(seed=1))
    reference = generate(target, NoDrafter(), PROMPT, max_new_tokens=8, sampling=GREEDY).token_ids
    result = generate(target, SlowCommit(reference + [0] * 8, vocab_size=64, spoil_every=3), PROMPT,
                      gamma=2, max_new_tokens=8, sampling=GREEDY)
    assert result.draft_seconds >= 0.01 * result.steps


class SlowStartDrafter(NoDrafter):
    """Plain decoding behind a drafter whose start on the prompt takes 0.2 s (a neural
    drafter's own prefill, made long enough to see)."""

    name = "slow-start"

    def start(self, context_ids, sampling, generator) -> None:
        time.sleep(0.2)


def test_the_drafters_own_prefill_is_counted_against_it_not_as_the_shared_prefill():
    result = generate(Target(tiny_qwen35(seed=1)), SlowStartDrafter(), PROMPT, max_new_tokens=4, sampling=GREEDY)
    assert result.draft_start_seconds >= 0.2 and result.draft_seconds >= 0.2
    assert result.prefill_seconds < 0.2  # the target's prefill alone: the same for plain decoding
    from babelspec.experiments.store import ExampleRecord

    record = ExampleRecord(language="amh", task="story", drafter="x", gamma=1, prompt_index=0, seed=0,
                           wall_seconds=result.wall_seconds, prefill_seconds=result.prefill_seconds,
                           draft_start_seconds=result.draft_start_seconds)
    assert record.decode_seconds >= 0.2  # what a speedup divides includes the drafter's start


def test_a_step_whose_drafts_are_all_rejected_does_one_forward_and_nothing_more():
    """What a failed draft costs, counted: on an attention-only target every step of a drafter
    that is always wrong runs one verification forward (the pending token and the γ drafts) and
    yields one token, the same count of target forwards as plain decoding, with no replay and no
    forward beyond the cache it keeps (the cropped drafts). Its time is a bench's
    (``babelspec bench engine``), not a test's."""
    from tiny import tiny_qwen3

    gamma, new = 4, 12
    target = Target(tiny_qwen3(seed=1))
    assert target.croppable
    plain = generate(target, NoDrafter(), PROMPT, max_new_tokens=new, sampling=GREEDY)
    plain_forwards = list(target.forward_tokens)
    drafter = ScriptedDrafter(plain.token_ids + [0] * 8, vocab_size=64, always_wrong=True)
    result = generate(target, drafter, PROMPT, gamma=gamma, max_new_tokens=new, sampling=GREEDY)
    assert result.token_ids == plain.token_ids and result.accepted == 0
    assert result.steps == len(plain_forwards) == len(target.forward_tokens)  # a forward per token, as plain
    # each forward: the pending token and that step's drafts (γ, fewer where the budget ends)
    assert target.forward_tokens == [1 + n for n in result.proposed_per_step]
    assert result.proposed_per_step[: new - gamma] == [gamma] * (new - gamma)
    assert result.target_replay_seconds == [] and target._checkpoint is None
    assert target.cached_len == len(PROMPT) + new - 1  # the rejected drafts cropped, nothing else kept
