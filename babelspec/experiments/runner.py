"""The runner: the grid languages x tasks x drafter settings x gamma, plus plain decoding.

Every example is stored as it finishes (``store.Store``), so a run killed at any point
resumes where it stopped. For each prompt the plain decoding and every speculative setting
run back to back (in an order rotated per prompt), so each wall-clock ratio compares
generations measured side by side under the same machine load.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from babelspec.experiments.checks import OutputChecker
from babelspec.experiments.config import ExperimentConfig, dump_toml
from babelspec.experiments.prepare import DrafterUnavailable, PrepareRequest, prepare
from babelspec.experiments.store import STORE_NAME, ExampleRecord, Key, Store
from babelspec.fileio import write_text_atomic
from babelspec.routing import BASELINE


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
    def key(self) -> Key:
        return (self.language, self.task, self.drafter, self.gamma, self.prompt_index, self.seed)


@dataclass
class RunSummary:
    out_dir: Path
    planned: int = 0
    done_before: int = 0
    generated: int = 0
    skipped: list[tuple[str, str, str]] = field(default_factory=list)
    specs: dict[tuple[str, str], str] = field(default_factory=dict)
    seconds: float = 0.0


def versions() -> dict[str, str]:
    import babelspec

    out = {"babelspec": babelspec.__version__}
    for name in ("torch", "transformers"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = ""
    return out


_write_atomic = write_text_atomic


def load_run_target(spec: str):
    """The verifier for a preset name or a local model directory."""
    from babelspec.models import load_target

    return load_target(spec)


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
    if data is None or lang not in data.languages:
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


def plan(cfg: ExperimentConfig, available: dict[str, list[str]]) -> list[WorkItem]:
    """Every example of the grid, grouped by language, task and prompt (interleaved order)."""
    items = []
    for lang in cfg.languages:
        units = [(BASELINE, 0)] if cfg.baseline else []
        units += [(name, g) for name in available.get(lang, []) for g in cfg.gammas]
        for task in cfg.tasks:
            for i in range(cfg.prompts_per_cell):
                for seed in cfg.seeds:
                    shift = (i + seed) % max(1, len(units))  # rotate so no setting always runs first
                    for name, g in units[shift:] + units[:shift]:
                        items.append(WorkItem(lang, task, i, seed, name, g))
    return items


def generation_seed(seed: int, prompt_index: int) -> int:
    """Plain and speculative decoding of one prompt share a seed (not that it matters for
    the distribution: verification is lossless)."""
    return seed * 1_000_003 + prompt_index


def run_experiment(
    cfg: ExperimentConfig,
    out_dir: str | Path,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> RunSummary:
    import torch

    from babelspec.drafters import make_drafter
    from babelspec.engine import generate

    started = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = RunSummary(out_dir=out)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    _write_atomic(out / "config.toml", dump_toml(cfg))
    store = Store(out / STORE_NAME)
    store.set_meta("config", cfg.to_dict())
    store.set_meta("versions", versions())
    meta = store.meta()
    if "started_at" not in meta:
        store.set_meta("started_at", time.time())

    log(f"loading target {cfg.target}")
    target = load_run_target(cfg.target)
    tokenizer = target.tokenizer
    store.set_meta("target", {"spec": cfg.target, "name": getattr(target, "name", ""),
                              "vocab_size": target.vocab_size})  # fmt: skip

    artifacts = _artifact_root(cfg, out)
    # 1. Prepare every drafter setting for every language (train n-grams, distil, ...).
    specs: dict[tuple[str, str], str] = {}
    stage_seconds = dict(store.meta().get("stage_seconds", {}))
    for lang in cfg.languages:
        for setting in cfg.settings_for(lang):
            t_prep = time.perf_counter()
            try:
                if setting.prepared:
                    req = PrepareRequest(setting, lang, cfg.target, target,
                                         artifacts / setting.kind, log=log, data=cfg.data)  # fmt: skip
                    specs[(setting.name, lang)] = prepare(req)
                else:
                    specs[(setting.name, lang)] = setting.spec.format(lang=lang, task="{task}")
                store.clear_skip(setting.name, lang)
            except DrafterUnavailable as exc:
                log(f"skipping {setting.name} for {lang}: {exc}")
                store.add_skip(setting.name, lang, str(exc))
            if setting.prepared:
                key = f"prepare {setting.name} {lang}"
                stage_seconds[key] = stage_seconds.get(key, 0.0) + time.perf_counter() - t_prep
    store.set_meta("specs", {f"{d}|{lang}": s for (d, lang), s in specs.items()})
    store.set_meta("trained_on", {s.name: s.trained_on for s in cfg.drafters})

    checker = OutputChecker.from_corpora(
        cfg.languages, loop_ngram=cfg.checks.loop_ngram, loop_threshold=cfg.checks.loop_threshold,
        min_language_score=cfg.checks.min_language_score, use_langid=cfg.checks.langid_package,
    )  # fmt: skip

    # 2. The grid, skipping what the store already holds.
    available = {lang: [d.name for d in cfg.settings_for(lang) if (d.name, lang) in specs]
                 for lang in cfg.languages}  # fmt: skip
    items = plan(cfg, available)
    done = store.done_keys()
    todo = [it for it in items if it.key not in done]
    summary.planned, summary.done_before = len(items), len(items) - len(todo)
    log(f"{len(items)} examples planned, {summary.done_before} already in the store")

    trained_on = {s.name: s.trained_on for s in cfg.drafters}
    drafters: dict[tuple[str, str], Any] = {}
    prompts: dict[tuple[str, str], list[Prompt]] = {}
    ver = versions()
    bar = _progress(len(items), summary.done_before, progress)
    t_stage = time.perf_counter()
    try:
        for it in todo:
            key = (it.language, it.task)
            if key not in prompts:
                prompts[key] = task_prompts(it.task, it.language, tokenizer, cfg.prompts_per_cell, cfg.data)
            if it.prompt_index >= len(prompts[key]):
                bar.update(1)
                continue  # the task has fewer prompts for this language than asked
            prompt = prompts[key][it.prompt_index]
            if it.drafter == BASELINE:
                drafter = make_drafter("none", target)
            else:
                dkey = (it.drafter, it.language)
                if dkey not in drafters:
                    _drop_other_languages(drafters, it.language)
                    try:
                        spec = specs[dkey].replace("{task}", it.task)
                        drafters[dkey] = make_drafter(spec, target, lang=it.language, task=it.task)
                    except (ValueError, ImportError, OSError) as exc:
                        log(f"skipping {it.drafter} for {it.language}: cannot build it: {exc}")
                        store.add_skip(it.drafter, it.language, f"cannot build the drafter: {exc}")
                        drafters[dkey] = None
                drafter = drafters[dkey]
                if drafter is None:
                    bar.update(1)
                    continue
            sampling = cfg.sampling_config(generation_seed(it.seed, it.prompt_index))
            t0 = time.time()
            result = generate(
                target, drafter, prompt.ids, gamma=max(1, it.gamma),
                max_new_tokens=cfg.max_new_tokens, sampling=sampling,
                stop_strings=prompt.stop_strings,
            )  # fmt: skip
            check = checker.check(result.text, it.language)
            record = _record(it, result, check, prompt, specs, trained_on, ver, t0)
            store.add(record)
            summary.generated += 1
            bar.update(1)
            bar.set_postfix_str(f"{it.language}/{it.task}/{it.drafter}/g{it.gamma}", refresh=False)
    finally:
        bar.close()
        stage_seconds["grid"] = stage_seconds.get("grid", 0.0) + time.perf_counter() - t_stage
        store.set_meta("stage_seconds", stage_seconds)

    # 3. Divergence on held-out text, per language and setting.
    if cfg.divergence.enabled:
        drafters.clear()
        gc.collect()
        t_stage = time.perf_counter()
        _divergence(cfg, store, target, specs, log)
        stage_seconds["divergence"] = stage_seconds.get("divergence", 0.0) + time.perf_counter() - t_stage
        store.set_meta("stage_seconds", stage_seconds)

    summary.skipped = store.skips()
    summary.specs = specs
    summary.seconds = time.perf_counter() - started
    store.set_meta("finished_at", time.time())
    store.close()

    # 4. Tables and the router, written next to the store.
    from babelspec.experiments.analysis import write_analysis

    write_analysis(out, log=log)
    return summary


def _artifact_root(cfg: ExperimentConfig, out: Path) -> Path:
    if cfg.shared_cache:
        from platformdirs import user_cache_dir

        return Path(os.environ.get("BABELSPEC_CACHE") or user_cache_dir("babelspec")) / "artifacts"
    return out / "artifacts"


def _drop_other_languages(drafters: dict, lang: str) -> None:
    # One language's drafters at a time: distilled students are whole models.
    stale = [k for k in drafters if k[1] != lang]
    for k in stale:
        del drafters[k]
    if stale:
        gc.collect()


def _record(it: WorkItem, result, check, prompt: Prompt, specs, trained_on, ver, t0) -> ExampleRecord:
    return ExampleRecord(
        language=it.language, task=it.task, drafter=it.drafter, gamma=it.gamma,
        prompt_index=it.prompt_index, seed=it.seed,
        drafter_spec=BASELINE if it.drafter == BASELINE else specs[(it.drafter, it.language)],
        trained_on=trained_on.get(it.drafter, ""),
        # NaN where nothing was judged or drafted: stored as NULL, never as 0
        alpha=result.alpha, alpha_token=result.alpha_token,
        mean_accepted_length=result.mean_accepted_length,
        proposed=result.proposed, accepted=result.accepted, rejections=result.rejections,
        steps=result.steps, accepted_per_step=list(result.accepted_per_step),
        proposed_per_step=list(result.proposed_per_step),
        draft_seconds=result.draft_seconds, target_seconds=result.target_seconds,
        wall_seconds=result.wall_seconds,
        draft_forward_seconds=[round(x, 7) for x in result.draft_forward_seconds],
        target_forward_seconds=[round(x, 7) for x in result.target_forward_seconds],
        c=result.c, n_tokens=result.n_tokens, n_chars=result.n_chars,
        prompt_tokens=len(prompt.ids), stop_reason=result.stop_reason, text=result.text,
        in_language=check.in_language, language_score=check.language_score,
        classifier_language=check.classifier_language, langid_language=check.langid_language,
        loop_ratio=check.loop_ratio, looped=check.looped, versions=ver,
        started_at=t0, finished_at=time.time(),
    )  # fmt: skip


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
    from babelspec.routing import Router, default_router_path

    dest = default_router_path()
    try:  # save() re-bases drafter paths on the copy's folder, so they stay valid
        return Router.load(router_path).save(dest)
    except OSError:
        return None
