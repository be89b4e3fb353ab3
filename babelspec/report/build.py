"""``build_report(run_dir)``: the run's Markdown report and self-contained HTML page."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from babelspec.experiments.aggregate import OTHER_WORK_LOAD, TIMING_AGREEMENT, VERIFY_OUTLIER
from babelspec.experiments.paper import PAPER_MEANS, ROLES
from babelspec.fileio import write_bytes_atomic, write_text_atomic
from babelspec.machine import describe, describe_machines
from babelspec.report import figures as figs
from babelspec.report.blocks import Block, Bullets, Figure, Heading, Paragraph, Table, to_html, to_markdown
from babelspec.report.provenance import provenance_blocks

# How every table and figure that picks a γ per language picks it (``aggregate.held_out_best``)
HELD_OUT_GAMMA = "γ per language chosen on the choosing (even-numbered) prompts; numbers on the held-out (odd-numbered) prompts"


def _measured_on(a: dict[str, Any], meta: dict[str, Any]) -> str:
    """What the speed figures were measured on: the generations' machines (the workers' under
    Ray), or the run's recorded execution settings for stores from before fingerprints."""
    if a.get("machines"):
        return describe_machines(a["machines"])
    return describe(meta.get("execution", {}))


def _f(x: Any, digits: int = 2, suffix: str = "") -> str:
    if x is None or not isinstance(x, (int, float)) or not math.isfinite(x):
        return "–"
    return f"{x:.{digits}f}{suffix}"


def _mean(values: list[Any]) -> float:
    vals = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else math.nan


def _ms(x: Any, digits: int = 1) -> str:
    return _f(x * 1e3, digits) if isinstance(x, (int, float)) else "–"


def _pct(x: Any) -> str:
    return _f(x * 100, 0, "%") if isinstance(x, (int, float)) else "–"


def _num(x: Any) -> float:
    return x if isinstance(x, (int, float)) and math.isfinite(x) else math.inf


def _ci(low: Any, high: Any) -> str:
    """A bootstrap interval as "[low, high]", "[–]" where there is none."""
    if _num(low) == math.inf or _num(high) == math.inf:
        return "[–]"
    return f"[{low:.2f}, {high:.2f}]"


def _pm(mean: Any, std: Any) -> str:
    return f"{_f(mean)} ± {_f(std)}" if isinstance(std, (int, float)) and math.isfinite(std) else _f(mean)


def _write_atomic(path: Path, data: bytes | str) -> None:
    (write_bytes_atomic if isinstance(data, bytes) else write_text_atomic)(path, data)


def _training_note(a: dict[str, Any], lang: str, setting: str) -> str:
    """The training text beside a number: the target tokens the setting's n-gram counted on the
    language's real sets, else the bundled corpus's size."""
    tokens = a.get("training_tokens", {}).get(lang, {}).get(setting)
    if lang in (a.get("data") or {}) and tokens:
        return f"{tokens / 1e3:.0f}k target tokens ({'scored' if 'distil' in setting else 'counted'}, real sets)"
    return _size_note(a.get("corpus", {}), lang)


def _size_note(corpus: dict, lang: str) -> str:
    c = corpus.get(lang)
    if not c:
        return "no bundled corpus"
    return (f"{c['train_chars'] / 1e3:.0f}k chars, {c['parallel_train']} pairs, "
            f"{len(c.get('domains', []))} domains")


def report_blocks(a: dict[str, Any]) -> list[Block]:
    meta = a.get("meta", {})
    cfg = meta.get("config", {})
    blocks: list[Block] = [Heading(f"babelspec run: {cfg.get('name', 'experiment')}", 1)]
    if cfg.get("description"):
        blocks.append(Paragraph(cfg["description"]))
    target = meta.get("target", {}).get("spec", cfg.get("target", "?"))
    blocks.append(Paragraph(
        f"Target `{target}`; {a['n_records']} generations, "
        f"{_f(a['wall_seconds_total'] / 60, 1)} min of generation (prefill and decoding); languages "
        f"{', '.join(cfg.get('languages', []))}; tasks {', '.join(cfg.get('tasks', []))}; "
        f"gamma in {cfg.get('gammas')}; {cfg.get('prompts_per_cell')} prompts per cell; "
        f"at most {cfg.get('max_new_tokens')} new tokens; sampling preset "
        f"`{cfg.get('sampling', {}).get('preset', '?')}`. Computed in {_measured_on(a, meta)}."
    ))  # fmt: skip
    for section in (_headline_blocks, across_blocks, _setting_blocks, _router_blocks, _figure_blocks,
                    _caveat_blocks):
        blocks += section(a)
    return blocks


def _lowest_held_out(h: dict[str, Any]) -> str:
    """``; lowest held out npi (translation) 1.06x [..]`` where it is another language than the
    worst ranked on the choosing prompts (empty in older analyses, which lack it)."""
    if "lowest_language" not in h or (h["lowest_language"], h["lowest_task"]) == (h["worst_language"], h["worst_task"]):
        return ""
    return (f"; lowest held out {h['lowest_language']} ({h['lowest_task']}) {_f(h['lowest'], suffix='x')} "
            f"{_ci(h['lowest_low'], h['lowest_high'])}")


def _headline_blocks(a: dict[str, Any]) -> list[Block]:
    """The headline: each language's best setting, mean and worst, and the router's."""
    meta = a.get("meta", {})
    blocks: list[Block] = []
    # --- headline: per language, best setting; mean and worst as prominent ---
    blocks.append(Heading("Headline: the best drafter setting per language"))
    head = {h["task"]: h for h in a.get("headline", [])}
    if "*" in head:
        h = head["*"]
        blocks.append(Paragraph(
            f"**Mean measured speedup {_f(h['mean'], suffix='x')} {_ci(h['mean_low'], h['mean_high'])}; "
            f"worst language, ranked on its choosing prompts, {h['worst_language']} ({h['worst_task']}) "
            f"{_f(h['worst'], suffix='x')} {_ci(h['worst_low'], h['worst_high'])} held out with "
            f"{h['worst_drafter']}{_lowest_held_out(h)}.** Each language's "
            f"setting is chosen on the even-numbered prompts and measured on the odd-numbered ones "
            f"(held out), so the number is not the maximum of noisy medians it was chosen by. "
            f"Measured = wall-clock decode seconds per token (after the prompt's prefill, the "
            f"same for both) of plain decoding over those of speculative decoding, median over "
            f"prompts run side by side; [low, high] = BCa bootstrap 95% interval "
            f"over prompts (– with fewer than 2 held-out prompts); computed in "
            f"{_measured_on(a, meta)}.",
            css="callout",
        ))  # fmt: skip
        blocks += _router_callout(a)
    blocks.append(_language_rows_table(a, head))
    blocks += _llama_cpp_rows(a)
    blocks += paper_blocks(a)
    return blocks


