"""The bf16 key cache's layout: keys cached transposed against Hugging Face's layout.

    .venv/bin/python benchmarks/attention_keys.py -o benchmarks/results/attention_keys.json

Two parts, each side by side in one process: (1) the product q @ keys^T of one layer's grouped
query rows (4 query heads on 1 key/value head of 256, Gemma-3-270M's shape) over a transposed
view of a [length, head_dim] cache, and over a strided slice of a [head_dim, capacity] one,
with a check that both give the same bits; (2) the default target's lean bf16 forward (1 and 5
tokens) after 64 and 512 cached tokens with each layout, interleaved, median ms and the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch


def _median_us(fn, repeats: int = 400) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def products(lengths=(64, 256, 512, 1024), blocks=(1, 5)) -> dict:
    out = {}
    for length in lengths:
        for n in blocks:
            cache = torch.randn(1, 1, 2048, 256).bfloat16()
            keys = cache[:, :, :length]
            keys_t = cache.transpose(2, 3).contiguous()[..., :length]
            q = torch.randn(1, 1, 4 * n, 256).bfloat16()
            view = _median_us(lambda q=q, keys=keys: torch.matmul(q, keys.transpose(2, 3)))
            strided = _median_us(lambda q=q, keys_t=keys_t: torch.matmul(q, keys_t))
            out[f"length {length}, {n} tokens"] = {
                "transposed_view_us": round(view, 1), "transposed_cache_us": round(strided, 1),
                "ratio": round(view / strided, 3),
                "same_bits": torch.equal(torch.matmul(q, keys.transpose(2, 3)), torch.matmul(q, keys_t))}
    return out


def forwards(contexts=(64, 512), blocks=(1, 5), rounds: int = 15) -> dict:
    from babelspec.bench.forward import interleaved_forwards
    from babelspec.models import load_model
    from babelspec.target import Target

    model, tokenizer = load_model("gemma-3-270m", dtype="bfloat16")
    targets = {"transposed": Target(model, tokenizer), "hf_layout": Target(model, tokenizer)}
    targets["hf_layout"].lean.keys_t = False
    targets["hf_layout"].reset()
    assert targets["transposed"].cache.layers[0].keys_t and not targets["hf_layout"].cache.layers[0].keys_t
    out = {}
    for context in contexts:
        times = interleaved_forwards(targets, [1000 + i % 5000 for i in range(context)], blocks, rounds)
        for n in blocks:
            transposed, hf_layout = times[("transposed", n)], times[("hf_layout", n)]
            out[f"context {context}, {n} tokens"] = {
                "transposed_ms": round(statistics.median(transposed) * 1e3, 2),
                "hf_layout_ms": round(statistics.median(hf_layout) * 1e3, 2),
                "ratio": round(statistics.median(a / b for a, b in zip(hf_layout, transposed)), 3)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", type=Path, default=Path("runs/attention_keys.json"))
    args = ap.parse_args()
    from babelspec.fileio import write_text_atomic
    from babelspec.machine import cpu_model

    figures = {"benchmark": "attention_keys", "threads": torch.get_num_threads(), "cpu": cpu_model(),
               "products": products(), "forwards": forwards()}
    write_text_atomic(args.output, json.dumps(figures, indent=1) + "\n")
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
