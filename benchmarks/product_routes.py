"""Routes for the lean forward's products, measured: oneDNN, a hand-written AVX-512 BF16 kernel, int8.

A bf16 decode step spends most of its time in the products of 18 layers and the output head.
This times, for the default target's shapes (Gemma-3-270M: per layer q/k/v 1536 x 640, o 640 x
1024, gate/up 4096 x 640, down 640 x 2048; head 262,144 x 640) and blocks of 1 to 16 rows:

* ``onednn``: the lean forward's prepacked oneDNN products (``lean.Linear``), what runs today;
* ``kernel``: a plain AVX-512 BF16 dot-product kernel (``vdpbf16ps``, fp32 sums, two weight rows
  by up to eight input rows per tile, threads over weight rows), built with
  ``torch.utils.cpp_extension.load_inline`` where the CPU lists ``avx512_bf16``; each output is
  summed in the same order whatever the block size, so its rows equal its one-row products by
  construction;
* ``int8``: torch's weight-only int8 product (``_weight_int8pack_mm``, one scale per row), the
  weights of a quantized target;
* ``w8a8``: int8 weights and int8 activations through oneDNN's quantized product
  (``onednn::qlinear_pointwise``, VNNI / AMX-INT8), each activation row quantized with its own
  scale (dynamic, symmetric) and the int32 sums scaled back per row, so a row's result does not
  depend on the other rows of its block (integer sums are exact).

The layers are timed all 18 in a row on distinct weights (200 MB, more than the cache holds, as
in a forward), the head on its own; medians of rounds where the routes alternate.

    .venv/bin/python benchmarks/product_routes.py -o benchmarks/results/product_routes.json
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from babelspec import lean
from babelspec.fileio import emit_json
from babelspec.machine import cpu_flags, execution_info

LAYER_SHAPES = ((1536, 640), (640, 1024), (4096, 640), (640, 2048))
HEAD_SHAPE = (262_144, 640)
LAYERS = 18

KERNEL = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

static inline void tile(const at::BFloat16* x, const at::BFloat16* w, float* out, int64_t K, int64_t m0,
                        int64_t mc, int64_t n, int64_t N, int64_t nr) {
  __m512 acc[8][2];
  for (int i = 0; i < 8; ++i) { acc[i][0] = _mm512_setzero_ps(); acc[i][1] = _mm512_setzero_ps(); }
  const at::BFloat16* w0 = w + n * K;
  const at::BFloat16* w1 = w + (n + (nr > 1 ? 1 : 0)) * K;
  for (int64_t k = 0; k < K; k += 32) {
    __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void*)(w0 + k));
    __m512bh b1 = (__m512bh)_mm512_loadu_si512((const void*)(w1 + k));
    for (int64_t i = 0; i < mc; ++i) {
      __m512bh a = (__m512bh)_mm512_loadu_si512((const void*)(x + (m0 + i) * K + k));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], a, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], a, b1);
    }
  }
  for (int64_t i = 0; i < mc; ++i) {
    out[(m0 + i) * N + n] = _mm512_reduce_add_ps(acc[i][0]);
    if (nr > 1) out[(m0 + i) * N + n + 1] = _mm512_reduce_add_ps(acc[i][1]);
  }
}

torch::Tensor product(torch::Tensor x, torch::Tensor w) {
  int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  TORCH_CHECK(K % 32 == 0 && w.size(1) == K && x.is_contiguous() && w.is_contiguous());
  auto y = torch::empty({M, N}, x.options().dtype(torch::kFloat32));
  const at::BFloat16* xp = x.data_ptr<at::BFloat16>();
  const at::BFloat16* wp = w.data_ptr<at::BFloat16>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, (N + 1) / 2, 64, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      int64_t n = 2 * g, nr = std::min<int64_t>(2, N - n);
      for (int64_t m0 = 0; m0 < M; m0 += 8) tile(xp, wp, yp, K, m0, std::min<int64_t>(8, M - m0), n, N, nr);
    }
  });
  return y.to(torch::kBFloat16);
}
"""


