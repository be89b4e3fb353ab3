"""The runner: the grid languages x tasks x drafter settings x gamma, plus plain decoding.

A run is a pipeline of stages: prepare the drafters (train n-grams, distil) -> plan the
units the store still lacks -> execute them (``executors``: here, or on a Ray cluster) ->
divergence on held-out text -> analysis. Every example is stored as it comes back, by this
process alone, one transaction each (``store.Store``), so a run killed at any point resumes
where it stopped. A unit is one prompt with plain decoding and every speculative setting run
back to back (in an order rotated per prompt) on one worker, so each wall-clock ratio
compares generations measured side by side on one machine under the same load.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from babelspec.experiments.aggregate import split_llama_cpp
from babelspec.experiments.config import ExperimentConfig, dump_toml
from babelspec.experiments.executors import Executor, LocalExecutor
from babelspec.experiments.store import STORE_NAME, ExampleRecord, Store
from babelspec.experiments.worker import (
    PrepareJob,
    Result,
    Skip,
    Unit,
    WorkItem,
    load_config_target,
    plan,
    prompt_data,
    units_of,
    versions,
)
from babelspec.fileio import write_text_atomic


@dataclass
class RunSummary:
    out_dir: Path
    planned: int = 0
    done_before: int = 0
    generated: int = 0
    skipped: list[tuple[str, str, str]] = field(default_factory=list)
    specs: dict[tuple[str, str], str] = field(default_factory=dict)
    seconds: float = 0.0
    executor: str = "local"
    worker_deaths: int = 0  # workers lost mid-run (their units were retried elsewhere)


def execution(target) -> dict:
    """How the numbers of a run were computed: dtype (and exact or fast mode), threads, CPU."""
    from babelspec.machine import execution_info

    return execution_info(target)


_write_atomic = write_text_atomic


def make_executor(address: str = "", workers: int = 0) -> Executor:
    """``LocalExecutor`` without an address, else a ``RayExecutor`` for ``auto`` or HOST:PORT."""
    if not address:
        return LocalExecutor()
    from babelspec.experiments.cluster import RayExecutor

    return RayExecutor(address, workers=workers)


def run_experiment(
    cfg: ExperimentConfig,
    out_dir: str | Path,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
    executor: Executor | None = None,
) -> RunSummary:
    """Run (or resume) the grid into ``out_dir``; ``executor`` defaults to ``cfg.ray``'s."""
    import torch

    started = time.perf_counter()
    executor = executor or make_executor(cfg.ray, cfg.ray_workers)
    # Workers first: no cluster, or a worker lacking the model, fails before the store exists.
    executor.start(cfg, log)
    try:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        summary = RunSummary(out_dir=out, executor=executor.name)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        _write_atomic(out / "config.toml", dump_toml(cfg))
        store = Store(out / STORE_NAME)
        try:
            target = _open_run(cfg, store, log)
            specs = prepare_drafters(cfg, store, target, _artifact_root(cfg, out), log, executor)
            executor.configure(target, specs)
            missing: set[tuple] = set()  # prompts a task does not have, by work-item key
            while todo := plan_stage(cfg, store, specs, summary, log, missing):
                execute_stage(executor, todo, store, summary, progress, missing)
                if not (cfg.sequential.max_prompts_per_cell or cfg.held_out.prompts):
                    break
            summary.worker_deaths = getattr(executor, "deaths", 0)
            executor.close()
            if cfg.divergence.enabled:
                gc.collect()
                with StageTimer(store, "divergence"):
                    _divergence(cfg, store, target, specs, log)
            summary.skipped = store.skips()
            summary.specs = specs
            summary.seconds = time.perf_counter() - started
            store.set_meta("finished_at", time.time())
        finally:
            store.close()
    finally:
        executor.close()

    # Tables and the router, written next to the store.
    from babelspec.experiments.analysis import write_analysis

    write_analysis(out, log=log)
    return summary


@dataclass
class RunPlan:
    """What ``babelspec run --dry-run`` prints: the work left and what it should cost."""

    units: int
    generations: int
    done_before: int
    workers: int
    seconds_per_token: float  # plain decoding, measured on one worker
    max_new_tokens: int
    prepare_jobs: int = 0  # drafters still to train (n-grams, distillation)
    prepare_seconds: float = 0.0  # their estimated wall time (estimate_prepare_seconds)
    sequential_generations: int = 0  # the most the [sequential] rounds can add

    @property
    def hours(self) -> float:
        """Upper estimate: every generation runs to max_new_tokens at plain-decoding speed."""
        per_gen = self.seconds_per_token * self.max_new_tokens
        return self.generations * per_gen / max(1, self.workers) / 3600

    def describe(self) -> str:
        prep = self.prepare_seconds / max(1, self.workers) / 3600
        return (f"{self.units} units, {self.generations} generations to run "
                f"({self.done_before} already stored) on {self.workers} worker(s); "
                f"plain decoding at {1 / self.seconds_per_token:.1f} tokens/s per worker -> "
                f"at most {self.hours:.2f} h (every generation at max_new_tokens = {self.max_new_tokens}); "
                f"{self.prepare_jobs} drafters to train, about {prep:.2f} h; in all about "
                f"{self.hours + prep:.2f} h (divergence and analysis not included)"
                + (f"; the sequential rounds add at most {self.sequential_generations} generations "
                   f"({self.sequential_generations / max(1, self.generations) * self.hours:.2f} h at that bound)"
                   if self.sequential_generations else ""))  # fmt: skip