def _llama_cpp_rows(a: dict[str, Any]) -> list[Block]:
    """Each language's chosen setting and plain decoding against llama.cpp's plain decoding, held
    out (a run with llama_cpp = true), or a line saying why the comparison is absent."""
    status = a.get("llama_cpp") or {}
    rows = [r for r in a.get("languages", []) if math.isfinite(_num(r.get("vs_llama_cpp")))]
    if not status.get("measured") or not rows:
        return [Paragraph(f"Not compared with llama.cpp's plain decoding: {status.get('why', 'not measured')}.")]
    return [Table(
        ["language", "task", "chosen setting", "× llama.cpp [95% CI]", "plain decoding × llama.cpp [95% CI]",
         "pairs"],
        [[r["language"], r["task"], f"{r['drafter']} γ={r['gamma']}",
          f"{_f(r['vs_llama_cpp'], suffix='x')} {_ci(r.get('vs_llama_cpp_low'), r.get('vs_llama_cpp_high'))}",
          f"{_f(r.get('plain_vs_llama_cpp'), suffix='x')} "
          f"{_ci(r.get('plain_vs_llama_cpp_low'), r.get('plain_vs_llama_cpp_high'))}",
          str(r.get("n_llama_cpp_pairs", ""))] for r in rows],
        caption=f"Against llama.cpp's plain decoding of the same GGUF ({status.get('description', '')}): "
        "decode tokens per second (after the prefill; llama.cpp's after its first token) of each language's "
        "chosen setting and of babelspec's plain decoding over llama.cpp's on the same held-out prompts, "
        "seeds and sampling, run side by side; median over prompts, BCa bootstrap 95% interval over prompts.",
    )]  # fmt: skip


def _router_callout(a: dict[str, Any]) -> list[Block]:
    """The headline's second callout: the router's mean and worst held-out predictions."""
    routed = [r for r in a["router"]["routes"] if r["task"] != "*"]
    if not routed:
        return []
    rh = a.get("router_headline", {})
    w = rh.get("worst") or min(routed, key=lambda r: _num(r["predicted_speedup"]))  # older analyses
    mean = rh.get("mean", _mean([r["predicted_speedup"] for r in routed]))
    return [Paragraph(
        f"**With the router (`--drafter auto`): mean {_f(mean, suffix='x')} "
        f"{_ci(rh.get('mean_low'), rh.get('mean_high'))}, worst "
        f"{w['language']} ({w['task']}) {_f(w['predicted_speedup'], suffix='x')} "
        f"{_ci(w.get('predicted_low'), w.get('predicted_high'))}** (held-out predictions) — "
        f"it takes a setting only where its interval on the choosing prompts lies above "
        f"1.0x and decodes plainly elsewhere (see the router section)"
        + (f"; held out, {rh['below_one']} of {rh['routes']} language–task pairs are below plain "
           f"decoding with it (lowest {_f(rh['lowest'], suffix='x')}), {rh['plain']} left at plain "
           "decoding." if "below_one" in rh else "."),
        css="callout",
    )]  # fmt: skip


def _language_rows_table(a: dict[str, Any], head: dict[str, dict]) -> Table:
    """Each language's best setting, held out, with the per-task mean, worst and lowest rows."""
    langs = a["languages"]
    rows = []
    for r in langs:
        rows.append([r["language"], r["task"], r["drafter"], str(r["gamma"]), _f(r["alpha"]),
                     f"{_f(r['speedup'], suffix='x')} {_ci(r.get('speedup_low'), r.get('speedup_high'))}",
                     str(r.get("n_pairs", "")), _f(r.get("speedup_in_sample"), suffix="x"),
                     _f(r["theoretical_f"], suffix="x"), _f(r["speedup_loop_free"], suffix="x"),
                     _ms(r["seconds_per_char_plain"]), _ms(r["seconds_per_char_best"]),
                     _training_note(a, r["language"], r["drafter"])])  # fmt: skip
    bold = set()
    for task, h in head.items():
        if task == "*":
            continue
        rows.append([f"mean ({task})", "", "", "", _f(h["alpha_mean"]),
                     f"{_f(h['mean'], suffix='x')} {_ci(h['mean_low'], h['mean_high'])}", "", "",
                     _f(_mean([x["theoretical_f"] for x in langs if x["task"] == task]), suffix="x"),
                     "", "", "", ""])  # fmt: skip
        rows.append([f"worst on choosing prompts ({task})", h["worst_language"], h["worst_drafter"],
                     str(h["worst_gamma"]), "", f"{_f(h['worst'], suffix='x')} {_ci(h['worst_low'], h['worst_high'])}",
                     "", "", "", "", "", "", ""])  # fmt: skip
        bold |= {len(rows) - 2, len(rows) - 1}
        if "lowest_language" in h:  # older analyses have only the worst
            rows.append([f"lowest held out ({task})", h["lowest_language"], h["lowest_drafter"], "", "",
                         f"{_f(h['lowest'], suffix='x')} {_ci(h['lowest_low'], h['lowest_high'])}",
                         "", "", "", "", "", "", ""])  # fmt: skip
    return Table(
        ["language", "task", "best drafter", "γ", "α", "measured speedup [95% CI]", "pairs",
         "in-sample best", "theoretical f", "speedup (loop-free)", "ms/char plain", "ms/char best",
         "training text"],
        rows, bold_rows=bold,
        caption="Best = highest measured speedup over drafter settings and γ on the even-numbered "
        "prompts; α, speedup, f and ms/char best are that setting's on the odd-numbered (held-out) "
        "prompts. Worst on choosing prompts = the language whose chosen setting measured lowest on "
        "the prompts that chose it (its held-out number shown; the lowest held-out number is biased "
        "down by its prompts' noise), lowest held out = the lowest held-out number. "
        "In-sample best = the maximum over settings of medians on all prompts, the "
        "number this table showed before held-out selection (biased upward). Training text: the "
        "target tokens the best setting's n-gram counted (or, distilled, scored) on the language's "
        "real sets, else the bundled corpus's size (small, mostly UI strings and the UDHR): far "
        "below the paper's.",
    )  # fmt: skip