def _kernel():
    if "avx512_bf16" not in cpu_flags():
        return None
    from torch.utils.cpp_extension import load_inline

    return load_inline(name="babelspec_bench_bf16_rows_omp", cpp_sources=KERNEL, functions=["product"],
                       extra_cflags=["-O3", "-fopenmp", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16"],
                       extra_ldflags=["-fopenmp"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,2,5,9,16")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("-o", "--output")
    args = parser.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    torch.manual_seed(0)
    layers = [[(torch.randn(shape) * 0.05).bfloat16() for shape in LAYER_SHAPES] for _ in range(LAYERS)]
    head = (torch.randn(HEAD_SHAPE) * 0.05).bfloat16()
    kernel = _kernel()
    routes = {"onednn": lambda w: lean.Linear(w), "int8": lambda w: _int8(w), "w8a8": lambda w: _w8a8(w)}
    if kernel is not None:
        routes["kernel"] = lambda w: (lambda x: kernel.product(x, w))
    built = {name: ([[make(w) for w in layer] for layer in layers], make(head)) for name, make in routes.items()}

    times: dict[tuple[str, str, int], list[float]] = {}
    for _ in range(args.rounds):
        for m in rows:
            xs = {k: torch.randn(m, k).bfloat16() for k in (640, 1024, 2048)}
            for name, (layer_products, head_product) in built.items():
                t0 = time.perf_counter()
                for layer in layer_products:
                    for product, (_, k) in zip(layer, LAYER_SHAPES):
                        product(xs[k])
                t1 = time.perf_counter()
                head_product(xs[640])
                t2 = time.perf_counter()
                times.setdefault((name, "layers", m), []).append(t1 - t0)
                times.setdefault((name, "head", m), []).append(t2 - t1)

    out: dict = {"benchmark": "product_routes", "rounds": args.rounds, "threads": torch.get_num_threads(),
                 "execution": execution_info(None, torch.bfloat16), "kernel_built": kernel is not None, "ms": {}}  # fmt: skip
    for (name, part, m), values in sorted(times.items()):
        out["ms"].setdefault(name, {}).setdefault(part, {})[str(m)] = round(statistics.median(values) * 1e3, 3)
    out["ratio_to_onednn"] = {name: {part: {m: round(out["ms"]["onednn"][part][m] / t, 3) for m, t in by_m.items()}
                                     for part, by_m in parts.items()}
                              for name, parts in out["ms"].items() if name != "onednn"}  # fmt: skip
    x = torch.randn(16, 640).bfloat16()
    w8a8 = _w8a8(head[:4096].contiguous())
    out["w8a8_rows_equal_one_row"] = all(torch.equal(w8a8(x)[i], w8a8(x[i : i + 1])[0]) for i in range(16))
    if kernel is not None:  # its rows equal its one-row products, bit for bit
        x = torch.randn(16, 640).bfloat16()
        block = kernel.product(x, head[:4096].contiguous())
        out["kernel_rows_equal_one_row"] = all(
            torch.equal(block[i], kernel.product(x[i : i + 1].contiguous(), head[:4096].contiguous())[0])
            for i in range(16))  # fmt: skip
    emit_json(out, args.output)


def _w8a8(weight: torch.Tensor):
    rows, scales = lean.quantize_int8(weight)
    packed = torch.ops.onednn.qlinear_prepack(rows, [1, rows.shape[1]])
    w_scales, zeros = scales.float(), torch.zeros(rows.shape[0], dtype=torch.long)

    def product(x: torch.Tensor) -> torch.Tensor:
        flat = x.float()
        s = flat.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
        qx = (torch.round(flat / s) + 128).to(torch.uint8)
        y = torch.ops.onednn.qlinear_pointwise(qx, 1.0, 128, packed, w_scales, zeros, None, 1.0, 0, torch.float32,
                                               "none", [], "")  # fmt: skip
        return (y * s).to(torch.bfloat16)

    return product


def _int8(weight: torch.Tensor):
    rows, scales = lean.quantize_int8(weight)
    return lambda x: torch._weight_int8pack_mm(x, rows, scales)


if __name__ == "__main__":
    main()
