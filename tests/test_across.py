"""The "Across languages" numbers on rows with known answers, and the report section they make."""

from __future__ import annotations

import math

import pytest

from babelspec.experiments.across import read_moscar, spearman, summarise


def _rows(n: int = 30) -> list[dict]:
    scripts = ["Latn", "Arab", "Deva"]
    return [{
        "language": f"l{i:02d}", "name": f"L{i}", "script": scripts[i % 3], "family": "A" if i < 10 else "B",
        "drafter": "bigram", "gamma": 4, "speedup": 0.8 + 0.05 * i, "speedup_low": 0.7, "speedup_high": 2.5,
        "alpha": 0.1 + 0.01 * i, "tv_per_char": 1.0 / (i + 1),
        # speedup rises with web and training tokens, falls with tokens per character
        "web_tokens": 10.0 ** (3 + i / 5), "train_tokens": 1e4 * (i + 1), "tokens_per_char": 5.0 - 0.1 * i,
        "router_drafter": "none" if i < 4 else "bigram", "router_speedup": 1.0 if i < 4 else 0.8 + 0.05 * i,
    } for i in range(n)]  # fmt: skip


def test_summary_of_languages_with_known_answers() -> None:
    s = summarise(_rows())
    assert s["languages"] == 30 and s["below_one"] == 4  # 0.80, 0.85, 0.90, 0.95
    assert [r["language"] for r in s["worst"][:3]] == ["l00", "l01", "l02"] and s["best"][0]["language"] == "l29"
    assert s["speedup_quantiles"]["50"] == pytest.approx(0.8 + 0.05 * 14.5)
    cor = {(c["metric"], c["proxy"]): c for c in s["correlations"]}
    assert cor[("speedup", "web_tokens")]["rho"] == pytest.approx(1.0)
    assert cor[("speedup", "tokens_per_char")]["rho"] == pytest.approx(-1.0)
    assert cor[("tv_per_char", "train_tokens")]["rho"] == pytest.approx(-1.0)
    assert cor[("speedup", "web_tokens")]["low"] == pytest.approx(1.0)  # a perfect rank order resamples to 1
    family = {g["family"]: g for g in s["by_family"]}
    assert family["A"]["languages"] == 10 and family["A"]["speedup_median"] == pytest.approx(0.8 + 0.05 * 4.5)
    assert s["router"]["plain"] == 4 and s["router"]["p5"] >= 1.0  # the router leaves no language slower
    assert s["router"]["lowest"] == 1.0 and s["router"]["below_floor"] == 0
    assert s["wholly_below_one"] == 0  # every interval reaches 2.5
    assert s["half_width"] == {"languages": 30, "median": pytest.approx(0.9), "widest": pytest.approx(0.9),
                               "over": 30, "bound": 0.15}


def test_languages_measured_below_one_and_interval_widths_are_counted() -> None:
    """Below 1.0 as a point estimate and below 1.0 with the whole interval are different counts;
    a router's language under the floor is counted, one on it is not."""
    rows = _rows(6)  # speedups 0.80 .. 1.05
    widths = [(0.7, 0.95), (0.8, 1.09), (0.85, 0.99), (0.9, 1.0), (1.0, 1.2), (1.0, 1.1)]
    for row, (low, high) in zip(rows, widths):
        row["speedup_low"], row["speedup_high"] = low, high
    rows[4]["speedup_high"] = math.nan  # no interval: left out of the widths
    rows[0]["router_drafter"], rows[0]["router_speedup"] = "bigram", 0.96
    rows[1]["router_speedup"] = 0.97
    s = summarise(rows)
    assert s["below_one"] == 4 and s["wholly_below_one"] == 2  # 0.95 and 0.99; 1.0 itself is not below
    assert s["half_width"]["languages"] == 5 and s["half_width"]["widest"] == pytest.approx(0.145)
    assert s["half_width"]["median"] == pytest.approx(0.07) and s["half_width"]["over"] == 0
    assert s["router"]["lowest"] == pytest.approx(0.96) and s["router"]["below_floor"] == 1


def test_spearman_interval_covers_a_noisy_relation_and_not_zero_when_strong() -> None:
    import numpy as np

    rng = np.random.default_rng(1)
    x = rng.normal(size=200)
    y = x + rng.normal(scale=1.0, size=200)
    out = spearman(list(x), list(y))
    assert 0.5 < out["low"] < out["rho"] < out["high"] < 0.85 and out["n"] == 200
    assert math.isnan(spearman([1, 2, 3], [3, 2, 1])["rho"])  # too few languages for an interval


