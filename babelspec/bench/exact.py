"""``babelspec bench exact``: whether every row of a bf16 block gets the bits of the same row
computed alone after the same cache (the grid of contexts and block sizes, token trees, prefill in
chunks), and what the exact bf16 forward costs (decode, verification, trees, prefill). The earlier
fast path it was once timed against is gone; its numbers stay in
``benchmarks/results/exact_bf16.json``. The gguf default's costs: ``babelspec bench forward
--dtypes gguf,bfloat16``.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from babelspec.errors import UserError
from babelspec.forward import ForwardOptions
from babelspec.forward.gemma3 import CACHE_ONLY, LeanGemma3
from babelspec.target import Target

# the paper's languages with FLORES-200 text (chr and haw have none), by their SIB-200 files
PAPER_FLORES = ("amh", "ber", "grn", "ibo", "npi", "oci", "que", "yor", "zgh")
TREE_PARENTS = (-1, 0, 0, 1, 1, 2, 3, -1, 7, 8, 4, 10, 11, 5, 13, 6)  # two roots, depth up to 6


def _lean(target: Target) -> LeanGemma3:
    if not isinstance(target.impl, LeanGemma3):
        raise UserError("bench exact needs the lean forward (a Gemma-3 text model on the CPU)")
    return target.impl


def _equal_rows(a: torch.Tensor, b: list[torch.Tensor]) -> tuple[bool, float]:
    same = all(torch.equal(a[i], b[i]) for i in range(len(b)))
    return same, 0.0 if same else max((a[i].float() - b[i].float()).abs().max().item() for i in range(len(b)))


def chain_grid(lean: LeanGemma3, ids: list[int], contexts: tuple[int, ...], max_block: int = 16) -> dict:
    """For each context c: one-token steps over tokens c..c+max_block-1, then blocks of 1..max_block
    tokens after the same cache; a cell (c, n) agrees when every row of the block is
    ``torch.equal`` to its step's."""
    x = torch.tensor([ids])
    cells, differ, worst = 0, [], 0.0
    for c in contexts:
        if c + max_block > len(ids):
            raise ValueError(f"context {c} + {max_block} passes the prompt's {len(ids)} tokens")
        cache = lean.new_cache()
        lean.forward(x[:, :c], cache, CACHE_ONLY)
        singles = [lean.forward(x[:, c + i : c + i + 1], cache)[0] for i in range(max_block)]
        cache.crop(-max_block)
        for n in range(1, max_block + 1):
            out = lean.forward(x[:, c : c + n], cache)
            cache.crop(-n)
            cells += 1
            same, gap = _equal_rows(out, singles[:n])
            if not same:
                differ.append([c, n])
                worst = max(worst, gap)
    return {"cells": cells, "differ": len(differ), "differing": differ, "max_abs_logit_gap": worst}


def tree_grid(lean: LeanGemma3, ids: list[int], contexts: tuple[int, ...], parents: tuple[int, ...] = TREE_PARENTS) -> dict:
    """A token tree after each context: every node's row against one-token steps along its path."""
    x, p = torch.tensor([ids]), torch.tensor(parents)
    n = len(parents)
    cells, differ = 0, []
    for c in contexts:
        cache = lean.new_cache()
        lean.forward(x[:, :c], cache, CACHE_ONLY)
        nodes = x[:, c : c + n]
        out = lean.forward(nodes, cache, 0, p)
        cache.crop(-n)
        for i in range(n):
            path, j = [], i
            while j >= 0:
                path.append(j)
                j = parents[j]
            for j in reversed(path):
                row = lean.forward(nodes[:, j : j + 1], cache)[0]
            cache.crop(-len(path))
            cells += 1
            if not torch.equal(row, out[i]):
                differ.append([c, i])
    return {"cells": cells, "differ": len(differ), "differing": differ}


