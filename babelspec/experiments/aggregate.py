"""Aggregation of a run's store into the tables the report and the router read.

Speedups are measured, not modelled: each speculative example is paired with the plain
decoding of the same prompt and seed (run next to it), and the speedup is the median over
pairs of (plain decode seconds per token) / (speculative decode seconds per token). Per token,
because sampled outputs differ in length; decode seconds (wall time after the prompt's prefill,
``ExampleRecord.decode_seconds``), because the prefill is the same for both and spread over
outputs of different lengths it would bias the ratio. A pair, and every other ratio of times, is only formed
within one machine kind (``machine.machine_kind``: device, dtype, threads). Each cell's speedup carries a bootstrap 95% interval over
prompts (``median_interval``: BCa, ``scipy.stats.bootstrap``). The theoretical factor f (``babelspec.speedup``) uses the
cell's pooled a = sum matched / sum (matched + rejections) and measured c.

The headline's best setting is chosen on one half of the prompts and measured on the other
(``held_out_split``), so the number reported is not the maximum of noisy medians it was
chosen by (the winner's curse).
"""

from __future__ import annotations

import math
import warnings
import zlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from babelspec.experiments.store import ExampleRecord
from babelspec.machine import machine_kind
from babelspec.numeric import is_finite, median
from babelspec.router import BASELINE, LLAMA_CPP
from babelspec.speedup import acceptance_rate, theoretical_speedup

POSITION_BIN_TOKENS = 16  # output-position bins for acceptance along the generation
N_BOOTSTRAP = 2000  # resamples for every interval
BOOTSTRAP_SEED = 0  # with the cell's name: the same resamples on every run of the same store
CellKey = tuple[str, str, str, int]  # language, task, drafter, gamma


def _nanmean(values: list[float]) -> float:
    vals = [v for v in values if is_finite(v)]
    return float(np.mean(vals)) if vals else math.nan


