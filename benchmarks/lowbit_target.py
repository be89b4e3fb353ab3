"""Two targets that read fewer bytes than bf16, measured as verifiers: int4 weights, and llama.cpp.

llama.cpp decodes the default GGUF about twice as fast as babelspec's bf16 target because it
reads its quantized weights as they are (Q4_K_M: Q5_0 q/k/v/gate/up, Q4_K or Q6_K output and
down projections, Q8_0 output head; about 240 MB against bf16's 540 MB). Two ways to give the
speculative loop such a verifier, each measured against the bf16 target:

* ``w4``: the bf16 target's products on torch's int4 CPU product (``int4_drafter.Int4Linear``,
  4-bit weights with a bf16 scale and zero per 32 input channels), the output head too or kept
  bf16 (``w4, head bf16``);
* ``llama.cpp``: the GGUF as llama.cpp runs it, driven as a verifier would drive it: a block of
  tokens through llama-cpp-python's context after a 100-token prompt, the cache cut back after.

For each: the decode time (one token) and the time of verification blocks of 2-16 tokens in
decode steps (medians of rounds in which the models alternate), whether every row of a block is
bit-equal to the row decoded one token at a time (what keeps speculative decoding lossless
with respect to the model that runs), and teacher-forced top-1 agreement with bf16 on the bf16
target's greedy translations of held-out FLORES-200 sentences (``bench.agreement``). For
llama.cpp also its own speculative decoding (llama-cpp-python's prompt lookup, 10 tokens a
draft) against its plain greedy decoding on the same prompts: where their outputs part.

    .venv/bin/python benchmarks/lowbit_target.py -o benchmarks/results/lowbit_target.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import torch
from int4_drafter import Int4Linear

from babelspec import lean
from babelspec.bench.agreement import teacher_forced_agreement
from babelspec.bench.llamacpp import open_llama_cpp
from babelspec.bench.tree import flores_prompts, real_root
from babelspec.drafters import make_drafter
from babelspec.engine import generate
from babelspec.fileio import emit_json
from babelspec.machine import execution_info
from babelspec.models import DEFAULT_TARGET
from babelspec.sampling import SamplingConfig
from babelspec.target import Target, load_target

LANGS = ("amh", "npi", "yor", "grn", "ibo", "oci")
PROMPT = list(range(1000, 1100))  # the context a timed block follows
BLOCK = list(range(2000, 2016))  # the timed blocks' tokens
PAUSE = 0.5  # seconds before each model's turn


def w4_target(group: int, head: bool) -> Target:
    """The bf16 target with every layer's products (and its output head, if ``head``) on int4."""
    target = load_target(DEFAULT_TARGET, dtype="bfloat16")
    forward = target.lean
    for module, layer in zip(forward.body.layers, forward.layers):
        for kind, weights in lean._weights(module).items():
            setattr(layer, kind, Int4Linear(weights, group))
        layer.qk_norm = lean._qk_norm(layer.norms, forward.heads, forward.kv_heads)
    if head:
        forward.logits_of.project = Int4Linear([forward.logits_of.weight], group)
    forward.quantize = "w4"
    target.reset()
    return target


class LlamaVerifier:
    """A block of tokens at a time through llama.cpp's context, its logits for every row, and the
    cache cut back (the calls a babelspec verifier over llama.cpp would make)."""

    def __init__(self, threads: int) -> None:
        self.model = open_llama_cpp(DEFAULT_TARGET, threads, n_ctx=512)
        self.ctx, self.batch = self.model.llama._ctx, self.model.llama._batch  # llama-cpp-python's own
        self.vocab = self.model.llama.n_vocab()
        self.length = 0

    def prefill(self, ids: list[int]) -> None:
        self.ctx.kv_cache_seq_rm(-1, 0, -1)
        self.length = 0
        self.forward(ids)

    def forward(self, ids: list[int]) -> np.ndarray:
        self.batch.set_batch(ids, self.length, True)
        self.ctx.decode(self.batch)
        self.length += len(ids)
        return np.ctypeslib.as_array(self.ctx.get_logits(), shape=(len(ids), self.vocab)).copy()

    def crop(self, length: int) -> None:
        if not self.ctx.kv_cache_seq_rm(-1, length, -1):
            raise RuntimeError(f"llama.cpp could not cut its cache back to {length} tokens")
        self.length = length

    def close(self) -> None:
        self.model.close()


class TorchVerifier:
    """The same calls on a babelspec target."""

    def __init__(self, target: Target) -> None:
        self.target = target

    def prefill(self, ids: list[int]) -> None:
        self.target.prefill(ids)

    def forward(self, ids: list[int]) -> np.ndarray:
        return self.target.forward(ids).numpy()

    def crop(self, length: int) -> None:
        self.target.crop_or_replay(length)


def rows_equal_decode(model: TorchVerifier | LlamaVerifier, blocks: list[int]) -> dict[str, bool]:
    """For each block size: are the block's logits bit-equal to the same tokens decoded one by one?"""
    model.prefill(PROMPT)
    alone = np.concatenate([model.forward([t]) for t in BLOCK[: max(blocks)]])
    out = {}
    for k in blocks:
        model.crop(len(PROMPT))
        out[str(k)] = bool(np.array_equal(model.forward(BLOCK[:k]), alone[:k]))
    return out