_PROXY_NAMES = {"web_tokens": "mOSCAR web tokens", "train_tokens": "bigram training tokens",
                "tokens_per_char": "target tokens per character ÷ English's"}
_METRIC_NAMES = {"speedup": "held-out speedup", "alpha": "held-out α", "tv_per_char": "TV per character (bigram)"}


def _tokens(x: Any) -> str:
    if not isinstance(x, (int, float)) or not math.isfinite(x):
        return "–"
    return f"{x / 1e6:.1f}M" if x >= 1e6 else f"{x / 1e3:.0f}k"


def _language_table(rows: list[dict[str, Any]], caption: str) -> Table:
    return Table(
        ["language", "name", "script", "family", "setting", "γ", "held-out speedup", "α", "TV/char",
         "bigram train tokens", "mOSCAR tokens", "tokens/char ÷ en", "router"],
        [[r["language"], r["name"], r["script"], r["family"], r["drafter"], str(r["gamma"]),
          f"{_f(r['speedup'], suffix='x')} {_ci(r.get('speedup_low'), r.get('speedup_high'))}",
          _f(r["alpha"]), _f(r["tv_per_char"], 3), _tokens(r["train_tokens"]), _tokens(r["web_tokens"]),
          _f(r["tokens_per_char"]), f"{r['router_drafter']} {_f(r['router_speedup'], suffix='x')}"]
         for r in rows], caption=caption)  # fmt: skip


def across_blocks(a: dict[str, Any]) -> list[Block]:
    """A run with many languages: the distribution over them, the extremes, groups, proxies, router."""
    x = a.get("across")
    if not x:
        return []
    q, rt = x["speedup_quantiles"], x["router"]
    blocks: list[Block] = [Heading("Across languages"), Paragraph(
        f"{x['languages']} languages, each at its setting chosen on its choosing (even-numbered) prompts "
        f"and measured on its held-out (odd-numbered) ones, as the headline. Held-out speedup over "
        f"languages: median {_f(q.get('50'), suffix='x')}, quartiles {_f(q.get('25'), suffix='x')}–"
        f"{_f(q.get('75'), suffix='x')}, 5th–95th percentile {_f(q.get('5'), suffix='x')}–"
        f"{_f(q.get('95'), suffix='x')}; {x['below_one']} languages below 1.0x"
        + (f", {x['wholly_below_one']} of them with their whole 95% interval below it"
           if "wholly_below_one" in x else "") + "."
        + (f" Held-out interval half-width (95%, per language): median {_f(hw['median'], suffix='x')}, "
           f"widest {_f(hw['widest'], suffix='x')}; {hw['over']} of {hw['languages']} languages wider than "
           f"±{_f(hw['bound'], suffix='x')}." if (hw := x.get("half_width")) and hw.get("languages") else "")
        + f" **The router's service level: its 5th-percentile language at {_f(rt['p5'], suffix='x')} (median "
        f"{_f(rt['median'], suffix='x')}"
        + (f", lowest {_f(rt['lowest'], suffix='x')}, {rt['below_floor']} below {_f(rt['floor'], suffix='x')}"
           if "below_floor" in rt else "")
        + f"); it leaves {rt['plain']} of {rt['languages']} languages at 1.0x (plain decoding)"
        + (f", under the `{rt['rule']}` rule" if "rule" in rt else "") + ".**"
        + (f" Those held-out numbers each carry their few prompts' noise, which spreads them wider than the "
           f"languages' own speedups; estimated as a distribution over languages (each setting's languages "
           f"pooled, the estimates spread to the spread the model expects of the true values: constrained "
           f"Bayes), the router's 5th-percentile language is at {_f(e['p5'], suffix='x')} (median "
           f"{_f(e['median'], suffix='x')}, {e['below_one']} below 1.0x)."
           if (e := a.get("router_headline", {}).get("ensemble")) and e.get("routes") else ""),
        css="callout")]  # fmt: skip
    png = figs.across_languages(x["rows"])
    if png:
        blocks.append(Figure("fig-across-languages", png,
                             "Held-out speedup over languages (left; dashed: plain decoding) and against "
                             "the target's tokens per character relative to English (right)."))
    blocks += _llama_cpp_blocks(a, x)
    ranked = ("ranked, as the headline's worst language, by the speedup of their setting on the choosing "
              "prompts, and shown with its held-out speedup")
    skipped = len(x.get("no_held_out") or [])
    blocks.append(_language_table(x["worst"], f"The 10 slowest languages, {ranked}; [low, high] = BCa bootstrap "
                                  "95% interval over held-out prompts."
                                  + (f" {skipped} languages without a held-out speedup are left out of this "
                                     "section." if skipped else "")))  # fmt: skip
    blocks.append(_language_table(x["best"], f"The 10 fastest languages, {ranked}."))
    if x.get("drafters"):
        blocks.append(Table(
            ["drafter", "languages that chose it", "router's languages", "α: median [5th, 95th pct]",
             "draft cost c: median [5th, 95th pct]"],
            [[d["drafter"], str(d["languages"]), str(d["routed"]),
              f"{_f(d['alpha']['median'])} [{_f(d['alpha']['p5'])}, {_f(d['alpha']['p95'])}]",
              f"{_f(d['draft_cost']['median'])} [{_f(d['draft_cost']['p5'])}, {_f(d['draft_cost']['p95'])}]"]
             for d in x["drafters"]],
            caption="The drafters the languages chose, held out: α and c (one draft forward over a plain decoding "
                    "step) over the languages that chose each; their per-language values are in the run's rows."))  # fmt: skip
    for title in ("script", "family"):
        blocks.append(Table(
            [title, "languages", "median held-out speedup", "median α", "median with the router"],
            [[g[title], str(g["languages"]), _f(g["speedup_median"], suffix="x"), _f(g["alpha_median"]),
              _f(g["router_median"], suffix="x")] for g in x[f"by_{title}"]],
            caption=f"Medians over the languages of each {title}"
            + (" (ISO 15924)." if title == "script" else " (top-level)."),
        ))
    blocks.append(Table(
        ["measure", "against", "languages", "Spearman ρ [95% interval]"],
        [[_METRIC_NAMES[c["metric"]], _PROXY_NAMES[c["proxy"]], str(c["n"]),
          f"{_f(c['rho'])} {_ci(c['low'], c['high'])}"] for c in x["correlations"]],
        caption=f"[low, high] = percentile bootstrap 95% interval over languages (languages resampled as "
        f"units, 2,000 resamples, fixed seed). The paper's r = {x['paper_r']} is Pearson's, of "
        "draft/target divergence against web-text size over its 11 languages. mOSCAR's token counts "
        "are a noisy proxy (language-ID confusion inflates some languages) and cover 163 FLORES-200 "
        f"codes; the training tokens are what this run's {x.get('setting', 'bigram')} counted: for a language "
        "outside the paper's, SIB-200 train and dev, NTREX-128 and OLDI Seed where they hold the language; "
        "for the paper's languages their own sets (SIB-200 train only, with HornMT, Tatoeba or FLoRes v1 "
        "where they hold the language), so those are not counted alike and are left out of the ρ against "
        "training tokens. Tokens per character measures how much of the language the target's tokenizer saw."))  # fmt: skip
    if x.get("missing"):
        blocks.append(Bullets([f"not available: {m}" for m in x["missing"]]))
    return blocks


