"""Whether a verification block computes each row as a decode step does, in the lean bf16 forward.

    .venv/bin/python benchmarks/row_invariance.py -o benchmarks/results/row_invariance.json

Greedy speculative output equals greedy plain output when the verifier's logits for a drafted
position are the logits a one-token decode step would give. Three parts, side by side in one
process on the default target in bf16:

1. each product shape of the model (random weights): how many rows of 2- to 16-row blocks differ
   in some bit from the same row computed alone, and from it computed as a padded two-row block;
2. the whole forward, with one-row products padded (the default) and not: rows of verification
   blocks of 2-9 tokens, after 8 context lengths, that differ from token-by-token decoding;
3. the cost: decode (1 token) and verify (5 tokens) forwards with padding and without, interleaved.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from babelspec import lean
from babelspec.lean import Linear


def products(shapes=((640, 2048), (640, 1024), (1536, 640), (4096, 640)), trials: int = 20) -> dict:
    out = {}
    g = torch.Generator().manual_seed(0)
    for n_out, n_in in shapes:
        product = Linear((torch.randn(n_out, n_in, generator=g) * 0.05).bfloat16())
        alone = padded = total = 0
        for trial in range(trials):
            x = (torch.randn(1, 16, n_in, generator=g) * (1 + trial % 4)).bfloat16()
            rows_alone = [product(x[:, j : j + 1])[0, 0] for j in range(16)]
            rows_padded = [product(torch.cat([x[:, j : j + 1]] * 2, 1))[0, 0] for j in range(16)]
            for n in (2, 3, 5, 9, 16):
                block = product(x[:, :n])[0]
                for j in range(n):
                    total += 1
                    alone += not torch.equal(block[j], rows_alone[j])
                    padded += not torch.equal(block[j], rows_padded[j])
        out[f"{n_out}x{n_in}"] = {"block_rows": total, "differ_from_row_alone": alone, "differ_from_padded_row": padded}
    return out


def _targets():
    from babelspec.models import load_model
    from babelspec.target import Target

    model, tokenizer = load_model("gemma-3-270m", dtype="bfloat16")
    padded = Target(model, tokenizer)
    probe = lean.one_row_differs
    lean.one_row_differs = lambda packed, shape: False  # every product, the head too, unpadded
    try:
        unpadded = Target(model, tokenizer)
    finally:
        lean.one_row_differs = probe
    assert not unpadded.lean.layers[0].down.pad_row
    return {"padded": padded, "unpadded": unpadded}


def forwards(targets: dict, contexts=(7, 30, 61, 64, 100, 127, 200, 333)) -> dict:
    g = torch.Generator().manual_seed(1)
    out = {name: {"block_rows": 0, "differ_from_decode": 0} for name in targets}
    for length in contexts:
        prompt = torch.randint(1000, 50000, (length,), generator=g).tolist()
        block = torch.randint(1000, 50000, (9,), generator=g).tolist()
        for name, t in targets.items():
            t.prefill(prompt)
            decoded = [t.forward([block[i]])[0] for i in range(9)]
            t.crop_or_replay(length)
            for n in range(2, 10):
                logits = t.forward(block[:n])
                t.crop_or_replay(length)
                out[name]["block_rows"] += n
                out[name]["differ_from_decode"] += sum(not torch.equal(logits[i], decoded[i]) for i in range(n))
    return out


def costs(targets: dict, context: int = 64, rounds: int = 20) -> dict:
    from babelspec.bench.forward import interleaved_forwards

    times = interleaved_forwards(targets, [1000 + i for i in range(context)], (1, 5), rounds)
    return {f"{n} tokens": {
        "padded_ms": round(statistics.median(times[("padded", n)]) * 1e3, 2),
        "unpadded_ms": round(statistics.median(times[("unpadded", n)]) * 1e3, 2),
        "padded_over_unpadded": round(statistics.median(
            a / b for a, b in zip(times[("padded", n)], times[("unpadded", n)])), 3)} for n in (1, 5)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", type=Path, default=Path("runs/row_invariance.json"))
    args = ap.parse_args()
    from babelspec.fileio import write_text_atomic
    from babelspec.machine import cpu_model

    torch.set_num_threads(torch.get_num_threads())
    targets = _targets()
    figures = {"benchmark": "row_invariance", "threads": torch.get_num_threads(), "cpu": cpu_model(),
               "products": products(), "forwards": forwards(targets), "costs": costs(targets)}
    write_text_atomic(args.output, json.dumps(figures, indent=1) + "\n")
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
