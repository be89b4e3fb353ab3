"""`babelspec run` killed with SIGKILL mid-run resumes with no row lost or duplicated.

Runs the real runner (real n-gram training, real drafters, real store) on a tiny random
Gemma-3 saved as a local model directory.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest
from experiments_fixtures import sigkill_after, tiny_model_dir

from babelspec.experiments.config import load_config
from babelspec.experiments.runner import run_experiment

LANGS, TASKS, PROMPTS, GAMMAS = ["yor", "amh"], ["translation", "story"], 4, [2, 3]
DRAFTERS = ["bigram", "self1"]
TOTAL = len(LANGS) * len(TASKS) * PROMPTS * (1 + len(DRAFTERS) * len(GAMMAS))


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    root = tmp_path_factory.mktemp("tinyrun")
    tiny_model_dir(root / "model")
    cfg = root / "tiny.toml"
    cfg.write_text(textwrap.dedent(f"""
        name = "tiny"
        target = "model"
        languages = {json.dumps(LANGS)}
        tasks = {json.dumps(TASKS)}
        gammas = {GAMMAS}
        prompts_per_cell = {PROMPTS}
        max_new_tokens = 6
        threads = 1

        [divergence]
        texts_per_language = 2
        max_tokens_per_text = 6

        [[drafters]]
        name = "bigram"
        kind = "ngram"
        order = 2

        [[drafters]]
        name = "self1"
        spec = "self:1"
    """))
    return cfg


def _run_cli(*args) -> subprocess.Popen:
    code = "from babelspec.cli import app; app()"
    return subprocess.Popen([sys.executable, "-c", code, "run", *args, "--no-progress",
                             "--no-install-router"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


def test_sigkill_mid_run_then_resume(tiny_config, tmp_path):
    out = tmp_path / "run"
    db_path = out / "results.sqlite"
    proc = _run_cli("--config", str(tiny_config), "-o", str(out))
    killed_at = sigkill_after(proc, db_path, records=6, timeout=600)
    assert 0 < killed_at < TOTAL

    db = sqlite3.connect(db_path)
    before = {tuple(r[:6]): r[6:] for r in db.execute(
        "SELECT language, task, drafter, gamma, prompt_index, seed, finished_at, text, wall_seconds "
        "FROM examples")}  # fmt: skip
    db.close()

    # Resume in this process (the same runner the CLI calls; saves an interpreter start).
    summary = run_experiment(load_config(tiny_config), out, progress=False, log=lambda m: None)
    assert summary.done_before == killed_at
    assert summary.generated == TOTAL - killed_at

    db = sqlite3.connect(db_path)
    rows = db.execute("SELECT language, task, drafter, gamma, prompt_index, seed, finished_at, "
                      "text, wall_seconds, n_tokens, proposed, accepted, alpha, prefill_seconds "
                      "FROM examples").fetchall()  # fmt: skip
    db.close()
    keys = [tuple(r[:6]) for r in rows]
    assert len(rows) == TOTAL and len(set(keys)) == TOTAL  # nothing lost, nothing duplicated
    for r in rows:  # rows written before the kill were not rewritten
        if tuple(r[:6]) in before:
            assert tuple(r[6:9]) == before[tuple(r[:6])]
    expected = {(lang, task, d, g, p, 0) for lang in LANGS for task in TASKS for p in range(PROMPTS)
                for d, g in [("none", 0)] + [(d, g) for d in DRAFTERS for g in GAMMAS]}  # fmt: skip
    assert set(keys) == expected
    for r in rows:
        n_tokens, proposed, accepted, alpha, prefill = r[9:]
        assert 1 <= n_tokens <= 6 and 0 <= accepted <= proposed
        assert 0.0 < prefill < r[8]  # the speedups compare the decode time after it
        assert alpha is None if proposed == 0 else 0.0 <= alpha <= 1.0  # NULL: nothing judged
        if r[2] == "none":
            assert proposed == 0
    # the finished run leaves its tables and router next to the store
    analysis = json.loads((out / "analysis.json").read_text())
    assert analysis["n_records"] == TOTAL
    assert {d["drafter"] for d in analysis["divergence"]} == set(DRAFTERS)
    router = json.loads((out / "router.json").read_text())
    assert {(r["language"], r["task"]) for r in router["routes"]} >= {(la, t) for la in LANGS for t in TASKS}
    assert (out / "artifacts" / "ngram").is_dir()
    # how its speeds were computed: dtype (exact or fast mode), threads, CPU
    from babelspec.experiments.store import Store

    execution = Store(db_path).meta()["execution"]
    assert execution["dtype"] in ("float32", "bfloat16") and execution["threads"] == 1
    assert execution["mode"] in ("exact", "fast") and execution["cpu"]


def test_a_stage_keeps_its_time_so_far_in_the_store_before_it_ends(tmp_path):
    """A run killed mid-stage still states the stage time it had spent (checkpointed)."""
    import time

    from babelspec.experiments.runner import StageTimer
    from babelspec.experiments.store import Store

    path = tmp_path / "r.sqlite"
    timer = StageTimer(Store(path), "grid", every=0.0)
    with timer:
        time.sleep(0.02)
        timer.checkpoint()
        so_far = Store(path).meta()["stage_seconds"]["grid"]  # what a SIGKILL here would leave
        assert so_far >= 0.02
        time.sleep(0.01)
    assert Store(path).meta()["stage_seconds"]["grid"] >= so_far + 0.01
