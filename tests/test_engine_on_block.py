"""The engine's per-step hook: every step's tokens in order, and a true return stops generation."""

from tiny import tiny_qwen3

from babelspec.drafters import make_drafter
from babelspec.engine import generate
from babelspec.sampling import SamplingConfig
from babelspec.target import Target


def test_on_block_sees_every_step_and_can_stop_generation():
    target = Target(tiny_qwen3(vocab=64, seed=0))
    drafter = make_drafter("self:1", target)
    blocks: list[list[int]] = []
    res = generate(target, drafter, [1, 2, 3], gamma=3, max_new_tokens=20,
                   sampling=SamplingConfig.paper(seed=3), on_block=blocks.append)  # fmt: skip
    assert [t for b in blocks for t in b] == res.token_ids and len(blocks) == res.steps
    assert all(1 <= len(b) <= 4 for b in blocks)

    seen: list[list[int]] = []
    stopped = generate(target, drafter, [1, 2, 3], gamma=3, max_new_tokens=20,
                       sampling=SamplingConfig.paper(seed=3),
                       on_block=lambda b: seen.append(b) or len(seen) == 2)  # fmt: skip
    assert stopped.stop_reason == "stopped" and stopped.steps == 2
    assert stopped.token_ids == res.token_ids[: len(stopped.token_ids)]
