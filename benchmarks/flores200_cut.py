"""A cut of the wide profile, run by ``babelspec run``, beside the last wide run's numbers.

Reads a run's store (``RUN/results.sqlite``) and writes, per language, the held-out speedup of
the setting chosen on the choosing prompts (with its BCa 95% interval), the router's choice and
its held-out prediction, the prompts the sequential rounds gave the language, and the same
language's row of the last wide run (``results/flores200_study.json``). Then the summary the
issue's goals name (median, languages below 1.0x, intervals wholly below, the router's 5th
percentile and plain count, interval half-widths) for the run's drafters and for the run with
each drafter left out (what the budget buys), the timing checks, and every setting's held-out
speedup per language (to compare settings side by side).

    .venv/bin/python benchmarks/flores200_cut.py runs/cut24 -o benchmarks/results/flores200_cut24.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from babelspec.experiments.across import against_llama_cpp
from babelspec.experiments.aggregate import (
    fill_vs_llama_cpp,
    held_out_best,
    language_summary,
    setting_stats,
    split_llama_cpp,
    timing_checks,
    timing_load,
)
from babelspec.experiments.route_choice import build_router, chooser
from babelspec.experiments.store import Store
from babelspec.fileio import write_text_atomic
from babelspec.machine import machine_kind

WIDE = Path(__file__).resolve().parent / "results" / "flores200_study.json"


def summary(records, specs, rule: str, drop=()) -> dict:
    """The goals' numbers over the languages of ``records``, without the settings in ``drop``,
    the headline's setting and the router chosen under the run's router ``rule``."""
    rs = [r for r in records if r.drafter not in drop]
    rows = language_summary(rs, chooser(rule))
    router = build_router(rs, {k: v for k, v in specs.items() if k[0] not in drop}, rule=rule)
    routes = {(r.language, r.task): r for r in router.routes if r.task != "*"}
    held = [x.speedup for x in rows]
    routed = [routes[(x.language, x.task)].predicted_speedup for x in rows]
    widths = [(x.speedup_high - x.speedup_low) / 2 for x in rows]
    return {"languages": len(rows), "median": round(statistics.median(held), 3),
            "below_one": sum(v < 1 for v in held), "wholly_below_one": sum(x.speedup_high < 1 for x in rows),
            "router_median": round(statistics.median(routed), 3),
            "router_p5": round(float(np.quantile(routed, 0.05)), 3), "router_min": round(min(routed), 3),
            "router_plain": sum(routes[(x.language, x.task)].drafter == "none" for x in rows),
            "router_below_097": sum(v < 0.97 for v in routed),
            "half_width_median": round(statistics.median(widths), 3), "half_width_max": round(max(widths), 3)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("-o", "--output", type=Path, required=True)
    args = ap.parse_args()
    with Store(args.run / "results.sqlite") as store:
        records, meta = store.records(), store.meta()
    if not records:
        sys.exit(f"error: {args.run} holds no generations")
    records, llama = split_llama_cpp(records)  # llama.cpp (llama_cpp = true): a baseline, never a setting
    specs = {(r.drafter, r.language): r.drafter_spec for r in records if r.drafter != "none"}
    wide = {r["language"]: r for r in json.loads(WIDE.read_text())["across"]["rows"]}
    rule = meta.get("config", {}).get("router", {}).get("rule", "interval")  # the run's [router] rule
    router = build_router(records, specs, rule=rule)
    routes = {(r.language, r.task): r for r in router.routes if r.task != "*"}
    prompts = {}
    for r in records:
        prompts[r.language] = max(prompts.get(r.language, 0), r.prompt_index + 1)
    per_language = {}
    tasks = {r.task for r in records}
    rows = language_summary(records, chooser(rule))
    fill_vs_llama_cpp(rows, records, llama)
    for x in rows:
        w, route = wide.get(x.language), routes[(x.language, x.task)]
        per_language[x.language if len(tasks) == 1 else f"{x.language} {x.task}"] = {
            "setting": x.drafter, "held_out": round(x.speedup, 3), "low": round(x.speedup_low, 3),
            "high": round(x.speedup_high, 3), "alpha": round(x.alpha, 3), "held_out_pairs": x.n_pairs,
            "prompts": prompts[x.language], "router": route.drafter, "router_held_out": round(route.predicted_speedup, 3),
            "wide_setting": w["drafter"] if w else "", "wide_held_out": round(w["speedup"], 3) if w else None,
            "wide_low": round(w["speedup_low"], 3) if w else None, "wide_high": round(w["speedup_high"], 3) if w else None,
            "wide_router": round(w["router_speedup"], 3) if w else None,
            **({k: round(getattr(x, k), 3) for k in ("vs_llama_cpp", "vs_llama_cpp_low", "vs_llama_cpp_high",
                                                    "plain_vs_llama_cpp")} if llama else {}),
        }  # fmt: skip
    drafters = sorted({r.drafter for r in records if r.drafter != "none"})
    config = meta.get("config", {})
    out = {
        "benchmark": "flores200_cut", "config": config.get("name", ""), "description": config.get("description", ""),
        "machine": sorted({machine_kind(r.machine) for r in records}),
        "generations": len(records), "stage_seconds": {k: round(v, 1) for k, v in meta.get("stage_seconds", {}).items()
                                                        if not k.startswith("prepare ")},
        "prepare_seconds": round(sum(v for k, v in meta.get("stage_seconds", {}).items() if k.startswith("prepare ")), 1),
        "summary": {"all drafters": summary(records, specs, rule),
                    **{f"without {d}": summary(records, specs, rule, (d,)) for d in drafters}},
        "against_llama_cpp": against_llama_cpp([asdict(x) for x in rows]), "llama_cpp_generations": len(llama),
        "timing_checks": timing_checks(setting_stats(records)), "timing_load": timing_load(records),
        "languages": per_language,
        # every setting of every language, its gamma chosen on the choosing prompts, measured held out
        "settings": {f"{h.language} {h.drafter}": {"gamma": h.gamma, "held_out": round(h.speedup, 3),
                                                    "low": round(h.speedup_low, 3), "high": round(h.speedup_high, 3),
                                                    "alpha": round(h.alpha_mean, 3), "pairs": h.n_pairs}
                     for h in held_out_best(records)},
    }  # fmt: skip
    write_text_atomic(args.output, json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps(out["summary"], indent=1))


if __name__ == "__main__":
    main()
