"""Aggregation of a run's store into the tables the report and the router read.

Speedups are measured, not modelled: each speculative example is paired with the plain
decoding of the same prompt and seed (run next to it), and the speedup is the median over
pairs of (plain seconds per token) / (speculative seconds per token). Per token, because
sampled outputs differ in length. The theoretical factor f uses the paper's formula
f = (1 - a^(g+1)) / ((1 - a)(g c + 1)) with the cell's mean a and measured c.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field

import numpy as np

from babelspec.experiments.store import ExampleRecord

BASELINE = "none"
POSITION_BIN_TOKENS = 16  # output-position bins for acceptance along the generation


def theoretical_speedup(alpha: float, gamma: int, c: float) -> float:
    """The paper's f(a, g, c); a -> 1 is the limit (g + 1) / (g c + 1)."""
    if gamma <= 0:
        return 1.0
    if alpha >= 1.0 - 1e-12:
        return (gamma + 1) / (gamma * c + 1)
    return (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1))


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else math.nan


@dataclass
class SettingStats:
    """One (language, task, drafter, gamma) cell."""

    language: str
    task: str
    drafter: str
    gamma: int
    trained_on: str = ""
    n: int = 0
    alpha_mean: float = math.nan
    alpha_std: float = math.nan
    alpha_token_mean: float = math.nan
    mean_accepted_length: float = math.nan
    c: float = math.nan  # median over examples of mean draft forward / mean target forward
    theoretical_f: float = math.nan
    speedup: float = math.nan  # measured, paired median vs plain decoding (per token)
    speedup_loop_free: float = math.nan
    n_pairs: int = 0
    n_pairs_loop_free: int = 0
    seconds_per_token: float = math.nan  # median wall seconds per generated token
    seconds_per_char: float = math.nan  # median wall seconds per generated character
    tokens_per_char: float = math.nan
    in_language_rate: float = math.nan
    loop_rate: float = math.nan
    langid_agreement: float = math.nan  # share where py3langid agreed (covered languages only)
    draft_forward_ms: float = math.nan  # median draft forward
    target_forward_ms: float = math.nan  # median target forward
    # Median verification forward (g + 1 tokens) over the median plain decode step: f assumes 1,
    # on a CPU with a 262k-row output head it is more. f_verify uses it in place of that 1.
    verify_cost: float = math.nan
    f_verify: float = math.nan
    acceptance_by_draft_position: list[float] = field(default_factory=list)
    acceptance_by_output_position: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _acceptance_by_draft_position(records: list[ExampleRecord], gamma: int) -> list[float]:
    """P(the i-th drafted token of a step is accepted | it was proposed), i = 0..gamma-1."""
    if gamma <= 0:
        return []
    prop = np.concatenate([np.asarray(r.proposed_per_step, dtype=np.int64) for r in records] or [np.zeros(0, np.int64)])
    acc = np.concatenate([np.asarray(r.accepted_per_step, dtype=np.int64) for r in records] or [np.zeros(0, np.int64)])
    if prop.size == 0:
        return []
    pos = np.arange(gamma)[None, :]
    proposed = (prop[:, None] > pos).sum(axis=0)
    accepted = (acc[:, None] > pos).sum(axis=0)
    return [float(a / p) if p else math.nan for a, p in zip(accepted, proposed)]


def _acceptance_by_output_position(records: list[ExampleRecord]) -> list[float]:
    """Paper-style a per bin of output position (16 tokens), from the per-step counts."""
    matched = defaultdict(float)
    judged = defaultdict(float)
    for r in records:
        prop = np.asarray(r.proposed_per_step, dtype=np.int64)
        acc = np.asarray(r.accepted_per_step, dtype=np.int64)
        if prop.size == 0:
            continue
        start = np.concatenate([[0], np.cumsum(acc + 1)[:-1]])  # output position of each step
        bins = start // POSITION_BIN_TOKENS
        rejected = (acc < prop).astype(np.int64)  # a step with a rejection judges acc + 1 tokens
        for b in np.unique(bins):
            sel = bins == b
            matched[int(b)] += float(acc[sel].sum())
            judged[int(b)] += float(acc[sel].sum() + rejected[sel].sum())
    if not judged:
        return []
    return [
        matched[b] / judged[b] if judged.get(b) else math.nan for b in range(max(judged) + 1)
    ]


