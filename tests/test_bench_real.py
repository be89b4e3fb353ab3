"""The real-sentence benches (`bench tree`, `bench quant`): their per-setting figures follow from
the runs (speedups as medians of per-prompt ratios to plain decoding in the same round, α as the
paper's code defines it), their specs take each prompt's language, and bad options are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from babelspec.bench.quant import spec_for
from babelspec.bench.tree import TreeBenchConfig, setting_table, tree_specs
from babelspec.cli import app


def _run(lang: str, prompt: int, setting: str, tokens: int, seconds: float, steps: int = 0, accepted: int = 0,
         proposed: int = 0, rejections: int = 0, c: float = float("nan")) -> dict:  # fmt: skip
    return {"lang": lang, "prompt": prompt, "mode": "greedy", "setting": setting, "tokens": tokens,
            "decode_seconds": seconds, "steps": steps, "accepted": accepted, "proposed": proposed,
            "rejections": rejections, "c": c}  # fmt: skip


def test_setting_table_pairs_each_run_with_plain_decoding_of_its_prompt() -> None:
    records = [_run("amh", 0, "plain", 10, 1.0), _run("amh", 1, "plain", 10, 2.0),
               _run("npi", 0, "plain", 10, 1.0),
               # amh: 2x and 4x its own plain runs; npi: 0.5x
               _run("amh", 0, "int8", 10, 0.5, steps=4, accepted=6, proposed=16, rejections=3, c=0.3),
               _run("amh", 1, "int8", 10, 0.5, steps=4, accepted=6, proposed=16, rejections=3, c=0.5),
               _run("npi", 0, "int8", 10, 2.0, steps=8, accepted=2, proposed=32, rejections=7, c=0.4)]  # fmt: skip
    table = setting_table(records, ("amh", "npi"), "greedy", ["plain", "int8"])
    row = table["int8"]
    assert row["speedup"] == pytest.approx(2.0)  # the median of 2, 4 and 0.5
    assert row["per_lang"]["amh"]["speedup"] == pytest.approx(3.0) and row["per_lang"]["npi"]["speedup"] == 0.5
    assert row["worst_lang_speedup"] == 0.5
    assert row["per_lang"]["amh"]["alpha"] == pytest.approx(12 / 18)  # accepted / (accepted + rejections)
    assert row["tokens_per_verification"] == pytest.approx((14 + 16) / 16)
    assert row["c"] == pytest.approx(0.4) and "alpha" not in table["plain"]


def test_quant_specs_take_the_prompts_language() -> None:
    bigram = Path("amh.ngram")
    assert spec_for("int8", "amh", bigram) == "int8:amh" and spec_for("head", "amh", bigram) == "head:amh"
    assert spec_for("int8:12@", "amh", bigram) == "int8:12@amh" and spec_for("bigram", "amh", bigram) == "ngram:amh.ngram"
    assert spec_for("self:6", "amh", bigram) == "self:6"


def test_tree_bench_chains_are_chains_and_trees_have_their_budget_and_depth() -> None:
    """Without ``tree=0`` a chain setting would be the drafter's default tree under greedy."""
    from babelspec.drafters.ngram import NgramDraftConfig, parse_spec

    specs = tree_specs(TreeBenchConfig(gamma=4, budgets=(8,), branches=(2, 4)))
    assert list(specs) == ["plain", "chain γ=4", "chain γ=8", "tree 8 branch 2", "tree 8 branch 2 deep",
                           "tree 8 branch 4", "tree 8 branch 4 deep"]

    def config(name: str) -> NgramDraftConfig:
        return NgramDraftConfig.from_options(parse_spec(specs[name][0].format(ngram="ngram:x.ngram")[6:])[1])

    assert config("chain γ=4").tree == config("chain γ=8").tree == 0 and specs["chain γ=8"][1] == 8
    assert (config("tree 8 branch 4").tree, config("tree 8 branch 4").branch, specs["tree 8 branch 4"][1]) == (8, 4, 4)
    assert specs["tree 8 branch 2 deep"][1] == 8 and config("tree 8 branch 2 deep").branch == 2
    assert "tree 8 deep" not in tree_specs(TreeBenchConfig(gamma=4, budgets=(8,), deep=False))


@pytest.mark.parametrize("command,option,value,message", [
    ("quant", "--modes", "beam", "--modes takes greedy and/or sample"),
    ("quant", "--drafters", ",", "--drafters needs at least one drafter spec"),
    ("tree", "--budgets", "8,x", "--budgets takes comma-separated integers"),
    ("tree", "--branches", "2,x", "--branches takes comma-separated integers"),
    ("serve", "--clients", "1,0", "--clients takes counts of at least 1"),
])  # fmt: skip
def test_bad_bench_options_are_refused_with_the_fix(command, option, value, message) -> None:
    res = CliRunner().invoke(app, ["bench", command, option, value])
    assert res.exit_code == 2 and message in res.output