@dataclass
class SettingStats:
    """One (language, task, drafter, gamma) cell."""

    language: str
    task: str
    drafter: str
    gamma: int
    trained_on: str = ""
    n: int = 0
    alpha_mean: float = math.nan  # pooled: sum matched / sum (matched + rejections)
    alpha_std: float = math.nan  # std of the per-generation alphas (NaN ones left out)
    alpha_low: float = math.nan  # BCa 95% interval of the pooled α, prompts resampled
    alpha_high: float = math.nan
    n_judged: int = 0  # generations with at least one judged draft token
    alpha_token_mean: float = math.nan  # pooled: sum accepted / sum proposed
    mean_accepted_length: float = math.nan  # pooled: sum accepted / sum steps
    c: float = math.nan  # median over examples of mean draft forward / mean target forward
    theoretical_f: float = math.nan
    drafted_per_step: float = math.nan  # tokens actually drafted per verification step (f's cost)
    depth_per_step: float = math.nan  # tokens on the longest path of a step's draft (f's γ)
    speedup: float = math.nan  # measured, paired median vs plain decoding (per token)
    speedup_low: float = math.nan  # bootstrap 95% interval over prompts (NaN under 2 prompts)
    speedup_high: float = math.nan
    speedup_loop_free: float = math.nan
    n_pairs: int = 0
    n_prompts: int = 0  # prompts behind the pairs
    n_pairs_loop_free: int = 0
    seconds_per_token: float = math.nan  # median decode seconds (after the prefill) per generated token
    seconds_per_char: float = math.nan  # median decode seconds per generated character
    tokens_per_char: float = math.nan
    in_language_rate: float = math.nan
    loop_rate: float = math.nan
    langid_agreement: float = math.nan  # share where py3langid agreed (covered languages only)
    draft_forward_ms: float = math.nan  # median draft forward
    target_forward_ms: float = math.nan  # median target forward
    # Median verification forward (g + 1 tokens) over the median plain decode step: f assumes 1,
    # on a CPU with a 262k-row output head it is more. f_verify uses it in place of that 1.
    verify_cost: float = math.nan
    draft_cost: float = math.nan  # median draft forward over the median plain decode step
    # Draft forwards timed per verification step: the drafted tokens for a drafter with a cache
    # of its own, one more (the bonus row's pass) for ``gguf:LANG`` on the target's own steps.
    draft_forwards_per_step: float = math.nan
    f_verify: float = math.nan
    # held_out_best: the cell's speedup on the prompts that chose its γ (NaN elsewhere)
    selection_speedup: float = math.nan
    acceptance_by_draft_position: list[float] = field(default_factory=list)
    acceptance_by_output_position: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def step_shapes(r: ExampleRecord) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(accepted, depth, rejected) per step of a generation: the drafted tokens kept, the tokens
    on the longest path of the step's draft (a chain: its length) and 1 where the step ended in
    a rejection. Stores from before depths were recorded have only node counts: a chain's steps
    are recovered from them (its depth is its length, a rejection is a step that kept fewer);
    None for a token tree there, whose depth was not recorded (its rejections disagree)."""
    acc = np.asarray(r.accepted_per_step, dtype=np.int64)
    if len(r.depth_per_step) == len(acc) and len(r.rejected_per_step) == len(acc):
        return acc, np.asarray(r.depth_per_step, dtype=np.int64), np.asarray(r.rejected_per_step, dtype=np.int64)
    prop = np.asarray(r.proposed_per_step, dtype=np.int64)
    rejected = (acc < prop).astype(np.int64)
    if len(prop) != len(acc) or int(rejected.sum()) != r.rejections:
        return None
    return acc, prop, rejected


def _depth_total(r: ExampleRecord, shape: tuple[np.ndarray, ...] | None) -> int | None:
    """Tokens on the longest paths of a generation's drafts (``shape``: its ``step_shapes``),
    summed over its steps (a chain's are its tokens, also where no per-step counts were kept);
    None where unknown."""
    if not r.accepted_per_step and not r.depth_per_step:
        return r.proposed
    return None if shape is None else int(shape[1].sum())


def _acceptance_by_draft_position(shapes: list[tuple[np.ndarray, ...] | None], gamma: int) -> list[float]:
    """P(the i-th drafted token of a step is accepted | a step's draft reached position i),
    i = 0..gamma-1: positions count along a path, so a tree's nodes at one depth are one
    position (``shapes``: each generation's ``step_shapes``). NaN-free only where every
    generation's depths are known."""
    if gamma <= 0:
        return []
    if any(sh is None for sh in shapes):
        return [math.nan] * gamma
    acc = np.concatenate([sh[0] for sh in shapes] or [np.zeros(0, np.int64)])
    depth = np.concatenate([sh[1] for sh in shapes] or [np.zeros(0, np.int64)])
    if depth.size == 0:
        return []
    pos = np.arange(gamma)[None, :]
    proposed = (depth[:, None] > pos).sum(axis=0)
    accepted = (acc[:, None] > pos).sum(axis=0)
    return [float(a / p) if p else math.nan for a, p in zip(accepted, proposed)]


def _acceptance_by_output_position(shapes: list[tuple[np.ndarray, ...] | None]) -> list[float]:
    """Paper-style a per bin of output position (16 tokens), from the per-step counts (a step
    with a rejection judges accepted + 1 tokens, one that ran out of draft its accepted ones)."""
    matched = defaultdict(float)
    judged = defaultdict(float)
    for shape in shapes:
        if shape is None:
            continue
        acc, _, rejected = shape
        if acc.size == 0:
            continue
        start = np.concatenate([[0], np.cumsum(acc + 1)[:-1]])  # output position of each step
        bins = start // POSITION_BIN_TOKENS
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
    if rec.n_tokens <= 0 or base.n_tokens <= 0 or rec.decode_seconds <= 0:
        return None
    return (base.decode_seconds / base.n_tokens) / (rec.decode_seconds / rec.n_tokens)


def _prompt_table(by_prompt: dict[int, list[float]]) -> np.ndarray:
    """One row per prompt with pairs, its seeds' values NaN-padded (an interval needs 2 rows)."""
    groups = [v for v in by_prompt.values() if v]
    table = np.full((len(groups), max((len(g) for g in groups), default=0)), np.nan)
    for i, g in enumerate(groups):
        table[i, : len(g)] = g
    return table


def _median_of(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The median of the pairs in ``rows`` of ``table`` (the last axis of ``rows`` is a resample)."""
    picked = table[rows]
    return np.nanmedian(picked.reshape(*picked.shape[:-2], -1), axis=-1)


def _bca(tables: list[np.ndarray], statistic, seed: int, level: float) -> tuple[float, float]:
    """BCa interval (``scipy.stats.bootstrap``) of ``statistic`` over prompts resampled within
    each table (all seeds of a prompt move together: the prompts are the resampled units)."""
    from scipy.stats import bootstrap

    prompts = [np.arange(len(t)) for t in tables]
    point = float(statistic(*prompts, axis=-1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate resamples (all equal) give NaN, handled below
        res = bootstrap(prompts, statistic, n_resamples=N_BOOTSTRAP, confidence_level=level,
                        method="BCa", vectorized=True, axis=-1, rng=np.random.default_rng(seed))
    lo, hi = (float(x) for x in res.confidence_interval)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        if np.allclose(res.bootstrap_distribution, point, equal_nan=True):
            return point, point  # every resample equals the estimate: no spread
        return math.nan, math.nan
    return lo, hi


def median_interval(by_prompt: dict[int, list[float]], seed: int = BOOTSTRAP_SEED,
                    level: float = 0.95) -> tuple[float, float]:
    """BCa interval of the median of a cell's pairs, prompts resampled; NaN under 2 prompts."""
    table = _prompt_table(by_prompt)
    if len(table) < 2:
        return math.nan, math.nan
    return _bca([table], lambda rows, axis=-1: _median_of(table, rows), seed, level)


def _judged_table(records: list[ExampleRecord]) -> np.ndarray:
    """Per prompt (its seeds summed): [accepted, accepted + rejections], prompts with none left out."""
    by: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for r in records:
        by[r.prompt_index][0] += r.accepted
        by[r.prompt_index][1] += r.accepted + r.rejections
    return np.array([v for v in by.values() if v[1] > 0], dtype=np.float64).reshape(-1, 2)


def _pooled_alpha_of(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    picked = table[rows]  # (..., n, 2)
    return picked[..., 0].sum(-1) / picked[..., 1].sum(-1)


def alpha_interval(records: list[ExampleRecord], seed: int = BOOTSTRAP_SEED,
                   level: float = 0.95) -> tuple[float, float]:
    """BCa interval of the pooled α of ``records``, prompts resampled; NaN under 2 prompts."""
    table = _judged_table(records)
    if len(table) < 2:
        return math.nan, math.nan
    return _bca([table], lambda rows, axis=-1: _pooled_alpha_of(table, rows), seed, level)


def mean_alpha_interval(records: list[ExampleRecord], cells: list[CellKey]) -> tuple[float, float, float]:
    """Mean over ``cells`` of their pooled α, with a BCa 95% interval (prompts resampled within
    each cell); NaN interval where a cell has < 2 judged prompts."""
    groups: dict[CellKey, list[ExampleRecord]] = defaultdict(list)
    for r in records:
        groups[(r.language, r.task, r.drafter, r.gamma)].append(r)
    tables = [t for t in (_judged_table(groups.get(key, [])) for key in cells) if len(t)]
    if not tables:
        return math.nan, math.nan, math.nan

    def mean_alpha(*rows: np.ndarray, axis: int = -1) -> np.ndarray:
        return sum(_pooled_alpha_of(t, r) for t, r in zip(tables, rows)) / len(tables)

    mean = float(mean_alpha(*(np.arange(len(t)) for t in tables)))
    if any(len(t) < 2 for t in tables):
        return mean, math.nan, math.nan
    seed = BOOTSTRAP_SEED + zlib.crc32(("alpha|" + "|".join("|".join(map(str, k)) for k in cells)).encode())
    return (mean, *_bca(tables, mean_alpha, seed, 0.95))


def cell_seed(key: CellKey) -> int:
    """A fixed bootstrap seed per cell: reproducible, and independent resamples across cells
    (their prompts are different texts), which the interval of a mean over cells assumes."""
    return BOOTSTRAP_SEED + zlib.crc32("|".join(map(str, key)).encode())


def paired_ratios(records: list[ExampleRecord], loop_free: bool = False) -> dict[CellKey, dict[int, list[float]]]:
    """Per speculative cell, per prompt index: plain over speculative seconds per token of
    each (prompt, seed) pair run side by side. ``loop_free`` leaves out pairs where either
    generation looped."""
    baseline = {(r.language, r.task, r.prompt_index, r.seed, machine_kind(r.machine)): r
                for r in records if r.drafter == BASELINE}  # fmt: skip
    out: dict[CellKey, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.drafter == BASELINE:
            continue
        base = baseline.get((r.language, r.task, r.prompt_index, r.seed, machine_kind(r.machine)))
        q = _ratio(r, base) if base is not None else None
        if q is None or (loop_free and (r.looped or base.looped)):
            continue
        out[(r.language, r.task, r.drafter, r.gamma)][r.prompt_index].append(q)
    return out


def pooled_alpha(records: list[ExampleRecord]) -> float:
    """Sum matched / sum (matched + rejections): generations where nothing was judged add
    nothing, instead of a 0 (or a NaN) to average."""
    return acceptance_rate(sum(r.accepted for r in records), sum(r.rejections for r in records))


def held_out_split(records: list[ExampleRecord]) -> tuple[list[ExampleRecord], list[ExampleRecord]]:
    """(choose, measure): even-numbered prompts choose a setting, odd-numbered ones measure it.

    Split by prompt, so every seed of a prompt and its plain-decoding pair stay together."""
    return ([r for r in records if r.prompt_index % 2 == 0],
            [r for r in records if r.prompt_index % 2 == 1])  # fmt: skip


def setting_stats(records: list[ExampleRecord]) -> list[SettingStats]:
    """Stats of every (language, task, drafter, gamma) in ``records``, plain decoding included."""
    groups: dict[CellKey, list[ExampleRecord]] = defaultdict(list)
    kinds: dict[CellKey, set[str]] = defaultdict(set)  # machine kinds of each cell's records
    for r in records:
        groups[(r.language, r.task, r.drafter, r.gamma)].append(r)
        kinds[(r.language, r.task, r.drafter, r.gamma)].add(machine_kind(r.machine))
    ratios, ratios_clean = paired_ratios(records), paired_ratios(records, loop_free=True)
    out = []
    for key, rows in sorted(groups.items()):
        lang, task, drafter, gamma = key
        cs = [r.c for r in rows if is_finite(r.c) and r.c > 0]
        s = SettingStats(language=lang, task=task, drafter=drafter, gamma=gamma,
                         trained_on=rows[0].trained_on, n=len(rows))  # fmt: skip
        if drafter != BASELINE:
            alphas = np.array([r.alpha for r in rows if is_finite(r.alpha)], dtype=np.float64)
            s.n_judged = sum(1 for r in rows if r.accepted + r.rejections > 0)
            s.alpha_mean = pooled_alpha(rows)
            s.alpha_low, s.alpha_high = alpha_interval(rows, seed=cell_seed(key))
            s.alpha_std = float(alphas.std(ddof=1)) if len(alphas) > 1 else (0.0 if len(alphas) else math.nan)
            proposed, steps = sum(r.proposed for r in rows), sum(r.steps for r in rows)
            accepted = sum(r.accepted for r in rows)
            s.alpha_token_mean = accepted / proposed if proposed else math.nan
            s.mean_accepted_length = accepted / steps if steps else math.nan
            # f at the tokens actually drafted per step, not at the γ asked for: the router
            # caps γ, n-gram drafters stop early, and the budget cuts the last draft. A tree
            # keeps at most its depth + 1 tokens a step and costs its nodes.
            s.drafted_per_step = proposed / steps if steps else math.nan
            shapes = [step_shapes(r) for r in rows]
            depths = [_depth_total(r, shape) for r, shape in zip(rows, shapes)]
            if steps and all(d is not None for d in depths):
                s.depth_per_step = sum(depths) / steps
            s.c = median(cs)
            s.theoretical_f = theoretical_speedup(s.alpha_mean, s.depth_per_step, s.c, nodes=s.drafted_per_step)
            by_prompt = ratios.get(key, {})
            pairs = [q for v in by_prompt.values() for q in v]
            s.speedup, s.n_pairs, s.n_prompts = median(pairs), len(pairs), len(by_prompt)
            s.speedup_low, s.speedup_high = median_interval(by_prompt, seed=cell_seed(key))
            clean = [q for v in ratios_clean.get(key, {}).values() for q in v]
            s.speedup_loop_free, s.n_pairs_loop_free = median(clean), len(clean)
            s.acceptance_by_draft_position = _acceptance_by_draft_position(shapes, gamma)
            s.acceptance_by_output_position = _acceptance_by_output_position(shapes)
        else:
            s.speedup = s.speedup_low = s.speedup_high = 1.0
            s.speedup_loop_free = 1.0
        s.seconds_per_token = median([r.decode_seconds / r.n_tokens for r in rows if r.n_tokens])
        s.seconds_per_char = median([r.decode_seconds / r.n_chars for r in rows if r.n_chars])
        tpc = [r.n_tokens / r.n_chars for r in rows if r.n_chars]
        s.tokens_per_char = median(tpc)
        checked = [r for r in rows if r.in_language is not None]
        if checked:
            s.in_language_rate = float(np.mean([bool(r.in_language) for r in checked]))
        s.loop_rate = float(np.mean([r.looped for r in rows]))
        covered = [r for r in rows if r.langid_language]
        if covered:
            from babelspec.data.langid import LANGID_CODES

            s.langid_agreement = float(
                np.mean([r.langid_language == LANGID_CODES.get(r.language) for r in covered])
            )
        dfw = [x for r in rows for x in r.draft_forward_seconds]
        tfw = [x for r in rows for x in r.target_forward_seconds]
        s.draft_forward_ms = median(dfw) * 1e3 if dfw else math.nan
        timed_steps = sum(r.steps for r in rows if r.draft_forward_seconds)
        s.draft_forwards_per_step = len(dfw) / timed_steps if timed_steps else math.nan
        s.target_forward_ms = median(tfw) * 1e3 if tfw else math.nan
        out.append(s)
    plain_ms = {(s.language, s.task): s.target_forward_ms for s in out if s.drafter == BASELINE}
    for s in out:
        base = plain_ms.get((s.language, s.task), math.nan)
        plain_kinds = kinds[(s.language, s.task, BASELINE, 0)]
        one_kind = len(plain_kinds) == 1 and kinds[(s.language, s.task, s.drafter, s.gamma)] == plain_kinds
        if s.drafter != BASELINE and one_kind and math.isfinite(base) and base > 0 and math.isfinite(s.target_forward_ms):
            s.verify_cost = s.target_forward_ms / base
            if math.isfinite(s.draft_forward_ms):
                s.draft_cost = s.draft_forward_ms / base  # draft forward in units of a plain step
                forwards = s.draft_forwards_per_step  # what the step's drafting cost: its timed forwards
                s.f_verify = theoretical_speedup(s.alpha_mean, s.depth_per_step, s.draft_cost, s.verify_cost,
                                                 nodes=forwards if math.isfinite(forwards) else s.drafted_per_step)
    return out


def setting_score(s: SettingStats) -> float:
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
        if key not in best or setting_score(s) > setting_score(best[key]):
            best[key] = s
    return best


def held_out_best(records: list[ExampleRecord]) -> list[SettingStats]:
    """Per (language, task, drafter): γ chosen on the choosing prompts (``best_gamma`` of the
    even-numbered ones), and that γ's statistics on the held-out prompts (the odd-numbered
    ones), so no reported number is the maximum it was chosen by. A cell with no held-out
    prompt is left out."""
    choose, measure = held_out_split(records)
    held = {(s.language, s.task, s.drafter, s.gamma): s for s in setting_stats(measure)}
    out = []
    for (lang, task, drafter), s in sorted(best_gamma(setting_stats(choose)).items()):
        if (h := held.get((lang, task, drafter, s.gamma))) is not None:
            h.selection_speedup = s.speedup
            out.append(h)
    return out


def best_per_cell(stats: list[SettingStats], score: Callable[[SettingStats], float] | None = None,
                  ) -> dict[tuple[str, str], SettingStats]:  # fmt: skip
    """Per (language, task) the speculative setting with the highest ``score`` (by default its
    measured speedup, else f; ``route_choice.pooled_score``: its pooled estimate)."""
    score = score or setting_score
    best: dict[tuple[str, str], SettingStats] = {}
    for s in best_gamma(stats).values():
        key = (s.language, s.task)
        if key not in best or score(s) > score(best[key]):
            best[key] = s
    return best


@dataclass
class LanguageSummary:
    """The headline row: per language and task, the best drafter setting, chosen on the even
    prompts and measured on the odd ones (``held_out_split``)."""

    language: str
    task: str
    drafter: str
    gamma: int
    alpha: float  # pooled, on the held-out prompts
    speedup: float  # held-out measured speedup of the chosen setting
    speedup_low: float  # its bootstrap 95% interval over the held-out prompts
    speedup_high: float
    n_pairs: int  # held-out pairs
    theoretical_f: float
    speedup_loop_free: float
    seconds_per_char_plain: float
    seconds_per_char_best: float
    selection_speedup: float = math.nan  # the same setting on the prompts that chose it
    speedup_in_sample: float = math.nan  # max over settings of the all-prompt medians (biased up)
    draft_cost: float = math.nan  # held out: a draft forward over a plain step (``SettingStats.draft_cost``)
    # llama.cpp's plain decoding of the same GGUF as the baseline (``llama_cpp = true``), held out:
    # the chosen setting's decode rate over llama.cpp's, and babelspec's plain decoding's
    vs_llama_cpp: float = math.nan
    vs_llama_cpp_low: float = math.nan
    vs_llama_cpp_high: float = math.nan
    plain_vs_llama_cpp: float = math.nan
    plain_vs_llama_cpp_low: float = math.nan
    plain_vs_llama_cpp_high: float = math.nan
    n_llama_cpp_pairs: int = 0


def split_llama_cpp(records: list[ExampleRecord]) -> tuple[list[ExampleRecord], list[ExampleRecord]]:
    """(the grid's records, llama.cpp's plain decoding's): llama.cpp is a baseline beside plain
    decoding (``llama_cpp = true``), never a setting to choose, a cell or a route."""
    return [r for r in records if r.drafter != LLAMA_CPP], [r for r in records if r.drafter == LLAMA_CPP]


def _rate(r: ExampleRecord, first_free: bool = False) -> float | None:
    """Decoded tokens per second after the prefill; ``first_free``: llama.cpp's records, whose
    prefill ends with the first token (so it is not counted)."""
    tokens = r.n_tokens - (1 if first_free else 0)
    return tokens / r.decode_seconds if tokens > 0 and r.decode_seconds > 0 else None


def llama_cpp_ratios(records: list[ExampleRecord], llama: list[ExampleRecord],
                     cell: CellKey) -> dict[int, list[float]]:  # fmt: skip
    """Per prompt index: the decode rate of ``cell``'s generations over llama.cpp's plain
    decoding of the same (prompt, seed) on the same kind of machine."""
    lang, task, drafter, gamma = cell
    theirs = {(r.prompt_index, r.seed, machine_kind(r.machine)): _rate(r, first_free=True)
              for r in llama if (r.language, r.task) == (lang, task)}  # fmt: skip
    out: dict[int, list[float]] = defaultdict(list)
    for r in records:
        if (r.language, r.task, r.drafter, r.gamma) != cell:
            continue
        mine, base = _rate(r), theirs.get((r.prompt_index, r.seed, machine_kind(r.machine)))
        if mine is not None and base is not None:
            out[r.prompt_index].append(mine / base)
    return out


def fill_vs_llama_cpp(rows: list[LanguageSummary], records: list[ExampleRecord], llama: list[ExampleRecord]) -> None:
    """Fill each row's ``vs_llama_cpp`` (its chosen setting) and ``plain_vs_llama_cpp`` fields
    from the held-out prompts: medians over (prompt, seed) pairs with BCa 95% intervals (prompts
    resampled); left NaN where llama.cpp decoded none of the row's prompts."""
    measure = held_out_split(records)[1]
    held_llama = held_out_split(llama)[1]
    for row in rows:
        for prefix, cell in (("", (row.language, row.task, row.drafter, row.gamma)),
                             ("plain_", (row.language, row.task, BASELINE, 0))):  # fmt: skip
            by_prompt = llama_cpp_ratios(measure, held_llama, cell)
            values = [v for vs in by_prompt.values() for v in vs]
            if not values:
                continue
            low, high = median_interval(by_prompt, seed=cell_seed((*cell[:3], -1)))
            setattr(row, f"{prefix}vs_llama_cpp", float(np.median(values)))
            setattr(row, f"{prefix}vs_llama_cpp_low", low)
            setattr(row, f"{prefix}vs_llama_cpp_high", high)
            if not prefix:
                row.n_llama_cpp_pairs = len(values)


def language_summary(records: list[ExampleRecord],
                     chooser: Callable[[list[ExampleRecord]], Callable[[SettingStats], float]] | None = None,
                     ) -> list[LanguageSummary]:  # fmt: skip
    """Per (language, task) the setting ``best_per_cell`` chooses on the choosing prompts, with
    ``chooser(choosing records)``'s score where given (the run's router rule: ``route_choice.
    chooser``), measured on the held-out ones."""
    choose, measure = held_out_split(records)
    everything, fit, held = setting_stats(records), setting_stats(choose), setting_stats(measure)
    # Latency per character on both sides over the same (held-out) prompts.
    plain = {(s.language, s.task): s for s in held if s.drafter == BASELINE}
    in_sample = best_per_cell(everything)
    held_index = {(s.language, s.task, s.drafter, s.gamma): s for s in held}
    out = []
    for (lang, task), s in sorted(best_per_cell(fit, chooser(choose) if chooser else None).items()):
        h = held_index.get((lang, task, s.drafter, s.gamma))
        p = plain.get((lang, task))
        best = in_sample.get((lang, task))
        nan = math.nan
        out.append(LanguageSummary(
            language=lang, task=task, drafter=s.drafter, gamma=s.gamma,
            alpha=h.alpha_mean if h else nan, speedup=h.speedup if h else nan,
            speedup_low=h.speedup_low if h else nan, speedup_high=h.speedup_high if h else nan,
            n_pairs=h.n_pairs if h else 0, theoretical_f=h.theoretical_f if h else nan,
            speedup_loop_free=h.speedup_loop_free if h else nan,
            seconds_per_char_plain=p.seconds_per_char if p else nan,
            seconds_per_char_best=h.seconds_per_char if h else nan,
            selection_speedup=s.speedup, speedup_in_sample=best.speedup if best else nan,
            draft_cost=h.draft_cost if h else nan,
        ))  # fmt: skip
    return out


def mean_speedup_interval(records: list[ExampleRecord], cells: list[CellKey]) -> tuple[float, float, float]:
    """Mean over ``cells`` of their median measured speedup, with a BCa 95% interval (prompts
    resampled within each cell); the interval is NaN where a cell has < 2 prompts. A
    plain-decoding cell counts 1.0."""
    ratios = paired_ratios(records)
    tables, constants = [], 0
    for key in cells:
        if key[2] == BASELINE:  # plain decoding: 1.0 by definition, no spread
            constants += 1
            continue
        table = _prompt_table(ratios.get(key, {}))
        if len(table):
            tables.append(table)
    n = len(tables) + constants
    if not n:
        return math.nan, math.nan, math.nan
    if not tables:  # plain decoding only
        return 1.0, 1.0, 1.0

    def mean_of_medians(*rows: np.ndarray, axis: int = -1) -> np.ndarray:
        return (sum(_median_of(t, r) for t, r in zip(tables, rows)) + constants) / n

    mean = float(mean_of_medians(*(np.arange(len(t)) for t in tables)))
    if any(len(t) < 2 for t in tables):  # a cell of one prompt: a median, but no interval
        return mean, math.nan, math.nan
    seed = BOOTSTRAP_SEED + zlib.crc32("|".join("|".join(map(str, key)) for key in cells).encode())
    return (mean, *_bca(tables, mean_of_medians, seed, 0.95))


def worst_by_selection(rows: list[Any]) -> Any:
    """The worst of ``rows`` (language summaries or routes), chosen like the best setting: on the
    prompts that chose each row's setting (``selection_speedup``), so the worst language's
    held-out speedup is measured on prompts that did not pick it. The minimum of noisy held-out
    medians would be biased down. Rows without a selection value are ranked by the held-out one."""

    def chosen_by(row: Any) -> float:
        value = getattr(row, "selection_speedup", math.nan)
        if not is_finite(value):
            value = getattr(row, "speedup", getattr(row, "predicted_speedup", math.nan))
        return value if is_finite(value) else math.inf

    return min(rows, key=chosen_by)


def headline(records: list[ExampleRecord], rows: list[LanguageSummary]) -> list[dict]:
    """Per task (and "*" for all): the mean held-out speedup of the chosen settings, the worst
    language ranked on its choosing prompts (``worst_by_selection``: the minimum of noisy held-out
    medians is biased down) and the lowest held-out number beside it, each with its bootstrap
    95% interval."""
    _, measure = held_out_split(records)
    out = []
    for task in [*sorted({r.task for r in rows}), "*"]:
        mine = [r for r in rows if (task == "*" or r.task == task) and is_finite(r.speedup)]
        if not mine:
            continue
        worst = worst_by_selection(mine)
        lowest = min(mine, key=lambda r: (r.speedup, r.language))  # the lowest held-out number
        mean, lo, hi = mean_speedup_interval(
            measure, [(r.language, r.task, r.drafter, r.gamma) for r in mine])
        out.append({
            "task": task, "cells": len(mine), "mean": mean, "mean_low": lo, "mean_high": hi,
            "alpha_mean": float(np.nanmean([r.alpha for r in mine])),
            "worst_language": worst.language, "worst_task": worst.task,
            "worst_drafter": worst.drafter, "worst_gamma": worst.gamma, "worst": worst.speedup,
            "worst_low": worst.speedup_low, "worst_high": worst.speedup_high,
            "lowest_language": lowest.language, "lowest_task": lowest.task, "lowest_drafter": lowest.drafter,
            "lowest": lowest.speedup, "lowest_low": lowest.speedup_low, "lowest_high": lowest.speedup_high,
        })  # fmt: skip
    return out


def drafter_means(best: list[SettingStats]) -> list[dict]:
    """Per task and drafter: mean and worst over languages of ``best`` (one cell per language,
    task and drafter: ``held_out_best``, γ chosen on other prompts than those measured)."""
    by: dict[tuple[str, str], list[SettingStats]] = defaultdict(list)
    for s in best:
        by[(s.task, s.drafter)].append(s)
    rows = []
    for (task, drafter), cells in sorted(by.items()):
        sp = [c.speedup for c in cells if math.isfinite(c.speedup)]
        # the worst language as the headline picks it: by the prompts that chose its γ (the
        # minimum of noisy held-out medians would be biased down)
        worst = worst_by_selection([c for c in cells if math.isfinite(c.speedup)] or cells)
        rows.append({
            "task": task, "drafter": drafter, "trained_on": cells[0].trained_on,
            "languages": len(cells),
            "alpha_mean": _nanmean([c.alpha_mean for c in cells]),
            "f_mean": float(np.nanmean([c.theoretical_f for c in cells])) if any(
                math.isfinite(c.theoretical_f) for c in cells) else math.nan,
            "speedup_mean": float(np.mean(sp)) if sp else math.nan,
            "speedup_worst": worst.speedup if sp else math.nan,  # held out
            "worst_selection": getattr(worst, "selection_speedup", math.nan) if sp else math.nan,
            "speedup_min": float(np.min(sp)) if sp else math.nan,  # the lowest held-out number
            "worst_language": worst.language if sp else "",
        })  # fmt: skip
    return rows


def _restricted_head_layers(spec: str) -> tuple[bool, str] | None:
    """(int8?, layers) of a restricted-head drafter spec: ``head[:LANG]`` and ``int8[:LANG]`` are
    all layers (""), ``self:K@[LANG]`` and ``int8:K@[LANG]`` the first K; None for other drafters."""
    kind, _, arg = spec.partition(":")
    if kind == "head":
        return False, ""
    if kind == "self" and "@" in arg:
        return False, arg.partition("@")[0]
    if kind == "int8":
        return True, arg.partition("@")[0] if "@" in arg else ""
    return None


def quantization_cost(stats: list[SettingStats], specs: dict[tuple[str, str], str]) -> list[dict]:
    """What weight-only int8 layers cost each language: every int8 drafter setting beside the bf16
    restricted-head setting of the same layers (``int8`` / ``head``, ``int8:K@`` / ``self:K@``),
    same task and γ, with both settings' α, c and measured speedup. ``specs``: (drafter name,
    language) -> spec."""
    cells: dict[tuple[str, str, int, str, bool], SettingStats] = {}
    for s in stats:
        shape = _restricted_head_layers(specs.get((s.drafter, s.language), ""))
        if shape is not None:
            cells.setdefault((s.language, s.task, s.gamma, shape[1], shape[0]), s)
    rows = []
    for (lang, task, gamma, layers, int8), q in sorted(cells.items()):
        bf16 = cells.get((lang, task, gamma, layers, False))
        if not int8 or bf16 is None:
            continue
        rows.append({"language": lang, "task": task, "gamma": gamma, "layers": layers or "all",
                     "bf16": bf16.drafter, "int8": q.drafter, "alpha_bf16": bf16.alpha_mean, "alpha_int8": q.alpha_mean,
                     "alpha_loss": bf16.alpha_mean - q.alpha_mean, "c_bf16": bf16.c, "c_int8": q.c,
                     "speedup_bf16": bf16.speedup, "speedup_int8": q.speedup})  # fmt: skip
    return rows


def cross_task_matrix(best: list[SettingStats]) -> dict[str, dict[str, dict[str, float]]]:
    """drafter -> evaluated task -> {alpha, speedup, f, in_task}; means over languages of
    ``best`` (``held_out_best``: each language's γ chosen on other prompts than those measured).

    ``in_task`` is 1 where the drafter was fitted to that task, 0 where the task is held out,
    NaN for drafters fitted to no task (general text or none).
    """
    by: dict[tuple[str, str], list[SettingStats]] = defaultdict(list)
    for s in best:
        by[(s.drafter, s.task)].append(s)
    out: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for (drafter, task), cells in sorted(by.items()):
        trained = cells[0].trained_on
        sp = [c.speedup for c in cells if math.isfinite(c.speedup)]
        out[drafter][task] = {
            "alpha": _nanmean([c.alpha_mean for c in cells]),
            "speedup": float(np.mean(sp)) if sp else math.nan,
            "f": _nanmean([c.theoretical_f for c in cells]),
            "in_task": (1.0 if trained == task else 0.0) if trained not in ("", "general") else math.nan,
            "languages": float(len(cells)),
        }
    return dict(out)


def wall_seconds_total(records: list[ExampleRecord]) -> float:
    return float(sum(r.wall_seconds for r in records))


OTHER_WORK_LOAD = 0.75  # load average above the run's own threads that means other work ran beside


def timing_load(records: list[ExampleRecord]) -> dict[str, Any]:
    """How many generations were timed while other work ran on the machine: the 1-minute load
    average at a generation's end, less the run's own threads (its fingerprint's), above
    ``OTHER_WORK_LOAD``. A paired ratio stays fair under steady load, but load that comes and
    goes within a cell moves its speedups. Records from stores without the load: not counted."""
    loads = [(r.load_average - float(r.machine.get("threads") or 0), r) for r in records
             if math.isfinite(r.load_average)]  # fmt: skip
    busy = [(other, r) for other, r in loads if other > OTHER_WORK_LOAD]
    cells = sorted({(r.language, r.task) for _, r in busy})
    return {"generations": len(records), "recorded": len(loads), "beside_other_work": len(busy),
            "max_other_load": round(max((other for other, _ in loads), default=math.nan), 2),
            "cells": [f"{lang} {task}" for lang, task in cells]}  # fmt: skip


# A cell's measured speedup and the speedup its own forwards predict (f_verify: its pooled α,
# tokens drafted and the median draft and verification forwards against the median plain step)
# agree within a few percent on a quiet machine (3 languages x 3 drafters of the flores200
# profile: 0.95-1.06). Further apart, the wall time holds something the forwards do not: other
# work, a stall, a slow drafter outside its forward. A verification forward far above the run's
# usual cost for its gamma says the forwards themselves were disturbed.
TIMING_AGREEMENT = 0.15  # |speedup / f_verify - 1| above this: the cell's timing disagrees
VERIFY_OUTLIER = 1.25  # a verify cost above this x the run's median for its gamma: an outlier


def timing_agreement(s: SettingStats) -> float:
    """Measured speedup over the speedup the cell's own forwards predict (NaN without both)."""
    if math.isfinite(s.speedup) and math.isfinite(s.f_verify) and s.f_verify > 0:
        return s.speedup / s.f_verify
    return math.nan


def timing_checks(stats: list[SettingStats]) -> dict[str, Any]:
    """The speculative cells whose timing disagrees with their own forwards
    (``TIMING_AGREEMENT``) and those whose verification forward is an outlier for its gamma
    (``VERIFY_OUTLIER`` x the median over the run's cells, where it has 5 or more)."""
    spec = [s for s in stats if s.drafter != BASELINE]
    checked = [(s, q) for s in spec if math.isfinite(q := timing_agreement(s))]
    off = [(s, q) for s, q in checked if abs(q - 1) > TIMING_AGREEMENT]
    by_gamma: dict[int, list[float]] = defaultdict(list)
    for s in spec:
        if math.isfinite(s.verify_cost):
            by_gamma[s.gamma].append(s.verify_cost)
    usual = {g: median(v) for g, v in by_gamma.items() if len(v) >= 5}
    outliers = [s for s in spec if s.gamma in usual and math.isfinite(s.verify_cost)
                and s.verify_cost > VERIFY_OUTLIER * usual[s.gamma]]  # fmt: skip

    def name(s: SettingStats) -> str:
        return f"{s.language} {s.task} {s.drafter} g{s.gamma}"

    return {"checked": len(checked), "agreement_quantiles": _quantiles([q for _, q in checked]),
            "disagreeing": [{"cell": name(s), "agreement": round(q, 3)} for s, q in off],
            "usual_verify_cost": {str(g): round(v, 3) for g, v in sorted(usual.items())},
            "verify_outliers": [{"cell": name(s), "verify_cost": round(s.verify_cost, 3)} for s in outliers]}


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    q = np.quantile(np.asarray(values), [0.05, 0.5, 0.95])
    return {"5": round(float(q[0]), 3), "50": round(float(q[1]), 3), "95": round(float(q[2]), 3)}


def paper_table(records: list[ExampleRecord], best: list[SettingStats] | None = None) -> list[dict]:
    """The paper's comparison, one row per task and drafter: each language's γ chosen on the
    choosing prompts (the highest measured speedup), then α, f, f at the measured verification
    cost and the measured speedup on the held-out prompts, as means over languages with BCa 95%
    intervals (prompts resampled within each language), and each language's held-out values.
    ``best``: ``held_out_best(records)``, where the caller has it already."""
    _, measure = held_out_split(records)
    by: dict[tuple[str, str], list[SettingStats]] = defaultdict(list)
    for h in held_out_best(records) if best is None else best:
        by[(h.task, h.drafter)].append(h)
    rows = []
    for (task, drafter), hs in sorted(by.items()):
        cells = [(h.language, h.task, h.drafter, h.gamma) for h in hs]
        speedup, low, high = mean_speedup_interval(measure, cells)
        alpha, alpha_low, alpha_high = mean_alpha_interval(measure, cells)
        rows.append({
            "task": task, "drafter": drafter, "trained_on": hs[0].trained_on, "languages": len(hs),
            "alpha": alpha, "alpha_low": alpha_low, "alpha_high": alpha_high,
            "f": _nanmean([h.theoretical_f for h in hs]), "f_verify": _nanmean([h.f_verify for h in hs]),
            "c": _nanmean([h.c for h in hs]), "verify_cost": _nanmean([h.verify_cost for h in hs]),
            "speedup": speedup, "speedup_low": low, "speedup_high": high,
            "per_language": [{"language": h.language, "gamma": h.gamma, "alpha": h.alpha_mean,
                              "alpha_low": h.alpha_low, "alpha_high": h.alpha_high,
                              "speedup": h.speedup, "speedup_low": h.speedup_low,
                              "speedup_high": h.speedup_high, "f": h.theoretical_f} for h in hs],
        })  # fmt: skip
    return rows