# Wall seconds to train one drafter on a 2-core CPU, measured in `babelspec run --config
# babelspec/profiles/paper.toml` (the report's stage table has the figures): a distillation is its
# training budget plus the teacher's soft targets and the held-out sets, an n-gram is counted
# in seconds, a distilled n-gram scores the target over its text (and answers its prompts).
# Measured on a 2-core Zen 4 (babelspec/profiles/flores200.toml, stage_seconds): counting a bigram on SIB-200 +
# NTREX + OLDI 0.05-2 s, a general distillation of 4,096 positions 9-12 s per language, a restricted
# head's rows (kind = "head") the same text's tokenisation and the target teacher-forced over 1,024 of
# its tokens (about 3 s: drafters.vocab.predicted_token_ids).
PREPARE_SECONDS = {"distilled_overhead": 90.0, "ngram": 2.0, "ngram_distil_mode": 24.0, "head": 5.0}


def estimate_prepare_seconds(setting: Any) -> float:
    """The estimated wall seconds of preparing ``setting`` for one language (PREPARE_SECONDS)."""
    options = setting.options
    if setting.kind == "distilled":
        budget = (options.get("train") or {}).get("budget_seconds")
        if budget is None:
            from babelspec.distill.pipeline import load_config

            try:
                budget = load_config(options.get("config"), lang="eng").train.budget_seconds
            except ValueError:
                budget = 0.0
        return float(budget or 300.0) + PREPARE_SECONDS["distilled_overhead"]
    if setting.kind == "ngram" and "distil" in options:
        modes = options["distil"]
        share = float(options.get("distil_tokens", 8192)) / 8192  # the seconds are for 8,192 positions
        return PREPARE_SECONDS["ngram_distil_mode"] * share * (1 if isinstance(modes, str) else len(modes))
    return PREPARE_SECONDS.get(setting.kind, 0.0)


def dry_run(cfg: ExperimentConfig, out_dir: str | Path, *, log: Callable[[str], None] = print,
            executor: Executor | None = None) -> RunPlan:  # fmt: skip
    """The plan of ``run_experiment`` without running it: nothing is written to ``out_dir``.

    Every configured drafter setting is counted (preparation may later skip some), minus what
    an existing store already holds; the speed is one worker's, measured on a short plain
    decoding."""
    import torch

    executor = executor or make_executor(cfg.ray, cfg.ray_workers)
    every = {lang: [d.name for d in cfg.settings_for(lang)] for lang in cfg.languages}
    if cfg.held_out.prompts:  # stage 2 counted with one speculative setting per cell (what it chooses)
        from babelspec.experiments.held_out import estimated_items

        items = estimated_items(cfg, every)
    else:
        items = plan(cfg, every)
    path = Path(out_dir) / STORE_NAME
    done: set = set()
    if path.is_file():
        with Store(path) as store:
            done = store.done_keys()
    todo = [it for it in items if it.key not in done]
    extra = 0
    if cfg.sequential.max_prompts_per_cell:
        cap = {(lang, task): cfg.sequential.max_prompts_per_cell for lang in cfg.languages for task in cfg.tasks}
        extra = sum(1 for it in plan(cfg, every, cap) if it.key not in done) - len(todo)
    executor.start(cfg, log)
    try:
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        target = load_config_target(cfg) if executor.name == "local" else None
        spt = executor.seconds_per_token(target)
        workers = executor.workers
    finally:
        executor.close()
    prepared = {}  # (setting, language) -> seconds; a multilingual distillation is trained once
    done_specs = {}
    if path.is_file():
        with Store(path) as store:
            done_specs = store.meta().get("specs", {})
    for lang in cfg.languages:
        for setting in cfg.settings_for(lang):
            if not setting.prepared or f"{setting.name}|{lang}" in done_specs:
                continue
            prepared[(setting.name, "mix" if setting.mix else lang)] = estimate_prepare_seconds(setting)
    return RunPlan(units=len(units_of(todo)), generations=len(todo), done_before=len(items) - len(todo),
                   workers=workers, seconds_per_token=spt, max_new_tokens=cfg.max_new_tokens,
                   prepare_jobs=len(prepared), prepare_seconds=sum(prepared.values()),
                   sequential_generations=extra)  # fmt: skip


