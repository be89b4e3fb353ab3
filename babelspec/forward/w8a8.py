"""The W8A8 target mode as a step applied to a built forward: SmoothQuant's per-channel smoothing
calibrated on text, then each product kind replaced by its W8A8 product.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from babelspec.errors import UserError
from babelspec.forward.gemma3 import LeanGemma3, _qk_norm, _weights
from babelspec.forward.kernels import OutputHead
from babelspec.forward.quantize import W8A8Linear


class _ChannelMax:
    """Wraps a product and records each input channel's largest magnitude (W8A8 calibration)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.amax = inner, None

    @property
    def fused(self) -> bool:
        return self.inner.fused

    def _see(self, x: torch.Tensor) -> None:
        seen = x.detach().reshape(-1, x.shape[-1]).abs().amax(0).float()
        self.amax = seen if self.amax is None else torch.maximum(self.amax, seen)

    def merges(self, x: torch.Tensor) -> bool:
        return self.inner.merges(x)

    def stacked(self, x: torch.Tensor) -> torch.Tensor:
        self._see(x)
        return self.inner.stacked(x)

    def __call__(self, x: torch.Tensor, merge: bool | None = None) -> Any:
        self._see(x)
        return self.inner(x) if merge is None else self.inner(x, merge)


PRODUCTS = ("qkv", "o", "gate_up", "down")


# W8A8's defaults: MLP down-projections kept bf16 (their inputs, GELU products, carry the largest
# outliers), SmoothQuant's alpha 0.5. ``benchmarks/w8a8_target.py`` measures teacher-forced top-1
# agreement with bf16 on held-out FLORES-200: every product W8A8 0.84 (amh 0.63, npi 0.66), down
# kept 0.89 (amh 0.73, npi 0.77; llama.cpp on the same GGUF 0.91, amh 0.80, npi 0.77), 1.27x bf16.
# With the output head calibrated on every row of the calibration text (``target.calibrate``;
# before, on each text's last row only), 3 sentences per language: 0.914 against 0.897 (amh 0.87
# against 0.83, npi 0.84 against 0.78, grn 0.91 against 0.93), llama.cpp 0.924.
W8A8_KEEP = ("down",)


W8A8_ALPHA = 0.5


def quantize_w8a8(forward: LeanGemma3, calibrate: Callable[[], None], alpha: float = W8A8_ALPHA,
                  keep: tuple[str, ...] = W8A8_KEEP) -> None:  # fmt: skip
    """Turn a bf16 target's lean forward into a W8A8 one, in place: every product but the kinds
    in ``keep`` and the output head on ``W8A8Linear``, smoothed with input magnitudes recorded
    while ``calibrate()`` runs the bf16 forward over calibration text."""
    if unknown := set(keep) - set(PRODUCTS):
        raise UserError(f"cannot keep {sorted(unknown)} in bf16; products are {', '.join(PRODUCTS)}")
    if not isinstance(forward.logits_of, OutputHead) or forward.quantize is not None:
        raise UserError("W8A8 applies to a target's own forward (a drafter's head or int8 layers are not)")
    if forward.dtype != torch.bfloat16:
        raise UserError(f"W8A8 quantizes a bfloat16 target; this one is {forward.dtype} (load it with "
                         "dtype='bfloat16')")  # fmt: skip
    weights = [_weights(module) for module in forward.body.layers[: len(forward.layers)]]
    slots = [(layer, kind, weights[i][kind]) for i, layer in enumerate(forward.layers) for kind in PRODUCTS
             if kind not in keep] + [(forward.logits_of, "project", [forward.logits_of.weight])]  # fmt: skip
    forward.exact_rows()  # probed on the bf16 products before they are wrapped (the probe's rows are no calibration)
    originals = [getattr(owner, name) for owner, name, _ in slots]
    for owner, name, _ in slots:
        setattr(owner, name, _ChannelMax(getattr(owner, name)))
    try:
        calibrate()
        recorded = [getattr(owner, name).amax for owner, name, _ in slots]
    finally:
        for (owner, name, _), original in zip(slots, originals):
            setattr(owner, name, original)
    if any(amax is None for amax in recorded):
        raise ValueError("W8A8 calibration ran no forward over the target's layers and head")
    for (owner, name, ws), amax in zip(slots, recorded):
        setattr(owner, name, W8A8Linear(ws, amax, alpha))
    for layer in forward.layers:
        layer.qk_norm = _qk_norm(layer.norms, forward.heads, forward.kv_heads)
    forward.quantize = "w8a8"
    forward._batch_rows.clear()
    forward._exact_rows.clear()
