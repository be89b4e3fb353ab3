"""The embedded default (gemma-3-270m): converted once into the cache, reloaded from it."""

from __future__ import annotations

import json

import pytest

from babelspec.models import DEFAULT_TARGET, converted_dir, load_model, loader
from babelspec.models.cache import COMPLETE_MARKER


@pytest.fixture(scope="module")
def default_model():
    return load_model(DEFAULT_TARGET)


def test_second_load_reuses_the_cached_conversion(default_model) -> None:
    directory = converted_dir(DEFAULT_TARGET)
    marker = directory / COMPLETE_MARKER
    stamp = (marker.stat().st_mtime_ns, (directory / "model.safetensors").stat().st_mtime_ns)
    conversions = loader.conversion_count
    model, tokenizer = load_model(DEFAULT_TARGET)
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
