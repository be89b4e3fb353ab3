"""`babelspec bench forward`: its JSON names what each figure was measured with, and bad
options are refused with the fix (figures themselves are a benchmark's, not a test's)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from babelspec.cli import app

pytestmark = pytest.mark.extended

runner = CliRunner()


def test_forward_bench_puts_lean_and_hf_side_by_side():
    res = runner.invoke(app, ["bench", "forward", "--dtypes", "bfloat16", "--repeats", "1", "--max-block", "2"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    lean, hf = out["dtypes"]["bfloat16"], out["dtypes"]["bfloat16/hf"]
    assert lean["forward"] == "lean" and hf["forward"] == "hf"
    assert lean["dtype"] == hf["dtype"] == "bfloat16" and lean["mode"] == "exact" and hf["mode"] == "fast"
    assert set(lean["verify_ms"]) == {"2"} and lean["decode_ms"] > 0 and hf["plain_generate_step_ms"] > 0
    assert set(out["forward_speedup_decode"]) == {"bfloat16: lean vs hf"}
    # the decode floor: the default model's bf16 weights (tied output head counted once)
    assert 500 < lean["weights_mb"] < 560 and lean["weights_read_ms"] > 0 and lean["decode_over_floor"] > 0


def test_forward_bench_refuses_unknown_forwards_and_dtypes():
    res = runner.invoke(app, ["bench", "forward", "--forwards", "lean,fast"])
    assert res.exit_code == 2 and "--forwards takes lean, hf (each once); got 'lean,fast'" in res.output
    res = runner.invoke(app, ["bench", "forward", "--dtypes", "int4"])
    assert res.exit_code == 2 and "--dtypes takes" in res.output
