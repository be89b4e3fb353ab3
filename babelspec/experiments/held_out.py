"""Held-out prompts that run only what was chosen: ``[held_out] prompts = N``.

In the plain grid every prompt runs every setting, and ``aggregate.held_out_split`` makes the
even-numbered prompts choose and the odd-numbered ones measure. The held-out half then also
times the settings that were not chosen, which nothing judges the router or a language by. With
``[held_out] prompts = N`` a run has two stages instead:

1. the choosing prompts (the even-numbered ones below ``prompts_per_cell``) with plain decoding
   and every setting, for every cell;
2. once every cell's choosing prompts are stored, N held-out prompts (the odd-numbered ones
   1, 3, ..., 2N - 1) with plain decoding and only the settings chosen on stage 1
   (``chosen_settings``): the best choosing speedup (the headline's choice, ``aggregate.
   language_summary``) and the router's, under the run's ``[router] rule``, where it differs.

For the same generations the held-out numbers rest on twice to three times as many prompts. The
choice reads only stored records, so a run that was stopped resumes into the same stage 2, and a
cluster runs the same prompts as this machine. What a run of this kind does not have: held-out
numbers for settings nobody chose (per drafter, a held-out mean covers the languages that chose
it, ``aggregate.held_out_best``).
"""

from __future__ import annotations

from collections import defaultdict

from babelspec.experiments.aggregate import best_per_cell, held_out_split, setting_stats
from babelspec.experiments.config import ExperimentConfig
from babelspec.experiments.route_choice import build_router, chooser
from babelspec.experiments.store import ExampleRecord
from babelspec.experiments.worker import WorkItem, plan
from babelspec.router import ANY_TASK, BASELINE, LLAMA_CPP

Cell = tuple[str, str]  # language, task


def choosing_prompts(cfg: ExperimentConfig) -> list[int]:
    """The prompt indices stage 1 runs with every setting: the even ones below ``prompts_per_cell``."""
    return list(range(0, cfg.prompts_per_cell, 2))


def held_out_prompts(cfg: ExperimentConfig) -> list[int]:
    """The prompt indices stage 2 runs with the chosen settings: 1, 3, ..., 2N - 1."""
    return list(range(1, 2 * cfg.held_out.prompts, 2))


def chosen_settings(cfg: ExperimentConfig, records: list[ExampleRecord],
                    specs: dict[tuple[str, str], str]) -> dict[Cell, list[tuple[str, int]]]:  # fmt: skip
    """Per (language, task), the speculative (drafter, gamma) settings its held-out prompts run,
    decided on the choosing prompts of ``records`` alone: the headline's setting (the best
    measured choosing speedup, or pooled estimate under the pooled rule), and the router's choice (its per-task route and its per-language route)
    under ``cfg.router.rule`` where that is another one. Plain decoding is never listed (it
    always runs)."""
    choose = held_out_split(records)[0]
    out: dict[Cell, list[tuple[str, int]]] = defaultdict(list)

    def add(cell: Cell, setting: tuple[str, int]) -> None:
        if setting[0] != BASELINE and setting not in out[cell]:
            out[cell].append(setting)

    score = chooser(cfg.router.rule)
    for (lang, task), s in sorted(best_per_cell(setting_stats(choose), score(choose) if score else None).items()):
        add((lang, task), (s.drafter, s.gamma))
    router = build_router(choose, specs, rule=cfg.router.rule)
    for route in router.routes:
        for task in cfg.tasks if route.task == ANY_TASK else [route.task]:
            add((route.language, task), (route.drafter, route.gamma))
    return dict(out)


def plan_stages(cfg: ExperimentConfig, available: dict[str, list[str]], records: list[ExampleRecord],
                specs: dict[tuple[str, str], str], skip: set[tuple] = frozenset()) -> list[WorkItem]:  # fmt: skip
    """Every item of the stage the stored ``records`` are at: stage 1's while any of them is
    neither stored nor in ``skip`` (a prompt the task lacks, a drafter that cannot be built),
    else stage 1's and stage 2's, whose settings ``chosen_settings`` decides from the stored
    choosing prompts. ``available[lang]`` are the setting names that could be built."""
    stage1 = _stage1(cfg, available)
    done = {(r.language, r.task, r.drafter, r.gamma, r.prompt_index, r.seed) for r in records}
    if any(it.key not in done and it.key not in skip for it in stage1):
        return stage1
    chosen = chosen_settings(cfg, records, specs)
    second = set(held_out_prompts(cfg))
    n = 2 * cfg.held_out.prompts
    return stage1 + [it for it in plan(cfg, available, _counts(cfg, n)) if it.prompt_index in second
                     and (it.drafter in (BASELINE, LLAMA_CPP) or (it.drafter, it.gamma) in chosen.get((it.language, it.task), []))]


def estimated_items(cfg: ExperimentConfig, available: dict[str, list[str]]) -> list[WorkItem]:
    """What ``plan_stages`` will run, before anything is chosen: stage 1, and stage 2 with plain
    decoding and each language's first setting standing in for the one it will choose (the
    router's choice adds a setting where it differs from the best choosing speedup)."""
    first = {lang: names[:1] for lang, names in available.items()}
    second, one_gamma = set(held_out_prompts(cfg)), cfg.gammas[0]
    stage2 = [it for it in plan(cfg, first, _counts(cfg, 2 * cfg.held_out.prompts))
              if it.prompt_index in second and it.gamma in (0, one_gamma)]  # fmt: skip
    return _stage1(cfg, available) + stage2


def _stage1(cfg: ExperimentConfig, available: dict[str, list[str]]) -> list[WorkItem]:
    """Stage 1's items: the choosing prompts with plain decoding and every available setting."""
    first = set(choosing_prompts(cfg))
    return [it for it in plan(cfg, available, _counts(cfg, cfg.prompts_per_cell)) if it.prompt_index in first]


def _counts(cfg: ExperimentConfig, n: int) -> dict[Cell, int]:
    return {(lang, task): n for lang in cfg.languages for task in cfg.tasks}


__all__ = ["chosen_settings", "choosing_prompts", "estimated_items", "held_out_prompts", "plan_stages"]
