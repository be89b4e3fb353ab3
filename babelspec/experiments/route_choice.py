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

Two rules decide whether a setting's choosing prompts say it pays (``rule``):

- ``"interval"``: its own bootstrap interval must lie above ``min_speedup``. With 3 or 4
  choosing prompts a language seldom clears that, even where it pays.
- ``"pooled"`` (``pooled_posteriors``): every language of a setting informs each one's estimate.
  Per setting, a language's log speedup (its prompts' mean paired log ratio) is shrunk towards
  the mean over languages by how much languages differ against how noisy its own prompts are
  (a normal empirical-Bayes model, the between-language variance by moments), its prompts'
  variance moderated towards the variance pooled over languages (``PRIOR_DF`` degrees of
  freedom, as in limma). The setting is taken where the posterior's lower 95 % bound lies above
  ``min_speedup``; among the settings taken, the highest measured choosing speedup wins, as under
  the interval rule. For a wide run, whose languages share a drafter whose cost varies little.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from babelspec.errors import UserError
from babelspec.experiments.aggregate import (
    CellKey,
    SettingStats,
    held_out_split,
    paired_ratios,
    setting_score,
    setting_stats,
)
from babelspec.experiments.store import ExampleRecord
from babelspec.router import ANY_TASK, BASELINE, RULES, Route, Router

PRIOR_DF = 4.0  # degrees of freedom of the pooled variance a language's own prompt variance is moderated by
MIN_POOLED_LANGUAGES = 8  # fewer languages in a setting: each language's mean stands alone (variance still pooled)
TAU2_FLOOR = 1e-4  # the between-language variance (log scale) is never taken as less: 1 % spread


@dataclass
class Posterior:
    """A setting's speedup in one language under the pooled rule (speedups, x plain)."""

    speedup: float  # exp of the posterior mean of the log speedup
    low: float  # exp of its lower and upper ``level`` bounds
    high: float
    own: float  # exp of the language's own mean log ratio
    prior: float  # exp of the mean over the setting's languages
    tau: float  # between-language sd of the log speedup (NaN: not pooled)
    n_prompts: int
    sd: float = 0.0  # posterior sd of the log speedup


def pooled_posteriors(records: list[ExampleRecord], level: float = 0.95, prior_df: float = PRIOR_DF,
                      min_languages: int = MIN_POOLED_LANGUAGES) -> dict[CellKey, Posterior]:
    """Per (language, task, drafter, gamma) cell of ``records`` (the choosing prompts), its
    speedup under the normal empirical-Bayes model the ``pooled`` rule uses (module docstring).

    A prompt's value is the mean over its seeds of log(plain / speculative seconds per token).
    A setting whose languages give no prompt variance at all (one prompt each) gets no posterior.

    The bounds take Student's t quantile on the moderated variance's ``n - 1 + prior_df``
    degrees of freedom (limma's moderated t), not the normal's: the variance is estimated, and
    with 3 prompts and 4 prior degrees of freedom the 95 % quantile is 2.45, not 1.96."""
    from scipy.stats import t as student_t
    by_setting: dict[tuple[str, str, int], dict[CellKey, list[float]]] = defaultdict(dict)
    for key, by_prompt in paired_ratios(records).items():
        logs = [float(np.mean(np.log(v))) for v in by_prompt.values() if v]
        if logs:
            by_setting[key[1:]][key] = logs
    out: dict[CellKey, Posterior] = {}
    for cells in by_setting.values():
        n = {k: len(v) for k, v in cells.items()}
        mean = {k: float(np.mean(v)) for k, v in cells.items()}
        own_var = {k: float(np.var(v, ddof=1)) if len(v) > 1 else 0.0 for k, v in cells.items()}
        df = sum(m - 1 for m in n.values())
        if df == 0:
            continue
        pooled_var = sum((n[k] - 1) * own_var[k] for k in cells) / df
        se2 = {k: ((n[k] - 1) * own_var[k] + prior_df * pooled_var) / (n[k] - 1 + prior_df) / n[k] for k in cells}
        y = np.array(list(mean.values()))
        mu = float(np.mean(y))
        pooled = len(cells) >= min_languages
        tau2 = max(TAU2_FLOOR, float(np.var(y, ddof=1)) - float(np.mean(list(se2.values())))) if pooled else math.inf
        for k in cells:
            if se2[k] <= 0:  # no spread at all between prompts: the language's own mean, exactly
                m, v = mean[k], 0.0
            else:
                v = 1 / (1 / se2[k] + 1 / tau2)
                m = v * (mean[k] / se2[k] + (mu / tau2 if pooled else 0.0))
            sd = math.sqrt(v)
            z = float(student_t.ppf(0.5 + level / 2, n[k] - 1 + prior_df))
            out[k] = Posterior(speedup=math.exp(m), low=math.exp(m - z * sd), high=math.exp(m + z * sd),
                               own=math.exp(mean[k]), prior=math.exp(mu),
                               tau=math.sqrt(tau2) if pooled else math.nan, n_prompts=n[k], sd=sd)  # fmt: skip
    return out


