"""A whole distillation run on the bundled data with the default target's real tokenizer (and a
tiny randomly initialised Gemma-3 of the same vocabulary as teacher), its resume, and the CLI's
errors."""

import json
import os
from pathlib import Path

import pytest
from tiny import tiny_gemma3
from typer.testing import CliRunner

from babelspec.cli import app
from babelspec.distill.pipeline import Teacher, load_config, run_distill
from babelspec.drafters import make_drafter
from babelspec.engine import generate
from babelspec.sampling import SamplingConfig
from babelspec.target import Target


@pytest.fixture(scope="module")
def teacher():
    from babelspec.models import load_tokenizer

    tokenizer = load_tokenizer("gemma-3-270m")
    model = tiny_gemma3(vocab=len(tokenizer), seed=1, layers=2)
    return Teacher("tiny-gemma3", model, tokenizer)


def tiny_config(tmp_path, mode):
    return load_config(None, mode=mode, lang="yo", student="self:1,head=corpus",
                       cache_dir=str(tmp_path / "cache"),
                       **{"data.max_examples": 3, "data.max_new_tokens": 4, "data.max_tokens": 12,
                          "data.shard_size": 2, "train.steps": 3, "train.batch_size": 2,
                          "train.grad_accum": 1, "train.lr": 1e-3, "train.checkpoint_every": 2,
                          "eval.prompts": 1, "eval.max_new_tokens": 4})


@pytest.mark.parametrize("mode", ["task", "general"])
def test_a_run_writes_a_loadable_drafter_and_resumes(teacher, tmp_path, mode):
    config = tiny_config(tmp_path, mode)
    config.validate()
    assert config.lang == "yor"  # the alias was resolved
    out = tmp_path / "out"
    first = run_distill(config, out, progress=False, teacher=teacher, stop_after=2)
    assert first["interrupted_at_step"] == 2 and not (out / "distilled.json").exists()
    meta = run_distill(tiny_config(tmp_path, mode), out, progress=False, teacher=teacher)
    assert meta["steps"] == 3 and len(meta["losses"]) == 3 and meta["resumed_from"] == [2]
    saved = json.loads((out / "distilled.json").read_text())
    assert saved["mode"] == mode and saved["lang"] == "yor" and saved["teacher"] == "tiny-gemma3"
    for task in ("translation", "story"):
        for when in ("eval_before", "eval_after"):
            assert 0.0 <= saved[when][task]["expected_acceptance"] <= 1.0
            assert saved[when][task]["positions"] > 0
    assert saved["wall_seconds"]["train_seconds"] > 0
    caches = sorted(p.name.split("-")[0] for p in (tmp_path / "cache").iterdir())
    assert caches == ["eval", "eval", "train"]

    target = Target(teacher.model, teacher.tokenizer)
    drafter = make_drafter(f"distilled:{out}", target)
    greedy = SamplingConfig(greedy=True)
    prompt = teacher.tokenizer("Ẹnì kọ̀ọ̀kan").input_ids
    plain = generate(target, make_drafter("none", target), prompt, max_new_tokens=6, sampling=greedy)
    spec = generate(target, drafter, prompt, gamma=3, max_new_tokens=6, sampling=greedy)
    assert spec.token_ids == plain.token_ids


