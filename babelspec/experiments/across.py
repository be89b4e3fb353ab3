"""Across languages: what a run with many languages says about all of them at once.

Each language's number is the headline's: its setting chosen on the choosing (even-numbered)
prompts and measured on the held-out (odd-numbered) ones (``aggregate.language_summary``). Over
languages this gives the distribution of held-out speedup, the worst and best languages, medians
per script and per family, Spearman's ρ of speedup, acceptance and per-character divergence
against proxies of how resourced a language is (each with a bootstrap interval over languages),
and the router's service level (its 5th-percentile language, and how many it leaves at 1.0×).

Proxies of resourcedness, stated with their weaknesses:
- ``web_tokens``: mOSCAR's web-text tokens per FLORES-200 code (``resources/mOSCAR.md``, read in
  place beside the corpora folder; 163 languages; noisy: language-ID confusion inflates some);
- ``train_tokens``: the target tokens the corpus bigram counted for the language (what the run's
  own drafter had);
- ``tokens_per_char``: the target tokenizer's tokens per character of the language's SIB-200 dev
  sentences over English's (a fertility ratio: high where the tokenizer saw little of the language).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from babelspec.data.real import REAL_DATA
from babelspec.errors import UserError

# A run is "many languages" from this many on (the paper measured 11).
MIN_LANGUAGES = 20
# The paper's correlation of draft/target divergence with resourcedness, over its 11 languages.
PAPER_R = -0.47
PROXIES = ("web_tokens", "train_tokens", "tokens_per_char")
METRICS = ("speedup", "alpha", "tv_per_char")
BOOTSTRAP_RESAMPLES = 2000
MOSCAR_ENV = "BABELSPEC_MOSCAR"


def moscar_path(data_root: str | Path | None) -> Path | None:
    """``$BABELSPEC_MOSCAR``, else ``resources/mOSCAR.md`` beside the corpora folder; None if absent."""
    import os

    candidates = [os.environ.get(MOSCAR_ENV)]
    if data_root:
        candidates.append(str(Path(data_root).parent / "resources" / "mOSCAR.md"))
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    return None


def _where(path: Path | None, data_root: str | Path | None) -> str:
    """Where the mOSCAR table was read, without this machine's paths: relative to the corpora
    folder's parent, or the variable that named it."""
    if path is None:
        return ""
    if data_root and path.resolve().is_relative_to(Path(data_root).resolve().parent):
        return str(path.resolve().relative_to(Path(data_root).resolve().parent))
    return f"${MOSCAR_ENV}"


def read_moscar(path: str | Path) -> dict[str, float]:
    """Web-text tokens per FLORES-200 code from mOSCAR's language table (Markdown)."""
    row = re.compile(r"^\|\s*[^|]+?\s*\|\s*([a-z]{3}_[A-Za-z]{4})\s*\|(?:[^|]*\|){4}\s*([\d,]+)\s*\|")
    out = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        m = row.match(line)
        if m:
            out[m.group(1)] = float(m.group(2).replace(",", ""))
    if not out:
        raise UserError(f"{path}: no language table rows (| name | code | family | script | docs | images | tokens |)")
    return out


def tokens_per_char(tokenizer: Any, root: str | Path, languages: list[str]) -> dict[str, float]:
    """Target tokens per character of each language's SIB-200 dev sentences, over English's."""
    from babelspec.data.loaders import DataFormatError, load_layout

    def ratio(lang: str) -> float:
        texts = load_layout("sib200", root, lang, "dev")
        ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
        return sum(map(len, ids)) / sum(map(len, texts))

    english = ratio("eng")
    out = {}
    for lang in languages:
        try:
            out[lang] = ratio(lang) / english
        except (DataFormatError, OSError):
            continue
    return out


def spearman(x: list[float], y: list[float], *, seed: int = 0,
             resamples: int = BOOTSTRAP_RESAMPLES) -> dict[str, float]:  # fmt: skip
    """Spearman's ρ and a percentile bootstrap 95% interval, languages resampled as pairs (the
    resamples ranked and correlated all at once: Pearson's r of average ranks, as ``spearmanr``
    computes it; a resample with one value on either side has none)."""
    from scipy.stats import rankdata, spearmanr

    xs, ys = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    out = {"n": int(xs.size), "rho": math.nan, "low": math.nan, "high": math.nan}
    if xs.size < 5 or np.ptp(xs) == 0 or np.ptp(ys) == 0:
        return out
    out["rho"] = float(spearmanr(xs, ys).statistic)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, xs.size, size=(resamples, xs.size))
    rx, ry = rankdata(xs[picks], axis=1), rankdata(ys[picks], axis=1)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        rhos = (rx * ry).sum(axis=1) / np.sqrt((rx * rx).sum(axis=1) * (ry * ry).sum(axis=1))
    rhos = rhos[np.isfinite(rhos)]
    if rhos.size:
        out["low"], out["high"] = (float(v) for v in np.percentile(rhos, [2.5, 97.5]))
    return out


