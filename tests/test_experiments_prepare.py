"""Drafters the runner trains itself (a distilled student), and a setting it must skip.

A real run on a tiny random Gemma-3: the runner distils a task-mode student through
``babelspec.distill``, runs it on both tasks, marks translation in-task and stories held-out
in the cross-task matrix, and skips a drafter it cannot build, with the reason in the report.
"""

from __future__ import annotations

import textwrap

from experiments_fixtures import tiny_model_dir

from babelspec.experiments.analysis import analyse, open_store
from babelspec.experiments.config import load_config
from babelspec.experiments.runner import run_experiment
from babelspec.report import build_report


def test_distilled_setting_is_prepared_and_a_broken_one_skipped(tmp_path, monkeypatch):
    monkeypatch.setenv("BABELSPEC_CACHE", str(tmp_path / "cache"))  # teacher shards stay out of the user's cache
    tiny_model_dir(tmp_path / "model")
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text(textwrap.dedent("""
        name = "prep"
        target = "model"
        languages = ["yor"]
        tasks = ["translation", "story"]
        gammas = [2]
        prompts_per_cell = 2
        max_new_tokens = 4

        [divergence]
        enabled = false

        [[drafters]]
        name = "distill-task"
        kind = "distilled"
        mode = "task"
        student = "self:1,head=corpus"
        train = { steps = 2, batch_size = 1, grad_accum = 1, checkpoint_every = 1 }
        data = { max_examples = 2, max_new_tokens = 4, shard_size = 2 }
        eval = { prompts = 1, max_new_tokens = 4 }

        [[drafters]]
        name = "missing-model"
        spec = "model:does-not-exist"
    """))
    out = tmp_path / "run"
    summary = run_experiment(load_config(cfg_path), out, progress=False, log=lambda m: None)
    spec = summary.specs[("distill-task", "yor")]
    assert spec.startswith("distilled:") and (out / "artifacts" / "distilled").is_dir()
    assert summary.generated == 2 * 2 * 2  # (plain + distilled) x 2 tasks x 2 prompts
    [(drafter, lang, reason)] = summary.skipped
    assert (drafter, lang) == ("missing-model", "yor") and "cannot build" in reason

    store = open_store(out)
    a = analyse(store)
    store.close()
    matrix = a["cross_task"]["distill-task"]
    assert matrix["translation"]["in_task"] == 1.0 and matrix["story"]["in_task"] == 0.0
    [learned] = a["distilled"]  # what the drafter's distilled.json says, for the report
    assert learned["drafter"] == "distill-task" and learned["mode"] == "task" and learned["steps"] == 2
    assert learned["curve"] and learned["curve"][0]["step"] == 0 and "alpha_translation" in learned["curve"][0]
    paths = build_report(out)
    md = paths["markdown"].read_text()
    assert "missing-model" in md and "cannot build" in md
    assert "How the distilled drafters learned" in md and "| distill-task | yor | task |" in md
    assert (paths["figures"] / "fig10-learning-curves.png").is_file()

    # rerunning a finished run trains nothing again and generates nothing
    again = run_experiment(load_config(cfg_path), out, progress=False, log=lambda m: None)
    assert again.generated == 0 and again.done_before == 8


