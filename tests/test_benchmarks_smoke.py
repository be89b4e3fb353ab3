"""The scripts in benchmarks/ run, on the tiny model and tiny sizes (their figures come from
the real model; here only that they still work with the public API)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from experiments_fixtures import tiny_model_dir
from serve_helpers import env

pytestmark = pytest.mark.extended

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    return tiny_model_dir(tmp_path_factory.mktemp("bench") / "model")


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True,
                          text=True, timeout=600, env=env(), cwd=ROOT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_ngram_acceptance_runs(model, tmp_path):
    out = tmp_path / "acc.json"
    _run("ngram_acceptance.py", "--target", model, "--langs", "yor", "--tasks", "translation", "--prompts", "1",
         "--max-tokens", "4", "--engine-prompts", "1", "--engine-tokens", "4", "-o", str(out))
    result = json.loads(out.read_text())
    assert result["langs"]["yor"]["tasks"]["translation"]["positions"] > 0


def test_ngram_distill_runs(model, tmp_path):
    out = tmp_path / "distil.json"
    _run("ngram_distill.py", "--target", model, "--langs", "yor", "--tasks", "translation", "--tokens", "64",
         "--train-prompts", "1", "--test-prompts", "1", "--max-new-tokens", "4", "--dtype", "float32", "-o", str(out))
    result = json.loads(out.read_text())
    cell = result["cells"]["yor/translation"]
    assert cell["test_positions"] > 0 and cell["general_positions"] > 0 and cell["task_train_positions"] > 0
    accepted = cell["accepted_per_position"]
    assert set(accepted) == {"corpus", "general", "task", "general+task"}
    assert all(0.0 <= a <= 1.0 for a in accepted.values())  # an expected acceptance per position
    assert result["mean_accepted_per_position"] == accepted  # one cell: the mean is the cell
    base = accepted["corpus"]  # > 0, or the script could not have divided by it
    assert base > 0 and result["relative_to_corpus"]["corpus"] == 1.0
    assert all(result["relative_to_corpus"][k] == round(v / base, 3) for k, v in accepted.items())


def test_render_results_writes_every_results_file_and_the_headline(tmp_path):
    # render into a copy of the docs and README, so the checkout stays as it is
    import shutil

    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "benchmarks", copy / "benchmarks", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "docs").mkdir()
    shutil.copy(ROOT / "README.md", copy / "README.md")
    engines = (ROOT / "docs" / "engines.md").read_text()
    begin, end = "<!-- engines:begin (benchmarks/render_results.py) -->", "<!-- engines:end -->"
    stale = engines[: engines.index(begin) + len(begin)] + "\n" + engines[engines.index(end) :]
    (copy / "docs" / "engines.md").write_text(stale)  # the tables left out: rendering fills them in
    study = (ROOT / "docs" / "study.md").read_text()
    begin2, end2 = "<!-- flores200:begin (benchmarks/render_results.py) -->", "<!-- flores200:end -->"
    (copy / "docs" / "study.md").write_text(study[: study.index(begin2) + len(begin2)] + "\n" + study[study.index(end2) :])
    proc = subprocess.run([sys.executable, str(copy / "benchmarks" / "render_results.py")], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    tables = (copy / "docs" / "benchmark-results.md").read_text()
    assert all(f"## {p.stem}\n" in tables for p in (ROOT / "benchmarks" / "results").glob("*.json"))
    assert (copy / "README.md").read_text() == (ROOT / "README.md").read_text()  # the README is up to date
    assert tables == (ROOT / "docs" / "benchmark-results.md").read_text()  # and so are the tables
    assert (copy / "docs" / "engines.md").read_text() == engines and "| yor |" in engines  # and the engines' tables
    assert (copy / "docs" / "study.md").read_text() == study and "## Across languages" not in study  # the wide run's
    assert "Spearman ρ" in study


def test_a_new_wide_run_is_kept_beside_the_previous_one(tmp_path):
    """``--flores200 RUN`` keeps the results file it replaces as ``previous`` (summarised by the
    current code) and tables both; keeping the same run again keeps the same previous run."""
    import shutil

    from babelspec.experiments.across import summarise

    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "benchmarks", copy / "benchmarks", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "README.md", copy / "README.md")
    kept = copy / "benchmarks" / "results" / "flores200_study.json"
    old = json.loads(kept.read_text())
    old.pop("previous", None)
    paper = ("amh", "ber", "grn", "ibo", "npi", "oci", "que", "yor", "zgh")
    old["across"]["rows"] = [r for i, r in enumerate(old["across"]["rows"]) if i < 20 or r["language"] in paper]
    kept.write_text(json.dumps(old))
    before = summarise(old["across"]["rows"])
    rows = [{**r, "speedup": r["speedup"] + 0.5} for r in old["across"]["rows"]]  # a faster "new" run
    run = tmp_path / "run"
    run.mkdir()
    (run / "analysis.json").write_text(json.dumps({
        "meta": {"config": {"name": "flores200"}, "versions": {"babelspec": "9.9"}, "started_at": 1.5,
                 "stage_seconds": {"prepare bigram amh": 2.0, "grid": 60.0}},
        "n_records": 12, "machines": old["machines"], "wall_seconds_total": 50.0,
        "across": {**summarise(rows), "rows": rows, "task": "translation", "setting": "bigram", "missing": []}}))
    for _ in range(2):
        proc = subprocess.run([sys.executable, str(copy / "benchmarks" / "render_results.py"), "--flores200", str(run),
                               "--prepare-seconds", "90", "--grid-seconds", "75"], capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        new = json.loads(kept.read_text())
        assert new["generations"] == 12 and new["stage_seconds"]["prepare"] == 90.0
        assert new["stage_seconds"]["grid"] == 75.0
        assert new["previous"]["generations"] == old["generations"]  # not the run itself, the second time
        assert new["previous"]["summary"]["below_one"] == before["below_one"]
    assert {r["language"] for r in new["previous"]["paper_rows"]} <= {"amh", "ber", "chr", "grn", "haw", "ibo",
                                                                      "npi", "oci", "que", "yor", "zgh"}  # fmt: skip
    study = (copy / "docs" / "study.md").read_text()
    median = before["speedup_quantiles"]["50"]
    median = f"{median:.2f}× | {median + 0.5:.2f}×"
    assert "| held-out speedup: median | " + median + " |" in study
    assert "| yor | " in study and "prepare 1.5 min" in study
    # every language moved by +0.5x at the same setting: the run-to-run line says how far
    assert len(new["previous"]["rows"]) == len(old["across"]["rows"])
    same = sum(isinstance(r["speedup"], float) for r in old["across"]["rows"])
    assert f"Run to run: {same} languages were measured at the same setting in both runs" in study


def test_w8a8_target_runs(model, tmp_path):
    from babelspec.data.real import corpora_root
    from babelspec.forward.quantize import w8a8_available

    if not w8a8_available():
        pytest.skip("this torch has no oneDNN qlinear_pointwise")
    if corpora_root(None) is None:
        pytest.skip("the real corpora (../shared/corpora or BABELSPEC_CORPORA) are not beside this checkout")
    out = tmp_path / "w8a8.json"
    _run("w8a8_target.py", "--target", model, "--langs", "yor", "--prompts-per-lang", "1", "--max-new-tokens", "4",
         "-o", str(out))
    assert json.loads(out.read_text())["all"]["teacher_forced_agreement"] > 0


def test_rejected_step_runs(model, tmp_path):
    out = tmp_path / "rejected.json"
    _run("rejected_step.py", "--target", model, "--dtype", "float32", "--seeds", "2", "--max-new-tokens", "4",
         "-o", str(out))
    result = json.loads(out.read_text())
    assert result["seeds"] == 2 and result["plain_ms_per_token"] > 0 and result["step_in_plain_steps_median"] > 0
    assert 0 <= result["alpha_token"] <= 1


def test_distil_positions_runs(model, tmp_path):
    from babelspec.data.real import corpora_root

    root = corpora_root(None)
    if root is None:
        pytest.skip("the real corpora (../shared/corpora or BABELSPEC_CORPORA) are not beside this checkout")
    out = tmp_path / "positions.json"
    _run("distil_positions.py", "--target", model, "--langs", "hau_Latn", "--positions", "32,64", "--prompts", "1",
         "--max-new-tokens", "4", "--dtype", "float32", "--data-root", str(root), "-o", str(out))
    row = json.loads(out.read_text())["languages"]["hau_Latn"]
    assert set(row["accepted_per_position"]) == {"corpus bigram", "bigram 32", "bigram 64", "trigram 64"}
    assert row["distilled_positions"]["bigram 64"] == 64 and row["test_positions"] > 0


def test_flores200_cut_summarises_a_store(tmp_path):
    from experiments_fixtures import small_store

    small_store(tmp_path / "results.sqlite").close()
    out = tmp_path / "cut.json"
    _run("flores200_cut.py", str(tmp_path), "-o", str(out))
    result = json.loads(out.read_text())
    # amh: "fast" 2x at gamma 3 on every prompt; yor: every setting slower, the router keeps plain
    rows = result["languages"]  # two tasks: a row per language and task
    assert rows["amh translation"]["held_out"] == 2.0 and rows["yor story"]["router"] == "none"
    assert result["summary"]["all drafters"]["router_plain"] == 2 and "without fast" in result["summary"]


def test_stack_step_times_the_parts_and_finds_the_one_row_layers_equal(tmp_path):
    """On the real default model (a gguf target): every part timed, and a decode step with and
    without the one-row C layers gives equal logits."""
    out = tmp_path / "stack.json"
    _run("stack_step.py", "--repeats", "2", "--context", "40", "--threads", "1", "--row-steps", "-o", str(out))
    result = json.loads(out.read_text())
    assert result["precision"] == "gguf" and set(result["head_rows_ms"]) == {"1", "5", "8"}
    assert result["row_steps"]["logits_equal"] is True
    assert result["layers_pass_ms"] > 0 and result["restricted_head_rows"] > 1000


def test_vocab_coverage_counts_the_sampled_tokens_outside_a_runs_rows(model, tmp_path):
    """A tiny run with a restricted head and plain decoding; the bench counts the tokens plain
    decoding sampled outside the head's rows, fewer (or as few) with the model's likely tokens."""
    import textwrap

    from babelspec.experiments.config import load_config
    from babelspec.experiments.runner import run_experiment

    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text(textwrap.dedent(f"""
        name = "cover"
        target = "{model}"
        languages = ["yor"]
        tasks = ["translation"]
        gammas = [2]
        prompts_per_cell = 2
        max_new_tokens = 8
        [divergence]
        enabled = false
        [[drafters]]
        name = "head"
        kind = "head"
        quantize = "none"
        predict_tokens = 0
    """))
    run_experiment(load_config(cfg_path), tmp_path / "run", progress=False, log=lambda m: None)
    out = tmp_path / "cover.json"
    _run("vocab_coverage.py", str(tmp_path / "run"), "--langs", "yor", "--head", "head", "--tokens", "64",
         "--thresholds", "0.01", "-o", str(out))
    row = json.loads(out.read_text())["languages"][0]
    assert row["sampled_tokens"] > 0 and 0 <= row["predicted"][0]["outside"] <= row["outside"] <= 1
    assert row["predicted"][0]["rows"] >= row["rows"]
