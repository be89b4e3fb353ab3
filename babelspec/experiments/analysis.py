"""Everything the report shows, computed from a run's store alone (``analyse``), and the files
a finished run leaves next to it: ``analysis.json`` and ``router.json``."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from babelspec.errors import UserError
from babelspec.experiments import aggregate as agg
from babelspec.experiments import paper
from babelspec.experiments.across import MIN_LANGUAGES, across_languages, training_tokens
from babelspec.experiments.divergence import resourcedness_correlation
from babelspec.experiments.route_choice import build_router, chooser, ensemble_estimates
from babelspec.experiments.store import STORE_NAME, Store
from babelspec.fileio import write_json_atomic
from babelspec.machine import machines_summary
from babelspec.router import LLAMA_CPP, Route, Router


def open_store(run_dir: str | Path) -> Store:
    path = Path(run_dir) / STORE_NAME
    if not path.is_file():
        raise UserError(
            f"{str(path)!r} not found: {run_dir} is not a babelspec run directory; "
            f"create one with `babelspec run -o {run_dir}`"
        )
    return Store(path)


def corpus_sizes(languages: list[str]) -> dict[str, dict[str, Any]]:
    """Bundled train-split sizes and domains per language (empty where the data is absent)."""
    from babelspec.data.corpus import corpus_stats

    out: dict[str, dict[str, Any]] = {}
    for lang in languages:
        try:
            st = corpus_stats(lang)
        except (ValueError, OSError):
            continue
        train, test = st["splits"]["train"], st["splits"]["test"]
        out[lang] = {
            "train_chars": train["monolingual_chars"], "train_words": train["monolingual_words"],
            "train_sentences": train["monolingual_sentences"],
            "test_sentences": test["monolingual_sentences"], "parallel_train": train["parallel_pairs"],
            "parallel_test": test["parallel_pairs"], "domains": st.get("domains", []),
            "notes": st.get("notes", ""),
        }  # fmt: skip
    return out


def _provenance(config: dict) -> dict[str, Any]:
    """Which text every prompt and drafter of the run came from (``babelspec.data.sources``)."""
    data = config.get("data", {})
    if not data.get("languages") and data.get("default", "bundled") == "bundled":
        return {}  # the bundled dataset throughout: the corpus table says it all
    from babelspec.data.sources import provenance
    from babelspec.experiments.config import DataSection

    if data.get("default") == "real":  # every language's real sets, spelled out as tables
        section = DataSection(root=data.get("root", ""), default="real")
        tables = {lang: asdict(section.for_language(lang)) for lang in config.get("languages", [])}
        config = {**config, "data": {**data, "languages": {**tables, **data.get("languages", {})}}}
    return provenance(config)


def llama_cpp_status(store: Store, llama: list) -> dict[str, Any]:
    """Whether the run measured llama.cpp's plain decoding as a second baseline, and if not why."""
    if llama:
        return {"measured": True, "generations": len(llama), "description": _llama_description(llama)}
    asked = store.meta().get("config", {}).get("llama_cpp", False)
    reasons = sorted({reason for drafter, _, reason in store.skips() if drafter == LLAMA_CPP})
    why = ("; ".join(reasons) if reasons else "no held-out prompt was decoded by llama.cpp") if asked else \
        "the run did not ask for it (llama_cpp = false in its config)"
    return {"measured": False, "generations": 0, "why": why}


def _llama_description(llama: list) -> str:
    return "; ".join(sorted({r.versions.get("llama_cpp", "") for r in llama} - {""})) or "llama-cpp-python"


