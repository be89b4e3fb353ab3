"""The compile route for the lean forward, measured: inductor over the whole decoder stack.

The lean bf16 forward spends most of a decode step in oneDNN's prepacked products and the rest in
small operations (norms, rotary, residuals, casts, attention). This compiles the decoder stack
of 18 layers as one graph with ``torch.compile`` (inductor, ``dynamic=True``, ``fullgraph``),
its products and its attention on the cache kept as opaque custom operators (inductor cannot
trace oneDNN's packed weights, and the cache grows), so inductor fuses everything between them:
each RMSNorm, the rotary, the residual adds and the GELU gate into a few C++ loops. Side by side
in one process against the lean forward, every cell once per round in a rotated order, medians:
decode and verification blocks, the first call of each block size (compilation), whether the
logits equal the lean forward's bit for bit, and whether the compiled forward keeps the fast
mode's property that a verification row equals the decode row of the same token.

    .venv/bin/python benchmarks/compiled_forward.py -o benchmarks/results/compiled_forward.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from babelspec import lean
from babelspec.fileio import emit_json
from babelspec.machine import execution_info
from babelspec.models import DEFAULT_TARGET
from babelspec.target import load_target

_PRODUCTS: list[tuple[torch.Tensor, bool, int]] = []  # (packed weight, pad_row, out features)
_STATE: dict[str, object] = {}  # the forward being compiled and the block being run


@torch.library.custom_op("babelspec_bench::product", mutates_args=())
def _product(x: torch.Tensor, index: int) -> torch.Tensor:
    packed, pad_row, _ = _PRODUCTS[index]
    return lean._packed_product(x, packed, pad_row)


@_product.register_fake
def _(x: torch.Tensor, index: int) -> torch.Tensor:
    return x.new_empty(*x.shape[:-1], _PRODUCTS[index][2])


@torch.library.custom_op("babelspec_bench::attend", mutates_args=())
def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, index: int) -> torch.Tensor:
    forward, prep = _STATE["lean"], _STATE["prep"]
    layer = forward.layers[index]
    return forward._attend(q, k, v, layer, prep.masks[layer.sliding], prep.cache.layers[index])


@_attend.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, index: int) -> torch.Tensor:
    return q.new_empty(1, q.shape[2], q.shape[1] * q.shape[3])


_LAYERS: list[dict] = []  # per layer: the lean layer and its products' indices


def _stack(x: torch.Tensor, cos_full: torch.Tensor, sin_full: torch.Tensor, cos_sliding: torch.Tensor,
           sin_sliding: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """The decoder stack of the lean forward in ``_STATE``, its products and attention the custom
    operators above (module globals, as dynamo traces them fastest: a bound method's ``self``
    and a closure's cells measured 1.2-1.3x slower per call)."""
    f = _STATE["lean"]
    n, heads, kv_heads, dim = x.shape[1], f.heads, f.kv_heads, f.head_dim
    columns = (heads + kv_heads) * dim
    for index, d in enumerate(_LAYERS):
        layer = d["layer"]
        cos, sin = (cos_sliding, sin_sliding) if layer.sliding else (cos_full, sin_full)
        residual = x
        h = lean._rms(x, *layer.norms["input_layernorm"])
        qkv = torch.ops.babelspec_bench.product(h, d["qkv"])
        qk = lean._rms(qkv[..., :columns].reshape(1, n, heads + kv_heads, dim).transpose(1, 2), *layer.qk_norm)
        qk = qk * cos + lean._rotate_half(qk) * sin
        q, k = qk[:, :heads], qk[:, heads:]
        v = qkv[..., columns:].reshape(1, n, kv_heads, dim).transpose(1, 2)
        a = torch.ops.babelspec_bench.attend(q.contiguous(), k.contiguous(), v.contiguous(), index)
        h = torch.ops.babelspec_bench.product(a, d["o"])
        x = residual + lean._rms(h, *layer.norms["post_attention_layernorm"])
        residual = x
        h = lean._rms(x, *layer.norms["pre_feedforward_layernorm"])
        gate_up = torch.ops.babelspec_bench.product(h, d["gate_up"])
        # slices, not split(): split's outputs measured 5x the custom operator's overhead
        gate, up = gate_up[..., : d["inter"]], gate_up[..., d["inter"] :]
        h = torch.ops.babelspec_bench.product(F.gelu(gate, approximate=f.approximate) * up, d["down"])
        x = residual + lean._rms(h, *layer.norms["post_feedforward_layernorm"])
    return lean._rms(x, *f.final_norm)


class CompiledStack:
    """``forward(ids, cache, keep)`` as the lean forward computes it, its decoder stack compiled."""

    def __init__(self, forward: lean.LeanGemma3) -> None:
        if not all(layer.qkv.fused and layer.qk_norm is not None for layer in forward.layers):
            raise SystemExit("the compile route is measured on the fused bf16 lean forward")
        self.lean = forward
        _STATE["lean"] = forward

        def register(linear, out: int) -> int:
            _PRODUCTS.append((linear.packed, linear.pad_row, out))
            return len(_PRODUCTS) - 1

        for layer in forward.layers:
            _LAYERS.append({"layer": layer, "qkv": register(layer.qkv, sum(layer.qkv.sizes)),
                            "o": register(layer.o, layer.o.weight.shape[0]),
                            "gate_up": register(layer.gate_up, sum(layer.gate_up.sizes)),
                            "down": register(layer.down, layer.down.weight.shape[0]),
                            "inter": layer.gate_up.sizes[0]})  # fmt: skip
        self.stack = torch.compile(_stack, dynamic=True, fullgraph=True)

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor, cache: lean.LeanCache, keep: int = 0) -> torch.Tensor:
        f = self.lean
        x = f.embed(ids)
        prep = f._prepare(lean.Block(ids, cache, keep), x)
        _STATE["prep"] = prep
        full, sliding = (tuple(t.unsqueeze(1) for t in prep.rope[kind]) for kind in ("full_attention", "sliding_attention"))
        x = self.stack(x, *full, *sliding)
        return f.logits_of(x[:, -keep:] if keep else x)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=DEFAULT_TARGET)
    ap.add_argument("--blocks", default="1,5,9,16", help="tokens per forward")
    ap.add_argument("--context", type=int, default=64, help="cached tokens before each forward")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("-o", "--output", type=Path)
    args = ap.parse_args()
    blocks = [int(b) for b in args.blocks.split(",")]

    target = load_target(args.target, dtype="bfloat16")
    eager = target.lean
    if eager is None:
        raise SystemExit(f"{args.target} has no lean forward")
    compiled = CompiledStack(eager)
    forwards = {"lean": eager, "compiled": compiled}
    g = torch.Generator().manual_seed(0)
    context = torch.randint(0, 4096, (1, args.context), generator=g)
    caches = {}
    with torch.inference_mode():
        for name in forwards:
            caches[name] = eager.new_cache()
            eager(context, caches[name], lean.CACHE_ONLY)  # the same cache for both

    first_call, equal = {}, {}
    with torch.inference_mode():
        for n in blocks:
            ids = torch.randint(0, 4096, (1, n), generator=g)
            out = {}
            for name, forward in forwards.items():
                t0 = time.perf_counter()
                out[name] = forward(ids, caches[name], n)
                first_call[f"{name} {n}"] = round(time.perf_counter() - t0, 3)
                caches[name].crop(-n)
            equal[n] = torch.equal(out["lean"], out["compiled"])
        # the fast mode's property: each row of a verification block equals the decode step of
        # the same token after the same tokens
        ids = torch.randint(0, 4096, (1, 9), generator=g)
        rows_equal = {}
        for name, forward in forwards.items():
            block = forward(ids, caches[name], 9)
            caches[name].crop(-9)
            alone = [forward(ids[:, i : i + 1], caches[name], 1)[0] for i in range(9)]
            caches[name].crop(-9)
            rows_equal[name] = all(torch.equal(block[i], alone[i]) for i in range(9))

        times: dict[str, list[float]] = {f"{name} {n}": [] for name in forwards for n in blocks}
        cells = list(times)
        for r in range(args.rounds + 2):
            shift = r % len(cells)
            for cell in cells[shift:] + cells[:shift]:
                name, n = cell.rsplit(" ", 1)
                ids = torch.randint(0, 4096, (1, int(n)), generator=g)
                t0 = time.perf_counter()
                forwards[name](ids, caches[name], int(n))
                elapsed = time.perf_counter() - t0
                caches[name].crop(-int(n))
                if r >= 2:
                    times[cell].append(elapsed)
        # why no fusion reaches the weight-read floor: the output head's product alone against
        # reading its bytes once (the floor's own measure, bench forward's weights_read_ms)
        head = target.model.lm_head.weight
        words = head.reshape(-1).view(torch.float32)
        x = torch.randn(1, 1, head.shape[1], generator=g).to(head.dtype)
        head_ms = {"product": [], "read": []}
        for _ in range(args.rounds):
            for name, run in (("product", lambda: eager.logits_of(x)), ("read", words.sum)):
                t0 = time.perf_counter()
                run()
                head_ms[name].append(time.perf_counter() - t0)
    ms = {cell: round(statistics.median(t) * 1e3, 2) for cell, t in times.items()}
    head_ms = {name: round(statistics.median(t) * 1e3, 2) for name, t in head_ms.items()}
    result = {
        "benchmark": "compiled_forward",
        "target": args.target,
        "execution": execution_info(target),
        "torch": torch.__version__,
        "context_tokens": args.context,
        "rounds": args.rounds,
        "median_ms": ms,
        "compiled_over_lean": {n: round(ms[f"compiled {n}"] / ms[f"lean {n}"], 3) for n in blocks},
        "first_call_seconds": first_call,
        "logits_equal_to_lean": equal,
        "verification_rows_equal_decode_rows": rows_equal,
        "output_head_ms": {**head_ms, "product_over_read": round(head_ms["product"] / head_ms["read"], 3)},
    }
    emit_json(result, args.output, indent=2)


if __name__ == "__main__":
    main()
