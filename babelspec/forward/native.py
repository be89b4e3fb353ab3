"""Row-wise glue for the lean forward's bf16 blocks, in C: one call where the eager forward runs
8-20 small torch operations (an RMSNorm alone is eight: cast, square, mean, add, rsqrt, two
products, cast back).

A bf16 decode step of Gemma-3-270M runs some 1,300 such operations at 3-6 µs each, most of a
drafter's step beside its products. ``torch.compile`` removes the operations but not the cost
of a call: a compiled norm-and-residual region costs 28 µs a call against 32 µs eager, and this
C version 5 µs (``benchmarks/results/native_glue.json``). The functions (``native.c``) are plain C on
raw bf16 buffers, built once per source, compiler, flags and platform with the system's C compiler into the user cache
(``models.cache_dir``) and loaded with ``ctypes``: no torch headers, a build of about a
second, no instructions beyond the compiler's default target but in the attention kernel, which
GCC also builds for AVX2 and AVX-512 and picks among once per process (the same kernel for every
call, so a row's bits never depend on the block), so the same file runs on any x86-64 CPU. Where no compiler is found (or ``ForwardOptions(native=False)``), ``glue()`` is None and the
forward keeps the torch operations.

Each function treats every row alike, so a row gets the same bits alone as in a block; they
round to bf16 where the torch operations round, but sum in their own order, so a value can
differ from the composite operations' in its last bit.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from babelspec.models import cache_dir

SOURCE = Path(__file__).with_name("native.c")
_P, _L, _F, _D = ctypes.c_void_p, ctypes.c_long, ctypes.c_float, ctypes.c_double
SIGNATURES = {  # name -> (argument types, result type)
    "bs_rms": ([_L, _L, _P, _L, _P, _F, _P], None),
    "bs_add_rms": ([_L, _L, _P, _P, _P, _F, _P, _F, _P, _P], None),
    "bs_qk_rope": ([_L, _L, _L, _P, _L, _P, _F, _P, _P, _P], None),
    "bs_certify": ([_L, _L, _P, _P, _F, _F, _P, _P, _P, _F, _F, _F, _F, _P, _L, _P], _L),
    "bs_attend": ([_L, _L, _L, _L, _P, _P, _P, _L, _L, _P, _P, _F, _P, _L], ctypes.c_int),
    "bs_layer_attention": ([_P, _P, _P, _P, _P], ctypes.c_int),
    "bs_layer_down": ([_P, _L, _L, _P, _L, _L, _P, _P, _F, _P, _F, _P, _P, _P], ctypes.c_int),
}


class LayerArgs(ctypes.Structure):
    """``layer_args`` of native.c: what ``bs_layer_attention`` needs of a layer for one row."""

    _fields_ = [("qmm", _P), ("isa", _L), ("threads", _L), ("qkv", _P), ("o", _P), ("gate_up", _P),
                ("qkv_n", _L), ("gate_up_n", _L), ("hidden", _L), ("heads", _L), ("kv_heads", _L), ("dim", _L),
                ("qk_scale", _P), ("qk_eps", _F), ("cos", _P), ("sin", _P), ("keys", _P), ("values", _P),
                ("cap", _L), ("past", _L), ("lo", _P), ("scaling", _F), ("post_scale", _P), ("pre_scale", _P),
                ("post_eps", _F), ("pre_eps", _F)]  # fmt: skip


FLAGS = ("-O3", "-shared", "-fPIC", "-fopenmp")  # -fopenmp: blocks share rows among torch's threads


def _compiler() -> tuple[str, str]:
    """(the C compiler, its version line); a RuntimeError naming the fix when there is none."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler found (set CC, or install gcc)")
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise RuntimeError(f"the C compiler {compiler} does not run: {err}") from None
    return compiler, (version.splitlines() or [""])[0]


