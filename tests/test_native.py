"""The C glue between the lean forward's products (``babelspec.forward.native``): the torch operations'
values up to rare last-bit differences, every row as alone, a cached build, a clear error for a
source that does not compile, and the torch operations where it is turned off."""

from __future__ import annotations

import math
import os

import pytest
import torch
from tiny import UNPACKED, tiny_gemma3

from babelspec.forward import ForwardOptions, lean_forward, native
from babelspec.forward.gemma3 import _rms, _rotate_half

glue = native.glue()
needs_glue = pytest.mark.skipif(glue is None, reason="no C compiler here")


def _rows(shape, seed=0, scale=4.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale * torch.logspace(-1, 1, shape[-2])[:, None]).bfloat16()


def _close(ours: torch.Tensor, reference: torch.Tensor) -> None:
    """Equal but for at most 1 in 500 values, each at most one bf16 step (of the larger) apart."""
    differ = ours != reference
    assert differ.float().mean().item() < 2e-3
    if differ.any():
        a, b = ours[differ].float(), reference[differ].float()
        step = torch.exp2(torch.floor(torch.log2(torch.maximum(a.abs(), b.abs()))) - 7)
        assert ((a - b).abs() <= step).all()


@needs_glue
def test_norm_and_residual_match_the_torch_operations():
    x, h = _rows((1, 16, 640), 0), _rows((1, 16, 640), 1, scale=40.0)
    norm = (1.0 + torch.randn(640) * 0.3, 1e-6)
    after = (1.0 + torch.randn(640) * 0.3, 1e-6)
    _close(glue.rms(x, *norm), _rms(x, *norm))
    summed, normed = glue.add_rms(x, h, norm, after)
    _close(summed, x + _rms(h, *norm))
    _close(normed, _rms(summed, *after))  # the second norm reads the first's rounded output


@needs_glue
def test_queries_and_keys_normed_and_rotated_match_the_torch_operations():
    heads, dim, rows = 5, 256, 9
    qkv = _rows((1, rows, (heads + 1) * dim), 2)
    scale = (1.0 + torch.randn(1, heads, 1, dim) * 0.3).contiguous()
    angles = torch.arange(rows)[:, None] * torch.logspace(0, -4, dim // 2)[None, :]
    cos, sin = (torch.cat([f(angles)] * 2, -1)[None].bfloat16() for f in (torch.cos, torch.sin))
    ours = glue.qk_rope(qkv, heads, dim, scale, 1e-6, cos, sin)
    t = _rms(qkv[..., : heads * dim].reshape(1, rows, heads, dim).transpose(1, 2), scale, 1e-6)
    _close(ours, t * cos[:, None] + _rotate_half(t) * sin[:, None])


@needs_glue
def test_every_row_gets_its_bits_alone():
    x, h = _rows((1, 7, 640), 3), _rows((1, 7, 640), 4)
    norm = (1.0 + torch.randn(640) * 0.3, 1e-6)
    block = glue.add_rms(x, h, norm, norm)
    for i in range(7):
        alone = glue.add_rms(x[:, i : i + 1], h[:, i : i + 1], norm, norm)
        assert all(torch.equal(a[0, 0], b[0, i]) for a, b in zip(alone, block))


def test_the_build_is_kept_and_a_broken_source_is_named(tmp_path):
    if native.shutil.which("cc") is None and native.shutil.which("gcc") is None:
        pytest.skip("no C compiler here")
    first = native.build(out_dir=tmp_path)
    stamp = first.stat().st_mtime_ns
    assert native.build(out_dir=tmp_path) == first and first.stat().st_mtime_ns == stamp
    broken = tmp_path / "broken.c"
    broken.write_text("void f(void) { this is not C; }\n")
    with pytest.raises(RuntimeError, match="failed on broken.c"):
        native.build(broken, out_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, "broken.c"])  # no partial file


def test_turned_off_the_forward_keeps_the_torch_operations(monkeypatch):
    model = tiny_gemma3(seed=0).to(torch.bfloat16)
    model.set_attn_implementation("eager")
    assert lean_forward(model, options=ForwardOptions(native=False)).glue is None
    monkeypatch.setenv("BABELSPEC_NATIVE", "0")  # read at the command line's edge only, never here
    on = lean_forward(model)
    if not on.layers[0].qkv.fused:
        pytest.skip(UNPACKED)
    assert (on.glue is not None) == (glue is not None)
    assert math.isfinite(on(torch.tensor([[1, 2, 3]]), on.new_cache()).float().sum().item())
    assert lean_forward(model, options=ForwardOptions(fuse=False)).glue is None  # fuse=False: Hugging Face's operations
    assert lean_forward(model.float()).glue is None  # float32 (the exact mode) never


@needs_glue
def test_an_int8_drafter_adopts_a_bf16_cache_in_float32():
    from babelspec.drafters.vocabhead import RestrictedHeadLM

    model = tiny_gemma3(seed=0).to(torch.bfloat16)
    model.set_attn_implementation("eager")
    target = lean_forward(model)
    drafter = lean_forward(RestrictedHeadLM(model, torch.arange(40), quantize="int8"), quantize="int8")
    assert drafter.glue is not None and drafter.cache_dtype == torch.float32
    cache = target.new_cache()
    target(torch.tensor([[5, 6, 7, 8, 9]]), cache)
    layer = drafter.cache_like(cache.layers[0])
    keys = cache.layers[0].keys[..., :5].transpose(2, 3) if cache.layers[0].keys_t else cache.layers[0].keys[:, :, :5]
    ours = layer.keys[..., :5].transpose(2, 3) if layer.keys_t else layer.keys[:, :, :5]
    assert layer.length == 5 and layer.keys.dtype == torch.float32
    assert torch.equal(ours, keys.float()) and torch.equal(layer.values[:, :, :5], cache.layers[0].values[:, :, :5].float())


def test_the_build_is_keyed_by_compiler_and_a_missing_one_is_said(tmp_path, monkeypatch):
    if native.shutil.which("cc") is None and native.shutil.which("gcc") is None:
        pytest.skip("no C compiler here")
    first = native.build(out_dir=tmp_path)
    wrapper = tmp_path / "other-cc"  # another compiler (here the same one under another name)
    wrapper.write_text(f"#!/bin/sh\nexec {native._compiler()[0]} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    assert native.build(out_dir=tmp_path) != first  # its own library, not the other compiler's
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    native.glue.cache_clear()
    try:
        with pytest.warns(UserWarning, match="C glue is unavailable"):
            assert native.glue() is None
    finally:
        native.glue.cache_clear()


@pytest.mark.parametrize("compiler", ["gcc-11", "gcc-12", "gcc-13", "gcc-14", "clang"])
def test_the_c_sources_build_with_each_compiler_installed(compiler, tmp_path, monkeypatch):
    """native.c and qmm.c with each compiler found here (GCC 11 is Ubuntu 22.04's: its function
    clones dispatch on instruction sets, not on x86-64 levels, which GCC 12 added)."""
    import shutil

    from babelspec.forward import qmm

    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed here")
    default = shutil.which(os.environ.get("CC", "cc"))
    if default and os.path.realpath(default) == os.path.realpath(shutil.which(compiler)):
        pytest.skip(f"{compiler} is this machine's default compiler: every other test builds with it")
    monkeypatch.setenv("CC", compiler)
    native.build(out_dir=tmp_path)
    native.build(qmm.SOURCE, out_dir=tmp_path, flags=qmm.FLAGS)
