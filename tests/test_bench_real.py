"""The real-sentence benches (`bench tree`, `bench quant`): their per-setting figures follow from
the runs (speedups as medians of per-prompt ratios to plain decoding in the same round, α as the
paper's code defines it), their specs take each prompt's language, and bad options are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from babelspec.bench.quant import setting_name, spec_for
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


def test_quant_settings_are_named_by_gamma_only_where_several_run() -> None:
    assert setting_name("int8", 4, (4,)) == "int8"
    assert [setting_name("int8", g, (3, 4)) for g in (3, 4)] == ["int8 γ=3", "int8 γ=4"]
    # what int8 costs in α pairs each int8 setting with the head at its own γ
    assert setting_name("int8", 3, (3, 4)).replace("int8", "head", 1) == setting_name("head", 3, (3, 4))


def test_tree_bench_chains_are_chains_and_trees_have_their_budget_and_depth() -> None:
    """Without ``tree=0`` a chain setting would be the drafter's default tree under greedy."""
    from babelspec.drafters.ngram_drafter import NgramDraftConfig, parse_spec

    specs = tree_specs(TreeBenchConfig(gamma=4, budgets=(8,), branches=(2, 4)))
    assert list(specs) == ["plain", "chain γ=4", "chain γ=8", "tree 8 branch 2", "tree 8 branch 2 deep",
                           "tree 8 branch 4", "tree 8 branch 4 deep"]

    def config(name: str) -> NgramDraftConfig:
        return NgramDraftConfig.from_options(parse_spec(specs[name][0].format(ngram="ngram:x.ngram")[6:])[1])

    assert config("chain γ=4").tree == config("chain γ=8").tree == 0 and specs["chain γ=8"][1] == 8
    assert (config("tree 8 branch 4").tree, config("tree 8 branch 4").branch, specs["tree 8 branch 4"][1]) == (8, 4, 4)
    assert specs["tree 8 branch 2 deep"][1] == 8 and config("tree 8 branch 2 deep").branch == 2
    assert "tree 8 deep" not in tree_specs(TreeBenchConfig(gamma=4, budgets=(8,), deep=False))
    recycled = tree_specs(TreeBenchConfig(gamma=4, budgets=(8,), deep=False, recycle=8))
    assert list(recycled) == ["plain", "chain γ=4", "chain γ=8", "tree 8", "chain γ=4 + recycling",
                              "chain γ=8 + recycling", "tree 8 + recycling"]
    assert recycled["tree 8 + recycling"] == (recycled["tree 8"][0] + ",recycle=8", 4)


@pytest.mark.parametrize("command,option,value,message", [
    ("quant", "--modes", "beam", "--modes takes greedy and/or sample"),
    ("quant", "--drafters", ",", "--drafters needs at least one drafter spec"),
    ("quant", "--gammas", "3,x", "--gammas takes comma-separated integers"),
    ("quant", "--gammas", "0", "--gammas takes counts of at least 1"),
    ("tree", "--budgets", "8,x", "--budgets takes comma-separated integers"),
    ("tree", "--branches", "2,x", "--branches takes comma-separated integers"),
    ("tree", "--recycle", "-1", "--recycle takes a count of candidates"),
    ("serve", "--clients", "1,0", "--clients takes counts of at least 1"),
    ("peers", "--gammas", "bigram@=0", "--gammas takes SPEC=γ with γ a positive integer"),
    ("peers", "--gammas", "bigram@", "--gammas takes SPEC=γ"),
])  # fmt: skip
def test_bad_bench_options_are_refused_with_the_fix(command, option, value, message) -> None:
    res = CliRunner().invoke(app, ["bench", command, option, value])
    assert res.exit_code == 2 and message in res.output


def test_peers_decode_rates_exclude_the_prefill_and_pair_each_run_with_llama_cpp() -> None:
    """``decode_tokens_per_s``: tokens after the prompt's prefill over the time after it; the
    decode ratio to llama.cpp pairs runs of the same prompt, while whole-run ratios, prefill
    included, stay as they were."""
    from babelspec.bench.peers import LLAMA_CPP, PeersConfig, summarise

    def run(method: str, prompt: int, tokens: int, seconds: float, decode_tokens: int, decode_seconds: float) -> dict:
        return {"mode": "greedy", "rep": 0, "prompt": prompt, "lang": "amh", "method": method, "tokens": tokens,
                "chars": 2 * tokens, "seconds": seconds, "decode_tokens": decode_tokens,
                "decode_seconds": decode_seconds}  # fmt: skip

    records = [run("hf-plain", p, 10, 2.0, 0, 0.0) for p in (0, 1)] + [
        run("hf-prompt-lookup", p, 10, 1.0, 0, 0.0) for p in (0, 1)] + [
        run(LLAMA_CPP, 0, 10, 1.0, 9, 0.5), run(LLAMA_CPP, 1, 10, 1.0, 9, 0.9),
        {**run("babelspec:none", 0, 10, 1.0, 10, 0.5), "alpha": float("nan"), "c": 0.0, "mean_accepted_length": 0.0},
        {**run("babelspec:none", 1, 10, 1.0, 10, 0.5), "alpha": float("nan"), "c": 0.0, "mean_accepted_length": 0.0},
        {**run("babelspec:bigram@", 0, 10, 0.5, 10, 0.1), "alpha": 0.5, "c": 0.0,
         "mean_accepted_length": 1.0},
        {**run("babelspec:bigram@", 1, 10, 0.5, 10, 10 / 40), "alpha": 0.5, "c": 0.0, "mean_accepted_length": 1.0},
    ]  # fmt: skip
    methods = ["hf-plain", "hf-prompt-lookup", LLAMA_CPP, "babelspec:none", "babelspec:bigram@"]
    cfg = PeersConfig(langs=("amh",), modes=("greedy",))
    table = summarise(records, cfg, methods, [], 1.0)["modes"]["greedy"]
    assert table[LLAMA_CPP]["decode_tokens_per_s"] == pytest.approx(14.0)  # median of 18 and 10
    # prompt 0: 10 / 0.1 = 100 tokens/s against llama.cpp's 18 (5.6x); prompt 1: 40 against 10 (4x)
    assert table["babelspec:bigram@"]["decode_ratio_to_llama_cpp"] == pytest.approx((100 / 18 + 4) / 2, abs=1e-4)
    assert table["babelspec:bigram@"]["ratio_to_llama_cpp"] == pytest.approx(2.0)  # whole runs, prefill included
    assert "decode_tokens_per_s" not in table["hf-plain"]
    assert table["_best_babelspec_vs_llama_cpp_decode"]["best"] == "babelspec:bigram@"


def test_drafter_lists_keep_each_ngram_spec_with_its_options() -> None:
    from babelspec.bench.cli import _spec_gammas, _spec_list

    assert _spec_list("none, real-bigram@,tree=15,branch=8 ,int8") == ["none", "real-bigram@,tree=15,branch=8", "int8"]
    assert _spec_list("ngram:x.ngram,tree=8,head,self:6") == ["ngram:x.ngram,tree=8", "head", "self:6"]
    assert _spec_list("head,tree=8") == ["head", "tree=8"]  # only n-gram specs take n-gram options
    assert _spec_gammas("real-bigram@,tree=0,recycle=8=8,int8=4") == {"real-bigram@,tree=0,recycle=8": 8, "int8": 4}

    res = CliRunner().invoke(app, ["bench", "peers", "--drafters", "none,real-bigram@,tree=8",
                                   "--gammas", "real-bigram@,tree=15=15"])
    assert res.exit_code == 2 and "--gammas names real-bigram@,tree=15, not among --drafters" in res.output
