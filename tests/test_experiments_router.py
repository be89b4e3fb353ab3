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
