"""A lean decode/verify forward for Gemma-3 text models, on the model's own weights.

Hugging Face's forward spends a fifth of a bf16 decode step of Gemma-3-270M on this CPU outside
the matrix products (``babelspec bench forward`` prints ``lean`` and ``hf`` side by side): mask
and rotary set-up, a cache that concatenates every layer's keys on every step, config look-ups
and module hooks. This forward does the same arithmetic, op for op (the RMSNorm, rotary, eager
attention and MLP of ``transformers.models.gemma3``), with a preallocated key/value cache that
a rollback crops by setting its length. In bf16 its decode and verification blocks also merge
products (``Linears``, and the grouped attention in ``_attention``), which can change the last
bits of their logits in rare shapes (``MERGE_MAX_TOKENS``), and run the norms, residual adds and
the queries' and keys' rotation between the products in C (``babelspec.native``), row by row;
``fuse=False`` turns both off.
It covers what the speculative loop needs (batch 1, a block of new tokens after the cached
ones); anything else (training, batches, other families) goes through the Hugging Face forward.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from babelspec.native import Glue, glue

FORWARDS = ("lean", "hf")
FORWARD_ENV = "BABELSPEC_FORWARD"  # "hf" turns the lean forward off everywhere


def default_forward() -> str:
    """``lean`` unless ``BABELSPEC_FORWARD=hf``; a clear error for any other value."""
    value = os.environ.get(FORWARD_ENV, "lean").strip().lower() or "lean"
    if value not in FORWARDS:
        raise ValueError(f"{FORWARD_ENV}={value!r} is not a forward; use one of {', '.join(FORWARDS)}")
    return value


def _gemma3_body(body: Any) -> bool:
    config = getattr(body, "config", None)
    return (type(body).__name__ == "Gemma3TextModel" and getattr(config, "model_type", "") == "gemma3_text"
            and config.attn_logit_softcapping is None and not config.use_bidirectional_attention
            and config.hidden_activation in ("gelu_pytorch_tanh", "gelu"))  # fmt: skip


def lean_forward(model: torch.nn.Module, forward: str | None = None, fuse: bool = True,
                 quantize: str | None = None) -> LeanGemma3 | None:  # fmt: skip
    """The lean forward of ``model`` (a Gemma-3 text LM, or a restricted-head drafter over one),
    or None where Hugging Face's forward is used: other families, or ``forward="hf"``.
    ``fuse=False`` keeps bf16's projections apart, as Hugging Face computes them (``Linears``).
    ``quantize="int8"``: the layers' products on weight-only int8 copies (``Int8Linear``), a
    drafter's forward (not the target's: it is another model)."""
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"unknown quantization {quantize!r}; use one of {', '.join(map(str, QUANTIZATIONS))}")
    forward = forward or default_forward()
    if forward not in FORWARDS:
        raise ValueError(f"unknown forward {forward!r}; use one of {', '.join(FORWARDS)}")
    if forward == "hf":
        return None
    logits_of = getattr(model, "logits_of", None)  # a drafter's own output head over the body
    body = getattr(model, "body", None) if logits_of is not None else getattr(model, "model", None)
    # Only under eager attention, whose arithmetic this forward repeats (SDPA rounds otherwise).
    if not _gemma3_body(body) or body.config._attn_implementation != "eager":
        return None
    if logits_of is None:
        head = getattr(model, "lm_head", None)
        if type(model).__name__ != "Gemma3ForCausalLM" or head is None or head.bias is not None:
            return None
        logits_of = OutputHead(Linear(head.weight, pad_row=fuse), head.weight, model.config.final_logit_softcapping)
    return LeanGemma3(body, logits_of, fuse=fuse, quantize=quantize)


class OutputHead:
    """A Gemma-3 LM's output head: the product (``Linear``, or ``W8A8Linear`` in a W8A8
    target), then the model's final logit soft-capping where it has one."""

    __slots__ = ("project", "weight", "softcap")

    def __init__(self, project: Any, weight: torch.Tensor, softcap: float | None) -> None:
        self.project, self.weight, self.softcap = project, weight, softcap

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.project(hidden)
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits


