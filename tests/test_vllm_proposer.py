"""vLLM itself loads babelspec's n-gram proposer (speculative method ``custom_class``), calls it each
step, and keeps what it drafts, by vLLM's own counters; a request in a language without a table
gets no drafts; the output is vLLM's own greedy output. Runs in the environment ``make
vllm-env`` makes (``make test-vllm``), on the real default model."""

from __future__ import annotations

import pytest

vllm = pytest.importorskip("vllm", reason="vLLM is installed by `make vllm-env` (run `make test-vllm`)")

from babelspec.bench.vllm_peer import _counters, model_folder, speculative_config  # noqa: E402
from babelspec.data.corpus import monolingual  # noqa: E402
from babelspec.data.tasks import get_task  # noqa: E402
from babelspec.integrations.vllm import write_tables  # noqa: E402
from babelspec.models import DEFAULT_TARGET, load_tokenizer  # noqa: E402
from babelspec.ngram import CountConfig, train  # noqa: E402

pytestmark = pytest.mark.vllm
NEW_TOKENS = 32


def _engine(folder: str, name: str, tables: str = "") -> vllm.LLM:
    # float32: vLLM's verification of a block then rounds as its one-token steps do, so its
    # speculative output can be compared with its plain output token for token
    return vllm.LLM(model=folder, dtype="float32", max_model_len=1024, enforce_eager=True, disable_log_stats=False,
                    kv_cache_memory_bytes=1 << 30, speculative_config=speculative_config(name, 4),
                    additional_config={"babelspec": {"tables": tables}} if tables else {})  # fmt: skip


def _greedy(llm: vllm.LLM, prompts: list[str]) -> tuple[list[list[int]], dict[str, float]]:
    before = _counters(llm)
    done = llm.generate(prompts, vllm.SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS), use_tqdm=False)
    after = _counters(llm)
    return [list(o.outputs[0].token_ids) for o in done], {k: after[k] - before[k] for k in after}


def test_vllm_runs_babelspecs_proposer(tmp_path):
    tokenizer = load_tokenizer(DEFAULT_TARGET)
    folder = model_folder(DEFAULT_TARGET)
    tables = tmp_path / "tables"
    write_tables({"yor": train(monolingual("yor", "train"), tokenizer, CountConfig(order=3))}, tables)
    yoruba = [p.text for p in get_task("translation").prompts("yor", tokenizer, 2, chat=False)]
    english = ["Once upon a time, in a small village by the river, there lived an old fisherman who"]

    plain = _engine(folder, "plain")
    expected, _ = _greedy(plain, yoruba)
    del plain
    ours = _engine(folder, "babelspec", str(tables))
    got, counts = _greedy(ours, yoruba)
    assert counts["drafted"] > 0 and counts["accepted"] > 0, counts
    assert got == expected
    _, counts = _greedy(ours, english)  # no English table: nothing drafted
    assert counts["drafted"] == 0, counts


def test_vllm_reports_the_proposers_own_error(tmp_path, capfd):
    # vLLM builds the proposer in its worker process: the engine fails to start, and the worker's
    # log carries babelspec's message, naming the folder and how to write it
    with pytest.raises(Exception, match="initialization failed"):
        _engine(model_folder(DEFAULT_TARGET), "babelspec", str(tmp_path / "missing"))
    logged = capfd.readouterr()
    assert f"{tmp_path / 'missing'} has no manifest.json; write the tables with `babelspec ngram export" in (
        logged.out + logged.err)
