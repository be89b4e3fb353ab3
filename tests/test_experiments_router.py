"""The router picks the best measured setting and never one measured at or below 1.0x."""

from __future__ import annotations

import math

import pytest

from babelspec.experiments import aggregate as agg
from babelspec.experiments.router import Router, build_router, predicted_vs_measured
from experiments_fixtures import record, small_store


@pytest.fixture
def stats(tmp_path):
    return agg.setting_stats(small_store(tmp_path / "r.sqlite").records())


SPECS = {(d, lang): f"{d}:x" for d in ("fast", "slow") for lang in ("amh", "yor")}


def test_best_setting_where_it_pays_plain_decoding_elsewhere(stats):
    router = build_router(stats, SPECS)
    amh = router.route("amh", "story")
    assert (amh.drafter, amh.gamma, amh.source) == ("fast", 3, "measured")
    assert amh.predicted_speedup == pytest.approx(2.0)
    yor = router.route("yor", "translation")
    assert (yor.drafter, yor.spec, yor.source) == ("none", "none", "fallback")


def test_never_picks_a_setting_measured_below_one(stats):
    for s in stats:  # make every theoretical f look excellent: it must not matter
        s.theoretical_f = 10.0
    router = build_router(stats, SPECS)
    measured = {(s.language, s.task, s.drafter, s.gamma): s.speedup for s in stats}
    for r in router.routes:
        if r.drafter != "none":
            assert measured[(r.language, r.task if r.task != "*" else "story", r.drafter, r.gamma)] > 1.0
    assert router.route("yor", "story").drafter == "none"
    assert router.route("yor").drafter == "none"  # per-language route, task unknown


def test_exactly_one_is_not_faster(stats):
    rows = [record("haw", "story", "none", 0, p, wall=1.0) for p in range(2)]
    rows += [record("haw", "story", "even", 2, p, wall=1.0) for p in range(2)]
    router = build_router(agg.setting_stats(rows), {("even", "haw"): "even:x"})
    assert router.route("haw", "story").drafter == "none"


def test_theoretical_f_is_used_only_without_a_baseline():
    rows = [record("haw", "story", "ng", 2, p, wall=1.0, alpha=0.8, c=0.01) for p in range(2)]
    stats = agg.setting_stats(rows)
    assert math.isnan(stats[0].speedup)
    r = build_router(stats, {("ng", "haw"): "ngram:f"}).route("haw", "story")
    assert (r.drafter, r.source) == ("ng", "theoretical")


def test_save_load_round_trip_with_relative_paths(tmp_path, stats):
    art = tmp_path / "run" / "artifacts" / "fast-amh.ngram"
    specs = {**SPECS, ("fast", "amh"): f"ngram:{art}"}
    router = build_router(stats, specs, target="gemma-3-270m")
    path = router.save(tmp_path / "run" / "router.json")
    assert str(tmp_path) not in path.read_text()  # paths inside the run are stored relative
    back = Router.load(path)
    assert back.route("amh", "story").spec == f"ngram:{art.resolve()}"
    assert back.target == "gemma-3-270m"
    assert [r.drafter for r in back.routes] == [r.drafter for r in router.routes]


def test_unknown_language_and_bad_file_are_clear_errors(tmp_path, stats):
    router = build_router(stats, SPECS)
    with pytest.raises(ValueError, match="no route for language 'chr'"):
        router.route("chr")
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="router file version"):
        Router.load(bad)
    with pytest.raises(ValueError, match="not found"):
        Router.load(tmp_path / "missing.json")


def test_predicted_vs_measured_on_held_out_prompts(stats):
    rows = predicted_vs_measured(build_router(stats, SPECS), stats)
    amh = [r for r in rows if r["language"] == "amh" and r["task"] == "story"][0]
    assert amh["predicted"] == pytest.approx(2.0) and amh["measured"] == pytest.approx(2.0)
