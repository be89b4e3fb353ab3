"""Prefill throughput of the gguf default against the bf16 target: a 300-token prompt (Nepali
text from the bundled corpus) prefilled by each, alternating, 6 rounds (the first dropped).

    .venv/bin/python benchmarks/gguf_prefill.py -o benchmarks/results/gguf_prefill.json
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from babelspec.data.corpus import monolingual
from babelspec.fileio import emit_json
from babelspec.machine import execution_info
from babelspec.models import DEFAULT_TARGET
from babelspec.target import load_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("-o", "--output")
    args = parser.parse_args()
    targets = {"gguf": load_target(DEFAULT_TARGET), "bfloat16": load_target(DEFAULT_TARGET, precision="none", dtype="bfloat16")}
    ids = targets["gguf"].tokenizer("\n".join(monolingual("npi")[:80]))["input_ids"][: args.tokens]
    times: dict[str, list[float]] = {name: [] for name in targets}
    for r in range(args.rounds):
        for name, target in targets.items() if r % 2 == 0 else list(targets.items())[::-1]:
            started = time.perf_counter()
            target.prefill(ids)
            times[name].append(time.perf_counter() - started)
    rate = {name: round(len(ids) / statistics.median(t[1:]), 1) for name, t in times.items()}
    emit_json({"benchmark": "gguf_prefill", "prompt_tokens": len(ids), "rounds": args.rounds, "tokens_per_s": rate,
               "gguf_over_bf16": round(rate["gguf"] / rate["bfloat16"], 3), "threads": torch.get_num_threads(),
               "execution": execution_info(targets["gguf"])}, args.output)  # fmt: skip


if __name__ == "__main__":
    main()
