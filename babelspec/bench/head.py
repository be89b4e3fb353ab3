"""``babelspec bench head``: the certified output head against the full one on the same bf16
target, side by side in one run: forward times (decode and verification blocks) and plain
decoding steps, greedy and under the paper's sampling; per language the certificate
(candidate-set sizes, fallbacks) and an exactness count over real text."""

from __future__ import annotations

import statistics
import time

import torch

from babelspec.drafters import make_drafter
from babelspec.engine import generate
from babelspec.forward import ForwardOptions, HeadRequest
from babelspec.forward.certified import BOUND_TERMS, CertifiedHead
from babelspec.sampling import SamplingConfig
from babelspec.target import Target

PAPER = SamplingConfig.paper()
MODES = ("full", "greedy", "paper")  # the full head; the certified one asked for k = 1; for k = 100 and the penalty's tokens


def _request(mode: str, context: list[int], block: list[int]) -> HeadRequest | None:
    if mode == "full":
        return None
    if mode == "greedy":
        return HeadRequest(1)
    return HeadRequest(100, tuple(sorted(set(context[-PAPER.repetition_window :]) | set(block))))


def _texts(tokenizer, languages: list[str], tokens: int) -> dict[str, list[int]]:
    """``tokens`` ids of each language's bundled sentences, joined (the test split's text side)."""
    from babelspec.data import parallel

    out = {}
    for code in languages:
        pairs = parallel(code)
        text, i = "", 0
        while len(tokenizer(text)["input_ids"]) < tokens and i < len(pairs):
            text, i = (text + " " + pairs[i][1]).strip(), i + 1
        out[code] = tokenizer(text)["input_ids"][:tokens]
    return out


def _forward_times(targets: dict[str, Target], texts: list[list[int]], blocks: tuple[int, ...],
                   rounds: int) -> dict[tuple[str, int], list[float]]:  # fmt: skip
    """Seconds of each mode's forward of n tokens after 64 of a text, every (mode, n) once per
    round in an order rotated per round, round r on text r (mod their number): the languages
    in turn; round 0 warms up and is dropped."""
    cells = [(mode, n) for mode in MODES for n in blocks]
    times: dict[tuple[str, int], list[float]] = {c: [] for c in cells}
    for r in range(rounds + 1):
        context, block_ids = texts[r % len(texts)][:64], texts[r % len(texts)][64:]
        for t in set(targets.values()):
            t.prefill(context)
        shift = r % len(cells)
        for mode, n in cells[shift:] + cells[:shift]:
            t, block = targets[mode], block_ids[:n]
            request = _request(mode, context, block)
            t0 = time.perf_counter()
            t.forward(block, head=request)
            elapsed = time.perf_counter() - t0
            t.crop_or_replay(len(context))
            if r:
                times[(mode, n)].append(elapsed)
    return times


def bound_only(model, tokenizer, block: int, terms: tuple[str, ...] = BOUND_TERMS,
               options: ForwardOptions | None = None) -> Target:  # fmt: skip
    """``model`` with a certified head that certifies every row of blocks up to ``block`` rows,
    whatever its estimated bound: the bound (its ``terms``) alone decides, the speed limits off.
    ``options``: how the rest of the forward computes (``ForwardOptions``; the defaults)."""
    from babelspec.forward import LeanGemma3
    from babelspec.forward.kernels import Linear, OutputHead
    from babelspec.forward.native import glue

    weight = model.lm_head.weight
    linear = Linear(weight, pad_row=True)
    options = options if options is not None else ForwardOptions()
    head = CertifiedHead(weight, linear, glue() if options.native else None, terms=terms, max_rows=block,
                         limits=(float("inf"), float("inf")))  # fmt: skip
    return Target(model, tokenizer, impl=LeanGemma3(model.model, OutputHead(linear, weight, None, head), options))


def needed_logits_differ(row: torch.Tensor, expected: torch.Tensor, request: HeadRequest) -> bool:
    """Whether a certified ``row`` of logits differs from the full head's ``expected`` where
    ``request`` needs it (the k largest, every tie of the k-th, the exact tokens), or anywhere it
    returned a logit at all."""
    needed = expected >= torch.topk(expected, request.k).values[-1]
    needed[list(request.exact)] = True
    computed = torch.isfinite(row)
    return not (computed[needed].all() and torch.equal(row[computed], expected[computed]))


def _exactness(full: Target, certified: Target, ids: list[int], block: int) -> tuple[int, int]:
    """(rows, rows where a needed logit differs): ``ids`` decoded in blocks of ``block`` by both
    targets, the certified one asked for the paper's k = 100 and its penalty's tokens, and then
    for k = 1, in turn."""
    rows = wrong = 0
    full.reset(), certified.reset()
    for n, start in enumerate(range(0, len(ids), block)):
        chunk = ids[start : start + block]
        request = _request("paper" if n % 2 else "greedy", ids[:start], chunk)
        want, got = full.forward(chunk), certified.forward(chunk, head=request)
        rows += len(got)
        wrong += sum(needed_logits_differ(row, expected, request) for row, expected in zip(got, want))
    return rows, wrong


