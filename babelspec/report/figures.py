"""The report's figures (matplotlib, Agg backend), each returned as PNG bytes.

Numbering follows the paper where a figure has a counterpart there (Fig. 2 forward times,
Figs. 3-4 acceptance and speedup per language, Fig. 5 in-task versus held-out task).
"""

from __future__ import annotations

import io
import warnings
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from babelspec.numeric import is_finite
from babelspec.router import BASELINE  # noqa: E402


def text_overlaps(fig) -> list[tuple[str, str]]:
    """Pairs of visible texts (titles, labels, tick labels, legends' entries) whose boxes overlap
    once the figure is drawn: what a reader could not read. A tick label counts only where its
    tick lies within its axis's view (matplotlib keeps labels of ticks outside it, undrawn)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ticks, shown = set(), []
    for ax in fig.axes:
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            lo, hi = sorted(limits)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                for label in (tick.label1, tick.label2):
                    ticks.add(id(label))
                    if lo <= tick.get_loc() <= hi:
                        shown.append(label)
    texts = [t for t in fig.findobj(matplotlib.text.Text) if id(t) not in ticks] + shown
    texts = [t for t in texts if t.get_visible() and t.get_text().strip()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    out = []
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1 :]:
            if box_a.overlaps(box_b) and box_a.width > 0 and box_b.width > 0:
                out.append((a, b))
    return out


class FigureTextOverlap(UserWarning):
    """A report's figure draws text over other text (``text_overlaps``): a reader cannot read it."""


def _png(fig) -> bytes:
    """The figure as PNG bytes, closed after; a ``FigureTextOverlap`` warning where its texts overlap."""
    if overlaps := text_overlaps(fig):
        title = next((ax.get_title() for ax in fig.axes if ax.get_title()), "") or "untitled"
        warnings.warn(FigureTextOverlap(f"figure {title!r} draws text over text: {overlaps[:3]}"), stacklevel=3)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def forward_times(samples: dict[str, dict[str, list[float]]]) -> bytes | None:
    """Distribution of one forward's time per drafter, and the target's (paper Fig. 2)."""
    series = {f"draft: {d}": v["draft"] for d, v in samples.items() if d != BASELINE and v["draft"]}
    target = [x for v in samples.values() for x in v["target"]]
    if target:
        series["target (verify)"] = target
    series = {k: np.asarray(v) * 1e3 for k, v in series.items() if len(v)}
    if not series:
        return None
    fig, ax = plt.subplots(layout="constrained", figsize=(7.5, 3.8))
    lo = max(min(float(v[v > 0].min()) for v in series.values() if (v > 0).any()), 1e-4)
    hi = max(float(v.max()) for v in series.values())
    bins = np.logspace(np.log10(lo), np.log10(hi * 1.05), 50)
    for name, v in series.items():
        ax.hist(v[v > 0], bins=bins, histtype="step", linewidth=1.6,
                label=f"{name} (median {np.median(v):.3g} ms)")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("time of one forward (ms, log scale)")
    ax.set_ylabel("forwards")
    ax.legend(fontsize=8)
    return _png(fig)


def _yerr(rows: list[dict], value: str, interval: tuple[str, str] | None) -> np.ndarray | None:
    """Asymmetric error bars (2 x n) from each row's interval keys; 0 where a row has none."""
    if interval is None:
        return None
    lo_key, hi_key = interval
    err = np.zeros((2, len(rows)))
    for i, r in enumerate(rows):
        v, lo, hi = r.get(value), r.get(lo_key), r.get(hi_key)
        if is_finite(v) and is_finite(lo) and is_finite(hi):
            err[:, i] = [max(0.0, v - lo), max(0.0, hi - v)]
    return err