def _llama_cpp_blocks(a: dict[str, Any], x: dict[str, Any]) -> list[Block]:
    """The Across section against llama.cpp's plain decoding of the same GGUF: the distribution,
    the figure against both baselines and the languages that gain least; or why it was not measured."""
    status, lc = a.get("llama_cpp") or {}, x.get("llama_cpp")
    if not lc:
        why = status.get("why") or "the run did not record it"
        return [Paragraph(f"Against llama.cpp's plain decoding of the same GGUF: not measured ({why}).")]
    blocks: list[Block] = [Paragraph(
        f"**Against llama.cpp's plain decoding of the same GGUF** ({status.get('description', 'llama-cpp-python')}, "
        f"the same held-out prompts, sampling and thread count, decode time only, after its first token): over "
        f"{lc['languages']} languages the chosen settings decode at a median {_f(lc['median'], suffix='x')} "
        f"llama.cpp's rate, 5th percentile {_f(lc['p5'], suffix='x')}, lowest {_f(lc['lowest'], suffix='x')}; "
        f"{lc['below_one']} below 1.0x, {lc['wholly_below_one']} with their whole 95% interval below it. "
        f"babelspec's own plain decoding runs at a median {_f(lc['plain_median'], suffix='x')} llama.cpp's.",
        css="callout")]  # fmt: skip
    png = figs.against_both_baselines(x["rows"])
    if png:
        blocks.append(Figure("fig-against-llama-cpp", png,
                             "Each language's chosen setting, held out: its speedup over babelspec's plain decoding "
                             "and its decode rate over llama.cpp's plain decoding of the same GGUF, with BCa 95% "
                             "intervals over held-out prompts; sorted by the latter."))
    blocks.append(Table(
        ["language", "setting", "× llama.cpp [95% interval]", "α", "target tokens per char", "draft cost c"],
        [[f"{r['name']} ({r['language']})", f"{r['drafter']} γ={r['gamma']}",
          f"{_f(r['vs_llama_cpp'], suffix='x')} {_ci(r.get('vs_llama_cpp_low'), r.get('vs_llama_cpp_high'))}",
          _f(r.get("alpha")), _f(r.get("tokens_per_char")), _f(r.get("draft_cost"))] for r in lc["least"]],
        caption="The five languages that gain least against llama.cpp's plain decoding (held out); c: the "
                "chosen drafter's forward over a plain decoding step."))  # fmt: skip
    return blocks


def _held_out_scope(a: dict[str, Any]) -> str:
    """A caption's sentence where the run's held-out prompts ran only the chosen settings."""
    if not a.get("meta", {}).get("config", {}).get("held_out", {}).get("prompts"):
        return ""
    return (" This run's held-out prompts ran only the settings their languages chose ([held_out] prompts): "
            "a drafter's held-out numbers cover the languages that chose it, not every language.")


