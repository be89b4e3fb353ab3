"""The embedded default (gemma-3-270m): converted once into the cache, reloaded from it."""

from __future__ import annotations

import json

import pytest

from babelspec.models import DEFAULT_TARGET, converted_dir, load_model, loader
from babelspec.models.userdir import COMPLETE_MARKER


@pytest.fixture(scope="module")
def default_model():
    return load_model(DEFAULT_TARGET, dtype="float32")


def test_second_load_reuses_the_cached_conversion(default_model) -> None:
    directory = converted_dir(DEFAULT_TARGET)
    marker = directory / COMPLETE_MARKER
    stamp = (marker.stat().st_mtime_ns, (directory / "model.safetensors").stat().st_mtime_ns)
    conversions = loader.conversion_count
    model, tokenizer = load_model(DEFAULT_TARGET, dtype="float32")
    assert loader.conversion_count == conversions  # no reconversion in this process
    assert (marker.stat().st_mtime_ns, (directory / "model.safetensors").stat().st_mtime_ns) == stamp
    meta = json.loads(marker.read_text())
    assert meta["gguf_sha256"].startswith("a5fd3b62")
    assert model.config.num_hidden_layers == 18 and model.config.vocab_size == 262_144


def test_default_model_is_fp32_cpu_with_tied_head(default_model) -> None:
    import torch

    model, _ = default_model
    assert model.dtype == torch.float32 and not model.training
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_gemma_tokenizer_from_gguf_adds_one_bos(default_model) -> None:
    _, tok = default_model
    assert tok.bos_token_id == 2 and tok.eos_token_id == 1
    assert tok("Hello world").input_ids == [2, 9259, 1902]
    assert tok("Hello world", add_special_tokens=False).input_ids == [9259, 1902]
    for text in ["ሰላም ለዓለም", "नमस्ते संसार", "Ẹ kú àárọ̀"]:
        ids = tok(text, add_special_tokens=False).input_ids
        assert tok.decode(ids) == text


def test_bf16_is_a_second_cached_conversion_loaded_as_bf16() -> None:
    import torch

    fp32_dir, bf16_dir = converted_dir(DEFAULT_TARGET), converted_dir(DEFAULT_TARGET, torch.bfloat16)
    assert bf16_dir != fp32_dir
    meta = json.loads((bf16_dir / COMPLETE_MARKER).read_text())
    assert meta["dtype"] == "bfloat16" and meta["gguf_sha256"].startswith("a5fd3b62")
    model, _ = load_model(DEFAULT_TARGET, dtype="bfloat16")
    assert model.dtype == torch.bfloat16
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    # half the bytes of the fp32 conversion on disk
    size = lambda d: sum(p.stat().st_size for p in d.glob("*.safetensors"))  # noqa: E731
    assert size(bf16_dir) < 0.6 * size(fp32_dir)