def analyse(store: Store, *, min_languages: int = MIN_LANGUAGES) -> dict[str, Any]:
    records, llama = agg.split_llama_cpp(store.records())
    stats = agg.setting_stats(records)
    meta = store.meta()
    specs = {tuple(k.split("|", 1)): v for k, v in meta.get("specs", {}).items()}
    # specs without the store's meta (hand-made stores): the recorded drafter spec
    for r in records:
        specs.setdefault((r.drafter, r.language), r.drafter_spec)
    target = meta.get("target", {}).get("spec", "")
    # Chosen on the even prompts, predicted and reported from the odd ones.
    rule = meta.get("config", {}).get("router", {}).get("rule", "interval")  # the run's [router] rule
    router = build_router(records, specs, target=target, rule=rule)
    languages_rows = agg.language_summary(records, chooser(rule))
    agg.fill_vs_llama_cpp(languages_rows, records, llama)
    best = agg.held_out_best(records)
    routed = [r for r in router.routes if r.task != "*"]
    mean, low, high = agg.mean_speedup_interval(
        agg.held_out_split(records)[1], [(r.language, r.task, r.drafter, r.gamma) for r in routed])
    languages = sorted({r.language for r in records})
    sizes = corpus_sizes(languages)
    divergence = store.divergence()
    correlations = {}
    for drafter in sorted({d["drafter"] for d in divergence}):
        tv = {d["language"]: d["tv_per_char"] for d in divergence if d["drafter"] == drafter
              and d["tv_per_char"] is not None}  # fmt: skip
        correlations[drafter] = resourcedness_correlation(
            tv, {lang: s["train_chars"] for lang, s in sizes.items()}
        )
    result = {
        "meta": meta,
        "n_records": len(records),
        # What the generations ran on (the workers', under Ray), not the driver's settings.
        "machines": machines_summary([r.machine for r in records]),
        "wall_seconds_total": agg.wall_seconds_total(records),
        # generations timed while other work ran on the machine (load average beyond the run's threads)
        "timing_load": agg.timing_load(records),
        # cells whose wall-clock speedup disagrees with what their own forwards' timings predict
        "timing_checks": agg.timing_checks(stats),
        "settings": [s.to_dict() for s in stats],
        # γ per language, task and drafter chosen on the choosing prompts, numbers held out
        "best": [s.to_dict() for s in best],
        "languages": [asdict(x) for x in languages_rows],
        "llama_cpp": llama_cpp_status(store, llama),
        "headline": agg.headline(records, languages_rows),
        "drafter_means": agg.drafter_means(best),
        # the paper's comparison: γ chosen on the choosing prompts, numbers from the held-out ones
        "paper_table": (table := agg.paper_table(records, best)),
        "paper_findings": paper.findings_dicts(table),
        "task_kd_vs_bigram": paper.task_kd_against_bigram(table),
        "distilled": distilled_runs(specs),
        "cross_task": agg.cross_task_matrix(best),
        "quantization": agg.quantization_cost(stats, specs),
        "router": router.to_dict(),
        # held out; the worst route chosen on the choosing prompts, like the headline's
        "router_headline": {"mean": mean, "mean_low": low, "mean_high": high,
                            "worst": asdict(agg.worst_by_selection(routed)) if routed else None,
                            # held out: how many routed (language, task) pairs are below plain decoding
                            "routes": len(routed), "plain": sum(r.drafter == "none" for r in routed),
                            "below_one": sum(r.drafter != "none" and r.predicted_speedup < 1.0 for r in routed),
                            "lowest": min((r.predicted_speedup if r.drafter != "none" else 1.0 for r in routed),
                                          default=math.nan),
                            "ensemble": _ensemble(records, routed)},
        "divergence": divergence,
        "divergence_correlation": correlations,
        "corpus": sizes,
        "data": _provenance(meta.get("config", {})),
        "skips": [{"drafter": d, "language": la, "reason": r} for d, la, r in store.skips()],
        "forward_seconds": _forward_samples(records),
        # target tokens each n-gram drafter counted, per language and setting
        "training_tokens": training_tokens(specs, store.path.parent),
    }
    # a run with many languages: the distribution over them, proxies and the router's service level
    result["across"] = across_languages(result, meta.get("config", {}), min_languages=min_languages)
    return result