def _open_run(cfg: ExperimentConfig, store: Store, log: Callable[[str], None]):
    store.set_meta("config", cfg.to_dict())
    store.set_meta("versions", versions())
    if "started_at" not in store.meta():
        store.set_meta("started_at", time.time())
    log(f"loading target {cfg.target}")
    target = load_config_target(cfg)
    store.set_meta("execution", execution(target))
    store.set_meta("target", {"spec": cfg.target, "name": getattr(target, "name", ""),
                              "vocab_size": target.vocab_size})  # fmt: skip
    return target


def prepare_drafters(cfg: ExperimentConfig, store: Store, target, artifacts: Path,
                     log: Callable[[str], None], executor: Executor | None = None,
                     ) -> dict[tuple[str, str], str]:  # fmt: skip
    """Stage 1: the drafter spec of every (setting, language) that can run; skips recorded.

    Settings with a fixed spec are resolved here; those to train (n-grams, distillation) are
    prepared by ``executor`` (here by default, or on the cluster's workers)."""
    specs: dict[tuple[str, str], str] = {}
    jobs = []
    sharing: dict[str, list[str]] = {}  # a multilingual drafter: one job, every language's spec
    for lang in cfg.languages:
        for setting in cfg.settings_for(lang):
            if setting.prepared:
                if setting.mix:
                    if setting.name in sharing:
                        sharing[setting.name].append(lang)
                        continue
                    sharing[setting.name] = []
                jobs.append(PrepareJob(setting, lang, artifacts / setting.kind))
            else:
                specs[(setting.name, lang)] = setting.spec.format(lang=lang, task="{task}")
                store.clear_skip(setting.name, lang)
    stage_seconds = dict(store.meta().get("stage_seconds", {}))
    executor = executor or _started(LocalExecutor(), cfg, log)
    for job, spec, reason, seconds in executor.prepare(jobs, target):
        name = job.setting.name
        for lang in [job.language, *sharing.get(name, [])]:
            if spec:
                specs[(name, lang)] = spec
                store.clear_skip(name, lang)
            else:
                log(f"skipping {name} for {lang}: {reason}")
                store.add_skip(name, lang, reason)
        key = f"prepare {name} {job.language}"
        stage_seconds[key] = stage_seconds.get(key, 0.0) + seconds
        store.set_meta("stage_seconds", stage_seconds)
    store.set_meta("specs", {f"{d}|{lang}": s for (d, lang), s in specs.items()})
    store.set_meta("trained_on", {s.name: s.trained_on for s in cfg.drafters})
    return specs



def _started(executor: Executor, cfg: ExperimentConfig, log: Callable[[str], None]) -> Executor:
    executor.start(cfg, log)
    return executor


def plan_stage(cfg: ExperimentConfig, store: Store, specs: dict[tuple[str, str], str],
               summary: RunSummary, log: Callable[[str], None], missing: set[tuple] = frozenset()) -> list[Unit]:  # fmt: skip
    """Stage 2: the units of the grid, holding only the examples the store lacks (nor the
    prompts in ``missing``, which the task does not have). With ``[sequential]`` rounds, each
    call plans the next round (``sequential.prompt_counts``) from what the store holds; with
    ``[held_out]`` prompts, the choosing prompts, then the held-out ones of the settings they
    chose (``held_out.plan_stages``)."""
    available = {lang: [d.name for d in cfg.settings_for(lang) if (d.name, lang) in specs]
                 for lang in cfg.languages}  # fmt: skip
    counts = None
    if cfg.held_out.prompts:
        from babelspec.experiments.held_out import plan_stages

        items = plan_stages(cfg, available, store.records(), specs, missing)
    else:
        if cfg.sequential.max_prompts_per_cell:
            from babelspec.experiments.sequential import cell_settings, prompt_counts

            counts = prompt_counts(cfg, split_llama_cpp(store.records())[0], cell_settings(cfg, available))
        items = plan(cfg, available, counts)
    done = store.done_keys()
    todo = [it for it in items if it.key not in done and it.key not in missing]
    first = summary.planned == 0
    if first:
        summary.planned, summary.done_before = len(items), len(items) - len(todo)
        log(f"{len(items)} examples planned, {summary.done_before} already in the store")
    elif todo:
        summary.planned += len(todo)
        cells = len({(it.language, it.task) for it in todo})
        if cfg.held_out.prompts:
            log(f"held-out prompts of the chosen settings: {len(todo)} more examples for {cells} cell(s)")
        else:
            log(f"sequential round: {len(todo)} more examples for {cells} undecided cell(s)")
    return units_of(todo)


