"""Aggregation on a hand-made store whose statistics are known."""

from __future__ import annotations

import math

import numpy as np
import pytest
from experiments_fixtures import record, small_store

from babelspec.experiments import aggregate as agg
from babelspec.speedup import theoretical_speedup


@pytest.fixture
def records(tmp_path):
    return small_store(tmp_path / "r.sqlite").records()


@pytest.fixture
def stats(records):
    return agg.setting_stats(records)


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
    assert theoretical_speedup(1.0, 4, 0.0) == pytest.approx(5.0)


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


def test_best_gamma_and_language_summary(stats, records):
    best = agg.best_gamma(stats)
    assert best[("amh", "story", "fast")].gamma == 3
    summary = {(x.language, x.task): x for x in agg.language_summary(records)}
    assert summary[("amh", "story")].drafter == "fast"
    assert summary[("amh", "story")].speedup == pytest.approx(2.0)
    assert summary[("yor", "story")].speedup == pytest.approx(0.8)


def test_drafter_means_show_the_worst_language(records):
    [row] = [r for r in agg.drafter_means(agg.held_out_best(records)) if r["task"] == "story" and r["drafter"] == "fast"]
    assert row["speedup_mean"] == pytest.approx((2.0 + 0.8) / 2)
    assert row["speedup_worst"] == pytest.approx(0.8)
    assert row["worst_language"] == "yor"


def test_cross_task_matrix_marks_in_task_and_held_out(records):
    m = agg.cross_task_matrix(agg.held_out_best(records))
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
        if r.drafter == "ng":  # one timed draft forward per drafted token
            r.draft_forward_seconds = [0.001] * (3 * r.steps)
    [s] = [s for s in agg.setting_stats(rows) if s.drafter == "ng"]
    assert s.verify_cost == pytest.approx(2.0)
    c_plain = s.draft_forward_ms / 10.0
    assert s.draft_forwards_per_step == pytest.approx(3.0)
    assert s.f_verify == pytest.approx((1 - 0.5**4) / (0.5 * (3 * c_plain + 2.0)))
    assert s.f_verify < s.theoretical_f


def test_the_corrected_f_counts_every_timed_draft_forward_of_a_step():
    """gguf:LANG times γ + 1 passes a step (the last gives the bonus row): f_verify counts them all,
    not the γ tokens drafted, or it overstates such a drafter's speedup by a fifth at γ = 4."""
    rows = [record("amh", "story", "none", 0, p, wall=2.0) for p in range(2)]
    rows += [record("amh", "story", "own", 3, p, wall=2.0, alpha=0.5) for p in range(2)]
    for r in rows:
        if r.drafter == "own":
            r.draft_forward_seconds = [0.005] * (4 * r.steps)
    [s] = [s for s in agg.setting_stats(rows) if s.drafter == "own"]
    assert s.drafted_per_step == pytest.approx(3.0) and s.draft_forwards_per_step == pytest.approx(4.0)
    assert s.f_verify == pytest.approx((1 - 0.5**4) / (0.5 * (4 * 0.5 + 1.0)))


def test_alpha_pools_counts_and_a_generation_that_judged_nothing_adds_nothing():
    rows = [record("amh", "story", "none", 0, p, wall=2.0) for p in range(3)]
    rows += [record("amh", "story", "ng", 2, 0, wall=1.0, accepted_per_step=[2, 2, 2, 0], proposed_per_step=[2] * 4),
             record("amh", "story", "ng", 2, 1, wall=1.0, accepted_per_step=[0], proposed_per_step=[0]),
             record("amh", "story", "ng", 2, 2, wall=1.0, accepted_per_step=[1, 0, 0], proposed_per_step=[2] * 3)]
    assert [r.alpha for r in rows[3:]][0] == pytest.approx(6 / 7) and math.isnan(rows[4].alpha)
    [s] = [s for s in agg.setting_stats(rows) if s.drafter == "ng"]
    assert s.alpha_mean == pytest.approx(7 / 11)  # (6 + 0 + 1) / (6 + 1 + 0 + 1 + 3)
    assert s.n_judged == 2
    # f at the 14 tokens drafted over 8 steps, not at γ 2
    assert s.theoretical_f == pytest.approx(theoretical_speedup(7 / 11, 14 / 8, s.c))