def distilled_runs(specs: dict[tuple[str, str], str]) -> list[dict[str, Any]]:
    """What each distilled drafter of the run recorded (``distilled.json``): data, steps, why
    training stopped, expected α before and after, and the learning curve."""
    import json

    out, seen = [], set()
    for (drafter, lang), spec in sorted(specs.items()):
        kind, _, where = spec.partition(":")
        path = Path(where) / "distilled.json"
        if kind != "distilled" or where in seen or not path.is_file():
            continue
        seen.add(where)
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        data = meta.get("config", {}).get("data", {})
        curve = [{"step": p.get("step"), "train_loss": p.get("train_loss"), "dev_loss": p.get("dev_loss"),
                  **{f"alpha_{t}": v.get("expected_acceptance") for t, v in (p.get("held_out") or {}).items()
                     if isinstance(v, dict)}} for p in meta.get("curve", [])]  # fmt: skip
        out.append({
            "drafter": drafter, "language": meta.get("lang", lang), "mode": meta.get("mode"),
            "mix": data.get("mix", []), "train_examples": meta.get("train_examples"),
            "train_response_tokens": meta.get("train_response_tokens"),
            "sources": data.get("train_source") or data.get("text_sources") or "bundled",
            "steps": meta.get("steps"), "stopped": meta.get("stopped"), "best_step": meta.get("best_step"),
            "before": {t: v.get("expected_acceptance") for t, v in meta.get("eval_before", {}).items() if isinstance(v, dict)},
            "after": {t: v.get("expected_acceptance") for t, v in meta.get("eval_after", {}).items() if isinstance(v, dict)},
            "seconds": meta.get("wall_seconds", {}), "curve": curve,
        })  # fmt: skip
    return out


def _ensemble(records, routed: list[Route]) -> dict[str, Any]:
    """The routes' held-out speedups as estimates for the distribution over languages
    (``route_choice.ensemble_estimates``; plain decoding at 1.0): quantiles and the lowest."""
    cells = {(r.language, r.task, r.drafter, r.gamma) for r in routed if r.drafter != "none"}
    est = ensemble_estimates(agg.held_out_split(records)[1], cells) if cells else {}
    values = [est.get((r.language, r.task, r.drafter, r.gamma), math.nan) if r.drafter != "none" else 1.0
              for r in routed]  # fmt: skip
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return {"routes": 0}
    return {"routes": len(values), "p5": float(np.percentile(values, 5)), "median": float(np.median(values)),
            "lowest": float(min(values)), "below_one": int(sum(v < 1.0 for v in values))}


def _forward_samples(records, per_drafter: int = 4000) -> dict[str, dict[str, list[float]]]:
    """Draft and target forward times per drafter setting (for the Fig. 2 histogram)."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in records:
        d = out.setdefault(r.drafter, {"draft": [], "target": []})
        if len(d["draft"]) < per_drafter:
            d["draft"].extend(r.draft_forward_seconds)
        if len(d["target"]) < per_drafter:
            d["target"].extend(r.target_forward_seconds)
    return out


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def analyse_run(run_dir: str | Path) -> dict[str, Any]:
    """``analyse`` of a run directory's store, closing the store afterwards."""
    store = open_store(Path(run_dir))
    try:
        return analyse(store)
    finally:
        store.close()


def write_analysis(run_dir: str | Path, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Write ``analysis.json`` and ``router.json`` of a run; return the analysis."""
    run_dir = Path(run_dir)
    result = analyse_run(run_dir)
    slim = {k: v for k, v in result.items() if k != "forward_seconds"}
    write_json_atomic(run_dir / "analysis.json", _clean(slim), indent=1, sort_keys=False,
                      ensure_ascii=False)
    router = Router(**{**result["router"], "routes": []})
    router.routes = [Route(**r) for r in result["router"]["routes"]]
    router.save(run_dir / "router.json")
    log(f"wrote {run_dir / 'analysis.json'} and {run_dir / 'router.json'}")
    return result