class LeanLayerCache:
    """One layer's keys and values; the first ``length`` hold. Values are [1, kv_heads, capacity,
    head_dim]; keys the same, or transposed, [1, kv_heads, head_dim, capacity] (``keys_t``)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, keys_t: bool = False) -> None:
        self.keys, self.values, self.length, self.keys_t = keys, values, 0, keys_t

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cache ``k`` and ``v`` [1, kv_heads, n, head_dim]; every key and value cached, keys in
        the cache's layout."""
        end = self.length + k.shape[2]
        if end > self.values.shape[2]:
            grow = max(end, 2 * self.values.shape[2])
            self.keys = _grown(self.keys, grow, self.length, 3 if self.keys_t else 2)
            self.values = _grown(self.values, grow, self.length, 2)
        if self.keys_t:
            self.keys[..., self.length : end] = k.transpose(2, 3)
        else:
            self.keys[:, :, self.length : end] = k
        self.values[:, :, self.length : end] = v
        self.length = end
        return self.keys[..., :end] if self.keys_t else self.keys[:, :, :end], self.values[:, :, :end]

    def rows(self, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values of tokens ``start`` to ``end`` [1, kv_heads, n, head_dim] (views),
        as ``append`` takes them."""
        keys = self.keys[..., start:end].transpose(2, 3) if self.keys_t else self.keys[:, :, start:end]
        return keys, self.values[:, :, start:end]


def _grown(buffer: torch.Tensor, capacity: int, length: int, dim: int) -> torch.Tensor:
    shape = list(buffer.shape)
    shape[dim] = capacity
    out = buffer.new_empty(shape)
    out.narrow(dim, 0, length).copy_(buffer.narrow(dim, 0, length))
    return out


class LeanCache:
    """The lean forward's KV cache: ``crop`` and ``get_seq_length`` as ``DynamicCache`` has them."""

    is_croppable = True

    def __init__(self, layers: list[LeanLayerCache]) -> None:
        self.layers = layers

    def get_seq_length(self) -> int:
        return self.layers[0].length if self.layers else 0

    def keep(self, past: int, indices: torch.Tensor) -> None:
        """Keep the first ``past`` tokens and then the block entries at ``indices`` (positions
        after ``past``, ascending): the accepted path of a token tree, gathered in place."""
        n = len(indices)
        if n and bool((indices == torch.arange(n)).all()):
            self.crop(past + n - self.get_seq_length())  # a prefix of the block: a crop
            return
        at = past + indices
        for layer in self.layers:
            if layer.keys_t:
                layer.keys[..., past : past + n] = layer.keys[..., at]
            else:
                layer.keys[:, :, past : past + n] = layer.keys[:, :, at]
            layer.values[:, :, past : past + n] = layer.values[:, :, at]
            layer.length = past + n

    def crop(self, tokens: int) -> None:
        """Drop ``-tokens`` tokens from the end (``tokens`` <= 0, as ``DynamicCache.crop`` takes it)."""
        if tokens > 0:
            raise ValueError(f"crop takes minus the number of tokens to remove, got {tokens}")
        keep = max(self.get_seq_length() + tokens, 0)
        for layer in self.layers:
            layer.length = keep


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


_ATTENTION_PROBES: dict[tuple[int, int], bool] = {}  # (query heads per key head, head_dim) -> agree


def float32_attention_rows_agree(groups: int, head_dim: int) -> bool:
    """Whether float32 attention products (``_attend``'s grouped rows: a block's query heads of
    one key/value head as rows of one product) give every row of a 2-16-token block the bits of
    the same query alone, on random rows over context lengths 1-1,500: MKL picks its kernels by
    shape, so the blocks' products are checked against one-token ones once per process (about
    half a second). On this project's Xeon none of 1,165 block/length pairs differed in float32,
    27 in oneDNN's bf16."""
    key = (groups, head_dim)
    if key not in _ATTENTION_PROBES:
        g = torch.Generator().manual_seed(0)
        agree = True
        for length in (1, 2, 3, 5, 8, 13, 31, 64, 97, 128, 255, 300, 511, 700, 1023, 1500):
            keys_t = torch.randn(1, 1, head_dim, length, generator=g)
            values = torch.randn(1, 1, length, head_dim, generator=g)
            q = torch.randn(1, 1, groups * 16, head_dim, generator=g)
            w = torch.randn(1, 1, groups * 16, length, generator=g).softmax(-1)
            alone = [(torch.matmul(q[:, :, groups * i : groups * (i + 1)], keys_t),
                      torch.matmul(w[:, :, groups * i : groups * (i + 1)], values)) for i in range(16)]  # fmt: skip
            for n in range(2, 17):
                scores, out = torch.matmul(q[:, :, : groups * n], keys_t), torch.matmul(w[:, :, : groups * n], values)
                agree = agree and all(torch.equal(scores[:, :, groups * i : groups * (i + 1)], alone[i][0])
                                      and torch.equal(out[:, :, groups * i : groups * (i + 1)], alone[i][1])
                                      for i in range(n))  # fmt: skip
            if not agree:
                break
        _ATTENTION_PROBES[key] = agree
    return _ATTENTION_PROBES[key]


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


# Blocks of at most this many tokens (decode steps and verifications) run the bf16 merges;
# longer ones (prefill) run Hugging Face's products one for one, so the cache a generation starts
# from is Hugging Face's bit for bit. The merges reorder oneDNN's sums in some shapes (a stacked
# q/k/v product first differed from separate ones at 128 rows; grouped attention at 1 of 334
# context lengths for 5-token blocks, 23 for 9, none for one token), rare last-bit differences
# that the fast mode's measured agreement rate covers (``bench equivalence --dtype bfloat16``).
MERGE_MAX_TOKENS = 16
CACHE_ONLY = -1  # a block's logits_to_keep: no logits, the block only cached (a prefill)


class Linears:
    """``[x @ w.T for w in weights]`` for projections of one input (q, k, v; gate, up). Packed
    bf16 weights are also stacked into one oneDNN product for blocks of up to
    ``MERGE_MAX_TOKENS`` rows, split after: one pass over the input instead of two or three
    (``benchmarks/results/lean_fusion.json``). Longer blocks take ``F.linear`` on each weight, as Hugging
    Face does. Unpacked (float32) weights are never stacked: MKL picks its float32 kernels by
    shape, so a stacked product would round differently."""

    __slots__ = ("parts", "sizes", "packed", "pad_row")

    def __init__(self, weights: list[torch.Tensor], pack: bool = True, fuse: bool = True, pad_row: bool = False) -> None:
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
        return self.packed is not None and x.shape[-2] <= MERGE_MAX_TOKENS

    def stacked(self, x: torch.Tensor) -> torch.Tensor:
        """The stacked product itself, the projections side by side (``merges(x)`` only)."""
        return _packed_product(x, self.packed, self.pad_row)

    def __call__(self, x: torch.Tensor, merge: bool | None = None) -> list[torch.Tensor]:
        """The projections; ``merge`` (a batch of blocks says it for all its rows) defaults to
        ``merges(x)``, and stacks only where the weights are packed."""
        if not (self.merges(x) if merge is None else merge and self.fused):
            return [part(x) for part in self.parts]
        return list(self.stacked(x).split(self.sizes, dim=-1))


QUANTIZATIONS = (None, "int8")


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
            raise ValueError(f"int8 drafting needs torch's _weight_int8pack_mm (torch {torch.__version__} has none)")
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
            raise ValueError(f"W8A8 needs oneDNN's qlinear_pointwise, which torch {torch.__version__} here lacks")
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
        raise ValueError(f"cannot keep {sorted(unknown)} in bf16; products are {', '.join(PRODUCTS)}")
    if not isinstance(forward.logits_of, OutputHead) or forward.quantize is not None:
        raise ValueError("W8A8 applies to a target's own forward (a drafter's head or int8 layers are not)")
    if forward.dtype != torch.bfloat16:
        raise ValueError(f"W8A8 quantizes a bfloat16 target; this one is {forward.dtype} (load it with "
                         "dtype='bfloat16')")  # fmt: skip
    weights = [_weights(module) for module in forward.body.layers[: len(forward.layers)]]
    slots = [(layer, kind, weights[i][kind]) for i, layer in enumerate(forward.layers) for kind in PRODUCTS
             if kind not in keep] + [(forward.logits_of, "project", [forward.logits_of.weight])]  # fmt: skip
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


def _weights(layer: torch.nn.Module) -> dict[str, list[torch.Tensor]]:
    """A decoder layer's product weights by kind, q/k/v and gate/up side by side."""
    attn, mlp = layer.self_attn, layer.mlp
    return {"qkv": [attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight], "o": [attn.o_proj.weight],
            "gate_up": [mlp.gate_proj.weight, mlp.up_proj.weight], "down": [mlp.down_proj.weight]}  # fmt: skip


@dataclass
class _Layer:
    qkv: Linears | Int8Linear | W8A8Linear
    o: Linear | Int8Linear | W8A8Linear
    gate_up: Linears | Int8Linear | W8A8Linear
    down: Linear | Int8Linear | W8A8Linear
    norms: dict[str, tuple[torch.Tensor, float]]  # name -> (1 + weight in float32, eps)
    sliding: bool
    qk_norm: tuple[torch.Tensor, float] | None = None  # q_norm's scale per query head, then k_norm's


def _qk_norm(norms: dict[str, tuple[torch.Tensor, float]], heads: int, kv_heads: int) -> tuple[torch.Tensor, float] | None:
    """q_norm's and k_norm's scales stacked per head [1, heads + kv_heads, 1, head_dim], for one
    RMSNorm over the queries and keys of a block together (the same arithmetic per row)."""
    (q_scale, q_eps), (k_scale, k_eps) = norms["q_norm"], norms["k_norm"]
    if q_eps != k_eps:
        return None
    return torch.stack([q_scale] * heads + [k_scale] * kv_heads)[None, :, None, :], q_eps


@dataclass(eq=False)
class Block:
    """One sequence's block for ``LeanGemma3.forward_many``: ``ids`` [1, n] after the tokens in
    ``cache``, the logits of its last ``logits_to_keep`` rows (0: all; ``CACHE_ONLY``: none, the
    block is only cached, alone in its forward), ``parents`` for a tree."""

    ids: torch.Tensor
    cache: LeanCache
    logits_to_keep: int = 0
    parents: torch.Tensor | None = None


@dataclass
class _Prepared:
    n: int
    cache: LeanCache
    masks: dict[bool, Any]
    rope: dict[str, tuple[torch.Tensor, torch.Tensor]]


class LeanGemma3:
    """``forward(ids [1, n], cache, logits_to_keep)`` -> logits [n or logits_to_keep, columns]:
    the decoder stack ``body`` (a ``Gemma3TextModel``) under the output head ``logits_of``."""

    def __init__(self, body: torch.nn.Module, logits_of: Callable[[torch.Tensor], torch.Tensor],
                 initial_capacity: int = 256, pack: bool = True, fuse: bool = True,
                 quantize: str | None = None) -> None:  # fmt: skip
        config = body.config
        self.body, self.logits_of = body, logits_of
        self.rotary = body.rotary_emb
        self.embed = body.embed_tokens
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim
        self.scaling = config.query_pre_attn_scalar**-0.5
        self.window = config.sliding_window
        self.capacity = initial_capacity
        self.final_norm = _norm_weights(body.norm)
        self.layer_types = list(config.layer_types[: config.num_hidden_layers])
        self.approximate = "tanh" if config.hidden_activation == "gelu_pytorch_tanh" else "none"
        # bf16 on the CPU caches the keys transposed: q @ keys^T is then a product over a strided
        # slice rather than a transposed view, 1.5-2x faster (``benchmarks/results/attention_keys.json``),
        # and oneDNN's bf16 products give the same bits either way; MKL's float32 ones do not,
        # so float32 keeps Hugging Face's layout
        weight = body.embed_tokens.weight
        self.keys_t = weight.dtype == torch.bfloat16 and weight.device.type == "cpu"
        self.dtype, self.device = weight.dtype, weight.device
        self.cache_dtype = self.dtype
        # the int8 drafter (its own model: no bits to keep equal to the target's) also attends in
        # float32 over a float32 cache: oneDNN's bf16 products pay 50-80 µs for each new context
        # length, MKL's float32 ones 17 µs (``benchmarks/results/native_glue.json``)
        self.glue: Glue | None = None
        if quantize == "int8" and self.dtype == torch.bfloat16 and self.device.type == "cpu":
            self.glue, self.cache_dtype = glue(), torch.float32
        self._batch_rows: dict[int, int] = {}
        self.quantize = quantize
        self.layers = []
        for layer, kind in zip(body.layers[: config.num_hidden_layers], self.layer_types):
            attn, mlp = layer.self_attn, layer.mlp
            if quantize == "int8":
                products = {name: Int8Linear(ws) for name, ws in _weights(layer).items()}
                self.layers.append(_Layer(**products, norms=_layer_norms(layer, attn),
                                          sliding=kind == "sliding_attention"))  # fmt: skip
                self.layers[-1].qk_norm = _qk_norm(self.layers[-1].norms, self.heads, self.kv_heads)
                continue
            # fast-mode blocks compute a one-row product as two rows where one row alone rounds
            # otherwise (``one_row_differs``): a decode step then rounds as a verification does;
            # the merges and this are what ``fuse`` turns off
            self.layers.append(_Layer(
                qkv=Linears([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight], pack, fuse, pad_row=fuse),
                o=Linear(attn.o_proj.weight, pack, pad_row=fuse),
                gate_up=Linears([mlp.gate_proj.weight, mlp.up_proj.weight], pack, fuse, pad_row=fuse),
                down=Linear(mlp.down_proj.weight, pack, pad_row=fuse),
                norms=_layer_norms(layer, attn), sliding=kind == "sliding_attention"))  # fmt: skip
            if self.layers[-1].qkv.fused:
                self.layers[-1].qk_norm = _qk_norm(self.layers[-1].norms, self.heads, self.kv_heads)
        # bf16 blocks of up to MERGE_MAX_TOKENS rows (with the merges, which ``fuse`` turns off):
        # the norms, residual adds and the queries' and keys' rotation in C (``native``), row by
        # row, so a verification row still rounds as a decode row (``benchmarks/results/native_glue.json``)
        if (fuse and quantize is None and self.dtype == torch.bfloat16 and self.device.type == "cpu"
                and all(layer.qkv.fused and layer.gate_up.fused and layer.qk_norm is not None for layer in self.layers)):  # fmt: skip
            self.glue = glue()
            # and attention in float32 over a float32 cache where MKL's float32 products give a
            # block's rows a decode step's bits (``float32_attention_rows_agree``): oneDNN's bf16
            # products pay 50-80 µs for each context length they have not seen, 2.5 ms of a
            # 29 ms decode step (``benchmarks/results/native_glue.json``). The prefill still attends in
            # bf16, on the cache's values cast back (exactly), as Hugging Face does
            groups = self.heads // self.kv_heads
            if self.glue is not None and float32_attention_rows_agree(groups, self.head_dim):
                self.cache_dtype = torch.float32
        self._native = (self.glue, self.cache_dtype)

    def set_native(self, on: bool) -> None:
        """Turn the C glue and float32 attention off (``on=False``: the torch operations and a
        bf16 cache, as Hugging Face computes; for comparisons), or back on where they apply.
        Caches made before the change keep their dtype, so make new ones."""
        if not on:
            self.glue, self.cache_dtype = None, self.dtype
        else:
            self.glue, self.cache_dtype = self._native

    def cache_like(self, layer: LeanLayerCache) -> LeanLayerCache:
        """A copy of another forward's cached layer (a self-drafter starts from the target's
        cache) in this forward's cache dtype and key layout."""
        capacity = layer.values.shape[2]
        shape = (1, self.kv_heads, capacity, self.head_dim)
        out = LeanLayerCache(torch.empty((1, self.kv_heads, self.head_dim, capacity) if self.keys_t else shape,
                                         dtype=self.cache_dtype, device=self.device),
                             torch.empty(shape, dtype=self.cache_dtype, device=self.device), self.keys_t)  # fmt: skip
        out.append(*layer.rows(0, layer.length))
        return out

    def new_cache(self) -> LeanCache:
        shape = (1, self.kv_heads, self.capacity, self.head_dim)
        key_shape = (1, self.kv_heads, self.head_dim, self.capacity) if self.keys_t else shape
        empty = lambda s: torch.empty(s, dtype=self.cache_dtype, device=self.device)  # noqa: E731
        return LeanCache([LeanLayerCache(empty(key_shape), empty(shape), self.keys_t) for _ in self.layers])

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, cache: LeanCache, logits_to_keep: int = 0,
                parents: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """Logits of ``ids`` [1, n] after the cached tokens. ``parents`` [n] (a token tree):
        entry i is the block index of token i's parent, -1 for the last cached token; each
        token then sees the cache and its own ancestors, at the position of its depth."""
        return self.forward_many([Block(ids, cache, logits_to_keep, parents)])[0]

    __call__ = forward

    @torch.inference_mode()
    def forward_many(self, blocks: list[Block]) -> list[torch.Tensor]:
        """Each block's logits (as ``forward`` gives them), the blocks of several sequences in
        one pass: their rows share every product, norm and activation (row-wise arithmetic),
        and only attention runs per block, on the block's own cache. A lone block is computed
        op for op as before; in a batch a row rounds as alone where the products are
        row-invariant up to the batch's rows (``batch_rows``, which callers check)."""
        merge = all(b.ids.shape[1] <= MERGE_MAX_TOKENS for b in blocks)  # blocks, not the batch
        ids = blocks[0].ids if len(blocks) == 1 else torch.cat([b.ids for b in blocks], 1)
        x = self.embed(ids)  # Gemma3TextScaledWordEmbedding: the lookup times sqrt(hidden)
        preps = [self._prepare(b, x) for b in blocks]
        rope = None
        if len(blocks) > 1:
            rope = {kind: tuple(torch.cat([p.rope[kind][i] for p in preps], 1) for i in range(2))
                    for kind in preps[0].rope}  # fmt: skip
        glued = self.glue is not None and merge
        if glued:
            return self._finish(blocks, self._glued_layers(x, preps, rope))
        for index, (layer, kind) in enumerate(zip(self.layers, self.layer_types)):
            residual = x
            h = _rms(x, *layer.norms["input_layernorm"])
            h = self._attention(h, layer, kind, index, preps, merge, rope)
            x = residual + _rms(h, *layer.norms["post_attention_layernorm"])
            residual = x
            h = _rms(x, *layer.norms["pre_feedforward_layernorm"])
            gate, up = layer.gate_up(h, merge)
            h = layer.down(F.gelu(gate, approximate=self.approximate) * up)
            x = residual + _rms(h, *layer.norms["post_feedforward_layernorm"])
        return self._finish(blocks, _rms(x, *self.final_norm))

    def _glued_layers(self, x: torch.Tensor, preps: list[_Prepared], rope: Any) -> torch.Tensor:
        """The decoder stack with the glue between products in C (``native``): one call for each
        norm-and-residual pair and one for the queries' and keys' norm and rotation."""
        glue = self.glue
        h = glue.rms(x, *self.layers[0].norms["input_layernorm"])
        last = len(self.layers) - 1
        for index, (layer, kind) in enumerate(zip(self.layers, self.layer_types)):
            h = self._attention(h, layer, kind, index, preps, True, rope)
            x, h = glue.add_rms(x, h, layer.norms["post_attention_layernorm"], layer.norms["pre_feedforward_layernorm"])
            gate, up = layer.gate_up.stacked(h).chunk(2, dim=-1)
            h = layer.down(F.gelu(gate, approximate=self.approximate) * up)
            after = self.final_norm if index == last else self.layers[index + 1].norms["input_layernorm"]
            x, h = glue.add_rms(x, h, layer.norms["post_feedforward_layernorm"], after)
        return h

    def _finish(self, blocks: list[Block], x: torch.Tensor) -> list[torch.Tensor]:
        """Each block's logits from the final normed hidden states ``x`` of all blocks' rows."""
        if len(blocks) == 1:
            keep = blocks[0].logits_to_keep
            if keep == CACHE_ONLY:  # a prefill: the 262k-column head is a sixth of its time
                return [x.new_empty(0, 0)]
            return [self.logits_of(x[:, -keep:] if keep else x)[0]]
        rows, start = [], 0
        for b in blocks:
            n = b.ids.shape[1]
            keep = n if b.logits_to_keep == 0 else max(b.logits_to_keep, 0)  # CACHE_ONLY: none
            rows.append(x[:, start + n - keep : start + n])
            start += n
        if not any(r.shape[1] for r in rows):
            return [x.new_empty(0, 0) for _ in blocks]
        logits = self.logits_of(torch.cat(rows, 1))[0]
        return list(logits.split([r.shape[1] for r in rows]))

    def batch_rows(self, limit: int) -> int:
        """The most rows a batch of blocks may hold so that every row rounds as in its own
        block: the largest M <= ``limit`` for which each product of the model (q/k/v, output,
        gate/up, down, the output head) gives every row of an M-row block the bits of the same
        row computed alone (a decode step's form, ``pad_row`` included), for all of 2..M.
        Kernels are chosen by shape, so one layer's products stand for all; kept per limit."""
        if limit in self._batch_rows:
            return self._batch_rows[limit]
        layer, config = self.layers[0], self.body.config
        g = torch.Generator().manual_seed(0)

        def stacked(linears: Any) -> Callable[[torch.Tensor], torch.Tensor]:
            return lambda x: torch.cat(linears(x, True), -1)

        hidden = config.hidden_size
        products = [(stacked(layer.qkv), hidden), (layer.o, self.heads * self.head_dim),
                    (stacked(layer.gate_up), hidden), (layer.down, config.intermediate_size),
                    (self.logits_of, hidden)]  # fmt: skip
        best = limit
        with torch.inference_mode():
            for product, width in products:
                x = (torch.randn(1, limit, width, generator=g) * torch.logspace(-1, 1, limit)[:, None]).to(self.dtype)
                alone = [product(x[:, i : i + 1])[0, 0] for i in range(limit)]
                for m in range(2, best + 1):
                    block = product(x[:, :m])[0]
                    if any(not torch.equal(block[i], alone[i]) for i in range(m)):
                        best = m - 1
                        break
        self._batch_rows[limit] = best
        return best

    def _prepare(self, block: Block, x: torch.Tensor) -> _Prepared:
        """A block's positions, attention masks and rotary tables."""
        n = block.ids.shape[1]
        past = block.cache.get_seq_length()
        if block.parents is None:
            positions = torch.arange(past, past + n, device=x.device).unsqueeze(0)
            masks = self._masks(past, n, x.dtype, x.device)
        else:
            ancestors, depth = tree_ancestors(block.parents)
            positions = (past + depth).to(x.device).unsqueeze(0)
            masks = self._tree_masks(past, ancestors, depth, x.dtype, x.device)
        rope = {kind: self.rotary(x[:, :n], positions, kind) for kind in set(self.layer_types)}
        return _Prepared(n, block.cache, masks, rope)

    def _attention(self, h: torch.Tensor, layer: _Layer, kind: str, index: int, preps: list[_Prepared],
                   merge: bool, rope: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None) -> torch.Tensor:  # fmt: skip
        """The attention sublayer of every block: q/k/v and output products over all rows, the
        rest per block on its own cache. ``rope``: the blocks' rotary tables end to end, with
        which a stacked product's rows are normed and rotated all at once (row-wise arithmetic:
        each row as in its own block), leaving only the cache and attention per block."""
        stacked = layer.qk_norm is not None and merge and layer.qkv.fused
        qkv = layer.qkv.stacked(h) if stacked else layer.qkv(h, merge)
        heads = self._heads(qkv, layer, rope[kind]) if stacked and rope is not None else None
        outs, start = [], 0
        for prep in preps:
            rows = slice(start, start + prep.n)
            start += prep.n
            if heads is not None:
                q, k, v = (t[:, :, rows] for t in heads)
            else:
                block = qkv[:, rows] if stacked else [t[:, rows] for t in qkv]
                q, k, v = self._heads(block, layer, prep.rope[kind])
            outs.append(self._attend(q, k, v, layer, prep.masks[layer.sliding], prep.cache.layers[index]))
        return layer.o(outs[0] if len(outs) == 1 else torch.cat(outs, 1))

    def _heads(self, qkv: torch.Tensor | list[torch.Tensor], layer: _Layer,
               rope: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        """Queries, keys, values [1, heads, n, head_dim], normed and rotated, from ``qkv``: the
        stacked product's rows (queries and key normed and rotated together) or the three
        projections."""
        n = qkv.shape[1] if isinstance(qkv, torch.Tensor) else qkv[0].shape[1]
        shape = (1, n, -1, self.head_dim)
        cos, sin = (t.unsqueeze(1) for t in rope)
        if isinstance(qkv, torch.Tensor):
            # bf16 blocks: the queries and the key, side by side in the stacked product's output,
            # are normed and rotated together (per row the same arithmetic as apart, bit for bit:
            # tests/test_models_lean.py), which halves the small ops of this part of the layer
            columns = (self.heads + self.kv_heads) * self.head_dim
            if self.glue is not None:
                qk = self.glue.qk_rope(qkv, self.heads + self.kv_heads, self.head_dim, *layer.qk_norm, *rope)
            else:
                qk = _rms(qkv[..., :columns].reshape(shape).transpose(1, 2), *layer.qk_norm)
                qk = qk * cos + _rotate_half(qk) * sin
            q, k = qk[:, : self.heads], qk[:, self.heads :]
            v = qkv[..., columns:].reshape(shape).transpose(1, 2)
        else:
            q, k, v = (t.reshape(shape).transpose(1, 2) for t in qkv)
            q = _rms(q, *layer.norms["q_norm"])
            k = _rms(k, *layer.norms["k_norm"])
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
        return q, k, v

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: _Layer, mask: torch.Tensor | None,
                layer_cache: LeanLayerCache) -> torch.Tensor:  # fmt: skip
        """One block's attention on its cache, before the output product."""
        n = q.shape[2]
        keys, values = layer_cache.append(k, v)
        groups, length = self.heads // self.kv_heads, values.shape[2]
        # bf16 blocks: the query heads of a key/value head as rows of one product (``rows``),
        # instead of copying the keys and values once per query head (repeat_kv, as transformers)
        rows = (1, self.kv_heads, groups * n) if groups > 1 and layer.qkv.fused and n <= MERGE_MAX_TOKENS else None
        if keys.dtype != q.dtype:  # a float32 cache: blocks attend in float32, a prefill as HF does
            if rows is not None or self.quantize == "int8":
                q = q.to(keys.dtype)
            else:
                keys, values = keys.to(q.dtype), values.to(q.dtype)
        keys_t = keys if layer_cache.keys_t else keys.transpose(2, 3)  # [1, kv_heads, head_dim, length]
        if rows is not None:
            weights = torch.matmul(q.reshape(*rows, self.head_dim), keys_t).view(1, self.heads, n, length)
        else:
            if groups > 1:
                if layer_cache.keys_t:
                    keys_t = keys_t[:, :, None].expand(1, self.kv_heads, groups, self.head_dim, length).reshape(
                        1, self.heads, self.head_dim, length)  # fmt: skip
                else:  # Hugging Face's repeat_kv, then its transposed view
                    keys_t = keys[:, :, None].expand(1, self.kv_heads, groups, length, self.head_dim).reshape(
                        1, self.heads, length, self.head_dim).transpose(2, 3)  # fmt: skip
                values = values[:, :, None].expand(1, self.kv_heads, groups, length, self.head_dim).reshape(
                    1, self.heads, length, self.head_dim)  # fmt: skip
            weights = torch.matmul(q, keys_t)
        weights = weights * self.scaling
        if mask is not None:
            weights = weights + mask
        weights = F.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
        if rows is not None:
            out = torch.matmul(weights.view(*rows, length), values).view(1, self.heads, n, self.head_dim)
        else:
            out = torch.matmul(weights, values)
        return out.transpose(1, 2).contiguous().reshape(1, n, -1).to(self.dtype)

    def _masks(self, past: int, n: int, dtype: torch.dtype, device: torch.device) -> dict[bool, Any]:
        """Additive masks {sliding: mask or None} for n queries after ``past`` cached tokens."""
        total = past + n
        query = torch.arange(past, total, device=device)[:, None]
        key = torch.arange(total, device=device)[None, :]
        out: dict[bool, Any] = {}
        for sliding in (False, True):
            allowed = key <= query
            if sliding and self.window is not None:
                allowed = allowed & (key > query - self.window)
            if bool(allowed.all()):
                out[sliding] = None
            else:
                out[sliding] = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(
                    ~allowed, torch.finfo(dtype).min)  # fmt: skip
        return out

    def _tree_masks(self, past: int, ancestors: torch.Tensor, depth: torch.Tensor, dtype: torch.dtype,
                    device: torch.device) -> dict[bool, torch.Tensor]:  # fmt: skip
        """Additive masks {sliding: mask} for a token tree after ``past`` cached tokens
        (``tree_mask``; sliding layers with the model's window)."""
        return {sliding: tree_mask(past, ancestors, depth, dtype, device, self.window if sliding else None)
                for sliding in (False, True)}  # fmt: skip


def tree_mask(past: int, ancestors: torch.Tensor, depth: torch.Tensor, dtype: torch.dtype, device: torch.device,
              window: int | None = None) -> torch.Tensor:  # fmt: skip
    """Additive mask [n, past + n] for a token tree after ``past`` cached tokens (``ancestors``,
    ``depth``: ``tree_ancestors``): each token sees the cache and its own ancestors, and with a
    sliding ``window`` no key a window or more behind its position."""
    n = len(depth)
    allowed = torch.cat([torch.ones(n, past, dtype=torch.bool), ancestors], dim=1)
    if window is not None:
        query = (past + depth)[:, None]
        key = torch.cat([torch.arange(past), past + depth])[None, :]
        allowed = allowed & (key > query - window)
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed.to(device), torch.finfo(dtype).min)