def _setting_blocks(a: dict[str, Any]) -> list[Block]:
    """Per drafter over languages, every cell, the cross-task matrix, what int8 costs."""
    corpus = a.get("corpus", {})
    settings = a["settings"]
    blocks: list[Block] = []
    # --- per drafter: mean and worst over languages ---
    blocks.append(Heading("Drafter settings: mean and worst language"))
    blocks.append(Table(
        ["task", "drafter", "trained on", "languages", "α mean", "f mean", "speedup mean (held out)",
         "worst language (on the choosing prompts)", "its speedup: choosing / held out", "lowest held out"],
        [[r["task"], r["drafter"], r["trained_on"] or "–", str(r["languages"]), _f(r["alpha_mean"]),
          _f(r["f_mean"], suffix="x"), _f(r["speedup_mean"], suffix="x"), r["worst_language"],
          f"{_f(r.get('worst_selection'), suffix='x')} / {_f(r['speedup_worst'], suffix='x')}",
          _f(r.get("speedup_min"), suffix="x")] for r in a["drafter_means"]],
        caption=f"Each drafter at its best γ per language: {HELD_OUT_GAMMA}. The worst language is picked, "
        "like the headline's, by its speedup on the choosing prompts, and shown with that speedup and its "
        "held-out one, which can lie above the held-out mean (a language slow on the prompts that chose it "
        "need not be slow on the others); the last column is the lowest held-out speedup of any language." + _held_out_scope(a),
    ))  # fmt: skip

    # --- full table ---
    blocks.append(Heading("Every cell (language × task × drafter × γ)"))
    blocks.append(Table(
        ["lang", "task", "drafter", "γ", "n", "α mean ± std", "c", "f", "verify cost", "f (verify cost)", "speedup [95% CI]", "loop-free",
         "ms/token", "ms/char", "in language", "looping", "lang-ID agrees"],
        [[s["language"], s["task"], s["drafter"], str(s["gamma"]), str(s["n"]),
          _pm(s["alpha_mean"], s["alpha_std"]), _f(s["c"], 3), _f(s["theoretical_f"], suffix="x"),
          _f(s.get("verify_cost"), 2), _f(s.get("f_verify"), suffix="x"),
          f"{_f(s['speedup'], suffix='x')} {_ci(s.get('speedup_low'), s.get('speedup_high'))}",
          _f(s["speedup_loop_free"], suffix="x"),
          _ms(s["seconds_per_token"]), _ms(s["seconds_per_char"]),
          _pct(s["in_language_rate"]), _pct(s["loop_rate"]), _pct(s["langid_agreement"])] for s in settings],
        caption="α = Σ matched / Σ (matched + rejections) over the cell's generations (± the std "
        "of per-generation α where something was judged). Speedup [95% CI]: median over "
        "prompt pairs, bootstrap interval over prompts. "
        "c = median over generations of (mean draft forward / mean target forward). "
        "Verify cost = median verification forward (γ + 1 tokens) over the median plain decode "
        "step; the paper's f assumes it is 1, f (verify cost) puts the measured value in its place "
        "(f' = (1 − α^(d+1)) / ((1 − α)(n c' + v)), c' = draft forward over a plain step). "
        "f takes d = the tokens on the longest path of a step's draft and n = its drafted tokens, "
        "means per step: a chain has d = n, a token tree keeps at most d + 1 tokens a step and "
        "pays for its n nodes. "
        "In language: script check and the character n-gram classifier trained on the bundled "
        "corpora agree; lang-ID: py3langid where it covers the language (amh, npi, oci, que). "
        "Looping: repeated word 4-gram ratio ≥ the configured threshold.",
    ))  # fmt: skip

    # --- cross-task ---
    blocks.append(Heading("Cross-task matrix"))
    ct = a.get("cross_task", {})
    tasks = sorted({t for d in ct.values() for t in d})
    rows = []
    for d, by in sorted(ct.items()):
        cells = []
        for t in tasks:
            c = by.get(t)
            if c is None:
                cells.append("–")
                continue
            tag = {1.0: " (in-task)", 0.0: " (held-out)"}.get(c["in_task"], "")
            cells.append(f"α {_f(c['alpha'])}, {_f(c['speedup'], suffix='x')}{tag}")
        rows.append([d, *cells])
    blocks.append(Table(["drafter \\ evaluated on", *tasks], rows,
                        caption=f"Means over languages at each language's best γ: {HELD_OUT_GAMMA}."))  # fmt: skip

    # --- quantization by language ---
    quant = a.get("quantization") or []
    if quant:
        blocks.append(Heading("What int8 costs each language"))
        rows = [[q["language"], q["task"], str(q["gamma"]), q["layers"], _f(q["alpha_bf16"]), _f(q["alpha_int8"]),
                 _f(q["alpha_loss"]), f"{_f(q['c_bf16'])} → {_f(q['c_int8'])}",
                 f"{_f(q['speedup_bf16'], suffix='x')} → {_f(q['speedup_int8'], suffix='x')}",
                 _size_note(corpus, q["language"])] for q in quant]  # fmt: skip
        blocks.append(Table(
            ["language", "task", "γ", "layers", "α bf16", "α int8", "α lost", "c", "speedup", "corpus"], rows,
            caption="The target drafting for itself under a language-restricted bf16 head, its layers in bf16 "
            "(head:LANG, self:K@LANG) and on weight-only int8 copies (int8:[K@]LANG), same task and γ, all "
            "prompts: how much acceptance int8 rounding costs each language, beside its bundled data.",
        ))  # fmt: skip
    return blocks


def _router_blocks(a: dict[str, Any]) -> list[Block]:
    """The router's routes, and draft/target divergence against resourcedness."""
    corpus = a.get("corpus", {})
    div = a.get("divergence", [])
    blocks: list[Block] = []
    # --- router ---
    blocks.append(Heading("Router (`--drafter auto`)"))
    pooled = a["router"].get("rule", "interval") == "pooled"
    blocks.append(Paragraph(
        "Per language and task the setting with the highest measured speedup above 1.0x, plain "
        "decoding otherwise. "
        + ("Rule `pooled`: a setting's speedup in a language is estimated from its even-numbered "
           "prompts together with every other language's (the language's mean paired log speedup "
           "shrunk towards the setting's mean over languages by how much languages differ against how "
           "noisy its own prompts are: a normal empirical-Bayes model), and the setting is taken where "
           "that estimate's lower 95% bound lies above 1.0x. "
           if pooled else
           "A setting is taken only where its BCa bootstrap 95% interval on the even-numbered "
           "prompts lies above 1.0x. ")
        + "Its predicted speedup is what it measured on the odd-numbered prompts, which did not choose it."
    ))
    rows = [[r["language"], r["task"], r["drafter"], str(r["gamma"]),
             f"{_f(r.get('selection_speedup'), suffix='x')} {_ci(r.get('selection_low'), r.get('selection_high'))}"
             + (f"; pooled {_f(r.get('pooled_speedup'), suffix='x')} {_ci(r.get('pooled_low'), r.get('pooled_high'))}"
                if pooled and r["drafter"] != "none" else ""),
             f"{_f(r['predicted_speedup'], suffix='x')} {_ci(r.get('predicted_low'), r.get('predicted_high'))}",
             str(r.get("n_pairs", "")), r["source"]] for r in a["router"]["routes"]]  # fmt: skip
    blocks.append(Table(
        ["language", "task", "route", "γ", "on the choosing prompts", "predicted (held out)",
         "held-out pairs", "from"], rows,
        caption="Chosen on the even-numbered prompts, predicted from the odd-numbered ones; "
        "[low, high] = BCa bootstrap 95% interval over prompts. task * = the per-language route used "
        "when the task is not given.",
    ))  # fmt: skip

    # --- divergence ---
    blocks.append(Heading("Draft/target divergence and resourcedness"))
    if div:
        blocks.append(Table(
            ["language", "drafter", "texts", "tokens", "TV per token", "TV per char",
             "expected α = 1 − TV", "coverage", "bundled train chars"],
            [[d["language"], d["drafter"], str(d["n_texts"]), str(d["n_tokens"]),
              _f(d["tv_per_token"], 3), _f(d["tv_per_char"], 4), _f(d["expected_alpha"]),
              _pct(d["covered"]),
              str(corpus.get(d["language"], {}).get("train_chars", "–"))] for d in div],
        ))  # fmt: skip
        cor = a.get("divergence_correlation", {})
        blocks.append(Bullets([
            f"{d}: Pearson r = {_f(c['r'])}, p = {_f(c['p'], 3)} over n = {int(c['n'])} languages "
            f"(TV per character against log10 of bundled corpus characters; the paper found "
            f"r ≈ −0.47 against FineWeb2 bytes)" for d, c in sorted(cor.items())
        ] or ["no correlation computed"]))  # fmt: skip
    else:
        blocks.append(Paragraph("Not measured in this run (divergence disabled or no drafter)."))
    return blocks