def build(source: Path = SOURCE, out_dir: Path | None = None, flags: tuple[str, ...] = FLAGS) -> Path:
    """Compile ``source`` into a shared library named by what made it: the source, the compiler
    and its version, the flags and the platform (kept: a second call finds it; another compiler
    or machine builds its own), written under a temporary name and renamed, so a crash leaves no
    partial file."""
    compiler, version = _compiler()
    key = b"\0".join([source.read_bytes(), compiler.encode(), version.encode(), " ".join(flags).encode(),
                      platform.platform().encode(), platform.machine().encode()])  # fmt: skip
    out_dir = out_dir or cache_dir() / "native"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{source.stem}-{hashlib.sha256(key).hexdigest()[:16]}.so"
    if path.exists():
        return path
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out_dir)
    os.close(fd)
    try:
        done = subprocess.run([compiler, *flags, "-o", tmp, str(source), "-lm", "-lpthread"],
                              capture_output=True, text=True)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{compiler} failed on {source.name}: {done.stderr.strip()[-2000:]}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


class Glue:
    """The C functions over torch tensors: bf16, contiguous rows, on the CPU (``usable``)."""

    def __init__(self, library: Path) -> None:
        self.lib = ctypes.CDLL(str(library))
        for name, (argtypes, restype) in SIGNATURES.items():
            function = getattr(self.lib, name)
            function.argtypes, function.restype = argtypes, restype
        self._rms, self._add_rms = self.lib.bs_rms, self.lib.bs_add_rms
        self._qk_rope = self.lib.bs_qk_rope
        self._certify = self.lib.bs_certify
        self._attend = self.lib.bs_attend
        self._layer_attention = self.lib.bs_layer_attention
        self._layer_down = self.lib.bs_layer_down

    @staticmethod
    def usable(x: torch.Tensor) -> bool:
        return x.dtype == torch.bfloat16 and x.device.type == "cpu"

    def rms(self, x: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
        """Gemma-3's RMSNorm of each row of ``x`` [..., n] (``scale`` = 1 + weight, float32)."""
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.shape[-1]
        self._rms(x.numel() // n, n, x.data_ptr(), n, scale.data_ptr(), eps, out.data_ptr())
        return out

    def add_rms(self, residual: torch.Tensor, h: torch.Tensor, norm: tuple[torch.Tensor, float],
                next_norm: tuple[torch.Tensor, float]) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """(x, y): x = residual + rms(h) under ``norm``, y = rms(x) under ``next_norm``."""
        residual, h = residual.contiguous(), h.contiguous()
        x, y = torch.empty_like(h), torch.empty_like(h)
        n = h.shape[-1]
        self._add_rms(h.numel() // n, n, residual.data_ptr(), h.data_ptr(), norm[0].data_ptr(), norm[1],
                      next_norm[0].data_ptr(), next_norm[1], x.data_ptr(), y.data_ptr())  # fmt: skip
        return x, y

    def qk_rope(self, qkv: torch.Tensor, heads: int, dim: int, scale: torch.Tensor, eps: float,
                cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:  # fmt: skip
        """[1, heads, rows, dim]: the first ``heads`` heads of each row of ``qkv`` [1, rows, width]
        (queries, then keys), each normed under its ``scale`` row and rotated by ``cos``/``sin``
        [1, rows, dim]."""
        qkv, cos, sin = qkv.contiguous(), cos.contiguous(), sin.contiguous()
        rows = qkv.shape[1]
        out = qkv.new_empty(1, heads, rows, dim)
        self._qk_rope(rows, heads, dim, qkv.data_ptr(), qkv.shape[-1], scale.data_ptr(), eps, cos.data_ptr(),
                      sin.data_ptr(), out.data_ptr())  # fmt: skip
        return out


    def attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, past: int, lo: torch.Tensor,
               mask: torch.Tensor, scaling: float) -> torch.Tensor:  # fmt: skip
        """[1, n, heads * dim]: attention of ``q`` [1, heads, n, dim] over the bf16 cache buffers
        ``keys`` and ``values`` [1, kv_heads, capacity, dim] (the block's own keys cached at ``past``..),
        read as the floats they are,
        each row with a decode step's arithmetic (``bs_attend``): row i sees cache positions
        ``lo[i]``..``past`` and the block entries j where ``mask[i, j]``. Blocks of 2 or more
        rows share their rows among torch's OpenMP threads (a row's arithmetic is the same on any)."""
        q = q.contiguous()
        _, heads, n, dim = q.shape
        kv_heads, capacity = keys.shape[1], keys.shape[2]
        assert keys.is_contiguous() and values.is_contiguous() and keys.dtype == values.dtype == torch.bfloat16
        lo, mask = lo.contiguous(), mask.contiguous()
        out = q.new_empty(1, n, heads * dim)
        if self._attend(n, kv_heads, heads // kv_heads, dim, q.data_ptr(), keys.data_ptr(), values.data_ptr(),
                        capacity, past, lo.data_ptr(), mask.data_ptr(), scaling, out.data_ptr(),
                        torch.get_num_threads()) != 0:  # fmt: skip
            raise MemoryError(f"no memory for the attention of a {n}-token block")
        return out

    def layer_attention(self, args: LayerArgs, x: torch.Tensor, h: torch.Tensor, gate_up: torch.Tensor,
                        scratch: torch.Tensor) -> None:  # fmt: skip
        """One row through a layer's attention half (``bs_layer_attention``): ``x`` and ``h`` in
        place, the gate/up product into ``gate_up``; the key and value cached at ``args.past``."""
        if self._layer_attention(ctypes.byref(args), x.data_ptr(), h.data_ptr(), gate_up.data_ptr(),
                                 scratch.data_ptr()) != 0:  # fmt: skip
            raise MemoryError("no memory for a layer's one-row step")

    def layer_down(self, args: LayerArgs, down: Any, act: torch.Tensor, post: tuple[torch.Tensor, float],
                   after: tuple[torch.Tensor, float], x: torch.Tensor, h: torch.Tensor, scratch: torch.Tensor) -> None:  # fmt: skip
        """The down product of one row's activation ``act``, the residual add and the next norm
        (``bs_layer_down``): ``x`` and ``h`` in place."""
        if self._layer_down(args.qmm, args.isa, args.threads, down._handle, down.k, args.hidden, act.data_ptr(),
                            post[0].data_ptr(), post[1], after[0].data_ptr(), after[1], x.data_ptr(), h.data_ptr(),
                            scratch.data_ptr()) != 0:  # fmt: skip
            raise MemoryError("no memory for a layer's one-row step")

    def certify(self, k: int, sums: tuple[torch.Tensor, torch.Tensor], scales: tuple[float, float],
                per_token: tuple[torch.Tensor, ...], per_row: tuple[float, ...], cap: int) -> torch.Tensor | None:
        """The certified head's candidates of one row (``bs_certify``): the token ids, ascending,
        that may hold one of the ``k`` largest logits; None where more than ``cap``. ``sums``: the
        int8 sums of the two activation levels (float32 [vocab], a token left out at -2**100),
        ``scales`` theirs; ``per_token``: the bound's factors e, s, c (bf16 [vocab], rounded up);
        ``per_row``: hr, ho, dn, extra."""
        v = sums[0].numel()
        scratch = torch.empty(v + 2 * (v // 128 + 2), dtype=torch.float32)
        out = torch.empty(cap, dtype=torch.long)
        e, s, c = per_token
        n = self._certify(v, k, sums[0].data_ptr(), sums[1].data_ptr(), *scales, e.data_ptr(), s.data_ptr(),
                          c.data_ptr(), *per_row, scratch.data_ptr(), cap, out.data_ptr())  # fmt: skip
        return None if n < 0 else out[:n]


@lru_cache(maxsize=1)
def glue() -> Glue | None:
    """The built glue, or None where it cannot be built here (the torch operations then run,
    and the bf16 forward keeps its cache in bf16: the last bits of results change; a warning
    says so once, and every result records it in its execution plan). Whether a forward uses it
    is ``ForwardOptions.native``."""
    try:
        return Glue(build())
    except (RuntimeError, OSError) as err:
        warnings.warn(f"babelspec's C glue is unavailable ({err}); the bf16 forward runs the torch operations "
                      "and a bf16 cache instead (slower, and the last bits of results differ)", stacklevel=2)
        return None
