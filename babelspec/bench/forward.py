"""``babelspec bench forward``: decode and verification forward times, and the memory floor of a decode."""

from __future__ import annotations

import statistics
import time

import torch

from babelspec.engine import generate
from babelspec.sampling import SamplingConfig
from babelspec.target import Target


def weights_read_ms(model: torch.nn.Module, repeats: int = 7) -> tuple[float, float]:
    """(MB of the model's weights, median ms to read every byte of them once): the floor of a
    decode step, which streams all of them from memory, on this machine. Each weight is summed
    as float32 words (whatever its dtype, the bytes reinterpreted), a read at about the memory
    bandwidth, where a bf16 sum would be bound by its conversions."""
    weights = list({p.data_ptr(): p.detach() for p in model.parameters()}.values())
    return _read_ms([w.reshape(-1).view(torch.float32) for w in weights if w.is_contiguous() and w.nbytes % 4 == 0],
                    repeats)  # fmt: skip


def _read_ms(words: list[torch.Tensor], repeats: int) -> tuple[float, float]:
    """(MB of ``words``, median ms to sum every one of them once; the first round dropped)."""
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        for w in words:
            w.sum()
        times.append(time.perf_counter() - t0)
    return sum(w.nbytes for w in words) / 1e6, statistics.median(times[1:]) * 1e3