def _median(values: list[float]) -> float:
    vals = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return float(np.median(vals)) if vals else math.nan


def _groups(rows: list[dict], key: str) -> list[dict[str, Any]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r[key] or "unknown", []).append(r)
    return sorted(({key: k, "languages": len(v), "speedup_median": _median([r["speedup"] for r in v]),
                    "alpha_median": _median([r["alpha"] for r in v]),
                    "router_median": _median([r["router_speedup"] for r in v])}
                   for k, v in out.items()), key=lambda g: (-g["languages"], g[key]))  # fmt: skip


def language_rows(analysis: dict[str, Any], train_tokens: dict[str, float], web: dict[str, float],
                  fertility: dict[str, float], task: str = "translation", setting: str = "bigram") -> list[dict[str, Any]]:  # fmt: skip
    """One row per language of ``task``: its held-out number, the router's and every proxy
    (``setting``: the corpus n-gram whose divergence and training text are the proxies)."""
    from babelspec.data.languages import get_language

    tv = {d["language"]: d["tv_per_char"] for d in analysis.get("divergence", [])
          if d["drafter"] == setting and d.get("tv_per_char") is not None}  # fmt: skip
    routes = {r["language"]: r for r in analysis.get("router", {}).get("routes", []) if r["task"] == task}
    rows = []
    for row in analysis.get("languages", []):
        if row["task"] != task:
            continue
        lang = get_language(row["language"])
        route = routes.get(lang.code, {})
        rows.append({
            "language": lang.code, "name": lang.name, "script": lang.script, "family": lang.family,
            "drafter": row["drafter"], "gamma": row["gamma"], "speedup": row["speedup"],
            "selection_speedup": row.get("selection_speedup", math.nan),
            "speedup_low": row.get("speedup_low"), "speedup_high": row.get("speedup_high"),
            "alpha": row["alpha"], "draft_cost": row.get("draft_cost", math.nan),
            "held_out_prompts": row.get("n_pairs", 0), "tv_per_char": tv.get(lang.code, math.nan),
            "router_drafter": route.get("drafter", "none"),
            "router_speedup": route.get("predicted_speedup", 1.0) if route.get("drafter", "none") != "none" else 1.0,
            "train_tokens": train_tokens.get(lang.code, math.nan),
            "web_tokens": web.get(lang.flores, math.nan) if lang.flores else math.nan,
            "tokens_per_char": fertility.get(lang.code, math.nan),
            **{key: row.get(key, math.nan) for key in LLAMA_CPP_KEYS},
        })  # fmt: skip
    return rows


# a row's numbers against llama.cpp's plain decoding (a run with llama_cpp = true; NaN otherwise)
LLAMA_CPP_KEYS = ("vs_llama_cpp", "vs_llama_cpp_low", "vs_llama_cpp_high", "plain_vs_llama_cpp",
                  "plain_vs_llama_cpp_low", "plain_vs_llama_cpp_high")


