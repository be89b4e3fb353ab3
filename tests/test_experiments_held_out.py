"""[held_out] prompts: the choosing prompts run every setting, the held-out ones only plain
decoding and what the choosing prompts chose; the real runner stores exactly that, also after a
SIGKILL and a resume, and its analysis measures the chosen settings on every held-out prompt."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest
from experiments_fixtures import record, sigkill_after, tiny_model_dir

from babelspec.experiments.config import ConfigError, ExperimentConfig, HeldOutSection, RouterSection, load_config
from babelspec.experiments.held_out import chosen_settings, estimated_items, plan_stages
from babelspec.experiments.runner import run_experiment
from babelspec.experiments.store import Store

SPECS = {(d, lang): f"{d}:x" for d in ("steady", "wild", "slow") for lang in ("amh", "yor")}


def _config(n: int = 3, **kw) -> ExperimentConfig:
    return ExperimentConfig(languages=["amh", "yor"], tasks=["translation"], gammas=[4], prompts_per_cell=6,
                            held_out=HeldOutSection(prompts=n), **kw)  # fmt: skip


def _choosing(lang: str, speedups: dict[str, list[float]]) -> list:
    """Plain decoding and each setting on the choosing prompts 0, 2, 4, prompt i at speedups[d][i]."""
    out = []
    for j, p in enumerate((0, 2, 4)):
        out.append(record(lang, "translation", "none", 0, p, wall=2.0))
        out += [record(lang, "translation", d, 4, p, wall=2.0 / q[j]) for d, q in speedups.items()]
    return out


# amh: "wild" has the best choosing median but an interval across 1.0, "steady" clears 1.0 (the
# router's choice under the interval rule); yor: nothing pays, its best median is "slow"'s 0.9x.
RECORDS = (_choosing("amh", {"steady": [1.5, 1.52, 1.49], "wild": [0.8, 2.6, 2.5], "slow": [0.5, 0.5, 0.5]})
           + _choosing("yor", {"steady": [0.7, 0.72, 0.71], "wild": [0.6, 0.5, 0.55], "slow": [0.9, 0.91, 0.89]}))


def test_the_held_out_prompts_run_the_best_choosing_setting_and_the_routers_choice():
    chosen = chosen_settings(_config(), RECORDS, SPECS)
    assert chosen[("amh", "translation")] == [("wild", 4), ("steady", 4)]
    assert chosen[("yor", "translation")] == [("slow", 4)]  # the router keeps plain decoding, never listed


def test_stage_two_waits_for_every_choosing_prompt_and_then_runs_only_the_chosen_settings():
    cfg = _config()
    available = {"amh": ["steady", "wild", "slow"], "yor": ["steady", "wild", "slow"]}
    keys = lambda items: {(it.language, it.prompt_index, it.drafter) for it in items}  # noqa: E731
    stage1 = {(lang, p, d) for lang in ("amh", "yor") for p in (0, 2, 4) for d in ("none", "steady", "wild", "slow")}
    assert keys(plan_stages(cfg, available, [], SPECS)) == stage1
    missing_one = [r for r in RECORDS if not (r.language == "yor" and r.prompt_index == 4 and r.drafter == "wild")]
    assert keys(plan_stages(cfg, available, missing_one, SPECS)) == stage1  # one choosing example still to run
    # ... unless it cannot run (the runner's `missing`): then stage 2 goes ahead without it
    skip = {("yor", "translation", "wild", 4, 4, 0)}
    assert keys(plan_stages(cfg, available, missing_one, SPECS, skip)) - stage1
    stage2 = {("amh", p, d) for p in (1, 3, 5) for d in ("none", "wild", "steady")}
    stage2 |= {("yor", p, d) for p in (1, 3, 5) for d in ("none", "slow")}
    assert keys(plan_stages(cfg, available, RECORDS, SPECS)) == stage1 | stage2
    # the dry run's count stands one setting in for each cell's choice
    assert len(estimated_items(cfg, available)) == len(stage1) + 2 * 3 * 2


def test_the_pooled_rule_chooses_as_the_run_would():
    cfg = _config(router=RouterSection(rule="pooled"))
    # the pooled rule needs 8 languages to pool; with 2 each language stands alone, and amh's
    # "steady" (its own prompts all at 1.5x) is taken, as under the interval rule
    assert ("steady", 4) in chosen_settings(cfg, RECORDS, SPECS)[("amh", "translation")]


@pytest.mark.parametrize(("text", "message"), [
    ("[held_out]\nprompts = -1\n", "[held_out] prompts must be an integer >= 0"),
    ("[held_out]\nprompts = 4\n[sequential]\nmax_prompts_per_cell = 12\n", "cannot be combined"),
    ("baseline = false\n[[drafters]]\nname = \"b\"\nkind = \"ngram\"\n[held_out]\nprompts = 4\n",
     "set baseline = true"),
    ("prompts_per_cell = 1\n[held_out]\nprompts = 4\n", "prompts_per_cell must be >= 2"),
    ("[held_out]\nprompt = 4\n", "unknown key(s) 'prompt'"),
])  # fmt: skip
def test_bad_held_out_tables_name_the_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text('languages = ["amh"]\n' + text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path)


def test_the_held_out_section_survives_the_run_directorys_config(tmp_path):
    from babelspec.experiments.config import dump_toml

    path = tmp_path / "c.toml"
    path.write_text(dump_toml(_config(5)))
    assert load_config(path).held_out.prompts == 5 and load_config(path).max_prompts == 10


def test_a_run_stores_the_choosing_then_the_chosen_held_out_prompts_also_after_sigkill(tmp_path):
    tiny_model_dir(tmp_path / "model")
    cfg_file = tmp_path / "held.toml"
    cfg_file.write_text(textwrap.dedent(f"""
        name = "held"
        target = "{tmp_path / 'model'}"
        languages = ["yor", "amh"]
        tasks = ["translation"]
        gammas = [2]
        prompts_per_cell = 4
        max_new_tokens = 6
        threads = 1

        [divergence]
        enabled = false

        [held_out]
        prompts = 3

        [[drafters]]
        name = "bigram"
        kind = "ngram"
        order = 2

        [[drafters]]
        name = "trigram"
        kind = "ngram"
        order = 3
    """))
    out = tmp_path / "run"
    code = "from babelspec.cli import app; app()"
    proc = subprocess.Popen([sys.executable, "-c", code, "run", "--config", str(cfg_file), "-o", str(out),
                             "--no-progress", "--no-install-router"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    killed_at = sigkill_after(proc, out / "results.sqlite", records=7, timeout=600)
    assert 0 < killed_at < 2 * 2 * 3  # inside stage 1: 2 languages x 2 choosing prompts x 3 settings
    cfg = load_config(cfg_file)
    run_experiment(cfg, out, progress=False, log=lambda m: None)
    with Store(out / "results.sqlite") as store:
        records = store.records()
        specs = {tuple(k.split("|", 1)): v for k, v in store.meta()["specs"].items()}
    chosen = chosen_settings(cfg, records, specs)
    keys = {(r.language, r.prompt_index, r.drafter) for r in records}
    want = {(lang, p, d) for lang in ("yor", "amh") for p in (0, 2) for d in ("none", "bigram", "trigram")}
    want |= {(lang, p, d) for (lang, _), settings in chosen.items() for p in (1, 3, 5)
             for d in ["none", *(s for s, _ in settings)]}  # fmt: skip
    assert keys == want and len(records) == len(want)  # nothing twice, nothing else
    assert all(1 <= len(s) <= 2 for s in chosen.values())
    analysis = json.loads((out / "analysis.json").read_text())
    rows = {row["language"]: row for row in analysis["languages"]}
    assert {lang: rows[lang]["n_pairs"] for lang in ("yor", "amh")} == {"yor": 3, "amh": 3}  # every held-out prompt
    assert {lang: rows[lang]["drafter"] for lang in rows} == {lang: s[0][0] for (lang, _), s in chosen.items()}
