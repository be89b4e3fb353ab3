"""The preparation and execute stages on a Ray cluster.

Workers are Ray actors, each holding the target and the current language's drafters; the
driver sends them whole units (one prompt with all its settings, so every speedup pairs two
generations from one machine), keeps a worker on one language while that language has units
left (restricted heads and n-gram tables are not rebuilt), and gets each unit's records back
when it finishes. The driver alone writes the store. A worker that dies has its unit sent to
another worker and is replaced; a unit already stored is never sent (the runner plans only
what the store lacks). Drafters to train are prepared on free workers, in parallel, into the
run's artifact folder, which every machine must see at the same path.
"""

from __future__ import annotations

import socket
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from babelspec.experiments.config import ExperimentConfig
from babelspec.experiments.executors import ExecutorError, Sink
from babelspec.experiments.worker import (
    PrepareJob,
    Result,
    Unit,
    UnitRunner,
    prepare_one,
    speed_probe,
    task_prompts,
)

INSTALL_HINT = "install it with `pip install 'babelspec[ray]'` (on every machine of the cluster)"
MAX_ATTEMPTS = 3  # a unit whose worker dies this many times stops the run (out of memory?)


def import_ray():
    try:
        import ray
    except ImportError:
        raise ExecutorError(f"--ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


class ClusterWorker:
    """One Ray actor: loads the target once, then runs units for the driver."""

    def __init__(self, cfg: ExperimentConfig, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        self.cfg = cfg
        self.target = None
        self.runner: UnitRunner | None = None

    def ready(self, version: str) -> dict[str, Any]:
        """Load the target and check the data; ``error`` says what this machine lacks."""
        import ray

        import babelspec
        from babelspec.machine import machine_fingerprint

        info = {"host": socket.gethostname(), "node": ray.get_runtime_context().get_node_id(),
                "error": "", "machine": {}}  # fmt: skip
        if babelspec.__version__ != version:
            info["error"] = (f"babelspec {babelspec.__version__} is installed there, the driver runs "
                             f"{version}: install the same version on every machine")  # fmt: skip
            return info
        from babelspec.experiments.worker import load_config_target

        try:
            self.target = load_config_target(self.cfg)
        except Exception as exc:  # noqa: BLE001 - reported to the driver as the fix to make
            info["error"] = (f"cannot load the target {self.cfg.target!r} ({type(exc).__name__}: {exc}); "
                             "install the model on every machine: a preset is fetched once into the "
                             "cache, a model directory must exist at the same path")  # fmt: skip
            return info
        try:
            for lang in self.cfg.languages:
                for task in self.cfg.tasks:
                    task_prompts(task, lang, self.target.tokenizer, 1, self.cfg.data)
        except Exception as exc:  # noqa: BLE001
            info["error"] = (f"cannot read the {task} prompts for {lang} ({type(exc).__name__}: {exc}); "
                             "install the same babelspec, with its bundled data, on every machine, and a [data] "
                             "section's files at the same path")  # fmt: skip
            return info
        info["machine"] = machine_fingerprint(self.target)
        return info

    def prepare(self, job: PrepareJob) -> tuple[str, str, float, list[str]]:
        """Train one drafter here (its files go where the driver asked: a shared folder)."""
        messages: list[str] = []
        return (*prepare_one(self.cfg, self.target, job, messages.append), messages)

    def configure(self, specs: dict[tuple[str, str], str], paths: list[str]) -> str:
        """Take the prepared specs; the error if the driver's artifact files are not visible here."""
        missing = [p for p in paths if not Path(p).exists()]
        if missing:
            return (f"cannot see {missing[0]!r}, a prepared drafter file of the driver: put the run "
                    "directory (or the shared cache) on a filesystem every machine mounts at the same path")  # fmt: skip
        self.runner = UnitRunner(self.cfg, self.target, specs, log=lambda m: None)
        return ""

    def run_unit(self, items: list) -> list[Result]:
        assert self.runner is not None, "configure() first"
        return [self.runner.run(it) for it in items]

    def probe(self) -> float:
        return speed_probe(self.cfg, self.target)


@dataclass
class _Slot:
    actor: Any
    host: str = ""
    language: str | None = None  # the language whose drafters it holds


@dataclass
class RayExecutor:
    """``address``: ``auto`` (the cluster this machine belongs to) or HOST:PORT of its head."""

    address: str = "auto"
    workers: int = 0  # 0 = as many as the cluster has room for (GPUs, else CPUs / threads)
    threads: int = 0  # torch threads per worker; 0 = the config's threads, else 1
    name: str = "ray"
    deaths: int = 0  # workers lost during the run (each one's unit was retried)
    hosts: dict[str, dict] = field(default_factory=dict)  # host -> machine fingerprint
    slots: list[_Slot] = field(default_factory=list)
    starting: dict[Any, _Slot] = field(default_factory=dict)  # ready() ref -> replacement worker

    def start(self, cfg: ExperimentConfig, log: Callable[[str], None], workers: int | None = None) -> None:
        ray = import_ray()
        self.cfg, self.log = cfg, log
        self._owns_connection = not ray.is_initialized()
        if self._owns_connection:
            self._connect(ray)
        elif self.address not in ("auto", ray.get_runtime_context().gcs_address):
            self._reachable()
            raise ExecutorError(f"this process is already connected to the Ray cluster at "
                                f"{ray.get_runtime_context().gcs_address}, not {self.address}")  # fmt: skip
        resources = ray.cluster_resources()
        gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
        self.thread_count = self.threads or cfg.threads or 1
        self.gpu = gpus > 0
        room = gpus if self.gpu else cpus // self.thread_count
        if room < 1:
            raise ExecutorError(f"the Ray cluster at {self.address} has {cpus} CPUs, fewer than the "
                                f"{self.thread_count} threads asked per worker: lower `threads` in the config")  # fmt: skip
        wanted = workers or self.workers or cfg.ray_workers or room
        if wanted > room:
            log(f"the cluster has room for {room} workers of {self.thread_count} threads, not {wanted}")
        self.workers = min(wanted, room)
        self._actor_class = ray.remote(num_cpus=self.thread_count, num_gpus=1 if self.gpu else 0,
                                       max_restarts=0)(ClusterWorker)  # fmt: skip
        log(f"starting {self.workers} Ray workers ({self.thread_count} threads each"
            f"{', one GPU each' if self.gpu else ''})")  # fmt: skip
        pending = [self._spawn() for _ in range(self.workers)]
        try:
            for slot, ref in pending:
                self._admit(slot, ray.get(ref, timeout=_READY_TIMEOUT))
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise ExecutorError(f"Ray workers did not start within {_READY_TIMEOUT} s: the cluster lacks "
                                "free CPUs/GPUs for them (see `ray status`), or lower the workers asked") from None  # fmt: skip
        except ExecutorError:
            self.close()
            raise

    def _reachable(self) -> None:
        host, _, port = self.address.rpartition(":")
        if not host or not port.isdigit():
            raise ExecutorError(f"--ray {self.address!r}: give `auto` or HOST:PORT of the cluster's head "
                                "(the address `ray start --head` prints)")  # fmt: skip
        try:  # ray.init would wait minutes for a head that is not there
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError as exc:
            raise ExecutorError(f"no Ray cluster at {self.address} ({exc}): start one there with "
                                "`ray start --head`, or pass the address it prints") from None  # fmt: skip

    def _connect(self, ray) -> None:
        if self.address != "auto":
            self._reachable()
        try:
            ray.init(address=self.address, log_to_driver=False, logging_level="ERROR")
        except ConnectionError as exc:
            raise ExecutorError(f"cannot join the Ray cluster for --ray {self.address} ({exc}); start one with "
                                "`ray start --head`, or pass HOST:PORT of its head; a cluster with token "
                                "authentication (Ray's default) also needs RAY_AUTH_MODE=token here and its "
                                "token in ~/.ray/auth_token (`ray get-auth-token` on the head)") from None  # fmt: skip

    def _spawn(self) -> tuple[_Slot, Any]:
        import babelspec

        slot = _Slot(self._actor_class.remote(self.cfg, self.thread_count))
        return slot, slot.actor.ready.remote(babelspec.__version__)

    def _admit(self, slot: _Slot, info: dict) -> None:
        slot.host = info["host"]
        if info["error"]:
            raise ExecutorError(f"Ray worker on {info['host']}: {info['error']}")
        self.hosts[info["host"]] = info["machine"]
        self.slots.append(slot)

    def prepare(self, jobs: list[PrepareJob], target: Any) -> Iterator[tuple[PrepareJob, str, str, float]]:
        """Each drafter to train on a free worker (n-gram counts, distillations in parallel)."""
        import ray

        queue, running, idle = deque(jobs), {}, list(self.slots)
        while queue or running:
            while idle and queue:
                slot, job = idle.pop(), queue.popleft()
                running[slot.actor.prepare.remote(job)] = (slot, job)
            done, _ = ray.wait(list(running), num_returns=1)
            slot, job = running.pop(done[0])
            try:
                spec, reason, seconds, messages = ray.get(done[0])
            except _deaths(ray) as exc:
                raise ExecutorError(f"the worker on {slot.host} died preparing {job.setting.name} for "
                                    f"{job.language} ({type(exc).__name__}); rerun the same command: "
                                    "drafters already prepared are kept") from None  # fmt: skip
            except ray.exceptions.RayTaskError as exc:
                raise ExecutorError(f"preparing {job.setting.name} for {job.language} failed on "
                                    f"{slot.host}: {exc}") from None  # fmt: skip
            for message in messages:
                self.log(f"[{slot.host}] {message}")
            idle.append(slot)
            yield job, spec, reason, seconds

    def configure(self, target: Any, specs: dict[tuple[str, str], str]) -> None:
        import ray

        self.specs = specs
        self.paths = sorted(_artifact_paths(specs, self.cfg.tasks))
        for slot in list(self.slots):
            error = ray.get(slot.actor.configure.remote(specs, self.paths))
            if error:
                raise ExecutorError(f"Ray worker on {slot.host}: {error}")

    def execute(self, units: list[Unit], sink: Sink) -> None:
        import ray

        pending: dict[str, deque[Unit]] = defaultdict(deque)
        for unit in units:
            pending[unit.language].append(unit)
        attempts: dict[tuple, int] = defaultdict(int)
        running: dict[Any, tuple[_Slot, Unit]] = {}
        starting = self.starting  # replacement workers loading the target
        idle = list(self.slots)
        replacements = 2 * self.workers + 2
        while pending or running:
            for slot in idle:
                unit = _take(pending, slot.language)
                if unit is None:
                    break
                slot.language = unit.language
                running[slot.actor.run_unit.remote(unit.items)] = (slot, unit)
            idle = [s for s in idle if all(s is not r[0] for r in running.values())]
            if not running and not starting:
                raise ExecutorError("every Ray worker has died; what finished is stored: rerun the same "
                                    "command to resume (check `ray status` and the workers' memory)")  # fmt: skip
            done, _ = ray.wait(list(running) + list(starting), num_returns=1, timeout=1.0)
            for ref in done:
                if ref in starting:  # a replacement worker has loaded the target
                    slot = starting.pop(ref)
                    try:
                        info = ray.get(ref)
                        error = info["error"] or ray.get(slot.actor.configure.remote(self.specs, self.paths))
                    except _deaths(ray):
                        continue
                    if error:
                        self.log(f"replacement worker on {info['host']} cannot run: {error}")
                        continue
                    slot.host = info["host"]
                    self.slots.append(slot)
                    idle.append(slot)
                    continue
                slot, unit = running.pop(ref)
                try:
                    results = ray.get(ref)
                except _deaths(ray) as exc:
                    self.deaths += 1
                    attempts[unit.key] += 1
                    self.slots.remove(slot)
                    self.log(f"worker on {slot.host or '?'} died ({type(exc).__name__}); "
                             f"{unit.language}/{unit.task} prompt {unit.prompt_index} goes to another worker")  # fmt: skip
                    if attempts[unit.key] >= MAX_ATTEMPTS:
                        raise ExecutorError(f"{unit.language}/{unit.task} prompt {unit.prompt_index} killed "
                                            f"{MAX_ATTEMPTS} workers (out of memory?); lower max_new_tokens "
                                            "or give the workers more memory, then rerun to resume") from exc  # fmt: skip
                    pending[unit.language].appendleft(unit)
                    if replacements > 0:
                        replacements -= 1
                        new, ready_ref = self._spawn()
                        starting[ready_ref] = new
                    continue
                except ray.exceptions.RayTaskError as exc:
                    raise ExecutorError(f"a unit failed on {slot.host}: {exc}") from None
                sink(unit.items, results)
                idle.append(slot)

    def seconds_per_token(self, target: Any) -> float:
        import ray

        return float(ray.get(self.slots[0].actor.probe.remote()))

    def close(self) -> None:
        try:
            import ray
        except ImportError:
            return
        if not ray.is_initialized():
            return
        for slot in self.slots + list(self.starting.values()):
            ray.kill(slot.actor)
        self.slots, self.starting = [], {}
        if getattr(self, "_owns_connection", False):
            ray.shutdown()


_READY_TIMEOUT = 600


def _deaths(ray) -> tuple[type[BaseException], ...]:
    ex = ray.exceptions
    return tuple(getattr(ex, n) for n in ("RayActorError", "WorkerCrashedError", "OutOfMemoryError",
                                           "NodeDiedError", "ObjectLostError") if hasattr(ex, n))  # fmt: skip


def _take(pending: dict[str, deque[Unit]], language: str | None) -> Unit | None:
    """The next unit for a worker: of its language while any is left, else of the language
    with the most units left (so workers spread over languages)."""
    if language not in pending:
        if not pending:
            return None
        language = max(pending, key=lambda lang: len(pending[lang]))
    unit = pending[language].popleft()
    if not pending[language]:
        del pending[language]
    return unit


def _artifact_paths(specs: dict[tuple[str, str], str], tasks: list[str]) -> set[str]:
    """Files and folders of the driver that the specs name (n-gram tables, distilled students)."""
    out = set()
    for spec in specs.values():
        rest = spec.partition(":")[2]
        for task in tasks:
            path = rest.replace("{task}", task)
            if path and ("/" in path or "\\" in path) and Path(path).exists():
                out.add(str(Path(path).resolve()))
    return out
