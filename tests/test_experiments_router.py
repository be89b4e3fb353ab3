"""The router picks the best measured setting whose interval lies above 1.0x, chosen on one
half of the prompts and predicted from the other."""

from __future__ import annotations

import math
import re

import pytest
from experiments_fixtures import record, small_store

from babelspec.experiments import aggregate as agg
from babelspec.experiments.route_choice import build_router
from babelspec.router import Router


@pytest.fixture
def records(tmp_path):
    return small_store(tmp_path / "r.sqlite").records()


@pytest.fixture
def stats(records):
    return agg.setting_stats(records)


SPECS = {(d, lang): f"{d}:x" for d in ("fast", "slow") for lang in ("amh", "yor")}


def test_best_setting_where_it_pays_plain_decoding_elsewhere(records):
    router = build_router(records, SPECS)
    amh = router.route("amh", "story")
    assert (amh.drafter, amh.gamma, amh.source) == ("fast", 3, "measured")
    assert amh.predicted_speedup == pytest.approx(2.0)
    yor = router.route("yor", "translation")
    assert (yor.drafter, yor.spec, yor.source) == ("none", "none", "fallback")


def test_never_picks_a_setting_measured_below_one(records, stats):
    for r in records:  # every draft accepted at no cost: f is excellent, and must not matter
        if r.drafter != "none":
            r.accepted_per_step, r.accepted, r.rejections = list(r.proposed_per_step), r.proposed, 0
            r.c = 1e-6
    assert all(s.theoretical_f >= 2 for s in agg.setting_stats(records) if s.drafter != "none")
    router = build_router(records, SPECS)
    measured = {(s.language, s.task, s.drafter, s.gamma): s.speedup for s in stats}
    for r in router.routes:
        if r.drafter != "none":
            assert measured[(r.language, r.task if r.task != "*" else "story", r.drafter, r.gamma)] > 1.0
    assert router.route("yor", "story").drafter == "none"
    assert router.route("yor").drafter == "none"  # per-language route, task unknown


def test_exactly_one_is_not_faster(stats):
    rows = [record("haw", "story", "none", 0, p, wall=1.0) for p in range(2)]
    rows += [record("haw", "story", "even", 2, p, wall=1.0) for p in range(2)]
    router = build_router(rows, {("even", "haw"): "even:x"})
    assert router.route("haw", "story").drafter == "none"


def test_theoretical_f_is_used_only_without_a_baseline():
    rows = [record("haw", "story", "ng", 2, p, wall=1.0, alpha=0.8, c=0.01) for p in range(2)]
    stats = agg.setting_stats(rows)
    assert math.isnan(stats[0].speedup)
    r = build_router(rows, {("ng", "haw"): "ngram:f"}).route("haw", "story")
    assert (r.drafter, r.source) == ("ng", "theoretical")


def test_save_load_round_trip_with_relative_paths(tmp_path, records):
    art = tmp_path / "run" / "artifacts" / "fast-amh.ngram"
    specs = {**SPECS, ("fast", "amh"): f"ngram:{art}"}
    router = build_router(records, specs, target="gemma-3-270m")
    path = router.save(tmp_path / "run" / "router.json")
    assert str(tmp_path) not in path.read_text()  # paths inside the run are stored relative
    back = Router.load(path)
    assert back.route("amh", "story").spec == f"ngram:{art.resolve()}"
    assert back.target == "gemma-3-270m"
    assert [r.drafter for r in back.routes] == [r.drafter for r in router.routes]


def test_a_run_written_with_a_relative_folder_routes_to_its_files_from_anywhere(tmp_path, records, monkeypatch):
    """`babelspec run -o runs/X` names its artifacts relative to the working directory; its router
    must still find them when loaded from elsewhere (and a router file written before that rule,
    holding working-directory paths, from the directory it was written in)."""
    (tmp_path / "runs" / "x" / "artifacts").mkdir(parents=True)
    (tmp_path / "runs" / "x" / "artifacts" / "fast-amh.ngram").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    specs = {**SPECS, ("fast", "amh"): "ngram:runs/x/artifacts/fast-amh.ngram,tree=8"}
    text = build_router(records, specs).save("runs/x/router.json").read_text()
    assert '"ngram:artifacts/fast-amh.ngram,tree=8"' in text
    monkeypatch.chdir(tmp_path / "runs")
    expected = f"ngram:{tmp_path / 'runs/x/artifacts/fast-amh.ngram'},tree=8"
    assert Router.load("x/router.json").route("amh", "story").spec == expected
    old = text.replace('"ngram:artifacts/', '"ngram:runs/x/artifacts/')
    (tmp_path / "old.json").write_text(old)
    monkeypatch.chdir(tmp_path)
    assert Router.load("old.json").route("amh", "story").spec == expected