def pooled_score(choose: list[ExampleRecord]) -> Callable[[SettingStats], float]:
    """Each setting's pooled estimate of its speedup in a language on the choosing prompts
    ``choose`` (``pooled_posteriors``' posterior mean): how the headline's setting is chosen under
    the pooled rule (``chooser``). A language's own 3 choosing prompts are noisy; shrunk towards
    the setting's mean over languages, a drafter slow almost everywhere is not chosen on one
    lucky prompt (Igbo's corpus bigram in a 24-language cut: a choosing median of 1.20x on prompts
    of 0.94, 2.3 and 1.2, then 0.78x held out, where the self-drafter, 1.09x there, held 1.35x).
    A cell without a posterior (nothing measured against plain decoding) scores as by default."""
    posteriors = pooled_posteriors(choose)

    def score(s: SettingStats) -> float:
        p = posteriors.get((s.language, s.task, s.drafter, s.gamma))
        return p.speedup if p is not None else setting_score(s)

    return score


def chooser(rule: str) -> Callable[[list[ExampleRecord]], Callable[[SettingStats], float]] | None:
    """What scores the settings the headline chooses among under the router ``rule``: the pooled
    estimate under ``"pooled"``, the measured choosing speedup (None: ``aggregate.setting_score``)
    otherwise."""
    return pooled_score if rule == "pooled" else None