def _figure_blocks(a: dict[str, Any]) -> list[Block]:
    """The figures, numbered as the paper's where they have a counterpart."""
    corpus = a.get("corpus", {})
    settings = a["settings"]
    best = a["best"]
    langs = a["languages"]
    div = a.get("divergence", [])
    blocks: list[Block] = []
    # --- figures ---
    blocks.append(Heading("Figures"))
    figure_specs = [
        ("fig2-forward-times", figs.forward_times(a.get("forward_seconds", {})),
         "Fig. 2 — time of one forward per drafter and of the target's verification forward."),
    ]
    for task in sorted({b["task"] for b in best}):
        figure_specs.append((f"fig3-alpha-{task}", figs.per_language_bars(best, task, "alpha_mean", "α (best γ)",
                                                                          interval=("alpha_low", "alpha_high")),
                             f"Fig. 3 — acceptance α per language and drafter, {task}: {HELD_OUT_GAMMA} "
                             "(bars: BCa 95% intervals over held-out prompts)."))
        figure_specs.append((f"fig4-speedup-{task}", figs.per_language_bars(best, task, "speedup", "measured speedup", True,
                                                                            interval=("speedup_low", "speedup_high")),
                             f"Fig. 4 — measured wall-clock speedup per language and drafter, {task}: {HELD_OUT_GAMMA} "
                             "(dashed: plain decoding; bars: BCa 95% intervals over held-out prompts)."))
        figure_specs.append((f"fig4b-theoretical-{task}", figs.per_language_bars(best, task, "theoretical_f", "theoretical f", True),
                             f"Fig. 4b — theoretical f per language and drafter, {task}: {HELD_OUT_GAMMA}."))
    figure_specs += [
        ("fig1-paper-table", figs.paper_table(a.get("paper_table") or [], PAPER_MEANS),
         "Fig. 1 — the paper's comparison: held-out α and measured speedup per drafter and task, means "
         "over languages with BCa 95% intervals (crosses: the paper's α and theoretical f)."),
        ("fig10-learning-curves", figs.learning_curves(a.get("distilled") or []),
         "Fig. 10 — learning curves of the distilled drafters: dev loss and expected α on held-out "
         "translation prompts by step (circles: the kept step)."),
        ("fig5-task-tradeoff", figs.task_tradeoff(best),
         "Fig. 5 — in-task versus held-out task: α on translation against α on stories (stars: means); "
         f"{HELD_OUT_GAMMA}."),
        ("fig6-measured-vs-theoretical", figs.measured_vs_theoretical(settings),
         "Fig. 6 — measured wall-clock speedup against theoretical f, every cell."),
        ("fig7-latency-per-char", figs.latency_per_char(langs),
         "Fig. 7 — milliseconds per generated character, plain decoding and the best setting."),
        ("fig8-acceptance-by-position", figs.acceptance_by_position(best),
         f"Fig. 8 — acceptance along the output at each drafter's best γ: {HELD_OUT_GAMMA}."),
        ("fig9-divergence", figs.divergence_vs_resources(div, corpus, a.get("divergence_correlation", {})),
         "Fig. 9 — draft/target TV per character against the bundled corpus size."),
    ]  # fmt: skip
    for name, png, caption in figure_specs:
        if png is not None:
            blocks.append(Figure(name, png, caption))

    blocks += provenance_blocks(a)  # runs with a [data] section: the text behind every number
    return blocks


def _load_caveat(load: dict[str, Any]) -> str:
    """What else ran while the generations were timed, from their load averages."""
    if not load.get("recorded"):
        return "The machine's load beside each generation was not recorded in this run's store."
    busy, cells = load["beside_other_work"], load.get("cells", [])
    if not busy:
        return (f"No other work ran beside the timings: every one of the {load['recorded']} generations ended with "
                f"the 1-minute load average within {OTHER_WORK_LOAD} of the run's own threads.")  # fmt: skip
    named = ", ".join(cells[:6]) + (f" and {len(cells) - 6} more" if len(cells) > 6 else "")
    return (f"Other work ran beside {busy} of {load['recorded']} timed generations (1-minute load average "
            f"above the run's own threads by more than {OTHER_WORK_LOAD}, at most {load['max_other_load']}), "
            f"in {len(cells)} language–task cells ({named}): their speedups are less trustworthy; measure them "
            "again on a quiet machine.")


def _timing_caveat(checks: dict[str, Any]) -> str:
    """Which cells' wall-clock speedups their own forwards do not explain."""
    if not checks.get("checked"):
        return "No cell's speedup could be checked against its forwards' timings (none recorded both)."
    q = checks.get("agreement_quantiles", {})
    text = (f"Each cell's measured speedup was checked against the speedup its own forwards predict (its α and "
            f"median draft and verification forwards against plain decoding's step): over {checks['checked']} cells "
            f"their ratio has median {q.get('50')} (5–95 %: {q.get('5')}–{q.get('95')}).")  # fmt: skip
    off, outliers = checks.get("disagreeing", []), checks.get("verify_outliers", [])
    if off:
        named = ", ".join(f"{d['cell']} ({d['agreement']})" for d in off[:6]) + (f" and {len(off) - 6} more" if len(off) > 6 else "")
        text += (f" {len(off)} disagree by more than {round(TIMING_AGREEMENT * 100)} %: {named}; their wall time holds "
                 "something their forwards do not (other work, a stall), so measure them again.")  # fmt: skip
    else:
        text += f" None disagrees by more than {round(TIMING_AGREEMENT * 100)} %."
    if outliers:
        named = ", ".join(f"{d['cell']} ({d['verify_cost']})" for d in outliers[:6])
        text += (f" {len(outliers)} cells' verification forwards cost over {VERIFY_OUTLIER}x the run's usual "
                 f"for their γ: {named}.")  # fmt: skip
    return text


