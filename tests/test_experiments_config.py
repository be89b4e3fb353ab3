"""Experiment config files: the profiles load, bad input is a clear error."""

from __future__ import annotations

import pytest

from babelspec.experiments.config import ConfigError, config_from_dict, dump_toml, load_config


def test_profiles_load_and_use_the_paper_settings():
    assert load_config(profile="quick").gammas == [4]  # benchmarks/gamma_grid.toml
    assert load_config(profile="full").gammas == [2, 3, 4]
    assert load_config(profile="quick").prompts_per_cell >= 4  # 2 choose, 2 held out: an interval each
    for profile in ("quick", "full"):
        cfg = load_config(profile=profile)
        assert cfg.baseline
        s = cfg.sampling_config(seed=5)
        assert (s.top_k, s.top_p, s.repetition_penalty, s.repetition_window, s.seed) == (100, 0.9, 1.1, 16, 5)
        assert {d.kind for d in cfg.drafters} >= {"ngram"}
    assert load_config(profile="full").max_new_tokens == 128
    assert len(load_config(profile="full").languages) == 11


def test_aliases_resolve_and_a_config_round_trips(tmp_path):
    cfg = config_from_dict({"languages": ["ne", "amh"], "drafters": [
        {"name": "bigram", "kind": "ngram", "order": 2, "unseen": "stop"}, "self:6@"]})
    assert cfg.languages == ["npi", "amh"]
    assert cfg.drafters[0].options == {"order": 2, "unseen": "stop"}
    assert cfg.drafters[1].name == "self:6@"
    path = tmp_path / "c.toml"
    path.write_text(dump_toml(cfg))
    again = load_config(path)
    assert again.languages == cfg.languages and again.drafters == cfg.drafters
    assert again.router.rule == "interval"
    pooled = config_from_dict({"router": {"rule": "pooled"}})
    path.write_text(dump_toml(pooled))
    assert load_config(path).router.rule == "pooled"


@pytest.mark.parametrize("data, message", [
    ({"langauges": ["amh"]}, "unknown key.*'langauges'"),
    ({"languages": ["xx"]}, "unknown language 'xx'"),
    ({"gammas": [0, 2]}, "gamma must be an integer >= 1"),
    ({"gammas": [2.5]}, "gamma must be an integer >= 1"),
    ({"drafters": ["warp:9"]}, "unknown drafter spec 'warp:9'"),
    ({"drafters": [{"kind": "magic"}]}, "unknown kind 'magic'"),
    ({"drafters": [{"spec": "self:6", "order": 2}]}, "unknown key.*'order'"),
    ({"drafters": ["none"]}, "not a grid setting"),
    ({"tasks": ["poetry"]}, "unknown task 'poetry'"),
    ({"prompts_per_cell": 0}, "prompts_per_cell must be"),
    ({"precision": "int4"}, "precision must be gguf, w8a8, none .the dtype's own. or empty for the default .got 'int4'."),
    ({"head": "int8"}, "head must be full or certified .got 'int8'."),
    ({"sampling": {"top_p": 1.5}}, "top_p"),
    ({"sampling": {"preset": "wild"}}, "preset must be"),
    ({"checks": {"loop_n": 3}}, r"\[checks\].*unknown key"),
    ({"drafters": ["self:6", "self:6"]}, "two drafter settings are named"),
    ({"drafters": [{"kind": "ngram", "distil": "genral"}]}, "distil must be .*got 'genral'"),
    ({"drafters": [{"kind": "ngram", "distil": []}]}, "distil must be"),
    ({"router": {"rule": "bayes"}}, r"\[router\] rule must be one of 'interval', 'pooled' .got 'bayes'."),
    ({"router": {"level": 0.9}}, r"\[router\].*unknown key.*'level'"),
    ({"drafters": [{"kind": "head", "predict_tokens": -1}]}, "predict_tokens must be a whole number of tokens >= 0"),
    ({"drafters": [{"kind": "head", "predict_threshold": 1.5}]}, "predict_threshold must be a probability .*got 1.5"),
])
def test_bad_configs_name_the_problem(data, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict(data)


def test_bad_files_and_profiles(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("languages = [amh")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="unknown profile 'huge'"):
        load_config(profile="huge")
    with pytest.raises(ConfigError, match="either a config file or a profile"):
        load_config(bad, profile="quick")


def test_run_cli_rejects_a_bad_config_before_loading_anything(tmp_path):
    from typer.testing import CliRunner

    from babelspec.cli import app

    bad = tmp_path / "bad.toml"
    bad.write_text('languages = ["amh", "xx"]\n')
    res = CliRunner().invoke(app, ["run", "--config", str(bad), "-o", str(tmp_path / "run")])
    flat = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 2 and "unknown language 'xx'" in flat
    res = CliRunner().invoke(app, ["run", "--profile", "huge", "-o", str(tmp_path / "run")])
    assert res.exit_code == 2 and "unknown profile" in " ".join(res.output.replace("│", " ").split())
    assert not (tmp_path / "run").exists()
