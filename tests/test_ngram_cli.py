"""`babelspec ngram train|stats` and `babelspec bench ngram` on small real inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from ngram_tiny import CORPUS, WORDS, ids, word_tokenizer
from typer.testing import CliRunner

from babelspec.cli import app
from babelspec.errors import UserError
from babelspec.ngram import NgramModel

runner = CliRunner()


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok")
    word_tokenizer().save_pretrained(path)
    return path


def test_train_and_stats(tmp_path, tokenizer_dir):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n\n", encoding="utf-8")
    out = tmp_path / "m.ngram"
    res = runner.invoke(app, ["ngram", "train", "--corpus", str(corpus), "--tokenizer", str(tokenizer_dir),
                              "--order", "3", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "15 tokens from 4 texts" in res.output and "contexts" in res.output
    model = NgramModel.load(out)
    assert model.order == 3 and {WORDS[t]: p for t, p in model.probabilities(ids("a")).items()} == {"b": 1.0}
    assert model.training["corpus"] == "corpus.txt" and model.tokenizer["vocab_size"] == len(WORDS)

    res = runner.invoke(app, ["ngram", "stats", str(out)])
    assert res.exit_code == 0 and "order-3" in res.output and "corpus.txt" in res.output
    res = runner.invoke(app, ["ngram", "stats", str(out), "--json"])
    stats = json.loads(res.output)
    assert stats["file_bytes"] == out.stat().st_size and [t["entries"] for t in stats["tables"]] == [6, 6, 5]


def test_bad_cli_input_is_a_clear_error(tmp_path, tokenizer_dir):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b c\n", encoding="utf-8")
    res = runner.invoke(app, ["ngram", "train", "--corpus", str(corpus), "--tokenizer", str(tokenizer_dir),
                              "--order", "0", "-o", str(tmp_path / "x")])
    assert res.exit_code != 0 and "order must be >= 1" in res.output
    res = runner.invoke(app, ["ngram", "train", "--corpus", "no-such-language-or-file", "--tokenizer",
                              str(tokenizer_dir), "-o", str(tmp_path / "x")])
    assert res.exit_code != 0 and "no-such-language-or-file" in res.output
    (tmp_path / "broken.ngram").write_bytes(b"BSNGRAM\x00" + b"\x01\x00\x00\x00" + b"\xff\x00\x00\x00{")
    res = runner.invoke(app, ["ngram", "stats", str(tmp_path / "broken.ngram")])
    assert res.exit_code != 0 and "truncated" in res.output


def test_bench_prints_json_with_the_goal_fields():
    res = runner.invoke(app, ["bench", "ngram", "--tokens", "200000", "--vocab", "5000", "--proposals", "500"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    for key in ("train_tokens_per_s", "propose_us_per_token", "file_bytes", "peak_rss_bytes", "goals"):
        assert key in out
    assert out["file_bytes"] <= 2 * out["raw_triples_bytes"] and out["train_tokens"] == 200000


def test_distil_writes_a_drafter_of_the_targets_distributions(tmp_path):
    from experiments_fixtures import tiny_model_dir

    model_dir = tiny_model_dir(tmp_path / "model")
    out = tmp_path / "d.ngram"
    res = runner.invoke(app, ["ngram", "distil", "--corpus", "yor", "--target", model_dir, "--tokens", "40",
                              "--task", "story", "--prompts", "1", "--max-new-tokens", "3", "-o", str(out)])
    assert res.exit_code == 0, res.output
    model = NgramModel.load(out)
    assert model.training["general_positions"] == 40 and model.training["task_positions"] >= 1
    stats = runner.invoke(app, ["ngram", "stats", str(out)])
    assert stats.exit_code == 0 and "distilled  40 corpus" in stats.output

    bad = runner.invoke(app, ["ngram", "distil", "--corpus", "yor", "--target", model_dir, "--task", "poetry",
                              "-o", str(tmp_path / "x.ngram")])
    assert bad.exit_code == 2 and "--task takes translation or story" in bad.output
    assert not (tmp_path / "x.ngram").exists()


def test_export_as_a_llama_cpp_static_lookup_cache_round_trips(tmp_path, tokenizer_dir):
    """Every 2-token context of an order-3 model, with its continuations and counts in the
    target's token ids, read back from llama.cpp's record layout (4 int32 key slots padded
    with -1, n, then n (token, count) pairs)."""
    import itertools

    import numpy as np

    from babelspec.ngram.llamacpp import read_llamacpp

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    model_path, out = tmp_path / "m3.ngram", tmp_path / "m3.lookup"
    res = runner.invoke(app, ["ngram", "train", "--corpus", str(corpus), "--tokenizer", str(tokenizer_dir),
                              "--order", "3", "-o", str(model_path)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["ngram", "export", str(model_path), "--format", "llama.cpp", "-o", str(out)])
    assert res.exit_code == 0, res.output
    model, cache = NgramModel.load(model_path), read_llamacpp(out)
    expected = {}
    for context in itertools.product(range(len(WORDS)), repeat=2):
        found = model.continuations(list(context))
        if found is not None:
            expected[context] = dict(zip(found[0].tolist(), found[1].tolist()))
    assert cache == expected and len(cache) == model.tables[2].n_contexts == 4
    raw = np.fromfile(out, dtype="<i4")
    assert raw[2] == raw[3] == -1 and raw[4] == len(cache[tuple(raw[:2].tolist())])  # the record layout

    bigram = tmp_path / "m2.ngram"
    runner.invoke(app, ["ngram", "train", "--corpus", str(corpus), "--tokenizer", str(tokenizer_dir),
                        "--order", "2", "-o", str(bigram)])
    res = runner.invoke(app, ["ngram", "export", str(bigram), "-o", str(tmp_path / "x.lookup")])
    flat = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code != 0 and "keyed by 2-token contexts" in flat and "order 3" in flat


def test_export_for_each_engine_per_language(tmp_path, tokenizer_dir):
    """One table per language, written for each engine: llama.cpp caches per language (a bigram
    left out, with the reason), the vLLM proposer's tables folder (read back equal), the
    transformers helper's files; each with the line that starts its engine."""
    from babelspec.integrations.vllm import read_tables
    from babelspec.ngram.llamacpp import read_llamacpp

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    files = {}
    for name, order in (("tri", "3"), ("bi", "2")):
        files[name] = tmp_path / f"{name}.ngram"
        res = runner.invoke(app, ["ngram", "train", "--corpus", str(corpus), "--tokenizer", str(tokenizer_dir),
                                  "--order", order, "-o", str(files[name])])
        assert res.exit_code == 0, res.output
    args = [f"yor={files['tri']}", f"amh={files['bi']}"]

    res = runner.invoke(app, ["ngram", "export", *args, "--format", "llama.cpp", "-o", str(tmp_path / "llama")])
    assert res.exit_code == 0, res.output
    assert read_llamacpp(tmp_path / "llama" / "yor.lookup") and not (tmp_path / "llama" / "amh.lookup").exists()
    assert "amh: not exported" in res.output and "order-2 model" in res.output
    assert f"--lookup-cache-static {tmp_path / 'llama' / 'yor.lookup'}" in res.output

    res = runner.invoke(app, ["ngram", "export", *args, "--format", "vllm", "-o", str(tmp_path / "vllm")])
    assert res.exit_code == 0, res.output
    tables = read_tables(tmp_path / "vllm")
    assert sorted(tables) == ["amh", "yor"] and tables["yor"].order == 3
    assert tables["yor"].probabilities(ids("a")) == NgramModel.load(files["tri"]).probabilities(ids("a"))
    assert "babelspec.integrations.vllm.NgramProposer" in res.output and str(tmp_path / "vllm") in res.output

    res = runner.invoke(app, ["ngram", "export", *args, "--format", "transformers", "-o", str(tmp_path / "hf")])
    assert res.exit_code == 0 and f'drafter="ngram:{tmp_path / "hf" / "yor.ngram"}"' in res.output

    res = runner.invoke(app, ["ngram", "export", *args, "--format", "gguf", "-o", str(tmp_path / "x")])
    assert res.exit_code == 2 and "choose one of llama.cpp, vllm, transformers" in " ".join(res.output.replace("│", " ").split())


