"""`babelspec bench llama-server` and `bench vllm` refuse what they cannot run with a message that
says how to get it, before any model or server starts."""

from __future__ import annotations

import importlib.util

import pytest
from typer.testing import CliRunner

from babelspec.cli import app

runner = CliRunner()


def _flat(output: str) -> str:
    return " ".join(output.replace("│", " ").split())


def test_bench_llama_server_without_a_server(tmp_path):
    res = runner.invoke(app, ["bench", "llama-server", "--server", str(tmp_path / "llama-server")])
    assert res.exit_code == 2
    assert f"no llama-server at {tmp_path / 'llama-server'}; `make test-peers` builds it" in _flat(res.output)


def test_bench_llama_server_names_a_bad_method_or_count(tmp_path):
    server = tmp_path / "llama-server"
    server.write_text("")
    res = runner.invoke(app, ["bench", "llama-server", "--server", str(server), "--methods", "plain,lookahead"])
    assert res.exit_code == 2 and "unknown llama-server method 'lookahead'" in _flat(res.output)
    res = runner.invoke(app, ["bench", "llama-server", "--slots", "1,x"])
    assert res.exit_code == 2 and "--slots takes comma-separated integers" in _flat(res.output)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_bench_vllm_without_vllm_says_how_to_get_it():
    res = runner.invoke(app, ["bench", "vllm", "--configs", "plain"])
    assert res.exit_code == 2 and "vLLM is not installed in this environment" in _flat(res.output)
    assert "make vllm-env" in _flat(res.output)