def test_the_headline_setting_is_measured_on_prompts_that_did_not_choose_it():
    # "lucky" measures 2x on the even prompts and 0.8x on the odd ones; "steady" 1.25x on all.
    rows = [record("amh", "story", "none", 0, p, wall=2.0) for p in range(4)]
    rows += [record("amh", "story", "lucky", 2, p, wall=w) for p, w in enumerate([1.0, 2.5, 1.0, 2.5])]
    rows += [record("amh", "story", "steady", 2, p, wall=1.6) for p in range(4)]
    [row] = agg.language_summary(rows)
    assert row.drafter == "lucky" and row.selection_speedup == pytest.approx(2.0)
    assert row.speedup == pytest.approx(0.8) and row.n_pairs == 2  # held out
    assert row.speedup_in_sample == pytest.approx(1.4)  # the old headline's number
    [h] = [h for h in agg.headline(rows, [row]) if h["task"] == "*"]
    assert h["mean"] == pytest.approx(0.8) and h["worst"] == pytest.approx(0.8)


def test_each_cell_has_a_deterministic_bootstrap_interval_over_prompts():
    rng = np.random.default_rng(1)
    walls = 2.0 / rng.uniform(0.8, 1.6, size=10)
    rows = [record("amh", "story", "none", 0, p, wall=2.0) for p in range(10)]
    rows += [record("amh", "story", "ng", 2, p, wall=w) for p, w in enumerate(walls)]
    [s] = [s for s in agg.setting_stats(rows) if s.drafter == "ng"]
    assert s.n_prompts == 10
    assert s.speedup_low < s.speedup < s.speedup_high
    ratios = 2.0 / walls
    assert ratios.min() <= s.speedup_low and s.speedup_high <= ratios.max()
    [again] = [s for s in agg.setting_stats(list(reversed(rows))) if s.drafter == "ng"]
    assert (again.speedup_low, again.speedup_high) == (s.speedup_low, s.speedup_high)
    one = [s for s in agg.setting_stats(rows[:1] + rows[10:11]) if s.drafter == "ng"][0]
    assert math.isnan(one.speedup_low) and math.isnan(one.speedup_high)  # one prompt: no interval


def test_the_mean_speedup_interval_resamples_prompts_within_each_cell():
    rows = []
    for lang, ratios in (("amh", [1.0, 2.0, 1.5, 1.2]), ("yor", [0.9, 1.1, 1.0, 1.3])):
        rows += [record(lang, "story", "none", 0, p, wall=2.0) for p in range(4)]
        rows += [record(lang, "story", "ng", 2, p, wall=2.0 / q) for p, q in enumerate(ratios)]
    cells = [("amh", "story", "ng", 2), ("yor", "story", "ng", 2)]
    mean, lo, hi = agg.mean_speedup_interval(rows, cells)
    assert mean == pytest.approx((1.35 + 1.05) / 2)
    assert 0.95 <= lo < mean < hi <= 1.75  # between the all-worst and all-best resamples


def test_speedup_compares_decode_time_so_a_short_output_does_not_carry_the_prefill():
    """Plain stops after 5 tokens, speculation runs 40: both decode at 10 ms per token after a
    1 s prefill. On wall time per token plain would look 5x slower; on decode time it is 1.0x."""
    base = record("amh", "story", "none", 0, 0, wall=1.0 + 5 * 0.01, tokens=5)
    spec = record("amh", "story", "bigram", 4, 0, wall=1.0 + 40 * 0.01, tokens=40)
    for r in (base, spec):
        r.prefill_seconds = 1.0
    (s,) = [s for s in agg.setting_stats([base, spec]) if s.drafter == "bigram"]
    assert s.speedup == pytest.approx(1.0)
    assert s.seconds_per_token == pytest.approx(0.01)


def test_records_from_before_prefill_was_stored_use_their_wall_time():
    base = record("amh", "story", "none", 0, 0, wall=2.0, tokens=10)
    spec = record("amh", "story", "bigram", 4, 0, wall=1.0, tokens=10)
    assert math.isnan(base.prefill_seconds) and base.decode_seconds == 2.0
    (s,) = [s for s in agg.setting_stats([base, spec]) if s.drafter == "bigram"]
    assert s.speedup == pytest.approx(2.0)


