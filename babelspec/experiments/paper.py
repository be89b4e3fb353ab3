"""The paper's comparison beside a run's: its numbers, and each of its findings judged on ours.

The paper (Qwen3.5-9B verifier, 0.8B drafter, 11 languages, GPU) compares four drafters per task:
the small model of the target's family, task-specific and general-domain knowledge distillation,
and a corpus bigram. A run's settings play those roles by name (``ROLES``); its numbers are the
held-out means of ``aggregate.paper_table`` with BCa intervals. A finding is *reproduced* when the
intervals separate in the paper's direction, *not reproduced* when they separate the other way,
and *inconclusive* when they overlap.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

# The paper's means over 11 languages: (α, theoretical f) per task; f there assumes a
# verification costs one decode step.
PAPER_MEANS: dict[str, dict[str, tuple[float, float]]] = {
    "baseline": {"translation": (0.40, 1.02), "story": (0.46, 1.09)},
    "distill-task": {"translation": (0.60, 1.28), "story": (0.43, 1.03)},
    "distill-general": {"translation": (0.39, 1.03), "story": (0.47, 1.10)},
    "bigram": {"translation": (0.24, 1.30), "story": (0.30, 1.39)},
}
# The paper's name of each role.
ROLES: dict[str, str] = {
    "baseline": "small model of the family (0.8B)",
    "distill-task": "distillation (task)",
    "distill-general": "distillation (general)",
    "bigram": "corpus bigram",
}
REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
NOT_MEASURED = "not measured"


@dataclass
class Finding:
    claim: str  # the paper's finding, one sentence
    verdict: str  # reproduced | not reproduced | inconclusive | not measured
    evidence: str  # this run's numbers behind the verdict


def _fmt(row: dict[str, Any], key: str) -> str:
    m, lo, hi = row.get(key), row.get(f"{key}_low"), row.get(f"{key}_high")
    if not isinstance(m, (int, float)) or not math.isfinite(m):
        return "–"
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and math.isfinite(lo) and math.isfinite(hi):
        return f"{m:.2f} [{lo:.2f}, {hi:.2f}]"
    return f"{m:.2f}"


def compare(a: dict[str, Any], b: dict[str, Any], key: str) -> int:
    """+1 when ``a``'s interval of ``key`` lies above ``b``'s, -1 below, 0 when they overlap
    (or either has none)."""
    vals = [a.get(f"{key}_low"), a.get(f"{key}_high"), b.get(f"{key}_low"), b.get(f"{key}_high")]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in vals):
        return 0
    a_lo, a_hi, b_lo, b_hi = vals
    return 1 if a_lo > b_hi else -1 if a_hi < b_lo else 0


def _verdict(sign: int, expected: int) -> str:
    return INCONCLUSIVE if sign == 0 else REPRODUCED if sign == expected else NOT_REPRODUCED


def findings(table: list[dict[str, Any]]) -> list[Finding]:
    """The paper's four findings judged on ``aggregate.paper_table`` rows."""
    row = {(r["task"], r["drafter"]): r for r in table}
    out: list[Finding] = []

    def have(*keys: tuple[str, str]) -> bool:
        return all(k in row for k in keys)

    def missing(claim: str, *names: str) -> Finding:
        return Finding(claim, NOT_MEASURED, f"this run has no {' or '.join(names)} setting")

    # 1-2. Task KD against the family's small model, on each task.
    for task, expected, claim in (
        ("translation", 1, "Task-specific distillation raises translation acceptance over the family's "
                           "small model (paper: α 0.40 → 0.60)."),
        ("story", -1, "Task-specific distillation lowers story acceptance below the family's small "
                      "model (paper: α 0.46 → 0.43)."),
    ):  # fmt: skip
        kd, base = (task, "distill-task"), (task, "baseline")
        if not have(kd, base):
            out.append(missing(claim, "distill-task", "baseline"))
            continue
        sign = compare(row[kd], row[base], "alpha")
        out.append(Finding(claim, _verdict(sign, expected),
                           f"{task}: task KD α {_fmt(row[kd], 'alpha')} against the baseline's "
                           f"{_fmt(row[base], 'alpha')}"))
    # 3. General KD against the family's small model: no consistent direction.
    claim = ("General-domain distillation is mixed: no consistent gain over the family's small model "
             "(paper: α 0.39 / 0.47 against 0.40 / 0.46).")
    tasks = [t for t in ("translation", "story") if have((t, "distill-general"), (t, "baseline"))]
    if not tasks:
        out.append(missing(claim, "distill-general", "baseline"))
    else:
        signs = [compare(row[(t, "distill-general")], row[(t, "baseline")], "alpha") for t in tasks]
        consistent = len(tasks) == 2 and signs[0] == signs[1] != 0
        verdict = NOT_REPRODUCED if consistent else (
            REPRODUCED if len(tasks) == 2 and (signs[0] != signs[1] or signs == [0, 0]) else INCONCLUSIVE)
        out.append(Finding(claim, verdict, "; ".join(
            f"{t}: general KD α {_fmt(row[(t, 'distill-general')], 'alpha')} against "
            f"{_fmt(row[(t, 'baseline')], 'alpha')}" for t in tasks)))
    # 4. The bigram: the lowest α of the four, the best measured speedup on both tasks.
    claim = ("The corpus bigram, at the lowest acceptance, gives the best speedup on both tasks "
             "(paper: f 1.30 / 1.39, the others ≤ 1.28 / 1.10).")
    tasks = [t for t in ("translation", "story") if (t, "bigram") in row]
    if not tasks:
        out.append(missing(claim, "bigram"))
    else:
        signs, parts = [], []
        for t in tasks:
            others = [row[(t, d)] for d in PAPER_MEANS if d != "bigram" and (t, d) in row]
            signs += [compare(row[(t, "bigram")], o, "speedup") for o in others]
            parts.append(f"{t}: bigram speedup {_fmt(row[(t, 'bigram')], 'speedup')}x, the others "
                         + (", ".join(f"{o['drafter']} {_fmt(o, 'speedup')}x" for o in others) or "not measured"))
        if not signs:  # nothing to compare the bigram with
            verdict = NOT_MEASURED
        else:
            verdict = NOT_REPRODUCED if -1 in signs else REPRODUCED if all(s == 1 for s in signs) else INCONCLUSIVE
        out.append(Finding(claim, verdict, "; ".join(parts)))
    return out


def task_kd_against_bigram(table: list[dict[str, Any]], task: str = "translation") -> dict[str, Any]:
    """In how many languages task KD's held-out α beats the corpus bigram's on ``task``."""
    row = {(r["task"], r["drafter"]): r for r in table}
    kd, bigram = row.get((task, "distill-task")), row.get((task, "bigram"))
    if kd is None or bigram is None:
        return {}
    b = {x["language"]: x["alpha"] for x in bigram["per_language"]}
    pairs = [(x["language"], x["alpha"], b[x["language"]]) for x in kd["per_language"] if x["language"] in b]
    wins = [lang for lang, k, g in pairs if k > g]
    return {"task": task, "languages": len(pairs), "wins": len(wins), "won": wins,
            "pairs": [{"language": lang, "task_kd": k, "bigram": g} for lang, k, g in pairs]}


def findings_dicts(table: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [asdict(f) for f in findings(table)]
