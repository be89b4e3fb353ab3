"""`babelspec generate` end to end on the real default model, in a real process."""

import json
import subprocess
import sys

import pytest

BABELSPEC = [sys.executable, "-m", "babelspec"]
PROMPT = "English: Everyone has the right to life.\nNepali:"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*BABELSPEC, *args], capture_output=True, text=True, timeout=600)


def test_generate_json_matches_hugging_face_greedy():
    import torch

    from babelspec.models import load_model

    proc = run("generate", "--target", "gemma-3-270m", "--dtype", "float32", "--greedy",
               "--max-new-tokens", "12", "--prompt", PROMPT, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key in ("text", "token_ids", "alpha", "proposed", "accepted", "wall_seconds", "draft_seconds",
                "target_seconds"):
        assert key in out
    assert out["execution"]["dtype"] == "float32" and out["execution"]["mode"] == "exact"
    assert out["execution"]["threads"] >= 1 and out["execution"]["cpu"]
    model, tokenizer = load_model("gemma-3-270m", dtype="float32")
    ids = tokenizer(PROMPT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        reference = model.generate(ids, max_new_tokens=12, do_sample=False)[0, ids.shape[1]:].tolist()
    assert out["token_ids"] == reference[: len(out["token_ids"])]
    assert out["text"] == tokenizer.decode(out["token_ids"], skip_special_tokens=True)


def test_generate_with_auto_drafts_the_routers_gamma(tmp_path):
    router = tmp_path / "router.json"
    router.write_text(json.dumps({"version": 1, "target": "gemma-3-270m", "min_speedup": 0.0, "routes": [
        {"language": "amh", "task": "*", "drafter": "self1", "spec": "self:1", "gamma": 6, "c": 0.1,
         "alpha": 0.5, "theoretical_f": 1.2, "predicted_speedup": 1.3, "source": "measured"}]}))
    common = ["generate", "--drafter", f"auto:{router}", "--lang", "amh", "--greedy", "--max-new-tokens", "8",
              "--prompt", PROMPT, "--json"]
    out = json.loads(run(*common).stdout)
    assert out["gamma"] == 6 and max(out["proposed_per_step"]) == 6  # not capped by a default of 4


def test_bad_input_in_a_real_process_is_one_line_and_exit_2():
    """The command as a user's shell runs it (each bad value: ``test_cli_errors.py``, in-process)."""
    proc = run("generate", "--prompt", "Hello", "--drafter", "bogus:3")
    assert proc.returncode == 2
    assert "unknown drafter spec 'bogus:3'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.extended  # the certified head, an optional mode (make test-extended)
def test_generate_with_the_certified_head_gives_the_full_heads_tokens_and_says_so():
    from typer.testing import CliRunner

    from babelspec.cli import app

    outs = []
    for head in ("full", "certified"):  # in this process: the command, without a second interpreter's start
        res = CliRunner().invoke(app, ["generate", "--head", head, "--dtype", "bfloat16", "--max-new-tokens", "12",
                                       "--prompt", PROMPT, "--json"])  # fmt: skip
        assert res.exit_code == 0, res.output
        outs.append(json.loads(res.stdout.strip().splitlines()[-1]))
    assert outs[0]["token_ids"] == outs[1]["token_ids"] and len(outs[1]["token_ids"]) == 12
    assert outs[1]["execution"]["plan"]["head"] == "certified" and "head" not in outs[0]["execution"]["plan"]
