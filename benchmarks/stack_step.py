"""What a step of ``gguf:LANG`` on the target's own steps costs, part by part: a plain decode
step, the layers' one-token pass alone (``CausalLM.forward_hidden``), the full output head over 1,
5 and 8 rows (``head_logits``) and the language's restricted head, each timed alone after the same
cache (a prompt of real text), medians of ``--repeats`` calls, printed as JSON.

    .venv/bin/python benchmarks/stack_step.py --lang amh --row-steps -o benchmarks/results/stack_step.json

``--row-steps`` also times plain decode steps of a second target built with
``ForwardOptions(row_steps=False)`` (each layer through the glue's separate calls), interleaved
call by call with the first's on the same tokens and cache length, and checks their logits equal.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from babelspec.data.corpus import monolingual
from babelspec.drafters import make_drafter
from babelspec.fileio import write_text_atomic
from babelspec.forward import ForwardOptions
from babelspec.machine import cpu_model, execution_plan
from babelspec.sampling import SamplingConfig
from babelspec.target import load_target


def median_ms(call, repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times[1:]) * 1e3, 3)


def row_steps_side_by_side(target, ids: list[int], probe: int, repeats: int) -> dict:
    """Decode steps with and without the one-row C layers, interleaved call by call."""
    other = load_target(options=ForwardOptions(row_steps=False))
    assert execution_plan(target)["row_steps"] == "c" and execution_plan(other)["row_steps"] == "block"
    other.prefill(ids)
    times: dict[str, list[float]] = {"on": [], "off": []}
    equal = True
    for i in range(repeats + 1):
        for key, t in (("on", target), ("off", other)):
            length = t.cached_len
            t0 = time.perf_counter()
            logits = t.forward([probe])
            if i:
                times[key].append(time.perf_counter() - t0)
            t.crop_or_replay(length)
            if key == "on":
                mine = logits
            else:
                equal &= torch.equal(mine, logits)
    on, off = (statistics.median(times[k]) * 1e3 for k in ("on", "off"))
    return {"plain_step_ms": round(on, 3), "plain_step_ms_without": round(off, 3), "speedup": round(off / on, 3),
            "logits_equal": equal}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lang", default="amh")
    parser.add_argument("--context", type=int, default=300, help="cached tokens before the step")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--row-steps", action="store_true", help="also time decode steps without the one-row C layers")
    parser.add_argument("-o", "--output")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target()
    drafter = make_drafter(f"gguf:{args.lang}", target)
    ids = target.tokenizer("\n".join(monolingual(args.lang)[:40]))["input_ids"][: args.context]
    target.prefill(ids)
    drafter.start(ids + [ids[-1]], SamplingConfig(greedy=True), torch.Generator())
    length, probe = target.cached_len, ids[-1]

    def then_crop(call):
        def run():
            call()
            target.crop_or_replay(length)
        return run

    hidden = target.forward_hidden([probe])
    target.crop_or_replay(length)
    out = {
        "benchmark": "stack_step", "cpu": cpu_model(), "threads": args.threads, "lang": args.lang,
        "context": len(ids), "repeats": args.repeats, "precision": target.precision,
        "plain_step_ms": median_ms(then_crop(lambda: target.forward([probe])), args.repeats),
        "layers_pass_ms": median_ms(then_crop(lambda: target.forward_hidden([probe])), args.repeats),
        "head_rows_ms": {n: median_ms(lambda n=n: target.head_logits(torch.cat([hidden] * n, 1)), args.repeats)
                         for n in (1, 5, 8)},
        "restricted_head_ms": median_ms(lambda: drafter.head.logits_of(hidden), args.repeats),
        "restricted_head_rows": drafter.head.n_columns,
    }  # fmt: skip
    if args.row_steps:
        out["row_steps"] = row_steps_side_by_side(target, ids, probe, args.repeats)
    text = json.dumps(out, indent=2)
    print(text)
    if args.output:
        write_text_atomic(args.output, text + "\n")


if __name__ == "__main__":
    main()