def prefill_chunks(lean: LeanGemma3, ids: list[int], lengths: tuple[int, ...], follow: int = 4) -> dict:
    """A prompt prefilled whole against in 2 and in 3 chunks: the cached keys and values, and the
    logits of the ``follow`` tokens after it."""
    x = torch.tensor([ids])

    def run(chunks: list[int]):
        cache, start = lean.new_cache(), 0
        for n in chunks:
            lean.forward(x[:, start : start + n], cache, CACHE_ONLY)
            start += n
        return cache, lean.forward(x[:, start : start + follow], cache)

    cells, differ = 0, []
    for total in lengths:
        whole_cache, whole = run([total])
        for chunks in ([total // 2, total - total // 2], [total // 3, 5, total - total // 3 - 5], [total - 3, 3]):
            cache, out = run(chunks)
            end = total + follow
            same = torch.equal(out, whole) and all(
                torch.equal(a.keys[..., :end, :], b.keys[..., :end, :]) and torch.equal(a.values[..., :end, :], b.values[..., :end, :])
                for a, b in zip(whole_cache.layers, cache.layers))  # fmt: skip
            cells += 1
            if not same:
                differ.append([total, chunks])
    return {"cells": cells, "differ": len(differ), "differing": differ}


def _median_ms(times: list[float]) -> float:
    return round(statistics.median(times) * 1e3, 3)


def exact_costs(target: str = "gemma-3-270m", root: str | Path | None = None, rounds: int = 15,
                context: int = 300, forward: str | None = None, options: ForwardOptions | None = None) -> dict:  # fmt: skip
    """The exact bf16 forward's costs, each shape once per round in an order reversed every round:
    decode ms/token, verification of 2, 4, 8 and 16 tokens and a token tree of 8 (also in decode
    steps), prefill tokens/s at 300 and 1,000 tokens; and, with ``root`` (a corpora folder), the
    exactness grid on a 4-shot FLORES-200 Amharic prompt. (The numbers of the earlier,
    non-invariant path beside these: ``benchmarks/results/exact_bf16.json``.) ``forward`` and
    ``options`` are ``load_target``'s (the command line's ``--forward``/``--no-native``)."""
    from babelspec.machine import execution_info
    from babelspec.target import load_target

    t = load_target(target, dtype="bfloat16", forward=forward, options=options)
    lean = _lean(t)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, 50_000, (1, 1_100), generator=g)
    tree = torch.tensor([-1, 0, 0, 1, 1, 2, 3, 4])
    shapes = [("decode", 1), ("verify 2", 2), ("verify 4", 4), ("verify 8", 8), ("verify 16", 16), ("tree 8", 8),
              ("prefill 300", 300), ("prefill 1000", 1000)]  # fmt: skip
    times: dict[str, list[float]] = {s: [] for s, _ in shapes}
    for r in range(rounds + 1):  # round 0 warms up and is dropped
        for shape, n in shapes if r % 2 else shapes[::-1]:
            cache = lean.new_cache()
            if not shape.startswith("prefill"):
                lean.forward(ids[:, :context], cache, CACHE_ONLY)
                block = ids[:, context : context + n]
            else:
                block = ids[:, :n]
            t0 = time.perf_counter()
            lean.forward(block, cache, CACHE_ONLY if shape.startswith("prefill") else 0,
                         tree if shape.startswith("tree") else None)  # fmt: skip
            if r:
                times[shape].append(time.perf_counter() - t0)
    decode = statistics.median(times["decode"])
    row: dict = {"decode_ms_per_token": _median_ms(times["decode"])}
    for shape, n in shapes[1:]:
        if shape.startswith("prefill"):
            row[f"{shape} (tokens/s)"] = round(n / statistics.median(times[shape]), 1)
        else:
            row[f"{shape} (ms)"] = _median_ms(times[shape])
            row[f"{shape} (decode steps)"] = round(statistics.median(times[shape]) / decode, 3)
    out: dict = {"machine": execution_info(t), "target": target, "rounds": rounds, "context": context,
                 "exact_rows": list(lean.exact_rows()), "costs": row}  # fmt: skip
    if root is not None:
        from babelspec.bench.tree import flores_prompts

        prompt = list(flores_prompts("amh", t.tokenizer, 1, Path(root))[0].prompt_ids)
        contexts = tuple(c for c in (5, 24, 97, 297) if c + 16 <= len(prompt))
        out["grid"] = {"prompt_tokens": len(prompt), **chain_grid(lean, prompt, contexts)}
    return out