def test_vllm_tables_exported_under_any_code_of_a_language_draft_under_the_canonical_one(tmp_path, tokenizer_dir):
    """``amh_Ethi=`` and ``ne=`` are amh and npi, as the detector names them: the tables are keyed
    by those, and babelspec's vLLM proposer drafts for a request in them (``lang`` given as an
    alias too). A code no language has is refused with the fix."""
    from types import SimpleNamespace

    from babelspec.integrations.vllm import NgramProposer, read_tables

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    table = tmp_path / "tri.ngram"
    res = runner.invoke(app, ["ngram", "train", "--corpus", str(corpus), "--tokenizer", str(tokenizer_dir),
                              "--order", "3", "-o", str(table)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["ngram", "export", f"amh_Ethi={table}", f"ne={table}", "--format", "vllm",
                              "-o", str(tmp_path / "vllm")])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert sorted(read_tables(tmp_path / "vllm")) == ["amh", "npi"]
    for lang in ("npi_Deva", "amh"):
        config = SimpleNamespace(additional_config={"babelspec": {"tables": str(tmp_path / "vllm"), "lang": lang,
                                                                   "threshold": "0"}},
                                 speculative_config=SimpleNamespace(num_speculative_tokens=3),
                                 model_config=SimpleNamespace(max_model_len=64, tokenizer=str(tokenizer_dir)))  # fmt: skip
        drafted = NgramProposer(config).draft(np.array(ids("a b"), dtype=np.int64), 3)
        assert drafted and drafted[0] == ids("c")[0]  # "a b" is followed by "c" twice, by "d" once
    res = runner.invoke(app, ["ngram", "export", f"xx_Zzzz={table}", "--format", "vllm", "-o", str(tmp_path / "v2")])
    assert res.exit_code == 2 and "name the table's language as LANG=FILE" in " ".join(res.output.replace("│", " ").split())
    # a manifest edited by hand to give one language two tables is refused as the export refuses it
    manifest = tmp_path / "vllm" / "manifest.json"
    data = json.loads(manifest.read_text())
    (tmp_path / "vllm" / "other.ngram").write_bytes(table.read_bytes())
    data["languages"]["am"] = "other.ngram"
    manifest.write_text(json.dumps(data))
    with pytest.raises(UserError, match="two tables for amh"):
        read_tables(tmp_path / "vllm")