def test_unknown_language_and_bad_file_are_clear_errors(tmp_path, records):
    router = build_router(records, SPECS)
    with pytest.raises(ValueError, match="no route for language 'chr'"):
        router.route("chr")
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="router file version"):
        Router.load(bad)
    with pytest.raises(ValueError, match="not found"):
        Router.load(tmp_path / "missing.json")
    # valid JSON of the wrong shape: a ValueError naming what is wrong, never an AttributeError
    for body, words in (("[]", "holds a JSON list, not an object"), ('{"version": 1}', "no 'routes' field"),
                        ('{"version": 1, "routes": [1]}', "'routes' must be a list of objects"),
                        ('{"version": 1, "routes": [{"language": 3}]}', "routes.0.language: Input should be")):
        bad.write_text(body)
        with pytest.raises(ValueError, match=re.escape(words)):
            Router.load(bad)


def _noisy_cell(lang: str, walls: dict[str, list[float]]) -> list:
    """Plain decoding at 2 s per prompt and each setting's wall seconds per prompt."""
    rows = [record(lang, "story", "none", 0, p, wall=2.0) for p in range(len(next(iter(walls.values()))))]
    for name, ws in walls.items():
        rows += [record(lang, "story", name, 2, p, wall=w) for p, w in enumerate(ws)]
    return rows


def test_the_predicted_speedup_is_measured_on_prompts_the_choice_did_not_see():
    # "lucky" is 2x on the even prompts and 0.8x on the odd ones: chosen on the even ones,
    # its prediction is the odd ones' 0.8x, not the in-sample 2.0x (or the all-prompt 1.4x).
    rows = _noisy_cell("amh", {"lucky": [1.0, 2.5, 1.0, 2.5], "steady": [1.6] * 4})
    r = build_router(rows, {("lucky", "amh"): "lucky:x", ("steady", "amh"): "steady:x"}).route("amh", "story")
    assert (r.drafter, r.source) == ("lucky", "measured")
    assert r.selection_speedup == pytest.approx(2.0)
    assert r.predicted_speedup == pytest.approx(0.8) and r.n_pairs == 2
    assert r.predicted_low == pytest.approx(0.8) and r.predicted_high == pytest.approx(0.8)


def test_a_setting_whose_interval_reaches_below_one_is_not_taken():
    # median 1.25x on the choosing prompts (0, 2, 4, 6), but two of them measure 0.8x
    walls = [1.0, 1.0, 2.5, 1.0, 1.0, 1.0, 2.5, 1.0]  # prompts 0 and 4 at 2x, 2 and 6 at 0.8x
    rows = _noisy_cell("amh", {"noisy": walls})
    [s] = [s for s in agg.setting_stats([r for r in rows if r.prompt_index % 2 == 0]) if s.drafter == "noisy"]
    assert s.speedup > 1.0 and s.speedup_low < 1.0
    router = build_router(rows, {("noisy", "amh"): "noisy:x"})
    assert router.route("amh", "story").drafter == "none"
    assert router.route("amh").drafter == "none"


def test_one_choosing_prompt_has_no_interval_so_plain_decoding():
    rows = _noisy_cell("amh", {"fast": [1.0, 1.0]})  # 2x, but one prompt per half
    router = build_router(rows, {("fast", "amh"): "fast:x"})
    assert router.route("amh", "story").drafter == "none"


def test_routes_carry_the_measured_verify_and_draft_costs(records):
    amh = build_router(records, SPECS).route("amh", "story")
    assert amh.verify_cost == pytest.approx(1.0)  # the fixture's forwards all take 10 ms
    assert amh.draft_cost == pytest.approx(0.1)


def test_a_route_of_one_task_names_that_tasks_drafter(records):
    # a setting's {task} is filled for a route of one task, and kept for the route of every
    # task ("*"), where the auto drafter fills it with the request's task
    specs = {(d, lang): f"ngram:{d}-{{task}}.ngram" for d in ("fast", "slow") for lang in ("amh", "yor")}
    router = build_router(records, specs)
    chosen = [r for r in router.routes if r.drafter != "none"]
    assert any(r.task != "*" for r in chosen)
    for r in chosen:
        template = specs[(r.drafter, r.language)]
        assert r.spec == (template if r.task == "*" else template.replace("{task}", r.task))


def test_the_default_router_lives_in_babelspecs_cache_directory(tmp_path, monkeypatch):
    from babelspec.router import default_router_path

    monkeypatch.delenv("BABELSPEC_ROUTER", raising=False)
    monkeypatch.setenv("BABELSPEC_CACHE", str(tmp_path / "cache"))
    assert default_router_path() == tmp_path / "cache" / "router.json"
    monkeypatch.setenv("BABELSPEC_ROUTER", str(tmp_path / "mine.json"))
    assert default_router_path() == tmp_path / "mine.json"