_GGUF_BASELINE = ("The target computed on its GGUF file's own quantized blocks (the gguf mode, the default for GGUF "
                  "models on a CPU): its plain decoding, the baseline of every speedup here, ran at about 2.6x the "
                  "bf16 target's and at 1.04-1.12x llama.cpp's on the same file (docs/benchmarks.md), so the same "
                  "drafters gain less over it than over bf16's.")


def _machines_precision(meta: dict[str, Any]) -> str:
    """The target mode the run's generations recorded (``precision`` of its execution), or ""."""
    execution = meta.get("execution", {}) or {}
    return str(execution.get("precision", "") or "")


def _caveat_blocks(a: dict[str, Any]) -> list[Block]:
    """Data sizes, caveats, what was not measured, stage times, skips, versions."""
    meta = a.get("meta", {})
    cfg = meta.get("config", {})
    corpus = a.get("corpus", {})
    blocks: list[Block] = []
    # --- data, caveats, what was not measured ---
    blocks.append(Heading("Data, caveats and what was not measured"))
    rows = [[lang, str(c["train_sentences"]), str(c["train_words"]), str(c["train_chars"]),
             str(c["parallel_train"]), str(c["parallel_test"]), ", ".join(c.get("domains", []))]
            for lang, c in sorted(corpus.items())]  # fmt: skip
    if rows:
        blocks.append(Table(["language", "mono train texts", "words", "chars", "pairs train",
                             "pairs test", "domains"], rows))  # fmt: skip
    caveats = [
        "The target is a 270M-parameter base model on a CPU, not the paper's 9B verifier on a GPU; "
        "every speedup here is CPU wall-clock, with other jobs possibly sharing the machine "
        "(ratios are medians of side-by-side pairs to damp that).",
        *([_GGUF_BASELINE] if _machines_precision(meta) == "gguf" else []),
        "The bundled corpora are tiny next to the paper's (software UI strings, the UDHR, CLDR "
        "phrases); n-gram drafters and distillation see far less text, and some languages have "
        "almost none (see the data table).",
        f"At most {cfg.get('max_new_tokens')} new tokens per generation and "
        f"{cfg.get('prompts_per_cell')} prompts per cell, half of them choosing the headline's "
        "and the router's settings and half measuring them: BCa bootstrap 95% intervals over prompts "
        "are shown ([–] where fewer than 2 prompts leave none); differences inside them are noise.",
        "α follows the paper's code (matched / (matched + rejections)), pooled over a cell's "
        "generations (one that judged nothing adds nothing); f uses each cell's measured c on "
        "this machine.",
        _load_caveat(a.get("timing_load") or {}),
        _timing_caveat(a.get("timing_checks") or {}),
        "Not measured: chrF or any quality score (the output distribution is the target's by "
        "construction, so quality does not depend on the drafter); GPU timings; batch sizes above 1; "
        "the paper's Qwen3.5 / Llama models (no weights offline).",
    ]
    distilled = [d["name"] for d in cfg.get("drafters", []) if "distil" in (d.get("options") or {})]
    if distilled:
        caveats.append(
            f"Distilled n-grams ({', '.join(distilled)}) are counted on the target's own top-20 "
            "next-token distributions (teacher-forced over the language's train text, and over the "
            "target's answers to the task's train prompts where the setting says task), not on the "
            "language's text: they follow what this target writes, in the language or not.")
    kinds = {d.get("kind") or d.get("spec", "").partition(":")[0] for d in cfg.get("drafters", [])}
    missing = [label for kind, label in (("ngram", "n-gram drafters"),
               ("distilled", "distilled drafters (task and general KD; the cross-task matrix "
                "then has no drafter fitted to a task)"))
               if cfg and kind not in kinds]  # fmt: skip
    if missing:
        caveats.append("Not in this run's config: " + "; ".join(missing)
                       + ". babelspec/profiles/full.toml has them.")
    blocks.append(Bullets(caveats))
    stages = meta.get("stage_seconds", {})
    if stages:
        blocks.append(Paragraph("Wall time per stage (all sessions of this run): " + "; ".join(
            f"{k} {v / 60:.1f} min" for k, v in stages.items()) + "."))
    est = full_profile_estimate(a)
    if est:
        blocks.append(Paragraph(est))
    skips = a.get("skips", [])
    if skips:
        blocks.append(Heading("Settings skipped", 3))
        blocks.append(Table(["drafter", "language", "reason"],
                            [[s["drafter"], s["language"], s["reason"]] for s in skips]))
    ver = meta.get("versions", {})
    blocks.append(Paragraph(
        "Versions: " + ", ".join(f"{k} {v}" for k, v in ver.items())
        + f". Report written {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC."
    ))
    return blocks


def _ci_of(row: dict[str, Any], key: str, digits: int = 2, suffix: str = "") -> str:
    return f"{_f(row.get(key), digits, suffix)} {_ci(row.get(f'{key}_low'), row.get(f'{key}_high'))}"