def test_mOSCAR_table_is_read_and_a_file_without_one_is_an_error(tmp_path) -> None:
    path = tmp_path / "m.md"
    path.write_text("| Lang. name | Code | Family | Script | #documents | #images | # tokens |\n"
                    "| --- | --- | --- | --- | --- | --- | --- |\n"
                    "| Amharic                | amh_Ethi | Afro-Asiatic   | Ge‘ez      | 39,588     | 152,646     | 35,089,019     |\n")
    assert read_moscar(path) == {"amh_Ethi": 35_089_019.0}
    path.write_text("nothing here\n")
    with pytest.raises(ValueError, match="no language table rows"):
        read_moscar(path)


def test_the_report_section() -> None:
    from babelspec.report.blocks import Figure, to_markdown
    from babelspec.report.build import across_blocks

    rows = _rows()
    blocks = across_blocks({"across": {**summarise(rows), "rows": rows, "missing": ["web_tokens: none"]}})
    md = to_markdown(blocks)
    assert md.startswith("## Across languages") and "5th-percentile language at 1.00x" in md
    assert "leaves 4 of 30 languages at 1.0x" in md and "not available: web_tokens: none" in md
    assert "4 languages below 1.0x, 0 of them with their whole 95% interval below it" in md
    assert "median 0.90x, widest 0.90x; 30 of 30 languages wider than ±0.15x" in md
    assert "lowest 1.00x, 0 below 0.97x" in md
    assert "| l00 | L0 | Latn | A | bigram | 4 | 0.80x [0.70, 2.50]" in md
    assert any(isinstance(b, Figure) for b in blocks)
    assert across_blocks({}) == []  # a run with few languages has no such section


def test_a_language_without_a_held_out_speedup_is_counted_and_left_out_of_the_lists() -> None:
    """NaN in a sort breaks the whole order: such rows are dropped first and named."""
    speeds = [1.3, 0.9, math.nan, 1.1, 0.7, 1.5, 0.95, 1.2]
    rows = _rows(len(speeds))
    for row, speed in zip(rows, speeds):
        row["speedup"] = speed
    s = summarise(rows)
    assert s["no_held_out"] == ["l02"] and s["languages"] == 7
    assert [r["speedup"] for r in s["best"][:4]] == [1.5, 1.3, 1.2, 1.1]
    assert [r["speedup"] for r in s["worst"][:3]] == [0.7, 0.9, 0.95]


def test_the_lists_rank_languages_on_their_choosing_prompts_as_the_headline_does() -> None:
    """A language whose held-out number is low by chance but whose choosing prompts were fast is
    not the worst: the lists rank by the selection speedup and show the held-out one."""
    rows = _rows(5)
    for row, (held, chosen) in zip(rows, [(0.9, 1.4), (1.0, 1.0), (1.1, 1.1), (1.2, 1.2), (1.3, 0.8)]):
        row["speedup"], row["selection_speedup"] = held, chosen
    s = summarise(rows)
    assert [r["language"] for r in s["worst"][:2]] == ["l04", "l01"]
    assert s["best"][0]["language"] == "l00"


def test_the_paper_languages_stay_out_of_the_training_token_rho() -> None:
    """Their bigrams count other sets than the generic FLORES-200 ones, so that ρ leaves them out."""
    rows = _rows(30)
    for row, code in zip(rows, ["amh", "yor", "npi"]):
        row["language"] = code
    cor = {(c["metric"], c["proxy"]): c for c in summarise(rows)["correlations"]}
    assert cor[("speedup", "train_tokens")]["n"] == 27 and cor[("speedup", "web_tokens")]["n"] == 30


def test_the_section_takes_its_task_and_setting_from_the_config_and_is_absent_without_rows() -> None:
    from babelspec.experiments.across import across_languages

    analysis = {"languages": [{"language": "yor", "task": "story", "drafter": "tri", "gamma": 4, "speedup": 1.2,
                               "alpha": 0.3}],
                "training_tokens": {"yor": {"tri": 5000.0}},
                "divergence": [{"language": "yor", "drafter": "tri", "tv_per_char": 0.2}]}
    analysis["languages"] += [{**analysis["languages"][0], "language": code} for code in ("amh", "ibo")]
    config = {"tasks": ["story"], "drafters": [{"name": "tri", "kind": "ngram", "order": 3}],
              "divergence": {"drafters": ["tri"]}}
    out = across_languages(analysis, config, min_languages=3)
    assert out["task"] == "story" and out["setting"] == "tri"
    row = {r["language"]: r for r in out["rows"]}["yor"]
    assert row["train_tokens"] == 5000.0 and row["tv_per_char"] == 0.2
    assert across_languages(analysis, {**config, "tasks": ["translation"]}, min_languages=3) is None