# --- the pooled rule: every language of a setting informs each one's estimate ---------------

def _wide_run(speedups: dict[str, list[float]], name: str = "int8") -> list:
    """Plain decoding at 2 s a prompt and ``name`` at 2 / speedup s, per language and prompt."""
    rows = []
    for lang, per_prompt in speedups.items():
        rows += [record(lang, "translation", "none", 0, p, wall=2.0) for p in range(len(per_prompt))]
        rows += [record(lang, "translation", name, 4, p, wall=2.0 / q) for p, q in enumerate(per_prompt)]
    return rows


# 12 languages where the drafter pays about 1.25x, each measured on 6 noisy prompts: on its 3
# choosing prompts (0, 2, 4) no language's own interval clears 1.0
NOISY = [1.6, 1.25, 0.98, 1.25, 1.6, 1.25]
LANGS = ["amh", "yor", "ibo", "hau", "npi", "que", "grn", "haw", "oci", "zgh", "chr", "ber"]


def test_the_pooled_rule_routes_languages_whose_own_prompts_cannot_decide():
    rows = _wide_run({lang: NOISY for lang in LANGS})
    specs = {("int8", lang): "int8:x" for lang in LANGS}
    one = [s for s in agg.setting_stats(agg.held_out_split(rows)[0]) if s.language == "amh" and s.drafter == "int8"]
    assert one[0].speedup_low < 1.0  # its own interval reaches below 1.0
    assert all(r.drafter == "none" for r in build_router(rows, specs).routes)
    pooled = build_router(rows, specs, rule="pooled")
    assert pooled.rule == "pooled"
    for r in pooled.routes:
        assert (r.drafter, r.source) == ("int8", "measured")
        assert r.pooled_low > 1.0 and r.pooled_low < r.pooled_speedup < r.pooled_high
        assert r.predicted_speedup == pytest.approx(1.25)  # still the held-out prompts' number


def test_pooling_does_not_route_a_language_its_own_prompts_show_slower():
    # 11 languages at about 1.3x and one whose drafter is steadily 0.8x: the prior says 1.25x,
    # its own three prompts agree closely on 0.8x, and they win
    rows = _wide_run({**{lang: [1.3, 1.3, 1.4, 1.3, 1.2, 1.3] for lang in LANGS[:-1]}, "ber": [0.8] * 6})
    router = build_router(rows, {("int8", lang): "int8:x" for lang in LANGS}, rule="pooled")
    assert router.route("ber", "translation").drafter == "none"
    assert router.route("ber").drafter == "none"
    assert all(router.route(lang, "translation").drafter == "int8" for lang in LANGS[:-1])


def test_the_pooled_estimate_is_the_normal_empirical_bayes_posterior():
    # hand-computed: 8 languages, 2 prompts each (log speedups y1, y2)
    from babelspec.experiments.route_choice import PRIOR_DF, pooled_posteriors

    logs = {lang: (0.1 + 0.05 * i, 0.3 - 0.02 * i) for i, lang in enumerate(LANGS[:8])}
    rows = _wide_run({lang: [math.exp(a), math.exp(b)] for lang, (a, b) in logs.items()})
    post = pooled_posteriors(rows)
    own_var = {lang: (a - b) ** 2 / 2 for lang, (a, b) in logs.items()}  # variance of 2 values, ddof 1
    pooled_var = sum(own_var.values()) / 8  # one degree of freedom each
    se2 = {lang: (own_var[lang] + PRIOR_DF * pooled_var) / (1 + PRIOR_DF) / 2 for lang in logs}
    means = {lang: (a + b) / 2 for lang, (a, b) in logs.items()}
    mu = sum(means.values()) / 8
    spread = sum((m - mu) ** 2 for m in means.values()) / 7
    tau2 = max(1e-4, spread - sum(se2.values()) / 8)
    for lang in logs:
        p = post[(lang, "translation", "int8", 4)]
        v = 1 / (1 / se2[lang] + 1 / tau2)
        m = v * (means[lang] / se2[lang] + mu / tau2)
        assert p.speedup == pytest.approx(math.exp(m), rel=1e-9)
        # limma's moderated t: 2 prompts and PRIOR_DF = 4 give 5 degrees of freedom, t = 2.5706
        assert p.low == pytest.approx(math.exp(m - 2.570581835636314 * math.sqrt(v)), rel=1e-9)
        assert p.own == pytest.approx(math.exp(means[lang])) and p.prior == pytest.approx(math.exp(mu))
        assert p.tau == pytest.approx(math.sqrt(tau2)) and p.n_prompts == 2
    # under MIN_POOLED_LANGUAGES languages a mean stands alone (the variance is still pooled)
    few = pooled_posteriors([r for r in rows if r.language in LANGS[:3]])
    p = few[("amh", "translation", "int8", 4)]
    assert math.isnan(p.tau) and p.speedup == pytest.approx(p.own)


