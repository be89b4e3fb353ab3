"""Every command ends a user's bad input the same way: exit status 2, one line on stderr that
names what was wrong, no traceback (``babelspec.cli.ErrorExitGroup``). And the forward the
command line chose (``--forward``, ``--native`` or their variables, read once at the edge)
reaches the target it loads."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from babelspec.cli import app
from babelspec.forward.kernels import onednn_packs_bf16
from babelspec.forward.native import glue

# (arguments, what the message names); each runs from an empty folder with no corpora folder
BAD_INPUTS = [
    (["generate", "--prompt", "hi", "--lang", "xx"], "unknown language 'xx'"),
    (["generate", "--prompt", "hi", "--target", "nosuch-model"], "unknown model 'nosuch-model'"),
    (["generate", "--prompt", "hi", "--gamma", "0"], "--gamma must be >= 1"),
    (["run", "-o", "r", "--profile", "nosuch"], "unknown profile 'nosuch'"),
    (["run", "-o", "r", "--config", "missing.toml"], "config file 'missing.toml' not found"),
    (["run", "-o", "README.md", "--profile", "quick"], "File exists: 'README.md'"),  # a file where the run's folder goes
    (["report", "nothing"], "nothing is not a babelspec run directory"),
    (["ngram", "train", "--corpus", "nosuch", "-o", "x.ngram"], "'nosuch' is neither a file or folder nor a language"),
    (["ngram", "train", "--corpus", "hau", "-o", "x.ngram"], "not Hausa (hau_Latn)"),
    (["ngram", "stats", "nope.ngram"], "n-gram file 'nope.ngram' does not exist"),
    (["ngram", "export", "amh=nope.ngram", "-o", "x"], "no n-gram file 'nope.ngram'"),
    (["data", "show", "xx"], "unknown language 'xx'"),
    (["data", "list", "--data-root", "nope"], "nope is not a folder"),
    (["distill", "--mode", "task", "--lang", "xx", "-o", "d"], "unknown language 'xx'"),
    (["serve", "--drafter", "ngram:nope.ngram"], "n-gram file 'nope.ngram' does not exist"),
    (["bench", "tree", "--langs", "amh", "--data-root", "nope"], "data root 'nope' is not a folder"),
    (["bench", "peers", "--langs", "xx"], "unknown language 'xx'"),
    (["--forward", "quick", "generate", "--prompt", "hi"], "'quick' is not a forward; use lean or hf"),
    # generate's own values, each refused before a model loads
    (["generate", "--prompt", "hi", "--max-new-tokens", "-3"], "--max-new-tokens must be >= 0"),
    (["generate", "--prompt", "hi", "--top-p", "2"], "top_p must be in (0, 1]"),
    (["generate", "--prompt", "hi", "--drafter", "bogus:3"], "unknown drafter spec 'bogus:3'"),
    (["generate", "--prompt", "hi", "--dtype", "half"], "unknown dtype 'half'; choose one of auto, bfloat16, float32"),
    (["generate", "--prompt", "hi", "--precision", "int4"], "unknown target precision 'int4'; use one of w8a8"),
    (["generate", "--prompt", "hi", "--precision", "w8a8", "--dtype", "float32"],
     "W8A8 quantizes a bfloat16 target; this one is torch.float32"),
    (["generate", "--prompt", "hi", "--head", "fast"], "unknown output head 'fast'; use one of full, certified"),
    (["generate", "--prompt", "hi", "--head", "certified", "--dtype", "float32"],
     "load the target with dtype='bfloat16' or use head='full'"),
]


@pytest.mark.parametrize("args,names", BAD_INPUTS, ids=lambda a: " ".join(a) if isinstance(a, list) else "")
def test_a_bad_input_ends_in_one_line_and_exit_2(args, names, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BABELSPEC_CORPORA", raising=False)
    (tmp_path / "README.md").write_text("a user's file\n")
    res = CliRunner().invoke(app, args)
    # transformers' progress bar while a model loads is not babelspec's message
    lines = [line for line in re.split(r"[\r\n]", res.stderr) if line.strip() and "Loading weights" not in line]
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    assert len(lines) == 1 and lines[0].startswith("error: ") and names in lines[0], res.stderr
    assert "Traceback" not in res.output


def _plan(env: dict[str, str], *root: str) -> dict:
    res = CliRunner().invoke(app, [*root, "generate", "--prompt", "Hello", "--max-new-tokens", "1", "--dtype",
                                   "bfloat16", "--json"], env=env)  # fmt: skip
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1])["execution"]["plan"]


def test_the_command_line_chooses_the_forward_it_loads():
    if glue() is None or not onednn_packs_bf16():
        pytest.skip("no C compiler, or no bf16 packing (an AVX2-only CPU): the exact path and its glue are off "
                    "whatever is chosen")
    assert _plan({"BABELSPEC_NATIVE": None, "BABELSPEC_FORWARD": None})["glue"] is True
    assert _plan({"BABELSPEC_NATIVE": "0"})["glue"] is False
    assert _plan({"BABELSPEC_NATIVE": None, "BABELSPEC_FORWARD": None}, "--forward", "hf")["forward"] == "hf"


def test_the_servers_a_bench_starts_get_the_root_commands_forward_choice():
    """``babelspec --no-native bench serve`` (or ``BABELSPEC_NATIVE=0``) starts its servers with
    the same choice: it reaches them as arguments, not only through the environment."""
    import importlib

    import typer

    from babelspec.bench.cli import root_args

    core = importlib.import_module(typer.BadParameter.__module__.rpartition(".")[0] + ".core")
    command = typer.main.get_command(app)
    with core.Context(command, obj={"forward": "hf", "native": False}):
        assert root_args() == ["--forward", "hf", "--no-native"]
    with core.Context(command, obj={}):
        assert root_args() == []
    assert root_args() == []  # outside a command


def test_a_user_error_is_one_line_and_any_other_value_error_keeps_its_traceback():
    """``UserError`` is a user's input (exit 2, one line); a bare ``ValueError`` from inside is a
    fault, and a one-line message would hide where it came from."""
    import typer

    from babelspec.cli import ErrorExitGroup
    from babelspec.errors import UserError

    tiny = typer.Typer(cls=ErrorExitGroup, pretty_exceptions_enable=False)

    @tiny.command()
    def fail(kind: str) -> None:
        raise (UserError if kind == "user" else ValueError)(f"{kind} said no")

    @tiny.command()
    def other() -> None:  # two commands: the group stays a group
        pass

    user = CliRunner().invoke(tiny, ["fail", "user"])
    assert user.exit_code == 2 and user.stderr.strip() == "error: user said no"
    bug = CliRunner().invoke(tiny, ["fail", "bug"])
    assert bug.exit_code == 1 and type(bug.exception) is ValueError and "error:" not in bug.stderr
