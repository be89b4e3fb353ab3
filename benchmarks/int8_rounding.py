"""What bounds the int8 self-drafter's acceptance: int8, or the bf16 target's own rounding?

Under sampling a drafter's acceptance is one minus the total variation (TV) between its
distribution and the target's. This teacher-forces five models of the same weights along the
bf16 target's own sampled translations of held-out FLORES-200 sentences (the paper's sampling,
48 tokens), one decode step per token as a drafter runs, each under LANG's restricted head:

* ``float32``: ``head:LANG`` on the float32 model (the weights as published);
* ``bf16``: ``head:LANG`` on the bf16 target (the target's own bits on the restricted columns);
* ``int8``: ``int8:LANG`` (its layers on weight-only int8 copies);
* ``int8, target's context``: the same, its cache holding the bf16 target's keys and values of
  every earlier token, as a self-drafter's commits give it (``SelfDrafter.TARGET_ROWS``);
* ``int8 forward, bf16 weights``: the same forward with each layer's products back on the bf16
  weights (``F.linear``), so that it differs from ``bf16`` only in how its products round.

With ``--drop-sublayers`` it also drops each layer's attention and MLP from the int8 drafter in
turn (their output products return zeros, so the residual passes the sublayer by), the TV to
``bf16`` of each: what self-speculation by layer skipping would cost this model.

It prints the mean TV per position (softmax at temperature 1, the distribution the paper's
top-k/top-p then cuts) and top-1 agreement between pairs, per language, as JSON.

    .venv/bin/python benchmarks/int8_rounding.py -o benchmarks/results/int8_rounding.json
"""

from __future__ import annotations

import argparse
import time

import torch

from babelspec import lean
from babelspec.bench.quant import QUANT_LANGS
from babelspec.bench.tree import flores_prompts, real_root
from babelspec.drafters import make_drafter
from babelspec.engine import generate
from babelspec.fileio import emit_json
from babelspec.machine import execution_info
from babelspec.sampling import SamplingConfig
from babelspec.target import load_target


class Bf16Product(lean._StackedProduct):
    """A stacked product on the bf16 weights themselves (``F.linear``), in an int8 forward's place."""

    __slots__ = ("weight",)

    def __init__(self, weights: list[torch.Tensor]) -> None:
        super().__init__(weights)
        self.weight = self._stack(weights).contiguous()

    def stacked(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.weight)


class Zero(lean._StackedProduct):
    """A sublayer's output product returning zeros: Gemma-3's post-norm of zero is zero, so the
    residual stream passes the sublayer by."""

    __slots__ = ()

    def __init__(self, like: lean._StackedProduct) -> None:
        self.sizes, self.dtype = like.sizes, like.dtype

    def stacked(self, x: torch.Tensor) -> torch.Tensor:
        return x.new_zeros(*x.shape[:-1], sum(self.sizes))


def decode_probs(drafter, sequence: list[int], continuation: int) -> torch.Tensor:
    """[continuation, columns]: the drafter's next-token distribution before each continuation
    token, the prompt prefilled and then one token per forward (a drafter's own steps)."""
    lm = drafter.lm
    lm.reset()
    drafter.head.set_extra([])
    rows = [lm.forward(sequence[:-continuation], logits_to_keep=1).float()]
    for token in sequence[-continuation:-1]:
        rows.append(lm.forward([token], logits_to_keep=1).float())
    return torch.softmax(torch.cat(rows), -1)


def decode_probs_on_target_context(drafter, target, sequence: list[int], continuation: int) -> torch.Tensor:
    """As ``decode_probs``, but before each token the drafter's cache holds the bf16 target's own
    keys and values of every earlier token (what a self-drafter's cache holds when each commit
    takes the target's rows, ``SelfDrafter.TARGET_ROWS``)."""
    lm = drafter.lm
    target.prefill(sequence[:-1])
    theirs = target.cache.layers[: len(lm.lean.layers)]
    lm.reset()
    drafter.head.set_extra([])
    lm.cache.layers = [lm.lean.cache_like(layer) for layer in theirs]
    lm.cached_len = target.cached_len
    rows = []
    for i in range(len(sequence) - continuation - 1, len(sequence) - 1):
        lm.crop_or_replay(i)  # the target's rows before token i; the drafter's own row of it goes
        rows.append(lm.forward([sequence[i]], logits_to_keep=1).float())
    lm.reset()
    return torch.softmax(torch.cat(rows), -1)


