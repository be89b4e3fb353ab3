"""What runs the grid's generations on one machine, whichever executor drives it.

A ``Unit`` is one prompt with all its settings (plain decoding and every drafter x gamma):
the measured speedup compares a speculative generation with plain decoding of the same
prompt under the same load, so a unit always runs back to back on one worker. ``UnitRunner``
holds the target, the output checker and the current language's drafters, and turns a work
item into a record; it never touches the store (the driver is the only writer).
"""

from __future__ import annotations

import gc
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from babelspec.data.langid import OutputChecker
from babelspec.experiments.config import DrafterSetting, ExperimentConfig
from babelspec.experiments.store import ExampleRecord
from babelspec.machine import machine_fingerprint
from babelspec.router import BASELINE, LLAMA_CPP


@dataclass
class Prompt:
    ids: list[int]
    stop_strings: tuple[str, ...] = ()
    text: str = ""


@dataclass
class WorkItem:
    language: str
    task: str
    prompt_index: int
    seed: int
    drafter: str  # setting name, "none" for plain decoding
    gamma: int  # 0 for plain decoding

    @property
    def key(self) -> tuple[str, str, str, int, int, int]:
        return (self.language, self.task, self.drafter, self.gamma, self.prompt_index, self.seed)


@dataclass
class Unit:
    """One prompt of one task and language with every setting still to run, in run order."""

    language: str
    task: str
    prompt_index: int
    seed: int
    items: list[WorkItem] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.language, self.task, self.prompt_index, self.seed)


@dataclass
class Skip:
    """A drafter setting that could not be built for a language (the report lists it)."""

    drafter: str
    language: str
    reason: str


Result = ExampleRecord | Skip | None  # None: the task has fewer prompts than asked


def plan(cfg: ExperimentConfig, available: dict[str, list[str]],
         counts: dict[tuple[str, str], int] | None = None) -> list[WorkItem]:  # fmt: skip
    """Every example of the grid, grouped by language, task and prompt (interleaved order);
    ``counts[(lang, task)]`` prompts per cell (``sequential.prompt_counts``), else ``prompts_per_cell``.
    llama.cpp's plain decoding (``llama_cpp = true``) runs on the measuring (odd-numbered) prompts
    only: nothing is chosen against it."""
    items = []
    for lang in cfg.languages:
        settings = [(BASELINE, 0)] if cfg.baseline else []
        settings += [(LLAMA_CPP, 0)] if cfg.llama_cpp else []
        settings += [(name, g) for name in available.get(lang, []) for g in cfg.gammas]
        for task in cfg.tasks:
            n = counts.get((lang, task), cfg.prompts_per_cell) if counts is not None else cfg.prompts_per_cell
            for i in range(n):
                mine = [s for s in settings if s[0] != LLAMA_CPP or i % 2 == 1]
                for seed in cfg.seeds:
                    shift = (i + seed) % max(1, len(mine))  # rotate so no setting always runs first
                    for name, g in mine[shift:] + mine[:shift]:
                        items.append(WorkItem(lang, task, i, seed, name, g))
    return items


def units_of(items: list[WorkItem]) -> list[Unit]:
    """``items`` grouped into units, keeping their order (``plan`` puts a unit's items together)."""
    units: dict[tuple, Unit] = {}
    for it in items:
        key = (it.language, it.task, it.prompt_index, it.seed)
        if key not in units:
            units[key] = Unit(it.language, it.task, it.prompt_index, it.seed)
        units[key].items.append(it)
    return list(units.values())


def generation_seed(seed: int, prompt_index: int) -> int:
    """Plain and speculative decoding of one prompt share a seed (not that it matters for
    the distribution: verification is lossless). It never depends on where a unit runs."""
    return seed * 1_000_003 + prompt_index


def task_prompts(task: str, lang: str, tokenizer, n: int, data=None) -> list[Prompt]:
    """``n`` prompts of a task for a language, as token ids with their stop strings; ``data``
    (the config's ``[data]`` section) says which sentences, when it has a table for ``lang``."""
    from babelspec.data.tasks import get_task

    out = []
    for p in get_task(task).prompts(lang, tokenizer, n, data=prompt_data(data, lang)):
        ids = _first_attr(p, ("token_ids", "ids", "input_ids"))
        text = _first_attr(p, ("text", "prompt")) if not isinstance(p, str) else p
        if ids is None:  # a chat template may already have put the BOS token in the text
            bos = getattr(tokenizer, "bos_token", None)
            special = not (bos and text.startswith(bos))
            ids = tokenizer(text, add_special_tokens=special)["input_ids"]
        stops = _first_attr(p, ("stop_strings", "stop")) or ()
        out.append(Prompt(ids=list(ids), stop_strings=tuple(stops), text=text or ""))
    return out


