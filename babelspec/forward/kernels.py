"""The lean forward's products and the probes that choose them: oneDNN's prepacked bf16 products
(checked once to compute every row of a block as it computes the row alone), products merged
over stacked weights, and the output head.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch
import torch.nn.functional as F

from babelspec.forward.options import MERGE_MAX_TOKENS


class OutputHead:
    """A Gemma-3 LM's output head: the product (``Linear``, or ``W8A8Linear`` in a W8A8
    target), then the model's final logit soft-capping where it has one."""

    __slots__ = ("project", "weight", "softcap", "certified")

    def __init__(self, project: Any, weight: torch.Tensor, softcap: float | None, certified: Any = None) -> None:
        self.project, self.weight, self.softcap = project, weight, softcap
        self.certified = certified  # a ``CertifiedHead`` over the product (``ForwardOptions.head``)

    def __call__(self, hidden: torch.Tensor, requests: list | None = None) -> torch.Tensor:
        """Logits of ``hidden`` [1, rows, hidden]; ``requests`` (one ``HeadRequest`` or None per
        row) let the certified head return only what each row asks for."""
        if requests is not None and self.certified is not None and any(r is not None for r in requests):
            return self.certified(hidden, requests)
        logits = self.project(hidden)
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits


@functools.cache
def onednn_packs_bf16() -> bool:
    """Whether oneDNN prepacks bf16 weights on this CPU: it needs AVX-512 (BW, VL, DQ) or
    AVX-NE-CONVERT, and refuses an AVX2-only CPU (an AMD Zen 3, say) at the first product.
    Probed once on a small weight, so such a CPU takes ``F.linear`` instead of failing."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")):
        return False
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(torch.ones(16, 16, dtype=torch.bfloat16), None)
        _packed_product(torch.ones(2, 16, dtype=torch.bfloat16), packed, pad_row=False)
    except RuntimeError:
        return False
    return True


def _can_pack(weight: torch.Tensor) -> bool:
    """bf16 on the CPU with oneDNN: a prepacked weight is what ``F.linear`` computes with, bit
    for bit, without re-laying the weight out on every call (``bench forward``: the 262k-row
    output projection 48 -> 32 ms at 1-8 rows on this project's 2-core Xeon)."""
    return (weight.dtype == torch.bfloat16 and weight.device.type == "cpu" and weight.dim() == 2
            and onednn_packs_bf16())  # fmt: skip


# One packed copy per weight (or stack of weights) while any lean forward uses it (a self-drafter
# shares the target's layers and output head): keyed by the weights' storage, shape and version,
# dropped with its last user, which holds the weights themselves (so no key outlives them).
_PACKED: weakref.WeakValueDictionary[tuple, torch.Tensor] = weakref.WeakValueDictionary()


def _packed(weights: tuple[torch.Tensor, ...]) -> torch.Tensor:
    key = tuple((w.data_ptr(), tuple(w.shape), w.dtype, w._version) for w in weights)
    packed = _PACKED.get(key)
    if packed is None:
        stacked = weights[0] if len(weights) == 1 else torch.cat(weights)
        packed = _PACKED[key] = torch.ops.mkldnn._reorder_linear_weight(stacked.detach(), None)
    return packed


def _packed_product(x: torch.Tensor, packed: torch.Tensor, pad_row: bool) -> torch.Tensor:
    """``x @ weight.T`` on a prepacked bf16 weight. With ``pad_row`` a one-row block is computed
    as two (the row twice) and the first kept: oneDNN multiplies one row with another kernel
    than two or more, whose sums can round differently (on a Zen 4 CPU 16 % of the rows of the
    2048-wide down projection differed in some bit from the row alone, and none from the padded
    row: ``benchmarks/results/row_invariance.json``), so a decode step computes the product as a
    verification block does."""
    if pad_row and x.shape[-2] == 1:
        return torch.ops.mkldnn._linear_pointwise(torch.cat([x, x], -2), packed, None, "none", [], "")[..., :1, :]
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


_ROW_PROBES: dict[tuple, bool] = {}  # (out, in features) -> whether one row rounds otherwise


def one_row_differs(packed: torch.Tensor, shape: tuple[int, int]) -> bool:
    """Whether the product with ``packed`` (a [out, in] weight) gives a row alone other bits than
    the same row in a block of 16, on random bf16 rows of varied scale. Kernels are chosen by
    shape, so the answer is kept per shape; a shape whose single rows do round otherwise shows
    it in about a sixth of the rows (the 2048-wide down projection on a Zen 4 CPU), so 64 rows
    (16 for the large output head) leave a miss a chance of about 1e-5 (6e-2)."""
    if shape not in _ROW_PROBES:
        g = torch.Generator().manual_seed(0)
        blocks = 4 if shape[0] * shape[1] < 2**24 else 1
        x = (torch.randn(blocks, 16, shape[1], generator=g) * torch.logspace(-1, 1, 16)[:, None]).bfloat16()
        product = lambda rows: _packed_product(rows, packed, pad_row=False)  # noqa: E731
        _ROW_PROBES[shape] = any(not torch.equal(product(x[b : b + 1, i : i + 1])[0, 0], block[i])
                                 for b in range(blocks) for block in [product(x[b : b + 1])[0]] for i in range(16))  # fmt: skip
    return _ROW_PROBES[shape]


class Linear:
    """``x @ weight.T``; bf16 CPU weights are prepacked once for oneDNN (a copy: the lean forward
    is for inference, and a weight changed after it was built is not seen). ``pad_row``: one-row
    blocks are computed as two rows (``_packed_product``)."""

    __slots__ = ("weight", "packed", "pad_row")

    def __init__(self, weight: torch.Tensor, pack: bool = True, pad_row: bool = False) -> None:
        self.weight = weight
        self.packed = _packed((weight,)) if pack and _can_pack(weight) else None
        self.pad_row = pad_row and self.packed is not None and one_row_differs(self.packed, tuple(weight.shape))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is None:
            return F.linear(x, self.weight)
        return _packed_product(x, self.packed, self.pad_row)


class Linears:
    """``[x @ w.T for w in weights]`` for projections of one input (q, k, v; gate, up). Packed
    bf16 weights are also stacked into one oneDNN product for blocks of up to
    ``merge_max_tokens`` rows (``ForwardOptions``), split after: one pass over the input instead of two or three
    (``benchmarks/results/lean_fusion.json``). Longer blocks take ``F.linear`` on each weight, as Hugging
    Face does. Unpacked (float32) weights are never stacked: MKL picks its float32 kernels by
    shape, so a stacked product would round differently."""

    __slots__ = ("parts", "sizes", "packed", "pad_row", "merge_max_tokens")

    def __init__(self, weights: list[torch.Tensor], pack: bool = True, fuse: bool = True, pad_row: bool = False,
                 merge_max_tokens: int = MERGE_MAX_TOKENS) -> None:  # fmt: skip
        self.merge_max_tokens = merge_max_tokens
        self.sizes = [w.shape[0] for w in weights]
        fusable = pack and fuse and all(_can_pack(w) and w.shape[1] == weights[0].shape[1] for w in weights)
        self.packed = _packed(tuple(weights)) if fusable else None
        self.pad_row = pad_row and fusable and one_row_differs(self.packed, (sum(self.sizes), weights[0].shape[1]))
        self.parts = [Linear(w, pack=not fusable and pack, pad_row=pad_row) for w in weights]

    @property
    def fused(self) -> bool:
        return self.packed is not None

    def merges(self, x: torch.Tensor) -> bool:
        """Whether a block of ``x``'s rows goes through the stacked product."""
        return self.packed is not None and x.shape[-2] <= self.merge_max_tokens

    def stacked(self, x: torch.Tensor) -> torch.Tensor:
        """The stacked product itself, the projections side by side (``merges(x)`` only)."""
        return _packed_product(x, self.packed, self.pad_row)

    def __call__(self, x: torch.Tensor, merge: bool | None = None) -> list[torch.Tensor]:
        """The projections; ``merge`` (a batch of blocks says it for all its rows) defaults to
        ``merges(x)``, and stacks only where the weights are packed."""
        if not (self.merges(x) if merge is None else merge and self.fused):
            return [part(x) for part in self.parts]
        return list(self.stacked(x).split(self.sizes, dim=-1))