def test_a_cell_interval_is_scipys_bca_interval_when_each_prompt_has_one_pair():
    """Resampling prompts (the units) with one pair each is resampling the pairs: the interval
    is exactly scipy's BCa interval of the median."""
    from scipy.stats import bootstrap

    values = [0.8, 1.0, 1.1, 1.15, 1.2, 1.3, 2.5]
    lo, hi = agg.median_interval({p: [v] for p, v in enumerate(values)}, seed=7)
    ref = bootstrap((np.array(values),), np.median, n_resamples=agg.N_BOOTSTRAP, method="BCa",
                    rng=np.random.default_rng(7)).confidence_interval
    assert (lo, hi) == pytest.approx((ref.low, ref.high))


def test_an_interval_without_spread_is_the_value_itself():
    assert agg.median_interval({p: [1.25] for p in range(5)}) == (1.25, 1.25)


def test_f_uses_the_tokens_actually_drafted_per_step_not_the_gamma_asked_for():
    """γ 4 asked, but the drafter stops after 1 or 2 tokens: f is f at 1.5 drafted per step."""
    rows = [record("amh", "story", "none", 0, p, wall=2.0) for p in range(2)]
    rows += [record("amh", "story", "ng", 4, p, wall=1.0, accepted_per_step=[1, 0, 2, 1],
                    proposed_per_step=[1, 2, 2, 1]) for p in range(2)]
    [s] = [s for s in agg.setting_stats(rows) if s.drafter == "ng"]
    assert s.drafted_per_step == pytest.approx(1.5)
    assert s.theoretical_f == pytest.approx(theoretical_speedup(s.alpha_mean, 1.5, s.c))
    assert s.theoretical_f != pytest.approx(theoretical_speedup(s.alpha_mean, 4, s.c))


def test_latency_per_character_compares_the_same_held_out_prompts():
    """Plain decoding is slow on the even (choosing) prompts only: the headline's plain latency
    per character is that of the odd prompts, where the best setting was measured too."""
    rows = [record("amh", "story", "none", 0, p, wall=6.0 if p % 2 == 0 else 2.0) for p in range(4)]
    rows += [record("amh", "story", "ng", 2, p, wall=1.0) for p in range(4)]
    [row] = agg.language_summary(rows)
    assert row.seconds_per_char_plain == pytest.approx(2.0 / 60)
    assert row.seconds_per_char_best == pytest.approx(1.0 / 60)


def test_the_worst_language_is_chosen_on_the_choosing_prompts_and_measured_on_the_others():
    """amh is worst where its setting was chosen (1.1x against yor's 2.0x); on the held-out
    prompts yor dips by chance to 0.9x. The worst language is amh, at its held-out 1.25x: the
    minimum of the held-out medians (yor's dip) would report a number biased down."""
    rows = []
    for lang, choose, held in (("amh", 1.1, 1.25), ("yor", 2.0, 0.9)):
        rows += [record(lang, "story", "none", 0, p, wall=2.0) for p in range(4)]
        rows += [record(lang, "story", "ng", 2, p, wall=2.0 / (choose if p % 2 == 0 else held))
                 for p in range(4)]
    summary = agg.language_summary(rows)
    [h] = [h for h in agg.headline(rows, summary) if h["task"] == "*"]
    assert h["worst_language"] == "amh" and h["worst"] == pytest.approx(1.25)
    # and the lowest held-out number beside it, named as such
    assert h["lowest_language"] == "yor" and h["lowest"] == pytest.approx(0.9)


def _int8_store(path):
    from babelspec.experiments.store import Store

    store = Store(path)
    for p in range(3):
        store.add(record("amh", "translation", "none", 0, p, wall=2.0))
        store.add(record("amh", "translation", "head", 3, p, wall=1.5, alpha=0.9, c=0.6))
        store.add(record("amh", "translation", "int8", 3, p, wall=1.25, alpha=0.7, c=0.5))
        store.add(record("amh", "translation", "int8", 4, p, wall=1.2, alpha=0.7))  # no bf16 twin at γ 4
        store.add(record("amh", "translation", "fast", 3, p, wall=1.0, alpha=0.5))  # not a restricted head
    return store