def prompt_data(data, lang: str):
    """The test and few-shot records of ``lang`` from a ``[data]`` section (None: bundled)."""
    if data is None or data.bundled(lang):
        return None
    from babelspec.data.sources import parallel_records
    from babelspec.data.tasks import PromptData

    test, shots, _ = data.sources(lang)
    return PromptData(test=parallel_records(test, lang), shots=parallel_records(shots, lang))


def _first_attr(obj: Any, names: tuple[str, ...]) -> Any:
    for name in names:
        value = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
        if value is not None:
            return value
    return None


def versions() -> dict[str, str]:
    import babelspec

    out = {"babelspec": babelspec.__version__}
    for name in ("torch", "transformers"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = ""
    return out


class UnitRunner:
    """Generations of work items on this machine; the target is loaded once by the caller."""

    def __init__(self, cfg: ExperimentConfig, target, specs: dict[tuple[str, str], str],
                 log: Callable[[str], None] = print) -> None:  # fmt: skip
        self.cfg, self.target, self.specs, self.log = cfg, target, specs, log
        self.trained_on = {s.name: s.trained_on for s in cfg.drafters}
        self.checker = OutputChecker.from_corpora(
            cfg.languages, root=cfg.data.root or None, loop_ngram=cfg.checks.loop_ngram, loop_threshold=cfg.checks.loop_threshold,
            min_language_score=cfg.checks.min_language_score, use_langid=cfg.checks.langid_package,
        )  # fmt: skip
        self.drafters: dict[tuple[str, str, str], Any] = {}  # (setting, language, task) -> drafter
        self.prompts: dict[tuple[str, str], list[Prompt]] = {}
        self.versions = versions()
        self.machine = machine_fingerprint(target)
        self.llama: Any = None  # llama.cpp's model (llama_cpp = true), or why it cannot run here

    def run(self, it: WorkItem) -> Result:
        from babelspec.drafters import make_drafter
        from babelspec.engine import generate

        cfg = self.cfg
        key = (it.language, it.task)
        if key not in self.prompts:
            # as many as the sequential rounds may ask for: the first n of them are the same for any n
            self.prompts[key] = task_prompts(it.task, it.language, self.target.tokenizer, cfg.max_prompts,
                                             cfg.data)  # fmt: skip
        if it.prompt_index >= len(self.prompts[key]):
            return None  # the task has fewer prompts for this language than asked
        prompt = self.prompts[key][it.prompt_index]
        if it.drafter == LLAMA_CPP:
            return self._llama_cpp(it, prompt)
        skip = None
        if it.drafter == BASELINE:
            drafter = make_drafter("none", self.target)
        else:
            # A drafter is built for its task too: a spec's {task} and an auto setting's route
            # name the task's own drafter, so a cached one must never serve another task.
            dkey = (it.drafter, it.language, it.task)
            if dkey not in self.drafters:
                self._drop_other_cells(it.language, it.task)
                try:
                    spec = resolved_spec(self.specs, it)
                    self.drafters[dkey] = make_drafter(spec, self.target, lang=it.language, task=it.task)
                except (ValueError, ImportError, OSError) as exc:
                    self.log(f"skipping {it.drafter} for {it.language}: cannot build it: {exc}")
                    self.drafters[dkey] = None
                    skip = Skip(it.drafter, it.language, f"cannot build the drafter: {exc}")
            drafter = self.drafters[dkey]
            if drafter is None:
                return skip
        sampling = cfg.sampling_config(generation_seed(it.seed, it.prompt_index))
        t0, cpu0 = time.time(), time.process_time()
        result = generate(
            self.target, drafter, prompt.ids, gamma=max(1, it.gamma),
            max_new_tokens=cfg.max_new_tokens, sampling=sampling, stop_strings=prompt.stop_strings,
        )  # fmt: skip
        cpu = time.process_time() - cpu0
        check = self.checker.check(result.text, it.language)
        record = make_record(it, result, check, prompt, self.specs, self.trained_on, self.versions, t0,
                             self.machine)  # fmt: skip
        record.cpu_seconds, record.load_average = round(cpu, 4), _load_average()
        return record

    def _llama_cpp(self, it: WorkItem, prompt: Prompt) -> Result:
        """llama.cpp's plain decoding of the prompt on the target's GGUF (opened once), under the
        run's sampling and length, cut at the prompt's stop strings as ``generate`` cuts; a
        ``Skip`` saying why where llama.cpp cannot run here (the report then says so)."""
        if self.llama is None:
            self.llama = _open_llama_cpp(self.cfg.target, self.target)
        if isinstance(self.llama, str):
            return Skip(LLAMA_CPP, it.language, self.llama)
        record, check_text = llama_cpp_record(self.llama, self.target.tokenizer, it, prompt, self.cfg)
        check = self.checker.check(check_text, it.language)
        record.in_language, record.language_score = check.in_language, check.language_score
        record.classifier_language, record.langid_language = check.classifier_language, check.langid_language
        record.loop_ratio, record.looped = check.loop_ratio, check.looped
        record.versions, record.machine = {**self.versions, "llama_cpp": self.llama.description}, self.machine
        record.load_average = _load_average()
        return record

    def drop_drafters(self) -> None:
        self.drafters.clear()
        gc.collect()

    def _drop_other_cells(self, lang: str, task: str) -> None:
        # One language and task's drafters at a time: distilled students are whole models.
        stale = [k for k in self.drafters if k[1:] != (lang, task)]
        for k in stale:
            del self.drafters[k]
        if stale:
            gc.collect()


def _open_llama_cpp(spec: str, target) -> Any:
    """llama.cpp on the target's GGUF with the target's thread count, or why it cannot run."""
    import torch

    from babelspec.models.llamacpp import LlamaCppUnavailable, open_llama_cpp

    try:
        return open_llama_cpp(spec, threads=torch.get_num_threads())
    except (LlamaCppUnavailable, OSError, ValueError) as exc:
        return f"llama.cpp cannot run here: {exc}"


def llama_cpp_record(llama, tokenizer, it: WorkItem, prompt: Prompt, cfg: ExperimentConfig) -> tuple[ExampleRecord, str]:
    """(the record, the text) of llama.cpp's plain decoding of one work item. Its prefill is the
    prompt's evaluation and first token; decode time is the rest, and its rate
    (``aggregate.fill_vs_llama_cpp``) counts the tokens after the first, none that took no decode time."""
    from babelspec.engine import text_before_stop

    sampling = cfg.sampling_config(generation_seed(it.seed, it.prompt_index))
    stops = tuple(prompt.stop_strings)

    def stop(tokens: list[int]) -> bool:
        return bool(stops) and any(s in tokenizer.decode(tokens, skip_special_tokens=True) for s in stops)

    t0 = time.time()
    started = time.perf_counter()
    tokens = llama.generate(prompt.ids, cfg.max_new_tokens, greedy=sampling.greedy, seed=sampling.seed,
                            top_k=sampling.top_k, top_p=sampling.top_p, temperature=sampling.temperature,
                            repeat_penalty=sampling.repetition_penalty, stop=stop)  # fmt: skip
    wall = time.perf_counter() - started
    decoded = tokenizer.decode(tokens, skip_special_tokens=True)
    text = text_before_stop(decoded, stops)
    # the engine's stop reasons, so llama.cpp's records count as plain decoding's do
    reason = "stop_string" if text != decoded else "length" if len(tokens) >= cfg.max_new_tokens else "eos"
    record = ExampleRecord(
        language=it.language, task=it.task, drafter=LLAMA_CPP, gamma=0, prompt_index=it.prompt_index, seed=it.seed,
        drafter_spec=LLAMA_CPP, wall_seconds=wall, prefill_seconds=min(llama.first_token_seconds, wall),
        n_tokens=len(tokens), n_chars=len(text), prompt_tokens=len(prompt.ids),
        stop_reason=reason, text=text,
        started_at=t0, finished_at=time.time(),
    )  # fmt: skip
    return record, text


def _load_average() -> float:
    """The machine's 1-minute load average (NaN where the platform has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return math.nan


def resolved_spec(specs: dict[tuple[str, str], str], it: WorkItem) -> str:
    """The drafter spec a work item runs: its setting's spec for the language, ``{task}``
    filled with the item's task."""
    return specs[(it.drafter, it.language)].replace("{task}", it.task)


def make_record(it: WorkItem, result, check, prompt: Prompt, specs: dict[tuple[str, str], str],
                trained_on: dict[str, str], ver: dict[str, str], t0: float,
                machine: dict[str, Any] | None = None) -> ExampleRecord:  # fmt: skip
    """The stored record of one generation (``result``) and its output check."""
    return ExampleRecord(
        language=it.language, task=it.task, drafter=it.drafter, gamma=it.gamma,
        prompt_index=it.prompt_index, seed=it.seed,
        drafter_spec=BASELINE if it.drafter == BASELINE else resolved_spec(specs, it),
        trained_on=trained_on.get(it.drafter, ""),
        # NaN where nothing was judged or drafted: stored as NULL, never as 0
        alpha=result.alpha, alpha_token=result.alpha_token,
        mean_accepted_length=result.mean_accepted_length,
        proposed=result.proposed, accepted=result.accepted, rejections=result.rejections,
        steps=result.steps, accepted_per_step=list(result.accepted_per_step),
        proposed_per_step=list(result.proposed_per_step), depth_per_step=list(result.depth_per_step),
        rejected_per_step=list(result.rejected_per_step),
        draft_seconds=result.draft_seconds, target_seconds=result.target_seconds,
        wall_seconds=result.wall_seconds, prefill_seconds=result.prefill_seconds,
        draft_start_seconds=result.draft_start_seconds,
        draft_forward_seconds=[round(x, 7) for x in result.draft_forward_seconds],
        target_forward_seconds=[round(x, 7) for x in result.target_forward_seconds],
        c=result.c, n_tokens=result.n_tokens, n_chars=result.n_chars,
        prompt_tokens=len(prompt.ids), stop_reason=result.stop_reason, text=result.text,
        in_language=check.in_language, language_score=check.language_score,
        classifier_language=check.classifier_language, langid_language=check.langid_language,
        loop_ratio=check.loop_ratio, looped=check.looped, versions=ver, machine=machine or {},
        started_at=t0, finished_at=time.time(),
    )  # fmt: skip


@dataclass
class PrepareJob:
    """One drafter setting to train (n-gram counting, distillation) for one language."""

    setting: DrafterSetting
    language: str
    artifacts: Path  # the folder for this kind's files (the run's, or the shared cache)


def prepare_one(cfg: ExperimentConfig, target, job: PrepareJob,
                log: Callable[[str], None]) -> tuple[str, str, float]:  # fmt: skip
    """(spec, "", seconds), or ("", why the setting cannot be built for the language, seconds)."""
    from babelspec.experiments.prepare import DrafterUnavailable, PrepareRequest, prepare

    t0 = time.perf_counter()
    try:
        req = PrepareRequest(job.setting, job.language, cfg.target, target, job.artifacts, log=log,
                             data=cfg.data, sampling=cfg.sampling_config(0))  # fmt: skip
        return prepare(req), "", time.perf_counter() - t0
    except DrafterUnavailable as exc:
        return "", str(exc), time.perf_counter() - t0


def speed_probe(cfg: ExperimentConfig, target, tokens: int = 16) -> float:
    """Seconds per token of a plain generation of ``max_new_tokens`` on this machine, its
    prefill included (the dry run's cost estimate)."""
    from babelspec.drafters import make_drafter
    from babelspec.engine import generate

    prompt = task_prompts(cfg.tasks[0], cfg.languages[0], target.tokenizer, 1, cfg.data)[0]
    n = min(tokens, cfg.max_new_tokens)
    plain = make_drafter("none", target)
    sampling = cfg.sampling_config(0)
    generate(target, plain, prompt.ids, gamma=1, max_new_tokens=2, sampling=sampling)  # warm-up
    result = generate(target, plain, prompt.ids, gamma=1, max_new_tokens=n, sampling=sampling)
    # a generation at max_new_tokens: one prefill, then that many decode steps
    decode = (result.wall_seconds - result.prefill_seconds) / max(1, result.n_tokens)
    return decode + result.prefill_seconds / max(1, cfg.max_new_tokens)


def load_config_target(cfg: ExperimentConfig):
    """The run's verifier as the config asks for it: the driver and every worker load it so."""
    from babelspec.forward import ForwardOptions
    from babelspec.target import load_target

    return load_target(cfg.target, dtype=cfg.dtype, precision=cfg.precision or None, head=cfg.head,
                       forward=cfg.forward, options=ForwardOptions(native=cfg.native))  # fmt: skip
