"""llama.cpp's plain decoding as a study's second baseline (``llama_cpp = true``): what a run plans,
what the analysis computes from hand-made records with known rates, what the report says, and
a real run through llama-cpp-python where it is installed."""

from __future__ import annotations

import math

import pytest
from experiments_fixtures import record, small_store

from babelspec.experiments import aggregate as agg
from babelspec.experiments.analysis import analyse
from babelspec.experiments.config import ConfigError, config_from_dict
from babelspec.experiments.worker import _open_llama_cpp, plan
from babelspec.report import build_report
from babelspec.router import LLAMA_CPP


def _with_llama(store, walls: dict[int, float]):
    """llama.cpp records of amh/translation on the held-out (odd) prompts: 20 tokens, the first
    free, so (20 - 1) / wall tokens per second."""
    for prompt, wall in walls.items():
        store.add(record("amh", "translation", LLAMA_CPP, 0, prompt, wall=wall))
    return store


def test_a_run_plans_llama_cpp_on_the_measuring_prompts_only():
    cfg = config_from_dict({"languages": ["amh"], "tasks": ["translation"], "prompts_per_cell": 4,
                            "llama_cpp": True, "drafters": [{"name": "bigram", "kind": "ngram"}]})  # fmt: skip
    items = plan(cfg, {"amh": ["bigram"]})
    assert sorted(it.prompt_index for it in items if it.drafter == LLAMA_CPP) == [1, 3]
    assert all(it.gamma == 0 for it in items if it.drafter == LLAMA_CPP)
    assert sum(it.drafter == "none" for it in items) == 4  # plain decoding still on every prompt


def test_the_config_refuses_llama_cpp_without_plain_decoding_and_the_reserved_name():
    with pytest.raises(ConfigError, match="llama_cpp = true .* set baseline = true"):
        config_from_dict({"languages": ["amh"], "baseline": False, "llama_cpp": True,
                          "drafters": [{"name": "bigram", "kind": "ngram"}]})  # fmt: skip
    with pytest.raises(ConfigError, match="'llama.cpp' is reserved"):
        config_from_dict({"languages": ["amh"], "drafters": [{"name": "llama.cpp", "kind": "ngram"}]})
    with pytest.raises(ConfigError, match="llama_cpp must be true or false"):
        config_from_dict({"languages": ["amh"], "llama_cpp": "yes", "drafters": [{"name": "bigram", "kind": "ngram"}]})


def test_rates_against_llama_cpp_are_paired_per_prompt_and_held_out(tmp_path):
    # amh/translation: plain decodes 20 tokens in 2.0 s (10/s), "fast" at gamma 3 in 1.0 s (20/s);
    # llama.cpp decodes 19 tokens after its first in 1.9 s (10/s) on prompt 1, 0.95 s (20/s) on prompt 3
    store = _with_llama(small_store(tmp_path / "r.sqlite"), {1: 1.9, 3: 0.95})
    result = analyse(store)
    [row] = [r for r in result["languages"] if (r["language"], r["task"]) == ("amh", "translation")]
    assert (row["drafter"], row["gamma"]) == ("fast", 3)
    assert row["vs_llama_cpp"] == pytest.approx(1.5)  # the median of 2.0 and 1.0
    assert row["plain_vs_llama_cpp"] == pytest.approx(0.75)  # of 1.0 and 0.5
    assert row["n_llama_cpp_pairs"] == 2
    assert row["vs_llama_cpp_low"] <= row["vs_llama_cpp"] <= row["vs_llama_cpp_high"]
    # a baseline, not a setting: no cell, no route and no headline number of its own
    assert not [s for s in result["settings"] if s["drafter"] == LLAMA_CPP]
    assert all(r["drafter"] != LLAMA_CPP for r in result["router"]["routes"])
    assert result["llama_cpp"]["measured"] and result["llama_cpp"]["generations"] == 2
    # the other cells have no llama.cpp records: their columns stay empty, not 0
    [story] = [r for r in result["languages"] if (r["language"], r["task"]) == ("amh", "story")]
    assert math.isnan(story["vs_llama_cpp"]) and story["n_llama_cpp_pairs"] == 0


def test_choosing_prompts_never_enter_the_ratio(tmp_path):
    store = _with_llama(small_store(tmp_path / "r.sqlite"), {0: 0.1, 2: 0.1, 1: 1.9, 3: 1.9})
    records = [r for r in store.records() if r.drafter != LLAMA_CPP]
    llama = [r for r in store.records() if r.drafter == LLAMA_CPP]
    rows = agg.language_summary(records)
    agg.fill_vs_llama_cpp(rows, records, llama)
    [row] = [r for r in rows if (r.language, r.task) == ("amh", "translation")]
    assert row.vs_llama_cpp == pytest.approx(2.0) and row.n_llama_cpp_pairs == 2


def test_the_report_compares_with_llama_cpp_or_says_why_not(tmp_path):
    measured, absent = tmp_path / "measured", tmp_path / "absent"
    measured.mkdir(), absent.mkdir()
    _with_llama(small_store(measured / "results.sqlite"), {1: 1.9, 3: 0.95}).close()
    md = build_report(measured)["markdown"].read_text()
    assert "Against llama.cpp's plain decoding of the same GGUF" in md
    assert "| amh | translation | fast γ=3 | 1.50x" in md
    store = small_store(absent / "results.sqlite")
    store.add_skip(LLAMA_CPP, "amh", "llama.cpp cannot run here: llama-cpp-python is not installed")
    store.set_meta("config", {"llama_cpp": True})
    store.close()
    md = build_report(absent)["markdown"].read_text()
    assert ("Not compared with llama.cpp's plain decoding: llama.cpp cannot run here: llama-cpp-python is not "
            "installed.") in md


def test_a_target_without_a_gguf_file_says_why_llama_cpp_cannot_run(tmp_path):
    why = _open_llama_cpp(str(tmp_path), None)
    assert isinstance(why, str) and why.startswith("llama.cpp cannot run here: ")


@pytest.mark.peers
def test_a_real_run_decodes_the_held_out_prompts_with_llama_cpp_beside_plain_decoding(tmp_path):
    pytest.importorskip("llama_cpp", reason="the llamacpp extra (make test-peers installs it)")
    from babelspec.experiments.runner import run_experiment

    cfg = config_from_dict({"target": "gemma-3-270m", "languages": ["npi"], "tasks": ["translation"], "gammas": [3],
                            "prompts_per_cell": 4, "max_new_tokens": 16, "llama_cpp": True, "threads": 2,
                            "sampling": {"preset": "paper"}, "divergence": {"enabled": False},
                            "drafters": [{"name": "bigram", "kind": "ngram", "order": 2}]})  # fmt: skip
    run_experiment(cfg, tmp_path, progress=False, log=lambda m: None)
    from babelspec.experiments.analysis import open_store

    store = open_store(tmp_path)
    llama = store.records(drafter=LLAMA_CPP)
    assert sorted(r.prompt_index for r in llama) == [1, 3]
    assert all(r.n_tokens >= 2 and 0 < r.prefill_seconds < r.wall_seconds for r in llama)
    assert all("llama-cpp-python" in r.versions["llama_cpp"] for r in llama)
    result = analyse(store)
    [row] = result["languages"]
    assert math.isfinite(row["vs_llama_cpp"]) and math.isfinite(row["plain_vs_llama_cpp"])
    assert row["n_llama_cpp_pairs"] == 2
