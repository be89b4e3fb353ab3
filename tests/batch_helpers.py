"""Generations of (drafter spec, sampling, new tokens) jobs, each alone and all at once on an
``EngineLoop`` sharing the target's forwards: what a batch must give each of them."""

from __future__ import annotations

from babelspec.batching import EngineLoop
from babelspec.drafters import make_drafter
from babelspec.engine import generate
from babelspec.sampling import SamplingConfig
from babelspec.target import Target

Job = tuple[str, SamplingConfig, int]


def alone(target: Target, prompts: list[list[int]], jobs: list[Job], gamma: int) -> list[list[int]]:
    """Each job's tokens, generated on its own."""
    return [generate(target, make_drafter(spec, target), prompts[i], gamma=gamma, max_new_tokens=n,
                     sampling=sampling).token_ids for i, (spec, sampling, n) in enumerate(jobs)]  # fmt: skip


def batched(loop: EngineLoop, prompts: list[list[int]], jobs: list[Job], gamma: int,
            join_at: list[int] | None = None) -> list[list[int]]:  # fmt: skip
    """Each job's tokens, generated on ``loop`` at once; with ``join_at``, job i > 0 is submitted
    when job 0 has taken ``join_at[i]`` steps (so it joins sequences that are half done)."""
    outs: list[list[int] | None] = [None] * len(jobs)
    errors: list[BaseException] = []
    steps = [0]

    def task(i: int):
        def body(index: int, slot: Target) -> None:
            spec, sampling, n = jobs[i]
            try:
                on_block = None
                if i == 0 and join_at:
                    def on_block(ids: list[int]) -> None:
                        steps[0] += 1
                        for j in range(1, len(jobs)):
                            if join_at[j] == steps[0]:
                                loop.submit(task(j))

                outs[i] = generate(slot, make_drafter(spec, slot), prompts[i], gamma=gamma, max_new_tokens=n,
                                   sampling=sampling, on_block=on_block).token_ids  # fmt: skip
            except BaseException as err:  # noqa: BLE001 - reported below
                errors.append(err)

        return body

    for i in range(1 if join_at else len(jobs)):
        loop.submit(task(i))
    loop.run(until_idle=True)
    assert not errors, errors
    return outs
