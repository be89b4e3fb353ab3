"""A report renders from a small hand-made store: Markdown, figures, self-contained HTML."""

from __future__ import annotations

import re

import pytest
from experiments_fixtures import small_store
from typer.testing import CliRunner

from babelspec.cli import app
from babelspec.report import build_report


@pytest.fixture
def run_dir(tmp_path):
    store = small_store(tmp_path / "results.sqlite")
    store.add_divergence({"language": "amh", "drafter": "fast", "n_texts": 2, "n_tokens": 40,
                          "n_chars": 100, "tv_sum": 12.0, "tv_per_token": 0.3, "tv_per_char": 0.12,
                          "covered": 1.0, "expected_alpha": 0.7})  # fmt: skip
    store.add_skip("distill-task", "yor", "babelspec.distill is not available")
    store.close()
    return tmp_path


def test_report_has_the_headline_worst_language_and_figures(run_dir):
    paths = build_report(run_dir)
    md = paths["markdown"].read_text()
    # every headline number has its bootstrap interval next to it
    assert ("Mean measured speedup 1.40x [1.40, 1.40]; worst language, ranked on its choosing prompts, "
            "yor (story) 0.80x [0.80, 0.80] held out") in md
    assert "worst on choosing prompts (story)" in md and "lowest held out (story)" in md and "With the router (`--drafter auto`): mean 1.50x [1.50, 1.50]" in md
    assert "| amh | story | fast | 3 | 0.70 | 2.00x [2.00, 2.00] | 2 |" in md
    assert "Cross-task matrix" in md and "(in-task)" in md and "(held-out)" in md
    assert "babelspec.distill is not available" in md  # skipped settings and why
    assert "Not measured" in md
    # the paper's table: this run's settings (held out, with intervals) beside the paper's roles
    assert "## The paper's table, side by side" in md and "| translation | fast |" in md
    assert "**not measured** — Task-specific distillation raises translation acceptance" in md
    pngs = sorted(p.name for p in paths["figures"].glob("*.png"))
    for stem in ("fig1-paper-table", "fig2-forward-times", "fig3-alpha-story", "fig4-speedup-translation",
                 "fig5-task-tradeoff", "fig6-measured-vs-theoretical", "fig7-latency-per-char"):
        assert f"{stem}.png" in pngs
        assert f"figures/{stem}.png" in md
    html = paths["html"].read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert len(re.findall(r"src=[\"']data:image/png;base64,", html)) == len(pngs)
    assert not re.search(r"src=[\"']figures/", html) and "<link" not in html  # self-contained
    assert "<blockquote>" in html and "<strong>Mean measured speedup 1.40x [1.40, 1.40]" in html  # the callout
    assert "<td>amh</td>" in html and "<td>2.00x [2.00, 2.00]</td>" in html  # tables, from the same Markdown


def test_report_cli_and_its_error_on_a_missing_run(run_dir, tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(run_dir)])
    assert res.exit_code == 0, res.output
    assert "report.html" in res.output
    res = runner.invoke(app, ["report", str(tmp_path / "nothing")])
    assert res.exit_code != 0
    flat = " ".join(res.output.replace("│", " ").split())  # the error box wraps lines
    assert "not a babelspec run directory" in flat


def test_report_shows_what_int8_costs_each_language(tmp_path):
    from test_experiments_aggregate import _int8_store

    _int8_store(tmp_path / "results.sqlite").close()
    md = build_report(tmp_path)["markdown"].read_text()
    assert "## What int8 costs each language" in md
    assert "| amh | translation | 3 | all | 0.90 | 0.70 | 0.20 | 0.60 → 0.50 | 1.33x → 1.60x |" in md


def test_the_paper_figure_draws_no_text_over_other_text():
    """Fig. 1: the rotated drafter names of the upper panels once ran into the titles of the lower."""
    from babelspec.report.figures import paper_table_figure, text_overlaps

    drafters = ["bigram", "bigram-distilled", "trigram", "self:6", "int8:amh", "distilled-story"]
    table = [{"task": task, "drafter": d, "alpha": 0.3 + 0.05 * i, "alpha_low": 0.2, "alpha_high": 0.5,
              "speedup": 1.1 + 0.05 * i, "speedup_low": 0.9, "speedup_high": 1.4}
             for task in ("story", "translation") for i, d in enumerate(drafters)]  # fmt: skip
    paper = {"bigram": {"story": (0.2, 1.1), "translation": (0.3, 1.2)}}
    fig = paper_table_figure(table, paper)
    assert fig is not None
    assert text_overlaps(fig) == []
    ax = fig.axes[0]  # the check sees text drawn over text
    ax.text(0.5, 0.5, "overlapping", transform=ax.transAxes)
    ax.text(0.5, 0.5, "overlapping too", transform=ax.transAxes)
    assert ("overlapping", "overlapping too") in text_overlaps(fig)


def test_no_figure_of_a_report_draws_text_over_text(run_dir):
    """Every figure a report draws (not Fig. 1 alone) is checked as it becomes a PNG: a figure
    with text over text warns, and this report's figures draw none."""
    import warnings

    import matplotlib.pyplot as plt

    from babelspec.report.figures import FigureTextOverlap, _png

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_report(run_dir)
    assert [str(w.message) for w in caught if issubclass(w.category, FigureTextOverlap)] == []
    fig, ax = plt.subplots()
    ax.set_title("crowded")
    ax.text(0.5, 0.5, "overlapping", transform=ax.transAxes)
    ax.text(0.5, 0.5, "overlapping too", transform=ax.transAxes)
    with pytest.warns(FigureTextOverlap, match="figure 'crowded' draws text over text"):
        _png(fig)