def tree_ancestors(parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(ancestors [n, n] bool: token j is token i's ancestor or i itself, depth [n]: 0 for a
    child of the cache) of a block whose token i has parent ``parents[i]`` < i (-1: the cache)."""
    parents = [int(p) for p in parents]
    n = len(parents)
    ancestors = torch.eye(n, dtype=torch.bool)
    depth = torch.zeros(n, dtype=torch.long)
    for i, p in enumerate(parents):
        if not -1 <= p < i:
            raise ValueError(f"tree parents must point back (parents[{i}] = {p}): nodes in topological order")
        if p >= 0:
            ancestors[i] |= ancestors[p]
            depth[i] = depth[p] + 1
    return ancestors, depth


def _layer_norms(layer: torch.nn.Module, attn: torch.nn.Module) -> dict[str, tuple[torch.Tensor, float]]:
    return {name: _norm_weights(getattr(m, name)) for m in (layer, attn) for name in (
        "input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
        "post_feedforward_layernorm", "q_norm", "k_norm") if hasattr(m, name)}  # fmt: skip


def _norm_weights(norm: torch.nn.Module) -> tuple[torch.Tensor, float]:
    return (1.0 + norm.weight.float()), norm.eps


def _rms(x: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma3RMSNorm: normalised in float32, times (1 + weight), back in x's dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * scale).type_as(x)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
