"""Report blocks for runs with a ``[data]`` section: which text every number came from, and
the n-gram settings side by side (the domain of the counting text, e.g. UI strings against
real prose), per language and task."""

from __future__ import annotations

import math
from typing import Any

from babelspec.numeric import is_finite
from babelspec.report.blocks import Block, Heading, Paragraph, Table


def _size(entry: dict) -> str:
    if "error" in entry:
        return f"{', '.join(entry['sources'])} (unreadable now: {entry['error']})"
    return f"{', '.join(entry['sources'])}: {entry['sentences']:,} texts, {entry['words']:,} words"


def _num(x: Any, suffix: str = "") -> str:
    return f"{x:.2f}{suffix}" if isinstance(x, (int, float)) and math.isfinite(x) else "–"


def _alpha(s: dict) -> str:
    std = s.get("alpha_std")
    return _num(s.get("alpha_mean")) + (f" ± {std:.2f}" if is_finite(std) else "")


def _speedup(s: dict) -> str:
    lo, hi = s.get("speedup_low"), s.get("speedup_high")
    interval = f" [{lo:.2f}, {hi:.2f}]" if is_finite(lo) and is_finite(hi) else ""
    return f"{_num(s.get('speedup'), 'x')}{interval} (n={s.get('n_prompts') or s.get('n_pairs', 0)})"


def provenance_blocks(a: dict[str, Any]) -> list[Block]:
    data = a.get("data") or {}
    if not data:
        return []
    blocks: list[Block] = [Heading("Which text each number came from")]
    names = sorted({n for row in data.values() for n in row["settings"]})
    rows = [[lang, _size(row["test"]), _size(row["shots"])]
            + [_size(row["settings"][n]) + f" ({'; '.join(dict.fromkeys(row['settings'][n]['domains']))})"
               if n in row["settings"] else "–" for n in names]
            for lang, row in sorted(data.items())]  # fmt: skip
    blocks.append(Table(
        ["language", "translation test sentences", "few-shot examples"] + [f"{n} counted on" for n in names], rows,
        caption="Sources as FORMAT:PATH@SPLIT under the run's data root; words are whitespace/Ethiopic-"
        "punctuation separated tokens with a letter. Training text holds no test sentence (exact "
        "repeats dropped). Story prompts are the bundled ones for every language.",
    ))  # fmt: skip
    settings = [s for s in a.get("settings", []) if s["drafter"] in names]
    if not settings:
        return blocks
    blocks.append(Heading("The counting text side by side", 3))
    cells = sorted({(s["language"], s["task"], s["gamma"]) for s in settings})
    by = {(s["language"], s["task"], s["gamma"], s["drafter"]): s for s in settings}
    rows = []
    for lang, task, gamma in cells:
        row = [lang, task, str(gamma)]
        for n in names:
            s = by.get((lang, task, gamma, n))
            row += [_alpha(s), _speedup(s)] if s else ["–", "–"]
        rows.append(row)
    header = ["language", "task", "γ"] + [h for n in names for h in (f"α {n}", f"speedup {n}")]
    blocks.append(Table(header, rows, caption=(
        "α: pooled over the cell's generations (± standard deviation of the per-generation α); "
        "speedup: wall-clock, paired median against plain decoding of the same prompts, with its "
        "bootstrap 95% interval over the n prompts. "
        "The counting text of each column is in the table above.")))
    means = []
    for n in names:
        xs = [s for s in settings if s["drafter"] == n]
        al = [s["alpha_mean"] for s in xs if math.isfinite(s["alpha_mean"])]
        sp = [s["speedup"] for s in xs if math.isfinite(s["speedup"])]
        if al:
            means.append(f"{n}: mean α {sum(al) / len(al):.3f}"
                         + (f", mean speedup {sum(sp) / len(sp):.2f}x" if sp else "") + f" over {len(xs)} cells")
    if means:
        blocks.append(Paragraph("; ".join(means) + "."))
    return blocks