def _ratio(rec: ExampleRecord, base: ExampleRecord) -> float | None:
    if rec.n_tokens <= 0 or base.n_tokens <= 0 or rec.wall_seconds <= 0:
        return None
    return (base.wall_seconds / base.n_tokens) / (rec.wall_seconds / rec.n_tokens)


def setting_stats(records: list[ExampleRecord]) -> list[SettingStats]:
    """Stats of every (language, task, drafter, gamma) in ``records``, plain decoding included."""
    groups: dict[tuple, list[ExampleRecord]] = defaultdict(list)
    baseline: dict[tuple, ExampleRecord] = {}
    for r in records:
        groups[(r.language, r.task, r.drafter, r.gamma)].append(r)
        if r.drafter == BASELINE:
            baseline[(r.language, r.task, r.prompt_index, r.seed)] = r
    out = []
    for (lang, task, drafter, gamma), rows in sorted(groups.items()):
        alphas = np.array([r.alpha for r in rows], dtype=np.float64)
        cs = [r.c for r in rows if r.c and r.c > 0 and math.isfinite(r.c)]
        s = SettingStats(language=lang, task=task, drafter=drafter, gamma=gamma,
                         trained_on=rows[0].trained_on, n=len(rows))  # fmt: skip
        if drafter != BASELINE:
            s.alpha_mean = float(alphas.mean())
            s.alpha_std = float(alphas.std(ddof=1)) if len(alphas) > 1 else 0.0
            s.alpha_token_mean = float(np.mean([r.alpha_token for r in rows]))
            s.mean_accepted_length = float(np.mean([r.mean_accepted_length for r in rows]))
            s.c = _median(cs)
            if math.isfinite(s.c):
                s.theoretical_f = theoretical_speedup(s.alpha_mean, gamma, s.c)
            ratios, ratios_clean = [], []
            for r in rows:
                base = baseline.get((lang, task, r.prompt_index, r.seed))
                q = _ratio(r, base) if base is not None else None
                if q is None:
                    continue
                ratios.append(q)
                if not r.looped and not base.looped:
                    ratios_clean.append(q)
            s.speedup, s.n_pairs = _median(ratios), len(ratios)
            s.speedup_loop_free, s.n_pairs_loop_free = _median(ratios_clean), len(ratios_clean)
            s.acceptance_by_draft_position = _acceptance_by_draft_position(rows, gamma)
            s.acceptance_by_output_position = _acceptance_by_output_position(rows)
        else:
            s.speedup = 1.0
            s.speedup_loop_free = 1.0
        s.seconds_per_token = _median([r.wall_seconds / r.n_tokens for r in rows if r.n_tokens])
        s.seconds_per_char = _median([r.wall_seconds / r.n_chars for r in rows if r.n_chars])
        tpc = [r.n_tokens / r.n_chars for r in rows if r.n_chars]
        s.tokens_per_char = _median(tpc)
        checked = [r for r in rows if r.in_language is not None]
        if checked:
            s.in_language_rate = float(np.mean([bool(r.in_language) for r in checked]))
        s.loop_rate = float(np.mean([r.looped for r in rows]))
        covered = [r for r in rows if r.langid_language]
        if covered:
            from babelspec.experiments.checks import LANGID_CODES

            s.langid_agreement = float(
                np.mean([r.langid_language == LANGID_CODES.get(r.language) for r in covered])
            )
        dfw = [x for r in rows for x in r.draft_forward_seconds]
        tfw = [x for r in rows for x in r.target_forward_seconds]
        s.draft_forward_ms = _median(dfw) * 1e3 if dfw else math.nan
        s.target_forward_ms = _median(tfw) * 1e3 if tfw else math.nan
        out.append(s)
    plain_ms = {(s.language, s.task): s.target_forward_ms for s in out if s.drafter == BASELINE}
    for s in out:
        base = plain_ms.get((s.language, s.task), math.nan)
        if s.drafter != BASELINE and math.isfinite(base) and base > 0 and math.isfinite(s.target_forward_ms):
            s.verify_cost = s.target_forward_ms / base
            if math.isfinite(s.draft_forward_ms) and math.isfinite(s.alpha_mean):
                c_plain = s.draft_forward_ms / base  # draft forward in units of a plain step
                a, g = s.alpha_mean, s.gamma
                gain = (g + 1) if a >= 1.0 - 1e-12 else (1 - a ** (g + 1)) / (1 - a)
                s.f_verify = gain / (g * c_plain + s.verify_cost)
    return out


