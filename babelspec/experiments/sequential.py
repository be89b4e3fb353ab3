"""Sequential rounds: more prompts for a cell (language x task) whose numbers cannot yet decide.

A grid of a few prompts per cell leaves many intervals straddling 1.0: the router's rule (a
setting's whole choosing interval above ``min_speedup``) then keeps plain decoding, and the
held-out number that judges it is too wide to say anything. ``prompt_counts`` says how many
prompts each cell runs: ``prompts_per_cell``, then ``step`` more per round (as many choosing as
held-out prompts: ``aggregate.held_out_split`` splits by parity) while the cell is undecided
(``undecided``), up to ``[sequential] max_prompts_per_cell``.

Every decision reads the choosing prompts only. A rule that stopped on the held-out numbers
(their interval narrow, their speedup agreeing with the forwards' timings) would stop more
often when they happen to land near the prediction, and the held-out interval, which assumes
a fixed number of prompts, would not cover that; on the choosing prompts alone, the held-out
prompts of every round are a fixed sample given the rounds run.

Rounds are replayed from the store: round r's decision reads only the prompts of the rounds
before it, and a round whose prompts are not all stored stops the replay there (they run
next). So a run that was killed and resumed takes exactly the rounds an unbroken run takes,
and a cluster runs the same rounds as this machine.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from babelspec.experiments.aggregate import (
    TIMING_AGREEMENT,
    cell_seed,
    held_out_split,
    median_interval,
    paired_ratios,
    setting_stats,
    timing_agreement,
)
from babelspec.experiments.config import ExperimentConfig
from babelspec.experiments.store import ExampleRecord
from babelspec.numeric import median
from babelspec.router import BASELINE

Cell = tuple[str, str]  # language, task


@dataclass
class Verdict:
    """Why a cell's choosing prompts so far do or do not decide it."""

    undecided: bool
    reason: str  # "router chose" / "nothing can pay" / "choosing straddles" / "choosing wide" / "timing disagrees"
    setting: tuple[str, int] | None = None  # the setting the cell would choose (drafter, gamma)
    half_width: float = math.nan  # of the chosen setting's interval on the choosing prompts


def _interval(by_prompt: dict[int, list[float]], key: tuple) -> tuple[float, float, float]:
    pairs = [q for v in by_prompt.values() for q in v]
    lo, hi = median_interval(by_prompt, seed=cell_seed(key))
    return median(pairs), lo, hi


def undecided(records: list[ExampleRecord], half_width: float, min_speedup: float = 1.0) -> Verdict:
    """Whether one cell's records leave it undecided, on its choosing prompts alone (module
    docstring: the held-out ones never stop a round).

    The cell chooses as the router does: the setting with the highest choosing median among
    those whose choosing interval lies above ``min_speedup``; where none does, the headline's
    (the highest choosing median). It is undecided while (a) no setting clears the bar but one
    reaches above it, (b) the chosen setting's choosing 95% interval is more than
    ``half_width`` wide on either side of its median (half its width; NaN, under 2 prompts,
    counts as wide): the held-out prompts are as many, so their interval is expected as wide,
    or (c) its measured speedup on the choosing prompts is further than
    ``aggregate.TIMING_AGREEMENT`` from what its own forwards' timings predict (its wall time
    holds something else: it is measured again on more prompts)."""
    choose, _ = held_out_split(records)
    fit = {key: _interval(rows, key) for key, rows in paired_ratios(choose).items()}
    if not fit:
        return Verdict(True, "no choosing pair yet")
    clears = {k: v for k, v in fit.items() if math.isfinite(v[1]) and v[1] > min_speedup}
    pool = clears or fit
    best = max(pool, key=lambda k: (pool[k][0], k))
    _, lo, hi = fit[best]
    width = (hi - lo) / 2 if math.isfinite(lo) and math.isfinite(hi) else math.nan
    setting = (best[2], best[3])
    if not clears:
        if any(math.isnan(v[2]) or v[2] > min_speedup for v in fit.values()):
            return Verdict(True, "choosing straddles", setting, width)
        return Verdict(False, "nothing can pay", setting, width)
    if not (width <= half_width):
        return Verdict(True, "choosing wide", setting, width)
    if abs(_agreement(choose, best) - 1) > TIMING_AGREEMENT:  # NaN (nothing to check) passes
        return Verdict(True, "timing disagrees", setting, width)
    return Verdict(False, "router chose", setting, width)


def _agreement(records: list[ExampleRecord], key: tuple) -> float:
    """The setting's measured speedup on ``records`` over what its forwards predict."""
    lang, task, drafter, gamma = key
    rows = [r for r in records if (r.drafter, r.gamma) in ((BASELINE, 0), (drafter, gamma))]
    stats = [s for s in setting_stats(rows) if (s.drafter, s.gamma) == (drafter, gamma)]
    return timing_agreement(stats[0]) if stats else math.nan


def _complete(records: list[ExampleRecord], n: int, settings: list[tuple[str, int]], seeds: list[int]) -> bool:
    have = {(r.prompt_index, r.seed, r.drafter, r.gamma) for r in records}
    return all((i, s, d, g) in have for i in range(n) for s in seeds for d, g in settings)


def prompt_counts(cfg: ExperimentConfig, records: list[ExampleRecord],
                  settings: dict[str, list[tuple[str, int]]]) -> dict[Cell, int]:  # fmt: skip
    """Per cell, the prompts it runs as far as the stored ``records`` decide: the rounds are
    replayed from ``prompts_per_cell`` on. ``settings[lang]`` are the cell's (drafter, gamma)
    pairs, plain decoding included. A round some of whose prompts the task does not have (it
    ran out of sentences) is never complete, so the cell stops there."""
    seq = cfg.sequential
    by_cell: dict[Cell, list[ExampleRecord]] = defaultdict(list)
    for r in records:
        by_cell[(r.language, r.task)].append(r)
    out: dict[Cell, int] = {}
    for lang in cfg.languages:
        for task in cfg.tasks:
            cell, n = (lang, task), cfg.prompts_per_cell
            rows = by_cell.get(cell, [])
            while n < seq.max_prompts_per_cell:
                past = [r for r in rows if r.prompt_index < n]
                if not _complete(past, n, settings.get(lang, []), cfg.seeds):
                    break  # this round's prompts run first
                if not undecided(past, seq.half_width, seq.min_speedup).undecided:
                    break
                n = min(n + seq.step, seq.max_prompts_per_cell)
            out[cell] = n
    return out


def cell_settings(cfg: ExperimentConfig, available: dict[str, list[str]]) -> dict[str, list[tuple[str, int]]]:
    """Per language, every (drafter, gamma) a unit runs, plain decoding first."""
    return {lang: ([(BASELINE, 0)] if cfg.baseline else []) + [(d, g) for d in available.get(lang, []) for g in cfg.gammas]
            for lang in cfg.languages}  # fmt: skip


__all__ = ["Verdict", "cell_settings", "prompt_counts", "undecided"]