def against_llama_cpp(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The distribution over languages of the chosen settings' decode rate over llama.cpp's plain
    decoding (held out), and of babelspec's plain decoding's; None where no row has one."""
    measured = [r for r in rows if _finite(r.get("vs_llama_cpp", math.nan))]
    if not measured:
        return None
    vs = np.array([r["vs_llama_cpp"] for r in measured], float)
    plain = [r["plain_vs_llama_cpp"] for r in measured if _finite(r.get("plain_vs_llama_cpp", math.nan))]
    order = sorted(measured, key=lambda r: r["vs_llama_cpp"])
    return {
        "languages": len(measured), "median": float(np.median(vs)), "p5": float(np.percentile(vs, 5)),
        "lowest": float(vs.min()), "below_one": int(np.sum(vs < 1.0)),
        "wholly_below_one": int(sum(_finite(r.get("vs_llama_cpp_high", math.nan)) and r["vs_llama_cpp_high"] < 1.0
                                    for r in measured)),
        "plain_median": float(np.median(plain)) if plain else math.nan,
        "least": [{key: r.get(key) for key in ("language", "name", "drafter", "gamma", "vs_llama_cpp",
                                               "vs_llama_cpp_low", "vs_llama_cpp_high", "alpha", "tokens_per_char",
                                               "draft_cost")}
                  for r in order[:5]],
    }  # fmt: skip


ROUTER_FLOOR = 0.97  # a routed language below this held out counts as left slower (not noise around 1.0)
HALF_WIDTH = 0.15  # the per-language interval half-width a wide run is sized for


def _half_widths(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each language's held-out 95% interval as a half-width ((high - low) / 2): median, widest and
    how many are wider than ``HALF_WIDTH``; languages without a finite interval are left out."""
    halves = [(r["speedup_high"] - r["speedup_low"]) / 2 for r in rows
              if _finite(r.get("speedup_low", math.nan)) and _finite(r.get("speedup_high", math.nan))]
    if not halves:
        return {"languages": 0, "median": math.nan, "widest": math.nan, "over": 0, "bound": HALF_WIDTH}
    return {"languages": len(halves), "median": float(np.median(halves)), "widest": float(np.max(halves)),
            "over": int(sum(h > HALF_WIDTH for h in halves)), "bound": HALF_WIDTH}  # fmt: skip


def summarise(rows: list[dict[str, Any]], *, seed: int = 0, router_rule: str = "interval") -> dict[str, Any]:
    """The section's numbers from the per-language rows. Languages without a finite held-out
    speedup are left out of every number and counted (``no_held_out``); the worst and best lists
    rank languages as the headline does (``worst_by_selection``): on the prompts that chose each
    language's setting, so their held-out numbers are not the extremes of noisy medians."""
    no_held_out = [r["language"] for r in rows if not _finite(r["speedup"])]
    rows = [r for r in rows if _finite(r["speedup"])]
    speed = np.array([r["speedup"] for r in rows], float)
    router = np.array([r["router_speedup"] for r in rows], float)

    def chosen_by(row: dict[str, Any]) -> float:
        value = row.get("selection_speedup", math.nan)
        return value if _finite(value) else row["speedup"]

    order = sorted(rows, key=chosen_by)
    correlations = []
    for metric in METRICS:
        for proxy in PROXIES:
            # ranks: a log scale of the token counts would change nothing
            # the paper's languages count their own sets (``REAL_DATA``), not the generic ones:
            # their training tokens are not comparable, so they stay out of that proxy's rho
            alike = [r for r in rows if proxy != "train_tokens" or r["language"] not in REAL_DATA]
            correlations.append({"metric": metric, "proxy": proxy,
                                 **spearman([r[proxy] for r in alike], [r[metric] for r in alike], seed=seed)})
    return {
        "languages": len(rows), "no_held_out": no_held_out,
        "speedup_quantiles": {str(q): float(np.nanpercentile(speed, q)) for q in (5, 25, 50, 75, 95)} if rows else {},
        "below_one": int(np.sum(speed < 1.0)),
        # a language measured slower than plain decoding, not only estimated so: its whole interval below 1.0
        "wholly_below_one": int(sum(_finite(r.get("speedup_high", math.nan)) and r["speedup_high"] < 1.0
                                    for r in rows)),
        "half_width": _half_widths(rows),
        # held-out prompts (pairs) behind a language's number, median over languages (rows of older runs lack it)
        "held_out_prompts": float(np.median(counts)) if (counts := [r["held_out_prompts"] for r in rows
                                                                     if "held_out_prompts" in r]) else math.nan,
        "worst": order[:10], "best": order[::-1][:10],
        "by_script": _groups(rows, "script"), "by_family": _groups(rows, "family"),
        "correlations": correlations, "paper_r": PAPER_R,
        "router": {"p5": float(np.nanpercentile(router, 5)) if rows else math.nan,
                   "median": float(np.nanmedian(router)) if rows else math.nan,
                   "plain": int(sum(r["router_drafter"] == "none" for r in rows)),
                   "lowest": float(np.nanmin(router)) if rows else math.nan,
                   "below_floor": int(np.sum(router < ROUTER_FLOOR)), "floor": ROUTER_FLOOR,
                   "languages": len(rows), "rule": router_rule},
        "llama_cpp": against_llama_cpp(rows),
        "drafters": _drafters(rows),
    }  # fmt: skip


def _drafters(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per drafter the languages that chose it (held out) and those the router routes to it, with
    its α and its draft cost c (a draft forward over a plain step) over them: median and 5th–95th
    percentiles (rows of older runs have no cost: NaN)."""
    out = []
    for drafter in sorted({r["drafter"] for r in rows} | {r["router_drafter"] for r in rows} - {"none"}):
        chosen = [r for r in rows if r["drafter"] == drafter]
        alpha = np.array([r["alpha"] for r in chosen if _finite(r.get("alpha", math.nan))], float)
        cost = np.array([r["draft_cost"] for r in chosen if _finite(r.get("draft_cost", math.nan))], float)

        def spread(v: np.ndarray) -> dict[str, float]:
            return {q: float(np.percentile(v, p)) for q, p in (("p5", 5), ("median", 50), ("p95", 95))} \
                if len(v) else {"p5": math.nan, "median": math.nan, "p95": math.nan}  # fmt: skip

        out.append({"drafter": drafter, "languages": len(chosen),
                    "routed": sum(r["router_drafter"] == drafter for r in rows),
                    "alpha": spread(alpha), "draft_cost": spread(cost)})  # fmt: skip
    return out


def training_tokens(specs: dict[tuple[str, str], str], run_dir: str | Path | None = None) -> dict[str, dict[str, float]]:
    """Per language and n-gram setting, the target tokens its file counted (its training record;
    a distilled n-gram's scored positions). A spec's path may be relative to where the run ran:
    it is looked for as given, then under ``run_dir``'s artifacts."""
    from babelspec.ngram.model import NgramFileError, NgramModel

    out: dict[str, dict[str, float]] = {}
    for (name, lang), spec in specs.items():
        if not spec.startswith("ngram:"):
            continue
        given = Path(spec.removeprefix("ngram:").split(",", 1)[0])
        found = [p for p in (given, *([Path(run_dir) / "artifacts" / "ngram" / given.name] if run_dir else []))
                 if p.is_file()]  # fmt: skip
        try:
            if not found:
                continue
            training = NgramModel.load(found[0], verify=False).training
        except (NgramFileError, OSError):
            continue
        tokens = training.get("tokens", training.get("positions"))
        if isinstance(tokens, (int, float)):
            out.setdefault(lang, {})[name] = float(tokens)
    return out


def across_languages(analysis: dict[str, Any], config: dict[str, Any],
                     min_languages: int = MIN_LANGUAGES) -> dict[str, Any] | None:
    """The "Across languages" numbers of a run with at least ``min_languages`` languages, else None.

    A proxy that cannot be had (no corpora folder, no mOSCAR table) is left out and named in
    ``missing``; nothing else is assumed."""
    langs = sorted({r["language"] for r in analysis.get("languages", [])})
    if len(langs) < min_languages:
        return None
    root = (config.get("data") or {}).get("root") or None
    missing, web, fertility = [], {}, {}
    path = moscar_path(root)
    if path is None:
        missing.append("web_tokens: no mOSCAR table (set $BABELSPEC_MOSCAR or keep resources/ beside the corpora)")
    else:
        web = read_moscar(path)
    if root and (Path(root) / "sib200").is_dir():
        from babelspec.models import load_tokenizer

        fertility = tokens_per_char(load_tokenizer(config.get("target", "")), root, langs)
    else:
        missing.append("tokens_per_char: no SIB-200 under the run's data root")
    task, setting = _task_and_setting(analysis, config)
    counted = {lang: t[setting] for lang, t in analysis.get("training_tokens", {}).items() if setting in t}
    rows = language_rows(analysis, counted, web, fertility, task=task, setting=setting)
    if not rows:  # the run has no rows of that task: no section
        return None
    rule = (analysis.get("router") or {}).get("rule", "interval")
    return {"task": task, "setting": setting, **summarise(rows, router_rule=rule), "rows": rows, "missing": missing,
            "moscar": _where(path, root)}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _task_and_setting(analysis: dict[str, Any], config: dict[str, Any]) -> tuple[str, str]:
    """The task the section describes (translation where the run has it, else its first task) and
    the corpus n-gram whose divergence and training tokens are its proxies: the config's first
    n-gram drafter counted from a corpus (not distilled), else any n-gram the analysis counted."""
    tasks = [t for t in (config.get("tasks") or []) if isinstance(t, str)]
    tasks = tasks or sorted({r["task"] for r in analysis.get("languages", [])})
    task = "translation" if "translation" in tasks else (tasks[0] if tasks else "translation")
    corpus = [d.get("name", "") for d in config.get("drafters") or []
              if isinstance(d, dict) and d.get("kind") == "ngram" and not d.get("distil")]  # fmt: skip
    diverged = [n for n in (config.get("divergence") or {}).get("drafters") or [] if n in corpus]
    names = diverged + corpus
    counted = {name for t in analysis.get("training_tokens", {}).values() for name in t}
    setting = next((n for n in names if n), None) or ("bigram" if "bigram" in counted or not counted else sorted(counted)[0])
    return task, setting