def gguf_weights_read_ms(target: Target, repeats: int = 7) -> tuple[float, float]:
    """``weights_read_ms`` of a gguf target's products: the file's blocks as repacked, each read once."""
    lean = target.lean
    products = [getattr(layer, kind) for layer in lean.layers for kind in ("qkv", "o", "gate_up", "down")]
    tensors = [t for p in [*products, lean.logits_of.project] for w in p.parts
               for t in (w.codes, w.high, w.scales, w.offsets) if t is not None]  # fmt: skip
    return _read_ms([t.reshape(-1).view(torch.uint8)[: t.nbytes // 4 * 4].view(torch.float32) for t in tensors], repeats)


def _interleaved_block_times(targets: dict, names: list, blocks: tuple[int, ...], prompt: list[int],
                             repeats: int) -> dict:  # fmt: skip
    """Seconds of each (target, block size) forward after ``prompt``, every cell once per round
    in an order rotated per round; round 0 warms up and is dropped."""
    context = len(prompt)
    cells = [(name, b) for name in names for b in blocks]
    times: dict[tuple[tuple[str, str], int], list[float]] = {c: [] for c in cells}
    for round_ in range(repeats + 1):  # round 0 warms up and is dropped
        shift = round_ % len(cells)
        for name, b in cells[shift:] + cells[:shift]:
            t = targets[name]
            ids = [prompt[-1]] * b
            t0 = time.perf_counter()
            t.forward(ids)
            elapsed = time.perf_counter() - t0
            t.crop_or_replay(context)
            if round_:
                times[(name, b)].append(elapsed)
    return times


def _dtype_and_forward_ratios(figures: dict, dtypes: tuple[str, ...], forwards: tuple[str, ...]) -> dict:
    """bf16 against float32, the default forward against each other one, today's default plain
    step against the float32 Hugging Face one, where both sides were measured."""
    out: dict = {}
    if "float32" in figures and "bfloat16" in figures:
        f32, b16 = figures["float32"], figures["bfloat16"]
        out["bf16_speedup_decode"] = round(f32["decode_ms"] / b16["decode_ms"], 3)
        out["bf16_speedup_verify"] = {b: round(f32["verify_ms"][b] / b16["verify_ms"][b], 3)
                                      for b in b16["verify_ms"]}
    if "gguf" in figures and "bfloat16" in figures:
        g, b16 = figures["gguf"], figures["bfloat16"]
        out["gguf_speedup_decode"] = round(b16["decode_ms"] / g["decode_ms"], 3)
        out["gguf_speedup_verify"] = {b: round(b16["verify_ms"][b] / g["verify_ms"][b], 3) for b in g["verify_ms"]}
    if len(forwards) > 1:  # the default forward against each other one, per dtype
        both = [d for d in dtypes if d != "gguf"]
        out["forward_speedup_decode"] = {
            f"{d}: {forwards[0]} vs {f}": round(figures[f"{d}/{f}"]["decode_ms"] / figures[d]["decode_ms"], 3)
            for d in both for f in forwards[1:]}  # fmt: skip
        out["forward_speedup_plain_step"] = {
            f"{d}: {forwards[0]} vs {f}": round(figures[f"{d}/{f}"]["plain_generate_step_ms"]
                                                / figures[d]["plain_generate_step_ms"], 3)
            for d in both for f in forwards[1:]}  # fmt: skip
    if "float32/hf" in figures and "bfloat16" in figures:  # today's default against the old one
        out["plain_step_speedup_vs_float32_hf"] = round(
            figures["float32/hf"]["plain_generate_step_ms"] / figures["bfloat16"]["plain_generate_step_ms"], 3)
    return out


def forward_costs(target: str = "gemma-3-270m", dtypes: tuple[str, ...] = ("float32", "bfloat16"),
                  blocks: tuple[int, ...] = tuple(range(1, 10)), repeats: int = 15,
                  context: int = 64, plain_tokens: int = 16,
                  forwards: tuple[str, ...] = ("lean", "hf")) -> dict:  # fmt: skip
    """Decode (1 token) and verify (2-9 tokens) forwards of ``target`` through ``CausalLM``,
    per dtype and forward implementation (``lean``: babelspec's own where the family has one;
    ``hf``: Hugging Face's), all interleaved: every cell once per round, order rotated per round.
    The dtype ``gguf`` is the gguf target mode (``load_target(precision="gguf")``, lean only): its
    floor is the read of the file's blocks as its products hold them.

    Also one plain ``generate`` step (the whole loop around a one-token forward), to show what
    the loop adds to the forward."""
    from babelspec.drafters import make_drafter
    from babelspec.machine import execution_info
    from babelspec.models import load_model
    from babelspec.target import load_target

    names = [(d, f) for d in dtypes for f in forwards if d != "gguf" or f == "lean"]
    targets = {}
    floors = {}
    for dtype in dtypes:
        if dtype == "gguf":
            targets[("gguf", "lean")] = load_target(target, precision="gguf")
            floors[dtype] = gguf_weights_read_ms(targets[("gguf", "lean")])
            continue
        model, tokenizer = load_model(target, dtype=dtype)
        floors[dtype] = weights_read_ms(model)
        for forward in forwards:
            targets[(dtype, forward)] = Target(model, tokenizer, forward=forward)
    prompt = list(range(1000, 1000 + context))
    for t in targets.values():
        t.prefill(prompt)
    times = _interleaved_block_times(targets, names, blocks, prompt, repeats)
    step: dict[tuple[str, str], list[float]] = {name: [] for name in names}
    for round_ in range(3):
        for name in (names if round_ % 2 == 0 else names[::-1]):
            t = targets[name]
            r = generate(t, make_drafter("none", t), prompt, gamma=1, max_new_tokens=plain_tokens,
                         sampling=SamplingConfig(greedy=True))
            step[name].append((r.wall_seconds - r.prefill_seconds - r.draft_start_seconds) / r.steps)
    out: dict = {"benchmark": "forward", "target": target, "context_tokens": context,
                 "repeats": repeats, "threads": torch.get_num_threads(), "dtypes": {}}
    for dtype, forward in names:
        med = {b: statistics.median(times[((dtype, forward), b)]) for b in blocks}
        decode = med[blocks[0]]
        t = targets[(dtype, forward)]
        forward_ms = statistics.median(t.forward_seconds[-plain_tokens:]) * 1e3 if t.forward_seconds else None
        # the default forward under the dtype's name, the others beside it ("bfloat16/hf")
        key = dtype if forward == forwards[0] else f"{dtype}/{forward}"
        out["dtypes"][key] = {
            **execution_info(t),
            "forward": t.impl.kind,
            "decode_ms": round(decode * 1e3, 2),
            "verify_ms": {str(b): round(med[b] * 1e3, 2) for b in blocks[1:]},
            "verify_ratio": {str(b): round(med[b] / decode, 3) for b in blocks[1:]},
            "plain_generate_step_ms": round(statistics.median(step[(dtype, forward)]) * 1e3, 2),
            "plain_generate_forward_ms": round(forward_ms, 2) if forward_ms else None,
            "weights_mb": round(floors[dtype][0], 1),
            "weights_read_ms": round(floors[dtype][1], 2),  # the decode floor: every weight read once
            "decode_over_floor": round(decode * 1e3 / floors[dtype][1], 2),
        }
    out.update(_dtype_and_forward_ratios(out["dtypes"], dtypes, forwards))
    return out