def test_quantization_cost_sets_each_int8_setting_beside_the_bf16_head_of_its_layers(tmp_path):
    records = _int8_store(tmp_path / "q.sqlite").records()
    specs = {(r.drafter, r.language): r.drafter_spec for r in records}  # head:x, int8:x, fast:x
    [row] = agg.quantization_cost(agg.setting_stats(records), specs)
    assert (row["language"], row["task"], row["gamma"], row["layers"], row["bf16"], row["int8"]) == (
        "amh", "translation", 3, "all", "head", "int8")
    assert row["alpha_bf16"] == pytest.approx(0.9) and row["alpha_int8"] == pytest.approx(0.7)
    assert row["alpha_loss"] == pytest.approx(0.2)
    assert row["speedup_bf16"] == pytest.approx(2.0 / 1.5) and row["speedup_int8"] == pytest.approx(2.0 / 1.25)
    assert row["c_bf16"] == pytest.approx(0.6) and row["c_int8"] == pytest.approx(0.5)
    shapes = {s: agg._restricted_head_layers(s) for s in ("head:amh", "self:12@amh", "int8:12@", "int8:npi",
                                                          "self:12", "ngram:x.ngram")}  # fmt: skip
    assert shapes == {"head:amh": (False, ""), "self:12@amh": (False, "12"), "int8:12@": (True, "12"),
                      "int8:npi": (True, ""), "self:12": None, "ngram:x.ngram": None}  # fmt: skip


def _tree_record(prompt: int, legacy: bool = False):
    """Four steps of a tree of 8 nodes and depth 2 (four chains of two), each ending at a leaf."""
    r = record("yor", "story", "tree", 2, prompt, wall=1.0, c=0.05,
               accepted_per_step=[2] * 4, proposed_per_step=[8] * 4)  # fmt: skip
    r.rejections, r.alpha = 0, 1.0  # every step ran out of draft: nothing was rejected
    if not legacy:
        r.depth_per_step, r.rejected_per_step = [2] * 4, [0] * 4
    return r


def test_f_of_a_tree_follows_its_depth_for_the_tokens_kept_and_its_nodes_for_the_cost():
    [s] = agg.setting_stats([_tree_record(p) for p in range(2)])
    assert s.alpha_mean == 1.0 and s.depth_per_step == 2 and s.drafted_per_step == 8
    assert s.theoretical_f == pytest.approx(3 / (8 * s.c + 1))  # the bound: 3 tokens a step
    assert s.acceptance_by_draft_position == [1.0, 1.0]  # along the path, not over the nodes
    assert s.acceptance_by_output_position == [1.0]  # no step ended in a rejection
    assert theoretical_speedup(0.7, 2, 0.0, nodes=8) <= 3 < theoretical_speedup(0.7, 8, 0.0)


def test_a_tree_from_a_store_without_depths_has_no_f():
    # before depths were stored, a tree's node counts were all there was: its f is unknown,
    # not the f of a chain of 8 (which would exceed what a step can keep)
    [s] = agg.setting_stats([_tree_record(p, legacy=True) for p in range(2)])
    assert math.isnan(s.theoretical_f) and math.isnan(s.depth_per_step)
    assert all(math.isnan(a) for a in s.acceptance_by_draft_position)
    chain = record("yor", "story", "chain", 2, 0, wall=1.0, accepted_per_step=[2, 0], proposed_per_step=[2, 2])
    [c] = agg.setting_stats([chain])  # a chain's depths are its node counts
    assert c.depth_per_step == 2 and c.acceptance_by_output_position == [2 / 3]


def test_tables_that_choose_gamma_report_held_out_prompts():
    # amh: γ 2 wins on the even (choosing) prompts, 3x; on the odd ones it is 1.2x and γ 3 is
    # 2.5x there. In-sample choice would report γ 3 (or 3x); held out, γ 2 at 1.2x.
    rows = []
    for p in range(4):
        rows.append(record("amh", "story", "none", 0, p, wall=3.0))
        rows.append(record("amh", "story", "ng", 2, p, wall=1.0 if p % 2 == 0 else 2.5))
        rows.append(record("amh", "story", "ng", 3, p, wall=1.5 if p % 2 == 0 else 1.2))
    [best] = agg.held_out_best(rows)
    assert best.gamma == 2 and best.speedup == pytest.approx(1.2) and best.selection_speedup == pytest.approx(3.0)
    [row] = agg.drafter_means([best])
    assert row["speedup_mean"] == pytest.approx(1.2) and row["speedup_worst"] == pytest.approx(1.2)
    assert agg.cross_task_matrix([best])["ng"]["story"]["speedup"] == pytest.approx(1.2)
