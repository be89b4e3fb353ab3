"""The product on a GGUF's own quantized blocks (``forward.qmm``): the repacked weights are the
file's values, and every path (each instruction set the CPU runs, the portable C, the torch form)
gives every row of any block the same bits as the row alone, at 1, 2 and 3 threads."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from babelspec.forward import qmm
from babelspec.forward.qmm import QProduct, QuantError, product_torch, repack

BLOCK = {"Q8_0": (32, 34), "Q5_0": (32, 22), "Q4_K": (256, 144), "Q6_K": (256, 210)}
HALVES = {"Q8_0": (0,), "Q5_0": (0,), "Q4_K": (0, 2), "Q6_K": (208,)}  # byte offsets of each block's float16 scales


def random_blocks(kind: str, n: int, k: int, seed: int) -> np.ndarray:
    """Random raw GGUF blocks [n, bytes per row] of ``kind``, their float16 scales finite."""
    rng = np.random.default_rng(seed)
    inputs, size = BLOCK[kind]
    raw = rng.integers(0, 256, (n, k // inputs, size), dtype=np.uint8)
    for at in HALVES[kind]:
        scales = (rng.uniform(0.2, 2.0, (n, k // inputs)) * 10.0 ** rng.integers(-4, -1, (n, k // inputs)))
        raw[..., at : at + 2] = scales.astype(np.float16)[..., None].view(np.uint8)
    return raw.reshape(n, -1)


@pytest.mark.parametrize("kind", sorted(BLOCK))
def test_repacked_weights_are_the_files_values(kind: str) -> None:
    raw = random_blocks(kind, 32, 512, seed=1)
    weight = repack(kind, raw, 32, 512)
    expected = dequantize(raw, GGMLQuantizationType[kind]).reshape(32, 512)
    assert torch.equal(weight.dequantize(), torch.from_numpy(expected.astype(np.float32)))


def test_a_type_the_product_does_not_take_is_named_with_the_fix() -> None:
    with pytest.raises(QuantError, match=r"blk\.0\.attn_q is Q4_1; the quantized product takes Q8_0, Q5_0, Q4_K, Q6_K"):
        repack("Q4_1", np.zeros((16, 20), np.uint8), 16, 32, "blk.0.attn_q")


def _parts(seed: int) -> list[list[qmm.QWeight]]:
    """Stacks as the model has them: three projections of one input; Q4_K with offsets; Q6_K's
    groups of 16 (rows quantized per 16) beside Q8_0's of 32."""
    w = lambda kind, n, k, s: repack(kind, random_blocks(kind, n, k, seed + s), n, k)  # noqa: E731
    return [[w("Q5_0", 64, 512, 0), w("Q5_0", 32, 512, 1), w("Q8_0", 32, 512, 2)], [w("Q4_K", 48, 512, 3)],
            [w("Q6_K", 32, 512, 4), w("Q8_0", 16, 512, 5)]]  # fmt: skip


def _rows(m: int, k: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * torch.logspace(-3, 2, m)[:, None]
    x[0, :7] = 0.0  # a group with zeros, and one all zero
    x[-1, 32:64] = 0.0
    return x.bfloat16()


def _kernels() -> list[str]:
    """The torch form and every C path this CPU runs."""
    lib = qmm.library()
    if lib is None:
        return ["torch"]
    order = ["portable", "avx2", "avx512"]
    return ["torch", "auto", *order[: order.index(lib.best) + 1]]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_path_gives_every_row_the_bits_of_the_row_alone(threads: int) -> None:
    """Blocks of 1-17 rows (a decode step, chains, trees, a second tile of rows), against the torch
    form of the same arithmetic on each row alone."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for s, parts in enumerate(_parts(seed=10)):
            x = _rows(17, 512, seed=s)
            for dtype in (torch.float32, torch.bfloat16):  # the sums themselves, and rounded
                alone = torch.cat([product_torch(x[i : i + 1], parts, dtype) for i in range(17)])
                for kernel in _kernels():
                    product = QProduct(parts, kernel, dtype)
                    for m in (1, 2, 5, 8, 9, 17):
                        out = product.stacked(x[None, :m])[0]
                        assert out.dtype == dtype and torch.equal(out, alone[:m]), (kernel, m, parts[0].kind, dtype)
    finally:
        torch.set_num_threads(before)


def test_the_product_is_the_files_model_to_int8_activations() -> None:
    """Against the float64 product of the file's values: within what per-32 int8 rows allow."""
    for parts in _parts(seed=20):
        x = _rows(5, 512, seed=3)[1:]  # rows of ordinary scale
        exact = x.double() @ torch.cat([w.dequantize() for w in parts]).double().T
        out = QProduct(parts, out_dtype=torch.float32).stacked(x[None])[0].double()
        assert ((out - exact).norm(dim=1) / exact.norm(dim=1)).max() < 0.02


def test_the_product_is_built_where_a_c_compiler_is() -> None:
    """Where a compiler runs, the C product is what runs (not the torch form, slower)."""
    if shutil.which("cc") or shutil.which("gcc"):
        assert qmm.library() is not None
        assert QProduct(_parts(seed=0)[1]).kernel_used != "torch"


def test_a_kernel_the_cpu_lacks_or_a_wrong_input_is_refused_with_its_reason() -> None:
    parts = _parts(seed=30)[1]
    with pytest.raises(ValueError, match="unknown quantized kernel 'avx9'; use one of auto, avx512"):
        QProduct(parts, "avx9")
    with pytest.raises(ValueError, match="bf16 rows of 512, not torch.float32 rows of 512"):
        QProduct(parts).stacked(torch.zeros(1, 2, 512))
    lib = qmm.library()
    if lib is not None and lib.best != "avx512":
        with pytest.raises(ValueError, match="needs instructions this CPU lacks"):
            QProduct(parts, "avx512")
