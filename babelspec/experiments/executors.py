"""How the execute stage runs its units: here, in this process, or on a Ray cluster.

An executor takes the planned units and hands every result (a record, a skipped setting, or
``None`` for a prompt the task does not have) to the runner's ``sink``, which alone writes
the store. The local executor is the runner's original loop; ``cluster.RayExecutor`` sends
the same units to workers that each hold the target and drafters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from babelspec.experiments.config import ExperimentConfig
from babelspec.experiments.worker import (
    PrepareJob,
    Result,
    Unit,
    UnitRunner,
    WorkItem,
    prepare_one,
    speed_probe,
)

Sink = Callable[[list[WorkItem], list[Result]], None]  # a unit's items and their results


class ExecutorError(RuntimeError):
    """The executor cannot run (no cluster, a worker lacking the model...); the message says
    what to do. Raised before anything is written to the store where that is possible."""


class Executor(Protocol):
    name: str
    workers: int  # generations running at once

    def start(self, cfg: ExperimentConfig, log: Callable[[str], None]) -> None:
        """Acquire what the run needs (connect, start workers); called before the store opens."""

    def prepare(self, jobs: list[PrepareJob], target: Any) -> Iterator[tuple[PrepareJob, str, str, float]]:
        """Train drafters; yields (job, spec or "", why it was skipped, seconds) as each ends."""

    def configure(self, target: Any, specs: dict[tuple[str, str], str]) -> None:
        """The prepared drafter specs; ``target`` is the driver's own verifier."""

    def execute(self, units: list[Unit], sink: Sink) -> None:
        """Run every unit, calling ``sink`` with each unit's results as they come."""

    def seconds_per_token(self, target: Any) -> float:
        """Plain decoding speed of one worker, for the dry run's estimate."""

    def close(self) -> None: ...


class LocalExecutor:
    """The grid in this process, one generation at a time, each stored as it finishes."""

    name = "local"
    workers = 1

    def __init__(self) -> None:
        self.runner: UnitRunner | None = None
        self.cfg: ExperimentConfig | None = None
        self.log: Callable[[str], None] = print

    def start(self, cfg: ExperimentConfig, log: Callable[[str], None]) -> None:
        self.cfg, self.log = cfg, log

    def prepare(self, jobs: list[PrepareJob], target: Any) -> Iterator[tuple[PrepareJob, str, str, float]]:
        assert self.cfg is not None, "start() first"
        for job in jobs:
            yield (job, *prepare_one(self.cfg, target, job, self.log))

    def configure(self, target: Any, specs: dict[tuple[str, str], str]) -> None:
        assert self.cfg is not None, "start() first"
        self.runner = UnitRunner(self.cfg, target, specs, log=self.log)

    def execute(self, units: list[Unit], sink: Sink) -> None:
        assert self.runner is not None, "configure() first"
        for unit in units:
            for it in unit.items:  # each result goes to the store before the next generation
                sink([it], [self.runner.run(it)])

    def seconds_per_token(self, target: Any) -> float:
        assert self.cfg is not None, "start() first"
        return speed_probe(self.cfg, target)

    def close(self) -> None:
        if self.runner is not None:
            self.runner.drop_drafters()
        self.runner = None