def _score(s: SettingStats) -> float:
    """What 'best gamma' maximises: measured speedup when there is a baseline, else f."""
    if math.isfinite(s.speedup):
        return s.speedup
    return s.theoretical_f if math.isfinite(s.theoretical_f) else -math.inf


def best_gamma(stats: list[SettingStats]) -> dict[tuple[str, str, str], SettingStats]:
    """Per (language, task, drafter) the gamma with the highest measured (else predicted) speedup."""
    best: dict[tuple[str, str, str], SettingStats] = {}
    for s in stats:
        if s.drafter == BASELINE:
            continue
        key = (s.language, s.task, s.drafter)
        if key not in best or _score(s) > _score(best[key]):
            best[key] = s
    return best


@dataclass
class LanguageSummary:
    """The headline row: per language and task, the best drafter setting."""

    language: str
    task: str
    drafter: str
    gamma: int
    alpha: float
    speedup: float
    theoretical_f: float
    speedup_loop_free: float
    seconds_per_char_plain: float
    seconds_per_char_best: float


def language_summary(stats: list[SettingStats]) -> list[LanguageSummary]:
    plain = {(s.language, s.task): s for s in stats if s.drafter == BASELINE}
    best: dict[tuple[str, str], SettingStats] = {}
    for s in best_gamma(stats).values():
        key = (s.language, s.task)
        if key not in best or _score(s) > _score(best[key]):
            best[key] = s
    out = []
    for (lang, task), s in sorted(best.items()):
        p = plain.get((lang, task))
        out.append(LanguageSummary(
            language=lang, task=task, drafter=s.drafter, gamma=s.gamma, alpha=s.alpha_mean,
            speedup=s.speedup, theoretical_f=s.theoretical_f,
            speedup_loop_free=s.speedup_loop_free,
            seconds_per_char_plain=p.seconds_per_char if p else math.nan,
            seconds_per_char_best=s.seconds_per_char,
        ))  # fmt: skip
    return out


def drafter_means(stats: list[SettingStats]) -> list[dict]:
    """Per task and drafter (at its best gamma per language): mean and worst over languages."""
    by: dict[tuple[str, str], list[SettingStats]] = defaultdict(list)
    for s in best_gamma(stats).values():
        by[(s.task, s.drafter)].append(s)
    rows = []
    for (task, drafter), cells in sorted(by.items()):
        sp = [c.speedup for c in cells if math.isfinite(c.speedup)]
        worst = min(cells, key=lambda c: c.speedup if math.isfinite(c.speedup) else math.inf)
        rows.append({
            "task": task, "drafter": drafter, "trained_on": cells[0].trained_on,
            "languages": len(cells),
            "alpha_mean": float(np.mean([c.alpha_mean for c in cells])),
            "f_mean": float(np.nanmean([c.theoretical_f for c in cells])) if any(
                math.isfinite(c.theoretical_f) for c in cells) else math.nan,
            "speedup_mean": float(np.mean(sp)) if sp else math.nan,
            "speedup_worst": float(min(sp)) if sp else math.nan,
            "worst_language": worst.language if sp else "",
        })  # fmt: skip
    return rows


def cross_task_matrix(stats: list[SettingStats]) -> dict[str, dict[str, dict[str, float]]]:
    """drafter -> evaluated task -> {alpha, speedup, f, in_task}; means over languages.

    ``in_task`` is 1 where the drafter was fitted to that task, 0 where the task is held out,
    NaN for drafters fitted to no task (general text or none).
    """
    by: dict[tuple[str, str], list[SettingStats]] = defaultdict(list)
    for s in best_gamma(stats).values():
        by[(s.drafter, s.task)].append(s)
    out: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for (drafter, task), cells in sorted(by.items()):
        trained = cells[0].trained_on
        sp = [c.speedup for c in cells if math.isfinite(c.speedup)]
        out[drafter][task] = {
            "alpha": float(np.mean([c.alpha_mean for c in cells])),
            "speedup": float(np.mean(sp)) if sp else math.nan,
            "f": float(np.nanmean([c.theoretical_f for c in cells])),
            "in_task": (1.0 if trained == task else 0.0) if trained not in ("", "general") else math.nan,
            "languages": float(len(cells)),
        }
    return dict(out)


def wall_seconds_total(records: list[ExampleRecord]) -> float:
    return float(sum(r.wall_seconds for r in records))