def per_language_bars(best: list[dict], task: str, value: str, ylabel: str,
                      line_at_one: bool = False, interval: tuple[str, str] | None = None) -> bytes | None:
    """One bar per drafter setting per language for ``task`` (paper Figs. 3-4), with the
    ``interval`` keys' bounds as error bars."""
    rows = [b for b in best if b["task"] == task and is_finite(b.get(value))]
    if not rows:
        return None
    langs = sorted({b["language"] for b in rows})
    drafters = sorted({b["drafter"] for b in rows})
    width = 0.8 / len(drafters)
    fig, ax = plt.subplots(layout="constrained", figsize=(max(6.0, 1.1 * len(langs) + 2), 3.6))
    for j, d in enumerate(drafters):
        mine = {b["language"]: b for b in rows if b["drafter"] == d}
        xs = [i + (j - (len(drafters) - 1) / 2) * width for i in range(len(langs))]
        cells = [mine.get(lang, {}) for lang in langs]
        ax.bar(xs, [c.get(value, np.nan) for c in cells], width, label=d,
               yerr=_yerr(cells, value, interval), capsize=2, error_kw={"linewidth": 0.8})
    if line_at_one:
        ax.axhline(1.0, color="k", linewidth=1, linestyle="--")
    ax.set_xticks(range(len(langs)), langs)
    ax.set_ylabel(ylabel)
    ax.set_title(task)
    ax.legend(fontsize=8, ncol=min(4, len(drafters)))
    return _png(fig)


