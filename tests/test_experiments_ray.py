"""The study on a Ray cluster: the same store as the local run, and nothing lost to faults.

The module starts its own two-CPU Ray cluster on 127.0.0.1 (two single-thread workers) and
stops it at the end; the runs use a tiny random Gemma-3 saved as a local model directory.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict

import pytest

# Ray's switch for single-machine clusters: its servers bind to 127.0.0.1 only (set before Ray
# is imported; the drivers this module starts inherit it).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip("ray", reason="Ray is an extra: pip install 'babelspec[ray]'")

from experiments_fixtures import sigkill_after, stored_count, tiny_model_dir  # noqa: E402

from babelspec.experiments.cluster import RayExecutor  # noqa: E402
from babelspec.experiments.config import config_from_dict  # noqa: E402
from babelspec.experiments.executors import ExecutorError  # noqa: E402
from babelspec.experiments.runner import STORE_NAME, dry_run, run_experiment  # noqa: E402
from babelspec.experiments.store import Store  # noqa: E402

LANGS = ["yor", "amh"]
SETTINGS = [("none", 0), ("bigram", 2), ("self1", 2)]
# Everything about a generation that does not depend on where or when it ran.
TIMING = {"draft_seconds", "target_seconds", "wall_seconds", "prefill_seconds", "draft_start_seconds",
          "draft_forward_seconds", "target_forward_seconds", "c", "started_at", "finished_at", "cpu_seconds", "load_average",
          "machine", "versions"}  # fmt: skip


def quiet(msg: str) -> None: ...


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster owned by this module; yields its address (HOST:PORT)."""
    temp = tempfile.mkdtemp(prefix="bsray", dir="/tmp")  # short: Ray's socket paths have a limit
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=temp, log_to_driver=False,
             logging_level="ERROR")  # fmt: skip
    try:
        address = ray.get_runtime_context().gcs_address
        assert address.startswith("127.0.0.1:"), address
        yield address
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("raymodel") / "model")


def tiny_cfg(model: str, *, preset: str = "greedy", prompts: int = 2, tokens: int = 6, **extra):
    return config_from_dict({
        "name": "tiny-ray", "target": model, "languages": LANGS, "tasks": ["translation"],
        "gammas": [2], "prompts_per_cell": prompts, "max_new_tokens": tokens, "threads": 1,
        "dtype": "float32",  # the exact mode, whatever this CPU would pick under auto
        "sampling": {"preset": preset}, "divergence": {"enabled": False},
        "drafters": [{"name": "bigram", "kind": "ngram", "order": 2},
                     {"name": "self1", "spec": "self:1"}],
        **extra,
    })  # fmt: skip


def expected_keys(prompts: int) -> set[tuple]:
    return {(lang, "translation", d, g, p, 0) for lang in LANGS for p in range(prompts) for d, g in SETTINGS}


def stored(out) -> list[dict]:
    """The run's records, with the run folder in prepared drafters' paths written as RUN."""
    with Store(out / STORE_NAME) as store:
        rows = [asdict(r) for r in store.records()]
    for r in rows:
        r["drafter_spec"] = r["drafter_spec"].replace(str(out), "RUN")
    return rows


def _train_sizes() -> dict[str, int]:
    from babelspec.data import corpus

    return {lang: len(corpus.monolingual(lang, "train")) for lang in LANGS}