def execute_stage(executor: Executor, units: list[Unit], store: Store, summary: RunSummary,
                  progress: bool, missing: set[tuple] | None = None) -> None:  # fmt: skip
    """Stage 3: every unit through the executor; this process writes each result it returns.
    The keys of items that gave no record (a prompt the task does not have, a drafter that
    could not be built) go into ``missing``, so a later round does not plan them again."""
    n = sum(len(u.items) for u in units)
    bar = _progress(summary.planned, summary.planned - n, progress)

    def sink(items: list[WorkItem], results: list[Result]) -> None:
        for it, res in zip(items, results, strict=True):
            if isinstance(res, ExampleRecord):
                summary.generated += store.add(res)  # its own transaction; False if already there
            elif isinstance(res, Skip):
                store.add_skip(res.drafter, res.language, res.reason)
            if not isinstance(res, ExampleRecord) and missing is not None:
                missing.add(it.key)  # a prompt the task lacks, a drafter that cannot be built: not again
            bar.update(1)
            bar.set_postfix_str(f"{it.language}/{it.task}/{it.drafter}/g{it.gamma}", refresh=False)
        timer.checkpoint()

    timer = StageTimer(store, "grid")
    try:
        with timer:
            executor.execute(units, sink)
    finally:
        bar.close()


class StageTimer:
    """Adds the wall time of a stage to the store's ``stage_seconds`` (also when it fails).
    ``checkpoint`` writes the time so far at most every ``every`` seconds, so a run killed
    mid-stage (SIGKILL, a session's end) loses at most that much of it: a wide run resumed after
    a kill still states its whole stage time."""

    def __init__(self, store: Store, name: str, every: float = 30.0) -> None:
        self.store, self.name, self.every = store, name, every

    def __enter__(self) -> StageTimer:
        self.last = time.perf_counter()
        return self

    def checkpoint(self, force: bool = False) -> None:
        now = time.perf_counter()
        if force or now - self.last >= self.every:
            seconds = dict(self.store.meta().get("stage_seconds", {}))
            seconds[self.name] = seconds.get(self.name, 0.0) + now - self.last
            self.store.set_meta("stage_seconds", seconds)
            self.last = now

    def __exit__(self, *exc: object) -> None:
        self.checkpoint(force=True)


def _artifact_root(cfg: ExperimentConfig, out: Path) -> Path:
    if cfg.shared_cache:
        from babelspec.models import cache_dir

        return cache_dir() / "artifacts"
    return out / "artifacts"


def _divergence(cfg: ExperimentConfig, store: Store, target, specs, log) -> None:
    from babelspec.drafters import make_drafter
    from babelspec.experiments.divergence import language_divergence

    done = {(r["language"], r["drafter"]) for r in store.divergence()}
    wanted = set(cfg.divergence.drafters) or {d.name for d in cfg.drafters}
    sampling = cfg.sampling_config(0)
    for lang in cfg.languages:
        todo = [d for d in cfg.settings_for(lang)
                if d.name in wanted and (d.name, lang) in specs and (lang, d.name) not in done]  # fmt: skip
        if not todo:
            continue
        try:
            from babelspec.data import corpus

            held_out = prompt_data(cfg.data, lang)  # the [data] test sentences, else bundled test
            texts = [r["text"] for r in held_out.test] if held_out else corpus.monolingual(lang, "test")
            texts = texts[: cfg.divergence.texts_per_language]
        except (ImportError, ValueError, OSError) as exc:
            log(f"divergence: no held-out text for {lang}: {exc}")
            continue
        for d in todo:
            try:
                drafter = make_drafter(specs[(d.name, lang)].replace("{task}", "translation"),
                                       target, lang=lang, task="translation")  # fmt: skip
            except (ValueError, ImportError, OSError) as exc:
                log(f"divergence: cannot build {d.name} for {lang}: {exc}")
                continue
            res = language_divergence(target, drafter, texts, sampling, lang, d.name,
                                      max_tokens=cfg.divergence.max_tokens_per_text)  # fmt: skip
            store.add_divergence(res.to_dict())
            log(f"divergence {lang}/{d.name}: TV/char {res.tv_per_char:.4f}, "
                f"expected alpha {res.expected_alpha:.3f}")  # fmt: skip
            del drafter
            gc.collect()


class _NoBar:
    def update(self, n: int = 1) -> None: ...
    def set_postfix_str(self, s: str, refresh: bool = True) -> None: ...
    def close(self) -> None: ...


def _progress(total: int, initial: int, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="gen", desc="babelspec run", dynamic_ncols=True)


def install_router(router_path: Path) -> Path | None:
    """Copy a run's router to where ``--drafter auto`` finds it without a file name."""
    from babelspec.router import Router, default_router_path

    dest = default_router_path()
    try:  # save() re-bases drafter paths on the copy's folder, so they stay valid
        return Router.load(router_path).save(dest)
    except OSError:
        return None
