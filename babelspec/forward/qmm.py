"""Products on a GGUF's own quantized blocks: the ``gguf`` target mode's linear layers and
output head (``forward.gguf``).

A weight is kept as the file keeps it, an integer code per weight and a scale (and for Q4_K an
offset) per group of inputs, repacked at load into panels of 16 output columns that stream
(``QWeight``); nothing is re-quantized. ``qmm.c`` computes ``x @ W^T`` reading each panel once
for every row of a block, with each output's arithmetic fixed whatever the block, the thread count
or the instruction set (its header says how), so a row of a verification block gets the bits of
the row alone. ``KERNELS`` names the paths: the best this CPU runs (``auto``), each instruction
set forced, and ``torch``, the same arithmetic in torch operations where no C compiler is found.

Per weight the panels hold one byte per code, plus a float16 scale per 32 (Q8_0, Q5_0) or a
float32 scale (and offset) per 32 or 16 (Q4_K, Q6_K): 268 MB for Gemma-3-270M, against the
file's 247 and bf16's 535.
"""

from __future__ import annotations

import ctypes
import warnings
import weakref
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from babelspec.errors import UserError
from babelspec.forward import native

SOURCE = Path(__file__).with_name("qmm.c")
FLAGS = ("-O3", "-shared", "-fPIC", "-ffp-contract=off", "-fopenmp")  # no FMA: each path rounds the same steps
KERNELS = ("auto", "avx512", "avx2", "portable", "torch")
_ISA = {"auto": -1, "portable": 0, "avx2": 1, "avx512": 2}
PANEL = 16
FORMATS = ("Q8_0", "Q5_0", "Q4_K", "Q6_K")


class QuantError(UserError):
    """A GGUF tensor this product cannot take (its type or shape), with what to do instead."""