def workers_all_gone(timeout: float = 60.0) -> bool:
    """True once the cluster's two CPUs are free again (no worker left behind by a run)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if ray.available_resources().get("CPU", 0) == 2:
            return True
        time.sleep(0.2)
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.cluster
def test_ray_store_equals_local_store(cluster, model, tmp_path):
    """Token-identical records under seeded sampling (same dtype, 1 thread): every draw of the
    paper's sampling must come out the same on a worker as here (greedy, a run of argmaxes, is
    the easier case of the same path)."""
    cfg = tiny_cfg(model, preset="paper")
    local = run_experiment(cfg, tmp_path / "local", progress=False, log=quiet)
    ex, logs = RayExecutor(cluster, workers=2), []
    remote = run_experiment(cfg, tmp_path / "ray", progress=False, log=logs.append, executor=ex)
    assert (local.executor, remote.executor) == ("local", "ray")
    # the n-gram tables were counted by the workers, one language each at a time
    assert {m.split("] ", 1)[1] for m in logs if m.startswith("[")} >= {
        f"counting bigram for {lang} on {n} texts" for lang, n in _train_sizes().items()}
    assert local.generated == remote.generated == len(expected_keys(2))
    a, b = stored(tmp_path / "local"), stored(tmp_path / "ray")
    assert [{k: v for k, v in r.items() if k not in TIMING} for r in a] == \
        [{k: v for k, v in r.items() if k not in TIMING} for r in b]  # fmt: skip
    assert {(r["language"], r["task"], r["drafter"], r["gamma"], r["prompt_index"], r["seed"]) for r in b} \
        == expected_keys(2)  # fmt: skip
    for r in b:  # every record says what it ran on
        assert r["machine"]["host"] and r["machine"]["device"] and r["machine"]["threads"] == 1
        assert r["machine"]["dtype"] == a[0]["machine"]["dtype"] == "float32"
    # a unit (one prompt, all its settings) runs on one worker: its times are comparable
    assert set(ex.hosts) == {socket.gethostname()}
    # the dry run on the cluster counts its workers and what the store holds, less one unit
    with Store(tmp_path / "ray" / STORE_NAME) as store:
        store.db.execute("DELETE FROM examples WHERE language = 'yor' AND prompt_index = 0")
        store.db.commit()
    plan = dry_run(cfg, tmp_path / "ray", log=quiet, executor=RayExecutor(cluster, workers=1))
    assert (plan.units, plan.generations, plan.done_before, plan.workers) == (1, 3, len(expected_keys(2)) - 3, 1)
    assert 0 < plan.seconds_per_token < 10 and plan.hours > 0


@pytest.mark.cluster
def test_worker_killed_mid_run_loses_and_duplicates_nothing(cluster, model, tmp_path):
    cfg = tiny_cfg(model, prompts=4, tokens=8)
    out = tmp_path / "run"
    ex = RayExecutor(cluster, workers=2)
    box: dict = {}

    def drive() -> None:
        try:
            box["summary"] = run_experiment(cfg, out, progress=False, log=quiet, executor=ex)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            box["error"] = exc

    thread = threading.Thread(target=drive)
    thread.start()
    deadline = time.time() + 300
    while stored_count(out / STORE_NAME) < 1 and thread.is_alive() and time.time() < deadline:
        time.sleep(0.005)
    assert thread.is_alive(), f"the run ended before a worker could be killed: {box}"
    ray.kill(ex.slots[0].actor)  # both workers are busy while units are left
    thread.join(300)
    assert "error" not in box, box.get("error")
    summary = box["summary"]
    assert summary.worker_deaths == 1
    rows = stored(out)
    keys = [(r["language"], r["task"], r["drafter"], r["gamma"], r["prompt_index"], r["seed"]) for r in rows]
    assert len(keys) == len(set(keys)) and set(keys) == expected_keys(4)
    assert summary.generated == len(keys)
    assert workers_all_gone()  # the replacement worker too


@pytest.mark.cluster
def test_driver_sigkill_then_restart_completes_without_duplicates(cluster, model, tmp_path):
    cfg_file = tmp_path / "tiny.toml"
    cfg_file.write_text(
        f'target = "{model}"\nlanguages = ["yor", "amh"]\ntasks = ["translation"]\ngammas = [2]\n'
        'prompts_per_cell = 4\nmax_new_tokens = 8\nthreads = 1\n[sampling]\npreset = "greedy"\n'
        '[divergence]\nenabled = false\n[[drafters]]\nname = "bigram"\nkind = "ngram"\norder = 2\n'
        '[[drafters]]\nname = "self1"\nspec = "self:1"\n'
    )  # fmt: skip
    out = tmp_path / "run"
    db_path = out / STORE_NAME
    proc = subprocess.Popen(
        [sys.executable, "-c", "from babelspec.cli import app; app()", "run", "--config", str(cfg_file),
         "-o", str(out), "--ray", cluster, "--ray-workers", "2", "--no-progress", "--no-install-router"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    killed_at = sigkill_after(proc, db_path, records=1, timeout=300)
    total = len(expected_keys(4))
    assert 0 < killed_at < total
    before = {(r["language"], r["drafter"], r["gamma"], r["prompt_index"]): r["finished_at"] for r in stored(out)}

    from babelspec.experiments.config import load_config

    summary = run_experiment(load_config(cfg_file), out, progress=False, log=quiet,
                             executor=RayExecutor(cluster, workers=2))  # fmt: skip
    assert summary.done_before == killed_at and summary.generated == total - killed_at
    rows = stored(out)
    keys = [(r["language"], r["task"], r["drafter"], r["gamma"], r["prompt_index"], r["seed"]) for r in rows]
    assert len(keys) == len(set(keys)) == total and set(keys) == expected_keys(4)
    for r in rows:  # rows stored before the kill were neither sent again nor rewritten
        k = (r["language"], r["drafter"], r["gamma"], r["prompt_index"])
        if k in before:
            assert r["finished_at"] == before[k]


def test_no_cluster_at_address_is_a_clear_error_and_writes_nothing(model, tmp_path):
    address = f"127.0.0.1:{free_port()}"
    started = time.time()
    with pytest.raises(ExecutorError, match=r"no Ray cluster at 127\.0\.0\.1:\d+.*ray start --head"):
        run_experiment(tiny_cfg(model, ray=address), tmp_path / "run", progress=False, log=quiet)
    assert time.time() - started < 30  # not Ray's minutes of retrying
    assert not (tmp_path / "run").exists()


def test_ray_not_installed_names_the_extra(model, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` does where it is absent
    with pytest.raises(ExecutorError, match=r"pip install 'babelspec\[ray\]'"):
        run_experiment(tiny_cfg(model, ray="auto"), tmp_path / "run", progress=False, log=quiet)
    assert not (tmp_path / "run").exists()


@pytest.mark.cluster
def test_worker_lacking_the_model_is_a_clear_error_and_writes_nothing(cluster, tmp_path):
    cfg = tiny_cfg(str(tmp_path / "nowhere" / "model"))
    with pytest.raises(ExecutorError, match=r"Ray worker on .*cannot load the target.*install the model on every machine"):
        run_experiment(cfg, tmp_path / "run", progress=False, log=quiet, executor=RayExecutor(cluster, workers=1))
    assert not (tmp_path / "run").exists()
    assert workers_all_gone()  # the failed worker was given back


def test_cli_dry_run_prints_the_plan_and_writes_nothing(model, tmp_path):
    from typer.testing import CliRunner

    from babelspec.cli import app

    cfg_file = tmp_path / "tiny.toml"
    cfg_file.write_text(f'target = "{model}"\nlanguages = ["yor", "amh"]\ntasks = ["translation"]\n'
                        'gammas = [2, 3]\nprompts_per_cell = 3\nmax_new_tokens = 6\nthreads = 1\n'
                        '[[drafters]]\nname = "self1"\nspec = "self:1"\n')  # fmt: skip
    result = CliRunner().invoke(app, ["run", "-c", str(cfg_file), "-o", str(tmp_path / "run"), "--dry-run"])
    assert result.exit_code == 0, result.output
    # 2 languages x 3 prompts = 6 units of 1 plain + 1 drafter x 2 gammas
    assert "6 units, 18 generations to run (0 already stored) on 1 worker(s)" in result.output
    assert "tokens/s per worker" in result.output and " h " in result.output
    assert not (tmp_path / "run").exists()