def block_seconds(models: dict[str, TorchVerifier | LlamaVerifier], blocks: list[int], rounds: int) -> dict[str, dict[int, float]]:
    """Median seconds of a block of each size after ``PROMPT``, the models alternating per round.
    Each model's turn starts the same way whatever ran before it: a pause, then an untimed decode."""
    seconds: dict[str, dict[int, list[float]]] = {name: {k: [] for k in blocks} for name in models}
    for model in models.values():
        model.prefill(PROMPT)
    for _ in range(rounds):
        for name, model in models.items():
            time.sleep(PAUSE)
            model.forward(BLOCK[:1])  # untimed
            model.crop(len(PROMPT))
            for k in blocks:
                started = time.perf_counter()
                model.forward(BLOCK[:k])
                seconds[name][k].append(time.perf_counter() - started)
                model.crop(len(PROMPT))
    return {name: {k: statistics.median(v) for k, v in per.items()} for name, per in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", type=int, default=32, help="int4 input channels per scale and zero")
    parser.add_argument("--blocks", default="1,2,3,4,5,6,8,9,12,16", help="block sizes timed (1: decode)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--langs", default=",".join(LANGS))
    parser.add_argument("--prompts-per-lang", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--lookup", type=int, default=10, help="llama.cpp prompt lookup's tokens a draft")
    parser.add_argument("--data-root", default="")
    parser.add_argument("-o", "--output")
    args = parser.parse_args()
    if not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"):
        raise SystemExit(f"torch {torch.__version__} has no int4 product for the CPU")
    blocks = sorted({1, *(int(b) for b in args.blocks.split(","))})
    if max(blocks) > len(BLOCK):
        raise SystemExit(f"--blocks: at most {len(BLOCK)} tokens a block")
    langs = tuple(args.langs.split(","))
    root = real_root("lowbit_target", args.data_root)
    threads = torch.get_num_threads()

    base = load_target(DEFAULT_TARGET, dtype="bfloat16")
    w4, w4_head_bf16 = w4_target(args.group, head=True), w4_target(args.group, head=False)
    models = {"bf16": TorchVerifier(base), "w4": TorchVerifier(w4), "w4, head bf16": TorchVerifier(w4_head_bf16),
              "llama.cpp": LlamaVerifier(threads)}  # fmt: skip
    timed = block_seconds(models, blocks, args.rounds)
    out: dict[str, Any] = {"benchmark": "lowbit_target", "group": args.group, "rounds": args.rounds,
                           "execution": execution_info(base), "models": {}}  # fmt: skip
    for name, model in models.items():
        decode = timed[name][1]
        out["models"][name] = {
            "decode_ms": round(1000 * decode, 2),
            "decode_over_bf16": round(decode / timed["bf16"][1], 3),
            "block_in_decode_steps": {str(k): round(s / decode, 2) for k, s in timed[name].items() if k > 1},
            "block_rows_equal_decode_rows": rows_equal_decode(model, [k for k in blocks if k > 1])}  # fmt: skip
        print(name, out["models"][name], flush=True)
    models["llama.cpp"].close()

    # agreement with bf16, teacher-forced on bf16's own greedy translations
    llama = open_llama_cpp(DEFAULT_TARGET, threads, logits_all=True)
    others = {"w4": w4, "w4, head bf16": w4_head_bf16, "llama.cpp": llama}
    plain_cpp, lookup_cpp = llama, open_llama_cpp(DEFAULT_TARGET, threads, lookup=args.lookup)
    runs = []
    for lang in langs:
        for p in flores_prompts(lang, base.tokenizer, args.prompts_per_lang, root):
            ids = list(p.prompt_ids)
            tokens = generate(base, make_drafter("none", base), ids, max_new_tokens=args.max_new_tokens,
                              sampling=SamplingConfig(greedy=True), stop_strings=p.stop_strings).token_ids  # fmt: skip
            row = {"lang": lang, "tokens": len(tokens)}
            for name, other in others.items():
                row[name] = teacher_forced_agreement(base, other, ids, tokens)
            plain, looked = (m.generate(ids, args.max_new_tokens) for m in (plain_cpp, lookup_cpp))
            row["llama_cpp_lookup_parts_at"] = next((i for i, (a, b) in enumerate(zip(plain, looked)) if a != b), None)
            runs.append(row)
            print(row, flush=True)

    def pooled(rows: list[dict], name: str) -> float:
        return round(sum(r[name] * r["tokens"] for r in rows) / sum(r["tokens"] for r in rows), 3)

    out["agreement_with_bf16"] = {name: {"all": pooled(runs, name),
                                         **{lang: pooled([r for r in runs if r["lang"] == lang], name) for lang in langs}}
                                  for name in others}  # fmt: skip
    parted = [r["llama_cpp_lookup_parts_at"] for r in runs]
    out["llama_cpp_lookup_vs_plain"] = {"prompts": len(parted), "outputs_part": sum(p is not None for p in parted),
                                        "parts_at": parted, "lookup": args.lookup}  # fmt: skip
    out["prompts_per_lang"], out["max_new_tokens"], out["runs"] = args.prompts_per_lang, args.max_new_tokens, runs
    emit_json(out, args.output)


if __name__ == "__main__":
    main()