def paper_blocks(a: dict[str, Any]) -> list[Block]:
    """"The paper's table, side by side": its four drafters (and ours beside them) per task, its
    findings judged on this run, and how the distilled drafters learned."""
    table = a.get("paper_table") or []
    blocks: list[Block] = [Heading("The paper's table, side by side")]
    if not table:
        return blocks + [Paragraph("No speculative setting has held-out prompts in this run.")]
    mixed = [d for d in a.get("distilled") or [] if d.get("mix")]
    if mixed:
        d = mixed[0]
        blocks.append(Paragraph(
            f"The paper's first drafter is the small model of the target's family (Qwen3.5-0.8B for "
            f"the 9B). No smaller model of this target's family exists offline, so `{d['drafter']}` "
            f"stands in for it: the student shape of the distilled drafters (the target's first "
            f"layers under an output head restricted to the tokens it saw) general-distilled once "
            f"on an equal mix of {', '.join([d['language'], *d['mix']])} text "
            f"({d.get('train_examples')} windows, {d.get('steps')} steps), the way a family's small "
            f"model is trained on broad multilingual data, and used unchanged for every language "
            f"and task. It is far smaller and less trained than a real family member, so its α "
            f"is a floor for what the paper's baseline would reach here."))  # fmt: skip
    rows = []
    for r in table:
        ours = PAPER_MEANS.get(r["drafter"], {}).get(r["task"])
        rows.append([r["task"], r["drafter"], ROLES.get(r["drafter"], "–"), str(r["languages"]),
                     _ci_of(r, "alpha"), _f(r["c"], 3), _f(r["verify_cost"]), _f(r["f"], suffix="x"),
                     _f(r["f_verify"], suffix="x"), _ci_of(r, "speedup", suffix="x"),
                     _f(ours[0]) if ours else "–", _f(ours[1], suffix="x") if ours else "–"])  # fmt: skip
    blocks.append(Table(
        ["task", "drafter", "the paper's role", "languages", "α [95% CI]", "c", "verify cost", "f",
         "f (verify cost)", "measured speedup [95% CI]", "paper α", "paper f"], rows,
        caption="Ours: means over languages, each language at the γ that measured fastest on the "
        "choosing (even-numbered) prompts, every number measured on the held-out (odd-numbered) "
        "prompts; [low, high] = BCa bootstrap 95% interval, prompts resampled within each language. "
        "f = the paper's formula at the measured c and the tokens actually drafted per step; "
        "f (verify cost) puts the measured verification forward (in plain decode steps) in place of "
        "the paper's 1. Paper: means over 11 languages with a Qwen3.5-9B verifier and its 0.8B "
        "drafter on a GPU, theoretical f only.",
    ))  # fmt: skip
    found = a.get("paper_findings") or []
    if found:
        blocks.append(Heading("The paper's findings on this run", 3))
        blocks.append(Bullets([f"**{f['verdict']}** — {f['claim']} Here: {f['evidence']}." for f in found]))
        blocks.append(Paragraph("Reproduced: the 95% intervals separate in the paper's direction; not "
                                "reproduced: they separate the other way; inconclusive: they overlap."))
    kd = a.get("task_kd_vs_bigram") or {}
    if kd:
        blocks.append(Paragraph(
            f"Task KD against the corpus bigram on {kd['task']} (held-out α per language): task KD "
            f"is higher in {kd['wins']} of {kd['languages']} languages ("
            + ", ".join(f"{p['language']} {_f(p['task_kd'])} vs {_f(p['bigram'])}" for p in kd["pairs"]) + ")."))
    runs = a.get("distilled") or []
    if runs:
        blocks.append(Heading("How the distilled drafters learned", 3))
        rows = []
        for d in runs:
            src = d["sources"] if isinstance(d["sources"], str) else ", ".join(d["sources"])
            lang = d["language"] + (" + " + ", ".join(d["mix"]) if d["mix"] else "")
            before, after = d.get("before", {}), d.get("after", {})
            sec = d.get("seconds", {})
            total = sum(v for k, v in sec.items() if k != "total_seconds_this_process" and isinstance(v, (int, float)))
            rows.append([d["drafter"], lang, d["mode"] or "–", src, str(d.get("train_examples")),
                         str(d["steps"]), str(d["best_step"]), d["stopped"] or "–",
                         f"{_f(before.get('translation'), 3)} → {_f(after.get('translation'), 3)}",
                         f"{_f(before.get('story'), 3)} → {_f(after.get('story'), 3)}",
                         _f(total / 60, 1)])  # fmt: skip
        blocks.append(Table(
            ["drafter", "language", "mode", "trained on", "examples", "steps", "kept step", "stopped by",
             "expected α translation", "expected α story", "minutes"], rows,
            caption="Expected α = Σ min(p, q) under the paper's decoding settings on responses the "
            "target sampled for held-out (test-split) prompts, before → after training; the kept "
            "step is the one with the lowest dev loss (early stopping). Minutes: teacher soft "
            "targets, held-out sets, training and its evaluations.",
        ))  # fmt: skip
    return blocks


def full_profile_estimate(a: dict[str, Any]) -> str:
    """The full profile's runtime extrapolated from this run's measured seconds per token."""
    try:
        from babelspec.experiments.config import load_config

        full = load_config(profile="full")
    except ValueError:
        return ""
    per_token = [s["seconds_per_token"] for s in a["settings"]
                 if isinstance(s.get("seconds_per_token"), (int, float)) and math.isfinite(s["seconds_per_token"])]  # fmt: skip
    if not per_token:
        return ""
    mean_s = sum(per_token) / len(per_token)
    gens = sum(
        len(full.tasks) * full.prompts_per_cell * len(full.seeds)
        * (int(full.baseline) + len(full.settings_for(lang)) * len(full.gammas))
        for lang in full.languages
    )  # fmt: skip
    hours = gens * full.max_new_tokens * mean_s / 3600
    return (f"Runtime: this run decoded for {_f(a['wall_seconds_total'] / 60, 1)} min. The full profile "
            f"(babelspec/profiles/full.toml: {gens} generations of up to {full.max_new_tokens} tokens) would take "
            f"about {hours:.0f} h of decoding at this run's mean {mean_s * 1e3:.0f} ms per token "
            f"(an upper bound where generations stop early; distillation time not included).")


def build_report(run_dir: str | Path, out_dir: str | Path | None = None) -> dict[str, Path]:
    """Write ``report.md`` (+ ``figures/*.png``) and ``report.html`` for a run directory."""
    from babelspec.experiments.analysis import analyse_run

    run_dir = Path(run_dir)
    a = analyse_run(run_dir)
    out = Path(out_dir) if out_dir else run_dir
    (out / "figures").mkdir(parents=True, exist_ok=True)
    blocks = report_blocks(a)
    for b in blocks:
        if isinstance(b, Figure):
            _write_atomic(out / "figures" / f"{b.name}.png", b.png)
    md, page = out / "report.md", out / "report.html"
    _write_atomic(md, to_markdown(blocks))
    _write_atomic(page, to_html(blocks, title=f"babelspec report: {run_dir.name}"))
    return {"markdown": md, "html": page, "figures": out / "figures"}