@dataclass(eq=False)
class QWeight:
    """One weight [n, k] as the file holds it; weight = scale * (code - zero) - offset, per group
    of ``g`` inputs. ``codes``: a quad's 64 codes (16 columns x 4 inputs) side by side, uint8
    [n/16, k/4, 64] for 8 bits; for 4 and 5 bits two quads share 64 bytes (low nibbles the first's)
    [n/16, k/8, 64], and 5 bits keep each code's fifth bit in ``high`` (int64 [n/16, k/4], bit i
    of byte i), so a weight costs the file's bits. ``scales`` [n/16, k/g, 16] (float16 or
    float32), ``offsets`` like the scales in float32 or None."""

    codes: torch.Tensor
    high: torch.Tensor | None
    scales: torch.Tensor
    offsets: torch.Tensor | None
    n: int
    k: int
    g: int
    zero: int
    bits: int
    kind: str  # the GGUF type it came from

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.high, self.scales, self.offsets)
                   if t is not None)  # fmt: skip

    def unpacked(self) -> torch.Tensor:
        """The codes, one byte each: uint8 [n/16, k/4, 64]."""
        panels = self.n // PANEL
        if self.bits == 8:
            return self.codes
        pairs = self.codes.view(panels, self.k // 8, 1, 64)
        codes = torch.cat([pairs & 0x0F, pairs >> 4], 2).reshape(panels, self.k // 4, 64)
        if self.high is not None:
            bits = (self.high[..., None] >> torch.arange(64)) & 1
            codes = codes | (bits.to(torch.uint8) << 4)
        return codes

    def rows(self, ids: torch.Tensor) -> QWeight:
        """The weight of output rows ``ids`` alone (in that order), the file's codes and scales
        as they are, padded with zero rows to a multiple of 16: [len(ids) rounded up, k]."""
        ids = torch.as_tensor(ids, dtype=torch.long)
        panel, column = ids // PANEL, ids % PANEL
        quads = self.unpacked().view(self.n // PANEL, self.k // 4, PANEL, 4)
        codes = quads[panel, :, column].reshape(len(ids), self.k)  # [rows, k/4, 4] -> [rows, k]
        per_row = lambda t: t[panel, :, column]  # noqa: E731  [n/16, k/g, 16] -> [rows, k/g]
        scales, offsets = per_row(self.scales), None if self.offsets is None else per_row(self.offsets)
        pad = -len(ids) % PANEL
        if pad:
            codes = torch.cat([codes, torch.full((pad, self.k), self.zero, dtype=codes.dtype)])
            scales = torch.cat([scales, scales.new_zeros(pad, scales.shape[1])])
            offsets = None if offsets is None else torch.cat([offsets, offsets.new_zeros(pad, offsets.shape[1])])
        return _panels(codes.numpy(), scales.numpy(), None if offsets is None else offsets.numpy(), self.g,
                       self.zero, self.bits, self.kind)  # fmt: skip

    def code_matrix(self) -> torch.Tensor:
        """The codes as [n, k] (uint8)."""
        return self.unpacked().view(self.n // PANEL, self.k // 4, PANEL, 4).permute(0, 2, 1, 3).reshape(self.n, self.k)

    def dequantize(self) -> torch.Tensor:
        """The weight's values [n, k] in float32 (float64 steps, then rounded once)."""
        codes = self.code_matrix().double() - self.zero
        scales = self.scales.permute(0, 2, 1).reshape(self.n, self.k // self.g).double()
        w = codes.view(self.n, -1, self.g) * scales[..., None]
        if self.offsets is not None:
            w = w - self.offsets.permute(0, 2, 1).reshape(self.n, -1).double()[..., None]
        return w.reshape(self.n, self.k).float()


def _panels(codes: np.ndarray, scales: np.ndarray, offsets: np.ndarray | None, g: int, zero: int, bits: int,
            kind: str) -> QWeight:  # fmt: skip
    """The panel layout of codes [n, k] uint8 (each below 2**bits) and per-group scales/offsets [n, k/g]."""
    n, k = codes.shape
    if n % PANEL or k % 32:
        raise QuantError(f"a {kind} weight of {n} x {k}: the quantized product needs outputs in multiples of "
                         f"{PANEL} and inputs in multiples of 32; run this model with precision none (bfloat16)")  # fmt: skip
    quads = np.ascontiguousarray(codes.reshape(n // PANEL, PANEL, k // 4, 4).transpose(0, 2, 1, 3)).reshape(n // PANEL, k // 4, 64)
    high = None
    if bits == 8:
        packed = quads
    else:
        pairs = quads.reshape(n // PANEL, k // 8, 2, 64)
        packed = np.ascontiguousarray((pairs[:, :, 0] & 0x0F) | ((pairs[:, :, 1] & 0x0F) << 4))
        if bits == 5:
            high = torch.from_numpy(np.packbits((quads >> 4) & 1, axis=-1, bitorder="little").view("<i8")[..., 0].copy())
    group = lambda a: torch.from_numpy(np.ascontiguousarray(a.reshape(n // PANEL, PANEL, k // g).transpose(0, 2, 1)))  # noqa: E731
    return QWeight(torch.from_numpy(packed), high, group(scales), None if offsets is None else group(offsets), n, k,
                   g, zero, bits, kind)  # fmt: skip


def _blocks(raw: np.ndarray, n: int, size: int) -> np.ndarray:
    return np.ascontiguousarray(raw).reshape(n, -1, size)


def _q8_0(raw: np.ndarray, n: int) -> QWeight:
    b = _blocks(raw, n, 34)
    d = b[..., :2].copy().view(np.float16)[..., 0]
    codes = (b[..., 2:] ^ 0x80).reshape(n, -1)  # int8 q as the byte q + 128
    return _panels(codes, d, None, 32, 128, 8, "Q8_0")


def _q5_0(raw: np.ndarray, n: int) -> QWeight:
    b = _blocks(raw, n, 22)
    d = b[..., :2].copy().view(np.float16)[..., 0]
    high = b[..., 2:6].copy().view("<u4")[..., :1]  # bit j: input j's fifth bit
    bits = ((high >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)
    qs = b[..., 6:22]
    low = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)
    return _panels((low | (bits << 4)).reshape(n, -1), d, None, 32, 16, 5, "Q5_0")


def _q4_k(raw: np.ndarray, n: int) -> QWeight:
    b = _blocks(raw, n, 144)
    d = b[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    dmin = b[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    s = b[..., 4:16].astype(np.uint8)
    # the 6-bit scale and min of each of the 8 sub-blocks of 32 (llama.cpp's get_scale_min_k4)
    sc = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 0x0F) | ((s[..., 0:4] >> 6) << 4)], axis=-1)
    mn = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], axis=-1)
    qs = b[..., 16:144].reshape(n, -1, 4, 32)
    codes = np.stack([qs & 0x0F, qs >> 4], axis=3).reshape(n, -1)  # chunk c: sub-blocks 2c, 2c + 1
    scales = (d[..., None] * sc.astype(np.float32)).reshape(n, -1)  # exact: 11 bits times 6
    offsets = (dmin[..., None] * mn.astype(np.float32)).reshape(n, -1)
    return _panels(codes, scales, offsets, 32, 0, 4, "Q4_K")


def _q6_k(raw: np.ndarray, n: int) -> QWeight:
    b = _blocks(raw, n, 210)
    ql, qh = b[..., 0:128].reshape(n, -1, 2, 64), b[..., 128:192].reshape(n, -1, 2, 32)
    sc = b[..., 192:208].view(np.int8).astype(np.float32)
    d = b[..., 208:210].copy().view(np.float16)[..., 0].astype(np.float32)
    quarters = [(ql[..., :32] & 0x0F) | ((qh & 3) << 4), (ql[..., 32:] & 0x0F) | (((qh >> 2) & 3) << 4),
                (ql[..., :32] >> 4) | (((qh >> 4) & 3) << 4), (ql[..., 32:] >> 4) | (((qh >> 6) & 3) << 4)]  # fmt: skip
    codes = np.stack(quarters, axis=3).reshape(n, -1)  # half h, quarter j: inputs 128h + 32j ..
    scales = (d[..., None] * sc).reshape(n, -1)  # per 16 inputs; exact: 11 bits times 8
    return _panels(codes, scales, None, 16, 32, 8, "Q6_K")


_REPACK = {"Q8_0": _q8_0, "Q5_0": _q5_0, "Q4_K": _q4_k, "Q6_K": _q6_k}


def repack(kind: str, raw: np.ndarray, n: int, k: int, name: str = "") -> QWeight:
    """A GGUF tensor's raw blocks (uint8 [n, bytes per row]) as a ``QWeight`` [n, k]."""
    if kind not in _REPACK:
        raise QuantError(f"tensor {name or '?'} is {kind}; the quantized product takes {', '.join(FORMATS)} "
                         "(run this model with precision none for bfloat16, or requantize the file to one of them)")  # fmt: skip
    weight = _REPACK[kind](raw, n)
    if weight.k != k:
        raise QuantError(f"tensor {name or '?'}: {weight.k} inputs in its blocks, {k} in its shape")
    return weight


def _quantize_rows(x: torch.Tensor, g: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows [m, k] per group of g, as qmm.c's quantize_rows: (q [m, k/g, g], d, sums [m, k/g]),
    all float32 (the codes and sums are whole numbers)."""
    xf = x.float().view(x.shape[0], -1, g)
    d = xf.abs().amax(-1) / 127.0
    inv = torch.where(d != 0, 1.0 / d, torch.zeros_like(d))
    q = torch.round(xf * inv[..., None]).clamp(-127, 127)  # torch.round: to nearest even, as rintf
    return q, d, q.sum(-1)


def product_torch(x: torch.Tensor, parts: list[QWeight], out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """qmm.c's arithmetic in torch operations: [m, k] bf16 -> [m, sum of n] in ``out_dtype``
    (bf16, or float32: the sums unrounded). The codes' dot products are sums of whole numbers
    below 2**24, exact in float32 in any order."""
    outs = []
    rows = {g: _quantize_rows(x, g) for g in {w.g for w in parts}}
    for w in parts:
        q, d, sums = rows[w.g]
        codes = w.code_matrix().view(w.n, -1, w.g).float()
        isum = torch.einsum("mbi,nbi->mnb", q, codes) - w.zero * sums[:, None, :]
        scales = w.scales.permute(0, 2, 1).reshape(w.n, -1).float()
        v = (scales[None] * d[:, None, :]) * isum
        if w.offsets is not None:
            v = v - (w.offsets.permute(0, 2, 1).reshape(w.n, -1)[None] * d[:, None, :]) * sums[:, None, :]
        acc = torch.zeros(x.shape[0], w.n)
        for b in range(v.shape[2]):  # the groups in ascending order
            acc = acc + v[:, :, b]
        outs.append(acc.to(out_dtype))
    return torch.cat(outs, -1)


class _Library:
    def __init__(self, path: Path) -> None:
        self.lib = ctypes.CDLL(str(path))
        P, L = ctypes.c_void_p, ctypes.c_long
        self.new = self.lib.bs_qmm_new
        self.new.argtypes, self.new.restype = [L, L, P, P, P, P, P, P, P, P, P], P
        self.free = self.lib.bs_qmm_free
        self.free.argtypes, self.free.restype = [P], None
        self.qmm = self.lib.bs_qmm
        self.qmm.argtypes, self.qmm.restype = [P, L, P, L, P, L, L, L, L], ctypes.c_int
        self.lib.bs_qmm_best_isa.restype = L
        self.best = ("portable", "avx2", "avx512")[self.lib.bs_qmm_best_isa()]


@lru_cache(maxsize=1)
def library() -> _Library | None:
    """The built product (``qmm.c``), or None where no C compiler builds it here (a warning says
    so once; the products then run ``product_torch``, the same bits, slower)."""
    try:
        return _Library(native.build(SOURCE, flags=FLAGS))
    except (RuntimeError, OSError) as err:
        warnings.warn(f"babelspec's quantized product could not be built ({err}); the gguf target runs it in torch "
                      "operations instead (the same bits, slower)", stacklevel=2)  # fmt: skip
        return None


def _array(kind: type, values: list) -> ctypes.Array:
    return (kind * len(values))(*values)


class QProduct:
    """``x @ W.T`` for one or several weights of one input side by side (q, k, v; gate, up), on
    their quantized blocks: [1, m, k] bf16 -> [1, m, sum of n] in ``out_dtype`` (bf16, as the
    layers take it; float32 for the output head's logits). ``kernel``: one of ``KERNELS``. The
    lean forward's interface: ``fused``, ``stacked`` and the call."""

    fused = True

    def __init__(self, parts: list[QWeight], kernel: str = "auto", out_dtype: torch.dtype = torch.bfloat16) -> None:
        if kernel not in KERNELS:
            raise UserError(f"unknown quantized kernel {kernel!r}; use one of {', '.join(KERNELS)}")
        if len({w.k for w in parts}) != 1 or not 1 <= len(parts) <= 4:
            raise ValueError("a stacked quantized product takes 1 to 4 weights of one input width")
        if out_dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"a quantized product gives bfloat16 or float32, not {out_dtype}")
        self.parts, self.kernel, self.out_dtype = parts, kernel, out_dtype
        self.k, self.n = parts[0].k, sum(w.n for w in parts)
        self.sizes = [w.n for w in parts]
        self.lib = None if kernel == "torch" else library()
        if self.lib is not None:
            if kernel != "auto" and _ISA[kernel] > _ISA[self.lib.best]:
                raise UserError(f"the {kernel} kernel needs instructions this CPU lacks (it runs {self.lib.best})")
            self._isa = _ISA[kernel]
            longs = lambda values: _array(ctypes.c_long, values)  # noqa: E731
            pointers = lambda ts: _array(ctypes.c_void_p, [0 if t is None else t.data_ptr() for t in ts])  # noqa: E731
            handle = self.lib.new(self.k, len(parts), longs([w.n for w in parts]), longs([w.g for w in parts]),
                                  longs([w.zero for w in parts]),
                                  longs([int(w.scales.dtype == torch.float16) for w in parts]),
                                  longs([w.bits for w in parts]), pointers([w.codes for w in parts]),
                                  pointers([w.high for w in parts]), pointers([w.scales for w in parts]),
                                  pointers([w.offsets for w in parts]))  # fmt: skip
            if not handle:
                raise QuantError(f"the quantized product refused weights of {[w.kind for w in parts]} ({self.k} inputs)")
            self._handle = handle  # the weights' tensors stay alive with ``parts``
            self._qmm, self._f32 = self.lib.qmm, int(out_dtype == torch.float32)
            weakref.finalize(self, self.lib.free, handle)

    @property
    def kernel_used(self) -> str:
        """The path that runs: an instruction set, or ``torch``."""
        if self.lib is None:
            return "torch"
        return self.lib.best if self.kernel == "auto" else self.kernel

    def stacked(self, x: torch.Tensor) -> torch.Tensor:
        """The products side by side: [..., k] -> [..., sum of n]. (Called some 75 times a decode
        step: the checks and the call are kept to the few operations they need.)"""
        shape = x.shape
        if x.dtype is not torch.bfloat16 or shape[-1] != self.k:
            raise ValueError(f"a quantized product takes bf16 rows of {self.k}, not {x.dtype} rows of {shape[-1]}")
        if self.lib is None:
            return product_torch(x.reshape(-1, self.k), self.parts, self.out_dtype).view(*shape[:-1], self.n)
        x = x.contiguous()
        m = x.numel() // self.k
        out = torch.empty((*shape[:-1], self.n), dtype=self.out_dtype)
        if self._qmm(self._handle, m, x.data_ptr(), self.k, out.data_ptr(), self.n, self._f32,
                     torch.get_num_threads(), self._isa) != 0:  # fmt: skip
            raise RuntimeError(f"the quantized product refused a block of {m} x {self.k}")
        return out

    def __call__(self, x: torch.Tensor, merge: bool | None = None) -> torch.Tensor | list[torch.Tensor]:
        """One weight's product; several weights' products apart (as ``Linears``)."""
        out = self.stacked(x)
        return out if len(self.parts) == 1 else list(out.split(self.sizes, dim=-1))

    def merges(self, x: torch.Tensor) -> bool:
        return True