def test_an_unknown_rule_is_a_clear_error_and_the_rule_survives_the_file(tmp_path, records):
    with pytest.raises(ValueError, match="unknown router rule 'bayes'; choose one of: interval, pooled"):
        build_router(records, SPECS, rule="bayes")
    path = build_router(records, SPECS, rule="pooled").save(tmp_path / "router.json")
    assert Router.load(path).rule == "pooled"


def test_ensemble_estimates_spread_the_posterior_means_to_the_expected_spread_of_the_true_values():
    import numpy as np

    from babelspec.experiments.route_choice import ensemble_estimates, pooled_posteriors

    true = {lang: 1.05 + 0.04 * i for i, lang in enumerate(LANGS)}
    noise = [1.3, 0.8, 1.1, 0.9, 1.2, 0.85]
    rows = _wide_run({lang: [q * e for e in noise[i % 3:] + noise[:i % 3]] for i, (lang, q) in enumerate(true.items())})
    cells = {(lang, "translation", "int8", 4) for lang in LANGS}
    est = ensemble_estimates(rows, cells)
    post = pooled_posteriors(rows)
    m = np.log([post[k].speedup for k in sorted(cells)])
    e = np.log([est[k] for k in sorted(cells)])
    assert e.mean() == pytest.approx(m.mean())
    assert e.var() == pytest.approx(m.var() + np.mean([post[k].sd ** 2 for k in cells]))
    assert e.var() > m.var()  # wider than the shrunk means, narrower than the raw medians
    raw = np.log([s.speedup for s in agg.setting_stats(rows) if s.drafter == "int8"])
    assert e.var() < raw.var()
    assert ensemble_estimates(rows, set()) == {}


def test_ensemble_estimates_leave_an_unpooled_setting_at_each_languages_own_mean():
    from babelspec.experiments.route_choice import MIN_POOLED_LANGUAGES, ensemble_estimates, pooled_posteriors

    few = LANGS[: MIN_POOLED_LANGUAGES - 1]
    rows = _wide_run({lang: [1.1 + 0.05 * i, 1.3 - 0.02 * i, 1.2] for i, lang in enumerate(few)})
    cells = {(lang, "translation", "int8", 4) for lang in few}
    est, post = ensemble_estimates(rows, cells), pooled_posteriors(rows)
    for k in cells:  # not shrunk, so not widened: each language's own mean
        assert est[k] == pytest.approx(post[k].own, rel=1e-12)


def test_under_the_pooled_rule_the_headline_chooses_by_the_pooled_estimate():
    """12 languages where a steady drafter pays 1.25x and a lucky one about 0.8x, except that in
    amh the lucky one drew one 2.5x choosing prompt (choosing median 1.3x, above the steady
    one's 1.25x): by the choosing medians amh's headline takes the lucky drafter and holds 0.8x;
    by the pooled estimates (each shrunk towards its drafter's mean over languages) the steady
    one, which holds 1.25x; the held-out runs follow the same choice."""
    from babelspec.experiments.config import config_from_dict
    from babelspec.experiments.held_out import chosen_settings
    from babelspec.experiments.route_choice import chooser

    steady = _wide_run({lang: [1.25] * 6 for lang in LANGS}, name="steady")
    lucky = _wide_run({lang: ([1.3, 0.8, 2.5, 0.8, 0.9, 0.8] if lang == "amh" else [0.8, 0.8, 0.85, 0.8, 0.75, 0.8])
                       for lang in LANGS}, name="lucky")  # fmt: skip
    rows = steady + [r for r in lucky if r.drafter != "none"]
    by_median = {x.language: x for x in agg.language_summary(rows)}
    assert (by_median["amh"].drafter, by_median["amh"].speedup) == ("lucky", pytest.approx(0.8))
    pooled = {x.language: x for x in agg.language_summary(rows, chooser("pooled"))}
    assert (pooled["amh"].drafter, pooled["amh"].speedup) == ("steady", pytest.approx(1.25))
    assert all(x.drafter == "steady" for x in pooled.values()) and chooser("interval") is None
    specs = {(name, lang): f"{name}:x" for name in ("steady", "lucky") for lang in LANGS}
    cfg = config_from_dict({"languages": LANGS, "tasks": ["translation"], "router": {"rule": "pooled"}})
    assert ("steady", 4) in chosen_settings(cfg, rows, specs)[("amh", "translation")]
    assert ("lucky", 4) not in chosen_settings(cfg, rows, specs)[("amh", "translation")]
