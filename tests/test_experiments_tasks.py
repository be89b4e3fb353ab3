"""The study builds each task's own drafter: a setting whose spec names ``{task}`` is never
measured on the other task's prompts with a drafter built for the first."""

from __future__ import annotations

import json
import textwrap

from experiments_fixtures import tiny_model_dir

from babelspec.data import corpus
from babelspec.experiments.config import load_config
from babelspec.experiments.runner import run_experiment
from babelspec.experiments.store import STORE_NAME, Store
from babelspec.ngram import CountConfig, train


def test_a_task_spec_builds_the_drafter_of_each_task(tmp_path):
    from transformers import AutoTokenizer

    model = tiny_model_dir(tmp_path / "model")
    tokenizer = AutoTokenizer.from_pretrained(model)
    # yor has a translation table only: its story cells must not run on that table
    train(corpus.monolingual("yor", "train")[:200], tokenizer, CountConfig(order=2)).save(
        tmp_path / "yor-translation.ngram")
    cfg = tmp_path / "tasks.toml"
    cfg.write_text(textwrap.dedent(f"""
        name = "tasks"
        target = "{model}"
        languages = {json.dumps(["yor"])}
        tasks = {json.dumps(["translation", "story"])}
        gammas = [2]
        prompts_per_cell = 2
        max_new_tokens = 4
        threads = 1

        [divergence]
        texts_per_language = 0

        [[drafters]]
        name = "per-task"
        spec = "ngram:{tmp_path}/{{lang}}-{{task}}.ngram"
    """))
    out = tmp_path / "run"
    run_experiment(load_config(cfg), out, progress=False, log=lambda m: None)
    with Store(out / STORE_NAME) as store:
        records = [r for r in store.records() if r.drafter == "per-task"]
    assert {r.task for r in records} == {"translation"}  # the story table does not exist
    assert {r.drafter_spec for r in records} == {f"ngram:{tmp_path}/yor-translation.ngram"}
    # beside every timing, what else the machine ran: its load and the process's CPU seconds
    assert all(r.load_average >= 0 and 0 < r.cpu_seconds for r in records)