def test_distilled_ngram_setting_is_prepared_once(tmp_path):
    from babelspec.ngram import NgramModel

    tiny_model_dir(tmp_path / "model")
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text(textwrap.dedent("""
        name = "prep-ngram"
        target = "model"
        languages = ["yor"]
        tasks = ["story"]
        gammas = [2]
        prompts_per_cell = 1
        max_new_tokens = 4

        [divergence]
        enabled = false

        [[drafters]]
        name = "bigram-distilled"
        kind = "ngram"
        distil = ["general", "task"]
        trained_on = "story"
        distil_tokens = 64
        distil_prompts = 2
        distil_max_new_tokens = 4
        threshold = 0.1

        [[drafters]]
        name = "bigram-nothing"
        kind = "ngram"
        distil = "general"
        distil_tokens = 0
    """))
    out = tmp_path / "run"
    summary = run_experiment(load_config(cfg_path), out, progress=False, log=lambda m: None)
    spec = summary.specs[("bigram-distilled", "yor")]
    assert spec.startswith("ngram:") and spec.endswith(",threshold=0.1")  # drafting options stay in the spec
    model = NgramModel.load(spec.removeprefix("ngram:").split(",")[0])
    assert model.training["general_positions"] == 64 and model.training["task_positions"] > 0
    assert model.training["sampling"]["top_p"] == 0.9  # the run's (paper) sampling settings
    assert summary.generated == 2  # plain + distilled bigram
    [(drafter, lang, reason)] = summary.skipped  # nothing to score: skipped with the reason
    assert (drafter, lang) == ("bigram-nothing", "yor") and "no text to distil" in reason

    again = run_experiment(load_config(cfg_path), out, progress=False, log=lambda m: None)
    assert again.generated == 0 and again.specs[("bigram-distilled", "yor")] == spec


def test_the_paper_profile_distils_on_the_runs_real_sets(tmp_path):
    """babelspec/profiles/paper.toml: six languages on FLORES-200 test sentences; task KD translates the
    language's SIB-200 train split, general KD reads its real monolingual sets, the held-out
    prompts are its test sentences; the family-model stand-in is one multilingual drafter."""
    import os
    from pathlib import Path

    import pytest

    from babelspec.distill import pipeline
    from babelspec.experiments.prepare import PrepareRequest, _real_sources

    corpora = Path(os.environ.get("BABELSPEC_CORPORA") or Path(__file__).resolve().parents[2] / "shared" / "corpora")
    if not corpora.is_dir():
        pytest.skip(f"no real corpora at {corpora}")
    cfg = load_config(profile="paper", data_root=corpora)
    assert len(cfg.languages) >= 6 and cfg.prompts_per_cell >= 10 and cfg.baseline
    names = {d.name: d for d in cfg.drafters}
    assert set(names) == {"baseline", "distill-task", "distill-general", "bigram", "bigram-distilled", "gguf"}
    for lang in cfg.languages:
        assert cfg.data.for_language(lang).test == "sib200:sib200@test"
    task = pipeline.load_config(names["distill-task"].options["config"], mode="task", lang="amh")
    _real_sources(task, cfg.data, "amh")
    task.validate()
    assert (task.data.train_source, task.data.shots_source, task.data.test_source) == \
        ("sib200:sib200@train", "sib200:sib200@dev", "sib200:sib200@test")
    general = pipeline.load_config(names["distill-general"].options["config"], mode="general", lang="grn")
    _real_sources(general, cfg.data, "grn")
    assert general.data.text_sources == cfg.data.for_language("grn").monolingual
    paths = {PrepareRequest(names["baseline"], lang, cfg.target, None, tmp_path, data=cfg.data).artifact_path("")
             for lang in cfg.languages}
    assert len(paths) == 1 and "-mix-" in paths.pop().name  # trained once for every language
    per_language = {PrepareRequest(names["distill-task"], lang, cfg.target, None, tmp_path, data=cfg.data).artifact_path("")
                    for lang in cfg.languages}
    assert len(per_language) == len(cfg.languages)


def test_a_multilingual_drafter_is_distilled_once_for_every_language(tmp_path, monkeypatch):
    monkeypatch.setenv("BABELSPEC_CACHE", str(tmp_path / "cache"))
    tiny_model_dir(tmp_path / "model")
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text(textwrap.dedent("""
        name = "mix"
        target = "model"
        languages = ["yor", "amh"]
        tasks = ["story"]
        gammas = [2]
        prompts_per_cell = 1
        max_new_tokens = 3

        [divergence]
        enabled = false

        [[drafters]]
        name = "family"
        kind = "distilled"
        mode = "general"
        student = "self:1,head=corpus"
        train = { steps = 2, batch_size = 1, grad_accum = 1, checkpoint_every = 1 }
        data = { mix = ["yor", "amh"], max_examples = 2, max_tokens = 8, shard_size = 2 }
        eval = { prompts = 1, max_new_tokens = 3 }
    """))
    lines: list[str] = []
    summary = run_experiment(load_config(cfg_path), tmp_path / "run", progress=False, log=lines.append)
    assert summary.specs[("family", "yor")] == summary.specs[("family", "amh")]
    assert sum("distilling family" in line for line in lines) == 1
    assert "-mix-" in summary.specs[("family", "yor")]


