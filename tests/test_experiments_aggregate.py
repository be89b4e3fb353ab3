"""Aggregation on a hand-made store whose statistics are known."""

from __future__ import annotations

import math

import pytest

from babelspec.experiments import aggregate as agg
from experiments_fixtures import record, small_store


@pytest.fixture
def stats(tmp_path):
    return agg.setting_stats(small_store(tmp_path / "r.sqlite").records())


def cell(stats, lang, task, drafter, gamma):
    [s] = [s for s in stats if (s.language, s.task, s.drafter, s.gamma) == (lang, task, drafter, gamma)]
    return s


def test_measured_speedup_is_paired_against_plain(stats):
    assert cell(stats, "amh", "story", "fast", 3).speedup == pytest.approx(2.0)
    assert cell(stats, "amh", "story", "fast", 2).speedup == pytest.approx(1.5)
    assert cell(stats, "amh", "story", "slow", 2).speedup == pytest.approx(0.5)
    assert cell(stats, "yor", "translation", "fast", 2).speedup == pytest.approx(0.8)
    assert cell(stats, "amh", "story", "fast", 3).n_pairs == 4


def test_alpha_c_and_theoretical_f(stats):
    s = cell(stats, "amh", "translation", "fast", 3)
    assert s.alpha_mean == pytest.approx(0.7) and s.alpha_std == pytest.approx(0.0)
    assert s.c == pytest.approx(0.1)
    assert s.theoretical_f == pytest.approx((1 - 0.7**4) / ((1 - 0.7) * (3 * 0.1 + 1)))
    assert agg.theoretical_speedup(1.0, 4, 0.0) == pytest.approx(5.0)


def test_latency_per_token_and_per_char(stats):
    plain = cell(stats, "amh", "story", "none", 0)
    assert plain.seconds_per_token == pytest.approx(2.0 / 20)
    assert plain.seconds_per_char == pytest.approx(2.0 / 60)
    assert plain.tokens_per_char == pytest.approx(20 / 60)


def test_acceptance_by_draft_and_output_position(stats):
    s = cell(stats, "amh", "story", "fast", 2)
    # steps accept [2, 1, 0] of [2, 2, 2]: position 0 accepted 2/3, position 1 1/3
    assert s.acceptance_by_draft_position == pytest.approx([2 / 3, 1 / 3])
    # all steps start within the first 16 output tokens: matched 3 / (3 + 2 rejections)
    assert s.acceptance_by_output_position == pytest.approx([3 / 5])


def test_best_gamma_and_language_summary(stats):
    best = agg.best_gamma(stats)
    assert best[("amh", "story", "fast")].gamma == 3
    summary = {(x.language, x.task): x for x in agg.language_summary(stats)}
    assert summary[("amh", "story")].drafter == "fast"
    assert summary[("amh", "story")].speedup == pytest.approx(2.0)
    assert summary[("yor", "story")].speedup == pytest.approx(0.8)


def test_drafter_means_show_the_worst_language(stats):
    [row] = [r for r in agg.drafter_means(stats) if r["task"] == "story" and r["drafter"] == "fast"]
    assert row["speedup_mean"] == pytest.approx((2.0 + 0.8) / 2)
    assert row["speedup_worst"] == pytest.approx(0.8)
    assert row["worst_language"] == "yor"


def test_cross_task_matrix_marks_in_task_and_held_out(stats):
    m = agg.cross_task_matrix(stats)
    assert m["fast"]["translation"]["in_task"] == 1.0
    assert m["fast"]["story"]["in_task"] == 0.0
    assert math.isnan(m["slow"]["story"]["in_task"])
    assert m["fast"]["story"]["alpha"] == pytest.approx((0.7 + 0.3) / 2)


def test_loop_free_speedup_leaves_looping_pairs_out():
    rows = [record("amh", "story", "none", 0, p, wall=2.0, looped=(p == 0)) for p in range(3)]
    rows += [record("amh", "story", "ng", 2, 0, wall=0.5, looped=True)]  # loops: 4x, inflated
    rows += [record("amh", "story", "ng", 2, p, wall=2.0) for p in (1, 2)]
    [s] = [s for s in agg.setting_stats(rows) if s.drafter == "ng"]
    assert s.speedup == pytest.approx(1.0) and s.n_pairs == 3
    assert s.speedup_loop_free == pytest.approx(1.0) and s.n_pairs_loop_free == 2
    assert s.loop_rate == pytest.approx(1 / 3)


def test_verification_cost_enters_the_corrected_f():
    rows = [record("amh", "story", "none", 0, p, wall=2.0) for p in range(2)]
    rows += [record("amh", "story", "ng", 3, p, wall=2.0, alpha=0.5, c=0.1) for p in range(2)]
    for r in rows:  # verification of 4 tokens costs twice a plain step
        r.target_forward_seconds = [0.02] * 3 if r.drafter == "ng" else [0.01] * 3
    [s] = [s for s in agg.setting_stats(rows) if s.drafter == "ng"]
    assert s.verify_cost == pytest.approx(2.0)
    c_plain = s.draft_forward_ms / 10.0
    assert s.f_verify == pytest.approx((1 - 0.5**4) / (0.5 * (3 * c_plain + 2.0)))
    assert s.f_verify < s.theoretical_f