def compare(first: list[torch.Tensor], second: list[torch.Tensor]) -> dict[str, float]:
    positions = sum(len(p) for p in first)
    tv = sum(0.5 * (p - q).abs().sum().item() for p, q in zip(first, second, strict=True))
    agree = sum((p.argmax(-1) == q.argmax(-1)).sum().item() for p, q in zip(first, second, strict=True))
    return {"tv": round(tv / positions, 4), "top1_agreement": round(agree / positions, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--langs", default=",".join(QUANT_LANGS))
    parser.add_argument("--prompts-per-lang", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--data-root", default="")
    parser.add_argument("--drop-sublayers", action="store_true", help="also drop each sublayer in turn")
    parser.add_argument("-o", "--output")
    args = parser.parse_args()
    started = time.perf_counter()
    root = real_root("int8_rounding", args.data_root)
    target = load_target("gemma-3-270m", dtype="bfloat16")
    exact = load_target("gemma-3-270m", dtype="float32")
    layers = target.model.model.layers
    out: dict = {"benchmark": "int8_rounding", "prompts_per_lang": args.prompts_per_lang,
                 "max_new_tokens": args.max_new_tokens, "execution": execution_info(target), "langs": {}}  # fmt: skip
    for lang in args.langs.split(","):
        sequences = []
        for i, prompt in enumerate(flores_prompts(lang, target.tokenizer, args.prompts_per_lang, root)):
            run = generate(target, make_drafter("none", target), list(prompt.prompt_ids), gamma=1,
                           max_new_tokens=args.max_new_tokens, sampling=SamplingConfig.paper(seed=i),
                           stop_strings=prompt.stop_strings)  # fmt: skip
            if len(run.token_ids) > 1:
                sequences.append((list(prompt.prompt_ids) + list(run.token_ids), len(run.token_ids)))
        int8 = make_drafter(f"int8:{lang}", target, lang=lang)
        drafters = {"float32": make_drafter(f"head:{lang}", exact, lang=lang),
                    "bf16": make_drafter(f"head:{lang}", target, lang=lang), "int8": int8}  # fmt: skip
        probs = {name: [decode_probs(d, s, n) for s, n in sequences] for name, d in drafters.items()}
        probs["int8, target's context"] = [decode_probs_on_target_context(int8, target, s, n) for s, n in sequences]
        dropped = {}
        if args.drop_sublayers:
            for index, mine in enumerate(int8.lm.lean.layers):
                for kind, part in (("attention", "o"), ("mlp", "down")):
                    kept = getattr(mine, part)
                    setattr(mine, part, Zero(kept))
                    drop = [decode_probs(int8, s, n) for s, n in sequences]
                    dropped[f"layer {index} {kind}"] = compare(drop, probs["bf16"])["tv"]
                    setattr(mine, part, kept)
        for mine, layer in zip(int8.lm.lean.layers, layers, strict=True):
            for kind, weights in lean._weights(layer).items():
                setattr(mine, kind, Bf16Product(weights))
        probs["int8 forward, bf16 weights"] = [decode_probs(int8, s, n) for s, n in sequences]
        pairs = [("bf16", "float32"), ("int8", "float32"), ("int8", "bf16"), ("int8, target's context", "bf16"),
                 ("int8 forward, bf16 weights", "bf16")]
        out["langs"][lang] = {"positions": sum(n for _, n in sequences),
                              **{f"{a} vs {b}": compare(probs[a], probs[b]) for a, b in pairs}}  # fmt: skip
        if dropped:
            out["langs"][lang]["int8 without one sublayer vs bf16: tv"] = dropped
        print(lang, out["langs"][lang], flush=True)
    out["wall_seconds"] = round(time.perf_counter() - started, 1)
    emit_json(out, args.output)


if __name__ == "__main__":
    main()
