"""The paper's comparison on hand-made records: γ chosen on one half of the prompts and measured
on the other, α intervals over prompts, and each finding's verdict from the intervals."""

from __future__ import annotations

import math

import pytest
from experiments_fixtures import record

from babelspec.experiments import aggregate as agg
from babelspec.experiments import paper


def _cell(lang, task, drafter, gamma, alphas, ratio, prompts=8):
    """Plain decoding at 2 s and a speculative cell at ``ratio`` whose prompt p judges 10
    tokens at ``alphas[p % len(alphas)]``."""
    return [record(lang, task, drafter, gamma, p, wall=2.0 / ratio, alpha=alphas[p % len(alphas)])
            for p in range(prompts)]


def _plain(langs, tasks, prompts=8):
    return [record(lang, task, "none", 0, p, wall=2.0) for lang in langs for task in tasks for p in range(prompts)]


def test_the_pooled_alpha_interval_resamples_prompts():
    rows = _cell("amh", "story", "ng", 2, [0.2, 0.4, 0.3, 0.5], 1.2)
    [s] = [s for s in agg.setting_stats(rows)]
    assert s.alpha_mean == pytest.approx(0.35)
    assert 0.2 <= s.alpha_low < 0.35 < s.alpha_high <= 0.5
    same = _cell("amh", "story", "ng", 2, [0.3], 1.2)
    [t] = agg.setting_stats(same)
    assert (t.alpha_low, t.alpha_high) == pytest.approx((0.3, 0.3))  # no spread: the value itself
    [one] = agg.setting_stats(same[:1])
    assert math.isnan(one.alpha_low)  # one prompt: no interval


def test_the_paper_table_chooses_gamma_on_the_even_prompts_and_measures_on_the_odd_ones():
    rows = _plain(["amh"], ["story"])
    # gamma 2 measures 2x on the even prompts and 0.9x on the odd; gamma 4 1.5x throughout
    rows += [record("amh", "story", "bigram", 2, p, wall=2.0 / (2.0 if p % 2 == 0 else 0.9), alpha=0.3)
             for p in range(8)]
    rows += _cell("amh", "story", "bigram", 4, [0.2], 1.5)
    [row] = agg.paper_table(rows)
    assert row["per_language"][0]["gamma"] == 2
    assert row["speedup"] == pytest.approx(0.9)  # held out, not the 2x that chose it
    assert row["alpha"] == pytest.approx(0.3)


def _study(task_kd_story_alpha):
    langs, tasks = ["amh", "yor"], ["translation", "story"]
    rows = _plain(langs, tasks)
    for lang in langs:
        rows += _cell(lang, "translation", "baseline", 2, [0.3, 0.4], 1.0)
        rows += _cell(lang, "story", "baseline", 2, [0.3, 0.4], 1.0)
        rows += _cell(lang, "translation", "distill-task", 2, [0.6, 0.7], 1.1)
        rows += _cell(lang, "story", "distill-task", 2, task_kd_story_alpha, 1.0)
        rows += _cell(lang, "translation", "distill-general", 2, [0.3, 0.5], 1.0)
        rows += _cell(lang, "story", "distill-general", 2, [0.3, 0.4], 1.0)
        rows += _cell(lang, "translation", "bigram", 2, [0.1, 0.2], 1.5)
        rows += _cell(lang, "story", "bigram", 2, [0.1, 0.2], 1.5)
    return agg.paper_table(rows)


def test_findings_follow_the_intervals():
    table = _study([0.1, 0.2])
    verdicts = [f.verdict for f in paper.findings(table)]
    # task KD up on translation, down on story; general KD level; the bigram fastest on both
    assert verdicts == [paper.REPRODUCED] * 4
    reversed_story = [f.verdict for f in paper.findings(_study([0.7, 0.8]))]
    assert reversed_story[1] == paper.NOT_REPRODUCED
    overlapping = [f.verdict for f in paper.findings(_study([0.3, 0.4]))]
    assert overlapping[1] == paper.INCONCLUSIVE


def test_task_kd_against_the_bigram_counts_languages():
    kd = paper.task_kd_against_bigram(_study([0.1, 0.2]))
    assert kd["wins"] == 2 and kd["languages"] == 2


def test_a_run_without_the_papers_drafters_says_what_was_not_measured():
    rows = _plain(["amh"], ["story"]) + _cell("amh", "story", "bigram", 2, [0.2], 1.3)
    found = paper.findings(agg.paper_table(rows))
    assert [f.verdict for f in found[:3]] == ["not measured"] * 3
    assert "baseline" in found[0].evidence
    # the bigram alone: nothing to compare it with
    assert found[3].verdict == "not measured" and "the others not measured" in found[3].evidence
