"""The router: per language and task, the drafter setting and gamma that pay, and plain
decoding where none does, so no language is served slower.

The choice and its prediction come from different prompts (``aggregate.held_out_split``):
a setting is chosen on the even-numbered prompts, where its bootstrap 95% interval of the
measured speedup (paired against plain decoding) must lie above ``min_speedup`` (1.0 by
default), and its predicted speedup is what it measured on the odd-numbered prompts, with
that interval. A maximum of noisy medians reported on the data that picked it overstates
(the winner's curse); the held-out number does not. Without a plain-decoding baseline the
theoretical f decides instead. The ``auto`` drafter (``babelspec.drafters.auto``) reads the
file (``babelspec.router``) and also falls back online when its own acceptance in a
generation says drafting no longer pays.
"""

from __future__ import annotations

import math

from babelspec.experiments.aggregate import SettingStats, held_out_split, setting_stats
from babelspec.experiments.store import ExampleRecord
from babelspec.router import ANY_TASK, BASELINE, Route, Router


def _selection(s: SettingStats, min_speedup: float) -> tuple[float, str] | None:
    """(value, source) when ``s`` may be chosen: a measured speedup whose whole interval lies
    above ``min_speedup``, or, where nothing was measured against plain decoding, f."""
    if math.isfinite(s.speedup):
        ok = math.isfinite(s.speedup_low) and s.speedup_low > min_speedup
        return (s.speedup, "measured") if ok else None
    if math.isfinite(s.theoretical_f) and s.theoretical_f > min_speedup:
        return s.theoretical_f, "theoretical"
    return None


def build_router(
    records: list[ExampleRecord],
    specs: dict[tuple[str, str], str],
    target: str = "",
    min_speedup: float = 1.0,
) -> Router:
    """Choose per (language, task) on the even prompts, predict from the odd ones;
    ``specs[(drafter, language)]`` is the drafter spec each setting resolved to.

    A setting with a measured speedup is judged only by it (never by f), and only when its
    interval lies above ``min_speedup``; with fewer than 2 choosing prompts per cell there is
    no interval, so plain decoding."""
    choose, measure = held_out_split(records)
    fit = [s for s in setting_stats(choose) if s.drafter != BASELINE and (s.drafter, s.language) in specs]
    held = {(s.language, s.task, s.drafter, s.gamma): s for s in setting_stats(measure)}
    cells = sorted({(r.language, r.task) for r in records})
    best: dict[tuple[str, str], tuple[float, str, SettingStats]] = {}
    for s in fit:
        sel = _selection(s, min_speedup)
        key = (s.language, s.task)
        if sel is not None and (key not in best or sel[0] > best[key][0]):
            best[key] = (*sel, s)
    routes = []
    for lang, task in cells:
        if (lang, task) in best:
            _, source, s = best[(lang, task)]
            routes.append(_route(lang, task, s, held, specs, source))
        else:
            routes.append(_fallback(lang, task))
    # Per language, whatever the task: the setting whose worst task is best.
    for lang in sorted({lang for lang, _ in cells}):
        tasks = {t for la, t in cells if la == lang}
        per_setting: dict[tuple[str, int], dict[str, tuple[float, str, SettingStats]]] = {}
        for s in fit:
            sel = _selection(s, min_speedup) if s.language == lang else None
            if sel is not None:
                per_setting.setdefault((s.drafter, s.gamma), {})[s.task] = (*sel, s)
        choice = None
        for by_task in per_setting.values():
            if set(by_task) != tasks:
                continue  # some task does not pay (or was not measured)
            worst = min(by_task.values(), key=lambda v: v[0])
            if choice is None or worst[0] > choice[0]:
                choice = worst
        routes.append(_route(lang, ANY_TASK, choice[2], held, specs, choice[1], worst_of=tasks)
                      if choice else _fallback(lang, ANY_TASK))  # fmt: skip
    return Router(routes=routes, target=target, min_speedup=min_speedup)


def _route(lang: str, task: str, s: SettingStats, held: dict, specs: dict, source: str,
           worst_of: set[str] | None = None) -> Route:
    """The route to ``s``; its prediction is the held-out cell's (for the per-language route
    the worst task's), or f where nothing was measured."""
    tasks = sorted(worst_of) if worst_of else [s.task]
    measured = [h for t in tasks if (h := held.get((lang, t, s.drafter, s.gamma))) is not None]
    if source == "measured":
        finite = [h for h in measured if math.isfinite(h.speedup)]
        h = min(finite, key=lambda h: h.speedup) if finite and len(finite) == len(tasks) else None
        predicted = (h.speedup, h.speedup_low, h.speedup_high, h.n_pairs) if h else (math.nan, math.nan, math.nan, 0)
    else:
        fs = [h.theoretical_f for h in measured if math.isfinite(h.theoretical_f)]
        predicted = (min(fs) if fs else s.theoretical_f, math.nan, math.nan, 0)
    return Route(
        language=lang, task=task, drafter=s.drafter, spec=_spec(specs[(s.drafter, lang)], task),
        gamma=s.gamma, predicted_speedup=predicted[0], source=source, alpha=s.alpha_mean,
        c=s.c, theoretical_f=s.theoretical_f, predicted_low=predicted[1],
        predicted_high=predicted[2], n_pairs=predicted[3], selection_speedup=s.speedup,
        selection_low=s.speedup_low, selection_high=s.speedup_high,
        verify_cost=s.verify_cost, draft_cost=s.draft_cost,
    )  # fmt: skip


def _spec(spec: str, task: str) -> str:
    """A route's spec: a setting's ``{task}`` filled for a route of one task; a route for every
    task keeps it, for ``auto`` to fill with the request's task."""
    return spec if task == ANY_TASK else spec.replace("{task}", task)


def _fallback(lang: str, task: str) -> Route:
    return Route(language=lang, task=task, drafter=BASELINE, spec=BASELINE, gamma=0,
                 predicted_speedup=1.0, source="fallback", predicted_low=1.0,
                 predicted_high=1.0)  # fmt: skip