def task_tradeoff(best: list[dict]) -> bytes | None:
    """Per drafter: acceptance on translation (x) against story (y), per language and mean
    (paper Fig. 5: a drafter fitted to one task can lose on the other)."""
    by = defaultdict(dict)
    for b in best:
        if is_finite(b.get("alpha_mean")):
            by[(b["drafter"], b["language"])][b["task"]] = b["alpha_mean"]
    pts = defaultdict(list)
    for (d, _lang), tasks in by.items():
        if "translation" in tasks and "story" in tasks:
            pts[d].append((tasks["translation"], tasks["story"]))
    if not pts:
        return None
    fig, ax = plt.subplots(layout="constrained", figsize=(5.2, 5.0))
    for d, xy in sorted(pts.items()):
        xy = np.asarray(xy)
        sc = ax.scatter(xy[:, 0], xy[:, 1], alpha=0.35, s=18)
        ax.scatter(xy[:, 0].mean(), xy[:, 1].mean(), s=120, marker="*",
                   color=sc.get_facecolor()[0][:3], label=f"{d} (mean)")  # fmt: skip
    ax.plot([0, 1], [0, 1], color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("alpha on translation (in-task for task-distilled drafters)")
    ax.set_ylabel("alpha on story generation (held-out task)")
    ax.legend(fontsize=8)
    return _png(fig)


def measured_vs_theoretical(settings: list[dict]) -> bytes | None:
    rows = [s for s in settings if s["drafter"] != BASELINE and is_finite(s.get("speedup"))
            and is_finite(s.get("theoretical_f"))]  # fmt: skip
    if not rows:
        return None
    fig, ax = plt.subplots(layout="constrained", figsize=(5.2, 5.0))
    for d in sorted({s["drafter"] for s in rows}):
        xs = [s["theoretical_f"] for s in rows if s["drafter"] == d]
        ys = [s["speedup"] for s in rows if s["drafter"] == d]
        ax.scatter(xs, ys, s=22, label=d, alpha=0.8)
    lim = max(max(s["theoretical_f"] for s in rows), max(s["speedup"] for s in rows)) * 1.1
    ax.plot([0, lim], [0, lim], color="grey", linestyle=":", linewidth=1)
    ax.axhline(1.0, color="k", linewidth=0.8, linestyle="--")
    ax.set_xlabel("theoretical f = (1 - a^(g+1)) / ((1 - a)(g c + 1))")
    ax.set_ylabel("measured wall-clock speedup vs plain decoding")
    ax.legend(fontsize=8)
    return _png(fig)


def latency_per_char(languages: list[dict]) -> bytes | None:
    """Milliseconds per generated character: plain decoding and the best setting, per language."""
    rows = [r for r in languages if is_finite(r.get("seconds_per_char_plain"))]
    if not rows:
        return None
    labels = [f"{r['language']}\n{r['task'][:5]}" for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(layout="constrained", figsize=(max(6.0, 0.7 * len(rows) + 2), 3.6))
    ax.bar(x - 0.2, [r["seconds_per_char_plain"] * 1e3 for r in rows], 0.4, label="plain decoding")
    ax.bar(x + 0.2, [(r["seconds_per_char_best"] or np.nan) * 1e3 for r in rows], 0.4,
           label="best setting")  # fmt: skip
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("ms per generated character")
    ax.legend(fontsize=8)
    return _png(fig)


def acceptance_by_position(best: list[dict]) -> bytes | None:
    rows = [b for b in best if b.get("acceptance_by_output_position")]
    if not rows:
        return None
    fig, ax = plt.subplots(layout="constrained", figsize=(6.5, 3.5))
    by = defaultdict(list)
    for b in rows:
        by[(b["drafter"], b["task"])].append(b["acceptance_by_output_position"])
    for (d, task), curves in sorted(by.items()):
        n = max(len(c) for c in curves)
        arr = np.full((len(curves), n), np.nan)
        for i, c in enumerate(curves):
            arr[i, : len(c)] = [np.nan if v is None else v for v in c]
        ax.plot(np.arange(n) * 16 + 8, np.nanmean(arr, axis=0), marker="o", label=f"{d} / {task}")
    ax.set_xlabel("position in the output (tokens, bins of 16)")
    ax.set_ylabel("alpha (mean over languages)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    return _png(fig)


def divergence_vs_resources(divergence: list[dict], corpus: dict, correlations: dict) -> bytes | None:
    rows = [d for d in divergence if is_finite(d.get("tv_per_char")) and d["language"] in corpus
            and corpus[d["language"]].get("train_chars")]  # fmt: skip
    if not rows:
        return None
    fig, ax = plt.subplots(layout="constrained", figsize=(6.0, 4.2))
    named: set[tuple] = set()  # a language's label once per point: two drafters of one table coincide
    for name in sorted({d["drafter"] for d in rows}):
        pts = [(corpus[d["language"]]["train_chars"], d["tv_per_char"], d["language"])
               for d in rows if d["drafter"] == name]  # fmt: skip
        cor = correlations.get(name, {})
        label = name
        if is_finite(cor.get("r")):
            label += f" (r = {cor['r']:.2f}, p = {cor['p']:.2g}, n = {int(cor['n'])})"
        sc = ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=label)
        for x, y, lang in pts:
            if (lang, x, round(y, 6)) in named:
                continue
            named.add((lang, x, round(y, 6)))
            ax.annotate(lang, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points",
                        color=sc.get_facecolor()[0][:3])  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("bundled monolingual train corpus (characters, log scale)")
    ax.set_ylabel("draft/target total variation per character")
    ax.legend(fontsize=8)
    return _png(fig)


def paper_table(table: list[dict], paper: dict[str, dict[str, tuple[float, float]]]) -> bytes | None:
    """The paper's comparison: per task, held-out α and measured speedup per drafter (means over
    languages, BCa 95% intervals), the paper's α and f as crosses where it has the drafter."""
    fig = paper_table_figure(table, paper)
    return None if fig is None else _png(fig)


def paper_table_figure(table: list[dict], paper: dict[str, dict[str, tuple[float, float]]]):
    """``paper_table``'s matplotlib figure (None without rows)."""
    if not table:
        return None
    tasks = sorted({r["task"] for r in table})
    fig, axes = plt.subplots(2, len(tasks), layout="constrained", figsize=(5.2 * len(tasks), 6.4), squeeze=False)
    for col, task in enumerate(tasks):
        rows = [r for r in table if r["task"] == task]
        xs = np.arange(len(rows))
        for row_i, (value, label, idx) in enumerate((("alpha", "α (held out)", 0), ("speedup", "measured speedup", 1))):
            ax = axes[row_i][col]
            ax.bar(xs, [r[value] if is_finite(r[value]) else np.nan for r in rows], 0.6,
                   yerr=_yerr(rows, value, (f"{value}_low", f"{value}_high")), capsize=3,
                   color="tab:blue", label="this run")
            px = [(i, paper[r["drafter"]][task][idx]) for i, r in enumerate(rows) if task in paper.get(r["drafter"], {})]
            if px:
                ax.plot(*zip(*px), "x", color="tab:red", markersize=9, mew=2,
                        label="paper (α)" if idx == 0 else "paper (theoretical f)")
            if idx == 1:
                ax.axhline(1.0, color="k", linewidth=1, linestyle="--")
            ax.set_xticks(xs, [r["drafter"] for r in rows], rotation=20, fontsize=8)
            ax.set_ylabel(label)
            ax.set_title(task)
            ax.legend(fontsize=7)
    return fig


def learning_curves(runs: list[dict]) -> bytes | None:
    """Dev loss and expected α (held-out translation) by training step, one line per distilled
    drafter and language, a circle at the kept (best dev loss) step."""
    runs = [r for r in runs if any(is_finite(p.get("dev_loss")) for p in r.get("curve", []))]
    if not runs:
        return None
    drafters = sorted({r["drafter"] for r in runs})
    fig, axes = plt.subplots(2, len(drafters), layout="constrained", figsize=(4.6 * len(drafters), 6.0), squeeze=False)
    for col, d in enumerate(drafters):
        for r in (x for x in runs if x["drafter"] == d):
            curve = r["curve"]
            steps = [p["step"] for p in curve]
            for row_i, key in enumerate(("dev_loss", "alpha_translation")):
                ys = [p.get(key) if is_finite(p.get(key)) else np.nan for p in curve]
                (line,) = axes[row_i][col].plot(steps, ys, linewidth=1.3, label=r["language"])
                if r.get("best_step") in steps:
                    k = steps.index(r["best_step"])
                    axes[row_i][col].plot([steps[k]], [ys[k]], "o", color=line.get_color())
        axes[0][col].set_title(d)
        axes[0][col].set_ylabel("dev loss (soft CE)")
        axes[1][col].set_ylabel("expected α, translation")
        axes[1][col].set_xlabel("step")
        axes[0][col].legend(fontsize=7)
    return _png(fig)


def across_languages(rows: list[dict]) -> bytes | None:
    """Held-out speedup over languages (histogram, with the router's), and against the target's
    tokens per character relative to English."""
    speed = [r["speedup"] for r in rows if is_finite(r.get("speedup"))]
    if len(speed) < 2:
        return None
    fig, (left, right) = plt.subplots(1, 2, layout="constrained", figsize=(10.0, 4.0))
    bins = np.arange(np.floor(min(speed) * 10) / 10, max(speed) + 0.1, 0.05)
    left.hist(speed, bins=bins, alpha=0.7, label=f"each language's best setting (n = {len(speed)})")
    router = [r["router_speedup"] for r in rows if is_finite(r.get("router_speedup"))]
    left.hist(router, bins=bins, histtype="step", linewidth=1.5, label="with the router")
    left.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    left.set_xlabel("held-out speedup over plain decoding")
    left.set_ylabel("languages")
    left.legend(fontsize=8)
    pts = [(r["tokens_per_char"], r["speedup"]) for r in rows
           if is_finite(r.get("tokens_per_char")) and is_finite(r.get("speedup"))]  # fmt: skip
    if pts:
        right.scatter([p[0] for p in pts], [p[1] for p in pts], s=12)
        right.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    right.set_xlabel("target tokens per character, relative to English")
    right.set_ylabel("held-out speedup")
    return _png(fig)


def against_both_baselines(rows: list[dict]) -> bytes | None:
    """Each language's chosen setting, held out, sorted: its speedup over babelspec's plain
    decoding and its decode rate over llama.cpp's plain decoding, with their 95% intervals."""
    rows = sorted((r for r in rows if is_finite(r.get("vs_llama_cpp")) and is_finite(r.get("speedup"))),
                  key=lambda r: r["vs_llama_cpp"])  # fmt: skip
    if len(rows) < 2:
        return None
    fig, ax = plt.subplots(layout="constrained", figsize=(10.0, 4.0))
    x = np.arange(len(rows))
    for value, low, high, label in (("speedup", "speedup_low", "speedup_high", "over babelspec's plain decoding"),
                                    ("vs_llama_cpp", "vs_llama_cpp_low", "vs_llama_cpp_high",
                                     "over llama.cpp's plain decoding (same GGUF)")):  # fmt: skip
        ax.errorbar(x, [r[value] for r in rows], yerr=_yerr(rows, value, (low, high)), fmt="o", markersize=3,
                    linewidth=0.6, capsize=0, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xlabel(f"languages, sorted by the rate over llama.cpp (n = {len(rows)})")
    ax.set_ylabel("held-out decode rate ratio")
    if len(rows) <= 40:
        ax.set_xticks(x, [r["language"] for r in rows], rotation=90, fontsize=7)
    else:
        ax.set_xticks([])
    ax.legend(fontsize=8)
    return _png(fig)
