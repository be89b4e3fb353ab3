"""Products on quantized weights: weight-only int8 (a drafter's layers) and W8A8 (int8 weights and
int8 activations through oneDNN's quantized product, exact integer sums).
"""

from __future__ import annotations

import functools

import torch

from babelspec.errors import UserError

QUANTIZATIONS = (None, "int8", "gguf")  # gguf: a drafter on a gguf target's own products (``LeanGemma3.sharing_blocks``)


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 rows, one scale per row in ``weight``'s dtype): symmetric weight-only quantization
    per output row, ``weight ~ rows * scales[:, None]``."""
    w = weight.detach().float()
    scales = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    rows = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
    return rows, scales.to(weight.dtype)


class _StackedProduct:
    """The quantized products' common shape: the projections of one input (q/k/v, gate/up)
    stacked into one product and split after. Quacks as ``Linear`` and ``Linears``."""

    __slots__ = ("sizes", "dtype")

    fused = True  # the stacked product is the only one: ``_attention`` may norm q and k together

    def __init__(self, weights: list[torch.Tensor]) -> None:
        self.sizes = [w.shape[0] for w in weights]
        self.dtype = weights[0].dtype

    @staticmethod
    def _stack(weights: list[torch.Tensor]) -> torch.Tensor:
        return weights[0].detach() if len(weights) == 1 else torch.cat([w.detach() for w in weights])

    def merges(self, x: torch.Tensor) -> bool:
        return True

    def stacked(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def __call__(self, x: torch.Tensor, merge: bool | None = None) -> torch.Tensor | list[torch.Tensor]:
        out = self.stacked(x)
        return out if len(self.sizes) == 1 else list(out.split(self.sizes, dim=-1))


class Int8Linear(_StackedProduct):
    """``x @ weight.T`` on a weight-only int8 copy of ``weights``: torch's
    ``_weight_int8pack_mm``, whose one-row product reads half the bytes of bf16's (``bench
    quant``). Its cost grows with the rows, so it suits a drafter's one-row steps, not a
    verification block."""

    __slots__ = ("rows", "scales")

    def __init__(self, weights: list[torch.Tensor]) -> None:
        if not hasattr(torch.ops.aten, "_weight_int8pack_mm"):
            raise UserError(f"int8 drafting needs torch's _weight_int8pack_mm (torch {torch.__version__} has none)")
        super().__init__(weights)
        self.rows, self.scales = quantize_int8(self._stack(weights))

    def stacked(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        out = torch.ops.aten._weight_int8pack_mm(flat, self.rows, self.scales)
        return out.view(*x.shape[:-1], -1)


def w8a8_available() -> bool:
    """Whether this torch has oneDNN's quantized product (x86 CPU builds do)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.onednn, "qlinear_pointwise")


@functools.cache
def w8a8_activation_levels() -> int:
    """The largest magnitude W8A8 gives an activation: 127 where oneDNN's unsigned-by-signed int8
    sums are exact, 63 where they are not. Without VNNI (an AVX2-only CPU) oneDNN adds pairs of
    products in saturating 16-bit integers (``vpmaddubsw``), so 8-bit activations lose whole
    sums (on a Zen 3 the test product erred by 4.7 % instead of 0.5 %); 7-bit ones cannot
    overflow, PyTorch's own ``reduce_range``. Probed once with the largest operands."""
    weight = torch.full((1, 64), 127, dtype=torch.int8)
    packed = torch.ops.onednn.qlinear_prepack(weight, [1, 64])
    x = torch.full((1, 64), 255, dtype=torch.uint8)  # 127 above the zero point 128
    out = torch.ops.onednn.qlinear_pointwise(x, 1.0, 128, packed, torch.ones(1), torch.zeros(1, dtype=torch.long),
                                             None, 1.0, 0, torch.float32, "none", [], "")  # fmt: skip
    return 127 if float(out[0, 0]) == 127 * 127 * 64 else 63


class W8A8Linear(_StackedProduct):
    """``x @ weight.T`` on int8 weights and int8 activations (W8A8): oneDNN's quantized product
    (``qlinear_pointwise``), exact int32 sums under one scale per weight row and one per
    activation row, so every row of a block gets the bits it gets alone, and a 262k-row output
    head reads in half bf16's time at 1-16 rows (``benchmarks/results/product_routes.json``). Before
    quantization the input channels are smoothed as in SmoothQuant (Xiao et al. 2023):
    ``s_j = amax_j**alpha / max|W_j|**(1 - alpha)``, with ``amax`` each input channel's largest
    magnitude on calibration text; the activation is divided by ``s`` and the weight multiplied
    by it, moving outlier channels into the weights."""

    __slots__ = ("packed", "scales", "zeros", "smooth")

    def __init__(self, weights: list[torch.Tensor], amax: torch.Tensor, alpha: float) -> None:
        if not w8a8_available():
            raise UserError(f"W8A8 needs oneDNN's qlinear_pointwise, which torch {torch.__version__} here lacks")
        super().__init__(weights)
        stacked = self._stack(weights)
        s = amax.float().clamp(min=1e-5) ** alpha / stacked.abs().amax(0).float().clamp(min=1e-5) ** (1 - alpha)
        parts = [quantize_int8(rows.float() * s) for rows in stacked.split(16384)]  # a 262k-row head in parts
        rows = torch.cat([p[0] for p in parts])
        self.packed = torch.ops.onednn.qlinear_prepack(rows, [1, rows.shape[1]])
        self.scales = torch.cat([p[1] for p in parts])
        self.zeros = torch.zeros(rows.shape[0], dtype=torch.long)
        self.smooth = 1.0 / s

    def stacked(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1]).float() * self.smooth
        levels = w8a8_activation_levels()
        scale = flat.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / levels
        quantized = (torch.round(flat / scale) + levels + 1).to(torch.uint8)  # unsigned, zero point levels + 1
        out = torch.ops.onednn.qlinear_pointwise(quantized, 1.0, levels + 1, self.packed, self.scales, self.zeros, None,
                                                 1.0, 0, torch.float32, "none", [], "")  # fmt: skip
        return (out * scale).to(self.dtype).view(*x.shape[:-1], -1)