def test_a_restricted_head_setting_counts_its_rows_on_the_language_text(tmp_path):
    """kind = "head" writes the rows a restricted-head drafter keeps (the language's tokens and
    the English source tokens) as a vocabulary file, and the grid runs the int8 drafter on it.
    For a bundled language the rows are those ``head:LANG`` computes from the same text."""
    import numpy as np

    from babelspec.drafters.vocab import language_token_ids
    from babelspec.models import load_tokenizer
    from babelspec.target import load_target

    tiny_model_dir(tmp_path / "model")
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text(textwrap.dedent("""
        name = "head"
        target = "model"
        languages = ["yor"]
        tasks = ["translation"]
        gammas = [2]
        prompts_per_cell = 2
        max_new_tokens = 4

        [divergence]
        enabled = false

        [[drafters]]
        name = "int8"
        kind = "head"

        [[drafters]]
        name = "int8-1"
        kind = "head"
        layers = 1
    """))
    out = tmp_path / "run"
    summary = run_experiment(load_config(cfg_path), out, progress=False, log=lambda m: None)
    spec, spec1 = summary.specs[("int8", "yor")], summary.specs[("int8-1", "yor")]
    assert spec.startswith("int8:") and spec.endswith(".npy") and spec1.startswith("int8:1@")
    rows = np.load(spec.removeprefix("int8:"))
    tokenizer = load_tokenizer(str(tmp_path / "model"))
    model = load_target(str(tmp_path / "model")).model
    assert np.array_equal(rows, language_token_ids("yor", tokenizer, model=model))
    # with the tokens the model finds likely on the text beside the text's own
    assert len(rows) > len(language_token_ids("yor", tokenizer))
    assert summary.generated == 2 * 3 and not summary.skipped


def test_a_head_setting_for_a_language_beyond_the_bundled_ones_reads_its_real_text(tmp_path):
    import numpy as np
    import pytest

    from babelspec.data.real import corpora_root
    from babelspec.data.sources import real_training_texts
    from babelspec.drafters.vocab import corpus_token_ids
    from babelspec.experiments.config import DrafterSetting
    from babelspec.experiments.prepare import PrepareRequest, prepare
    from babelspec.models import load_tokenizer

    root = corpora_root(None)
    if root is None:
        pytest.skip("no corpora folder: set BABELSPEC_CORPORA (make test does)")
    cfg = load_config_text(f'languages = ["hau_Latn"]\n[data]\ndefault = "real"\nroot = "{root}"\n')
    tokenizer = load_tokenizer("gemma-3-270m")
    target = type("T", (), {"tokenizer": tokenizer})()  # the text's rows alone: no model to predict more
    setting = DrafterSetting(name="int8", kind="head", options={"predict_tokens": 0})
    req = PrepareRequest(setting, "hau_Latn", "gemma-3-270m", target,
                         tmp_path, log=lambda m: None, data=cfg.data)  # fmt: skip
    spec = prepare(req)
    rows = np.load(spec.removeprefix("int8:"))
    hausa = corpus_token_ids(real_training_texts("hau_Latn", root), tokenizer)
    assert np.isin(hausa, rows).all() and len(rows) > len(hausa)  # its tokens, and English sources'


def load_config_text(text: str):
    import tomllib

    from babelspec.experiments.config import config_from_dict

    return config_from_dict(tomllib.loads(text))