def test_config_errors_name_the_bad_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nstpes = 3\n")
    with pytest.raises(ValueError, match=r"unknown \[train\] keys \['stpes'\]"):
        load_config(bad)
    bad.write_text("studnet = 'self:2'\n")
    with pytest.raises(ValueError, match="unknown config keys"):
        load_config(bad)
    bad.write_text("[data\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ValueError, match="data.logp_dtype"):
        load_config(None, **{"data.logp_dtype": "int8"})
    for name in ("demo", "paper", "cpu"):  # the shipped configs parse
        cfg = load_config(f"babelspec/profiles/distill/{name}.toml", mode="task", lang="amh")
        cfg.validate()
    paper = load_config("babelspec/profiles/distill/paper.toml")
    assert (paper.train.steps, paper.train.batch_size, paper.train.grad_accum) == (3000, 4, 8)
    assert (paper.train.lr, paper.train.warmup_ratio, paper.data.k) == (5e-5, 0.06, 20)


def flat(output: str) -> str:
    """The CLI's message without the line breaks and box of the terminal rendering."""
    return "".join(ch for ch in output if ch.isalnum() or ch in ":,")


def test_cli_rejects_bad_input_clearly(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["distill", "--mode", "both", "--lang", "yor", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "task,general" in flat(result.output)
    result = runner.invoke(app, ["distill", "--mode", "task", "--lang", "xx", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "xx" in flat(result.output)
    result = runner.invoke(app, ["distill", "--mode", "task", "--lang", "yor", "--student",
                                 "lora:2", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "self:K" in flat(result.output)
    result = runner.invoke(app, ["distill", "--mode", "task", "--lang", "yor", "--config",
                                 str(tmp_path / "none.toml"), "-o", str(tmp_path)])
    assert result.exit_code == 2 and "doesnotexist" in flat(result.output)


CORPORA = Path(os.environ.get("BABELSPEC_CORPORA") or Path(__file__).resolve().parents[1].parent / "shared" / "corpora")
real = pytest.mark.skipif(not CORPORA.is_dir(), reason=f"no real corpora at {CORPORA} (set BABELSPEC_CORPORA)")


@real
@pytest.mark.parametrize("mode", ["task", "general"])
def test_a_run_on_real_train_text(teacher, tmp_path, mode):
    """Task mode translates SIB-200 train sentences (FLORES-200 dev, with dev-split shots);
    general mode reads OLDI Seed text: the soft targets come from the real sets, read in place."""
    from babelspec.data.loaders import load_layout_pairs
    from babelspec.distill import data

    sources = {"data.train_source": "sib200:sib200@train", "data.shots_source": "sib200:sib200@dev"} \
        if mode == "task" else {"data.text_sources": ["oldi-seed:nllb_oldi_seed"]}
    config = tiny_config(tmp_path, mode)
    config = load_config(None, **{**{k: v for k, v in config.to_dict().items() if k not in ("data", "train", "eval")},
                                  **{f"data.{k}": v for k, v in config.data.__dict__.items()},
                                  **{f"train.{k}": v for k, v in config.train.__dict__.items()},
                                  **{f"eval.{k}": v for k, v in config.eval.__dict__.items()},
                                  "data_root": str(CORPORA), "lang": "grn", **sources})
    config.validate()
    meta = run_distill(config, tmp_path / "out", progress=False, teacher=teacher)
    assert meta["steps"] == 3 and meta["train_examples"] >= 1
    [manifest] = (tmp_path / "cache").glob(f"train-{mode}-grn-*/manifest.json")
    assert json.loads(manifest.read_text())["meta"]["sources"] == \
        (["sib200:sib200@train", "sib200:sib200@dev"] if mode == "task" else ["oldi-seed:nllb_oldi_seed"])
    if mode == "task":
        items = data.task_prompts("translation", "grn", teacher.tokenizer, "train", 3,
                                  sources=("sib200:sib200@train", "sib200:sib200@dev"), root=str(CORPORA))
        train_en = {r["en"] for r in load_layout_pairs("sib200", str(CORPORA / "sib200"), "grn", "train")}
        last_lines = [teacher.tokenizer.decode(i.prompt_ids).rsplit("English: ", 1)[1].split("\n")[0] for i in items]
        assert all(line in train_en for line in last_lines)  # the sentences translated are SIB-200 train's


def test_bad_data_sources_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="data.train_source: source 'bogus:x': expected"):
        load_config(None, mode="task", lang="yor", **{"data.train_source": "bogus:x"}).validate()
    with pytest.raises(ValueError, match="no data root was given; pass --data-root"):
        load_config(None, mode="task", lang="yor", **{"data.train_source": "sib200:sib200@train"}).validate()
    with pytest.raises(ValueError, match="does not exist; check --data-root"):
        load_config(None, mode="task", lang="yor", data_root=str(tmp_path),
                    **{"data.train_source": "sib200:sib200@train"}).validate()
    with pytest.raises(ValueError, match="translation prompts need English-aligned text"):
        load_config(None, mode="task", lang="yor", data_root=str(tmp_path),
                    **{"data.train_source": "text:x.txt"}).validate()


@real
def test_without_sources_a_distillation_reads_the_languages_real_sets(monkeypatch, tmp_path):
    """`babelspec distill --mode task|general --lang L` with no source: SIB-200 train sentences
    (dev shots) in task mode, the language's real monolingual sets in general mode, the test
    split's sentences held out; the bundled data where the folder holds nothing for L."""
    from babelspec.data.real import REAL_DATA, corpora_root
    from babelspec.distill.pipeline import with_real_data

    monkeypatch.setenv("BABELSPEC_CORPORA", str(CORPORA))
    assert corpora_root() == CORPORA.resolve()
    task = with_real_data(load_config(None, mode="task", lang="grn"), corpora_root())
    task.validate()
    assert (task.data.train_source, task.data.shots_source, task.data.test_source) == \
        ("sib200:sib200@train", "sib200:sib200@dev", "sib200:sib200@test")
    general = with_real_data(load_config(None, mode="general", lang="grn"), corpora_root())
    general.validate()
    assert general.data.text_sources == list(REAL_DATA["grn"].monolingual)
    assert "oldi-seed:nllb_oldi_seed" in general.data.text_sources
    chr_ = with_real_data(load_config(None, mode="task", lang="chr"), corpora_root())
    assert (chr_.data.train_source, chr_.data_root) == ("", "")  # no real set: the bundled split
    empty = with_real_data(load_config(None, mode="task", lang="grn"), tmp_path)  # no sib200/ there
    assert empty.data.train_source == ""
    with pytest.raises(ValueError, match="not a folder"):
        corpora_root(tmp_path / "missing")


@real
def test_a_multilingual_student_reads_every_languages_text_in_equal_shares(teacher, tmp_path):
    from babelspec.distill.pipeline import _mixed_windows, with_real_data

    config = with_real_data(load_config(None, mode="general", lang="grn", **{"data.mix": ["yo", "amh"],
                                                                            "data.max_examples": 6}), CORPORA)
    config.validate()
    assert config.data.mix == ["yor", "amh"]  # aliases resolved
    own = [[2, 10, 11]] * 5
    windows = _mixed_windows(config, teacher, own)
    assert len(windows) == 6 and windows[0] == own[0] and windows[3] == own[1]  # grn, yor, amh, grn, ...
    amh = teacher.tokenizer.decode(windows[2])
    assert any("\u1200" <= ch <= "\u137f" for ch in amh)  # Ethiopic script: amh's real text
    with pytest.raises(ValueError, match="data.mix .* is for general mode"):
        load_config(None, mode="task", lang="grn", **{"data.mix": ["yor"]}).validate()