def ensemble_estimates(records: list[ExampleRecord], cells: set[CellKey]) -> dict[CellKey, float]:
    """Each cell's speedup on ``records`` (held-out prompts) as an estimate for the distribution
    over languages: the pooled posterior means, spread out again to the spread the model expects
    of the true values (constrained Bayes, Louis 1984), per setting.

    A quantile over languages of their noisy measured medians is biased outwards (each carries
    its prompts' noise), one of posterior means inwards (they are shrunk); these estimates' mean
    and variance match the posterior's expected mean and variance of the true values.

    A setting with too few languages to pool (``MIN_POOLED_LANGUAGES``) keeps each language's
    own mean: nothing was shrunk, so nothing is spread out again."""
    post = pooled_posteriors([r for r in records if r.drafter == BASELINE
                              or (r.language, r.task, r.drafter, r.gamma) in cells])  # fmt: skip
    by_setting: dict[tuple[str, str, int], list[tuple[CellKey, Posterior]]] = defaultdict(list)
    for key, p in post.items():
        by_setting[key[1:]].append((key, p))
    out: dict[CellKey, float] = {}
    for items in by_setting.values():
        m = np.array([math.log(p.speedup) for _, p in items])
        spread = float(np.var(m))
        mean_var = float(np.mean([p.sd**2 for _, p in items]))
        pooled = not math.isnan(items[0][1].tau)
        w = math.sqrt(1 + mean_var / spread) if pooled and spread > 0 else 1.0
        for (key, _), mi in zip(items, m):
            out[key] = math.exp(float(m.mean()) + w * (float(mi) - float(m.mean())))
    return out


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
    rule: str = "interval",
) -> Router:
    """Choose per (language, task) on the even prompts, predict from the odd ones;
    ``specs[(drafter, language)]`` is the drafter spec each setting resolved to.

    A setting with a measured speedup is judged only by it (never by f), and only when, under
    ``rule`` (module docstring), its choosing prompts put it above ``min_speedup``. Under the
    interval rule a cell with fewer than 2 choosing prompts has no interval, so plain decoding;
    under the pooled rule its prompt variance is the setting's pooled one."""
    if rule not in RULES:
        raise UserError(f"unknown router rule {rule!r}; choose one of: {', '.join(RULES)}")
    choose, measure = held_out_split(records)
    fit = [s for s in setting_stats(choose) if s.drafter != BASELINE and (s.drafter, s.language) in specs]
    held = {(s.language, s.task, s.drafter, s.gamma): s for s in setting_stats(measure)}
    cells = sorted({(r.language, r.task) for r in records})
    posteriors = pooled_posteriors([r for r in choose if (r.drafter, r.language) in specs or r.drafter == BASELINE]) \
        if rule == "pooled" else {}  # fmt: skip

    def selection(s: SettingStats) -> tuple[float, str] | None:
        if rule == "interval" or not math.isfinite(s.speedup):
            return _selection(s, min_speedup)
        p = posteriors.get((s.language, s.task, s.drafter, s.gamma))
        # the pooled estimate decides whether it pays; among settings that do, the measured
        # speedup ranks them, as under the interval rule (each setting's languages are shrunk
        # towards their own mean, which says which pays, not which of two paying settings is faster)
        return (s.speedup, "measured") if p is not None and p.low > min_speedup else None

    best: dict[tuple[str, str], tuple[float, str, SettingStats]] = {}
    for s in fit:
        sel = selection(s)
        key = (s.language, s.task)
        if sel is not None and (key not in best or sel[0] > best[key][0]):
            best[key] = (*sel, s)
    routes = []
    for lang, task in cells:
        if (lang, task) in best:
            _, source, s = best[(lang, task)]
            routes.append(_route(lang, task, s, held, specs, source, posteriors))
        else:
            routes.append(_fallback(lang, task))
    # Per language, whatever the task: the setting whose worst task is best.
    for lang in sorted({lang for lang, _ in cells}):
        tasks = {t for la, t in cells if la == lang}
        per_setting: dict[tuple[str, int], dict[str, tuple[float, str, SettingStats]]] = {}
        for s in fit:
            sel = selection(s) if s.language == lang else None
            if sel is not None:
                per_setting.setdefault((s.drafter, s.gamma), {})[s.task] = (*sel, s)
        choice = None
        for by_task in per_setting.values():
            if set(by_task) != tasks:
                continue  # some task does not pay (or was not measured)
            worst = min(by_task.values(), key=lambda v: v[0])
            if choice is None or worst[0] > choice[0]:
                choice = worst
        routes.append(_route(lang, ANY_TASK, choice[2], held, specs, choice[1], posteriors, worst_of=tasks)
                      if choice else _fallback(lang, ANY_TASK))  # fmt: skip
    return Router(routes=routes, target=target, min_speedup=min_speedup, rule=rule)


def _route(lang: str, task: str, s: SettingStats, held: dict, specs: dict, source: str,
           posteriors: dict[CellKey, Posterior], worst_of: set[str] | None = None) -> Route:
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
        **({"pooled_speedup": p.speedup, "pooled_low": p.low, "pooled_high": p.high}
           if (p := posteriors.get((s.language, s.task, s.drafter, s.gamma))) else {}),
    )  # fmt: skip


def _spec(spec: str, task: str) -> str:
    """A route's spec: a setting's ``{task}`` filled for a route of one task; a route for every
    task keeps it, for ``auto`` to fill with the request's task."""
    return spec if task == ANY_TASK else spec.replace("{task}", task)


def _fallback(lang: str, task: str) -> Route:
    return Route(language=lang, task=task, drafter=BASELINE, spec=BASELINE, gamma=0,
                 predicted_speedup=1.0, source="fallback", predicted_low=1.0,
                 predicted_high=1.0)  # fmt: skip