def head_costs(target: str = "gemma-3-270m", languages: tuple[str, ...] = (), positions: int = 10_000,
               blocks: tuple[int, ...] = (1, 2, 4, 8, 9, 12, 16), rounds: int = 22, plain_tokens: int = 24,
               block: int = 4) -> dict:  # fmt: skip
    """The certified head against the full one (``ForwardOptions.head``) on ``target`` in bf16:
    forward times per block size and plain decoding steps per language, all interleaved; the
    certificate per language; exactness over ``positions`` positions of real text spread over
    the languages (every paper language with bundled text by default)."""
    from babelspec.data.corpus import languages_with_data
    from babelspec.machine import execution_info
    from babelspec.models import load_model

    model, tokenizer = load_model(target, dtype="bfloat16")
    full = Target(model, tokenizer)
    t0 = time.perf_counter()
    certified = Target(model, tokenizer, options=ForwardOptions(head="certified"))
    build = time.perf_counter() - t0
    checked = bound_only(model, tokenizer, block)  # exactness and the certificate, every row through the bound
    targets = {"full": full, "greedy": certified, "paper": certified}
    codes = list(languages) or languages_with_data()
    per_language = -(-positions // len(codes))
    texts = _texts(tokenizer, codes, max(per_language, 64 + max(blocks)))
    out: dict = {"benchmark": "head", "target": target, **execution_info(full), "build_seconds": round(build, 1),
                 "languages": {}, "blocks": {}}  # fmt: skip
    times = _forward_times(targets, list(texts.values()), blocks, rounds)
    for n in blocks:
        med = {mode: statistics.median(times[(mode, n)]) * 1e3 for mode in MODES}
        out["blocks"][str(n)] = {**{f"{m}_ms": round(v, 2) for m, v in med.items()},
                                 "greedy_speedup": round(med["full"] / med["greedy"], 3),
                                 "paper_speedup": round(med["full"] / med["paper"], 3)}  # fmt: skip
    for mode in MODES:
        decode = statistics.median(times[(mode, 1)])
        out["blocks"]["1"][f"{mode}_verify_over_decode"] = {
            str(n): round(statistics.median(times[(mode, n)]) / decode, 3) for n in blocks[1:]}
    for code in codes:
        out["languages"][code] = _language(full, certified, checked, texts[code][: max(per_language, 48)],
                                           plain_tokens, block)  # fmt: skip
    rows = sum(v["positions"] for v in out["languages"].values())
    out["positions"] = rows
    out["positions_differing"] = sum(v["positions_differing"] for v in out["languages"].values())
    for key in ("greedy", "paper"):
        ratios = [v[f"plain_{key}_step_speedup"] for v in out["languages"].values()]
        out[f"plain_{key}_step_speedup_median"] = round(statistics.median(ratios), 3)
    return out


def _language(full: Target, certified: Target, checked: Target, ids: list[int], plain_tokens: int, block: int) -> dict:
    """One language: exactness over ``ids`` and the certificate's sizes and fallbacks there
    (``checked``: every row through the bound), and plain decoding steps (greedy, paper) with
    the full and the certified head, interleaved, after its first 48 tokens (with what the
    certified head did there)."""
    head = checked.impl.logits_of.certified
    head.stats.reset()
    rows, wrong = _exactness(full, checked, ids, block)
    stats = head.stats.summary()
    certified.impl.logits_of.certified.stats.reset()
    prompt = ids[:48]
    steps: dict[tuple[str, str], list[float]] = {}
    for r in range(3):
        for name, t in ((("full", full), ("certified", certified)) if r % 2 else (("certified", certified), ("full", full))):
            for key, sampling in (("greedy", SamplingConfig(greedy=True)), ("paper", PAPER)):
                g = generate(t, make_drafter("none", t), prompt, max_new_tokens=plain_tokens, sampling=sampling)
                steps.setdefault((name, key), []).append((g.wall_seconds - g.prefill_seconds) / g.steps)
    med = {k: statistics.median(v) * 1e3 for k, v in steps.items()}
    decoding = certified.impl.logits_of.certified.stats.summary()
    return {"positions": rows, "positions_differing": wrong, **stats,
            "plain_decoding_rows_certified": decoding["rows_certified"],
            "plain_decoding_fallback_rate": decoding["fallback_rate"],
            **{f"plain_{key}_step_ms": {"full": round(med[("full", key)], 2), "certified": round(med[("certified", key)], 2)}
               for key in ("greedy", "paper")},
            **{f"plain_{key}_step_speedup": round(med[("full", key)] / med[("certified", key)], 3)
               for key in ("greedy", "paper")}}  # fmt: skip
