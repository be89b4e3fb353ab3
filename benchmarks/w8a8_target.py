"""A W8A8 target, measured: speed against bf16 and agreement with it, per language.

``benchmarks/product_routes.py`` found oneDNN's int8 product (``onednn::qlinear_pointwise``,
int8 weights and activations, exact int32 sums) reading the 262k-row output head in half bf16's
time, flat over 1-9 rows. This builds the whole default target that way in-script (it is not a
babelspec mode): every product of the 18 layers (and with ``--head`` the output head) on int8
weights, one scale per weight row, each activation row quantized with its own scale after
SmoothQuant's per-channel smoothing (Xiao et al. 2023: ``s_j = max|X_j|^a / max|W_j|^(1-a)``,
the activation divided and the weight multiplied by ``s``), calibrated on FLORES-200 dev-split
prompts. On held-out FLORES-200 test translations it measures plain greedy decode tokens/s of
bf16 and of W8A8, the first token where their greedy outputs part, and the teacher-forced top-1
agreement (W8A8's arg-max on bf16's own output, position by position), per language.

    .venv/bin/python benchmarks/w8a8_target.py --alpha 0.5 --head -o benchmarks/results/w8a8_target.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from babelspec import lean
from babelspec.bench.tree import flores_prompts, real_root
from babelspec.data.real import real_data
from babelspec.distill.data import task_prompts
from babelspec.drafters import make_drafter
from babelspec.engine import generate
from babelspec.fileio import write_text_atomic
from babelspec.machine import execution_info
from babelspec.models import DEFAULT_TARGET
from babelspec.sampling import SamplingConfig
from babelspec.target import load_target

LANGS = ("amh", "npi", "yor", "grn", "ibo", "oci")


class W8A8:
    """Quacks as ``lean.Linears``: the stacked projections on int8 weights and activations."""

    fused = True
    calibrating = False  # while true: record each input channel's largest magnitude, compute in bf16

    def __init__(self, weights: list[torch.Tensor]) -> None:
        self.weight = weights[0] if len(weights) == 1 else torch.cat([w.detach() for w in weights])
        self.sizes = [w.shape[0] for w in weights]
        self.amax = torch.zeros(self.weight.shape[1])
        self.smooth: torch.Tensor | None = None

    def build(self, alpha: float) -> None:
        w = self.weight.detach().float()
        if alpha > 0:
            s = self.amax.clamp(min=1e-5) ** alpha / w.abs().amax(0).clamp(min=1e-5) ** (1 - alpha)
            self.smooth, w = 1.0 / s, w * s[None, :]
        rows, scales = lean.quantize_int8(w)
        self.packed = torch.ops.onednn.qlinear_prepack(rows, [1, rows.shape[1]])
        self.scales, self.zeros = scales.float(), torch.zeros(rows.shape[0], dtype=torch.long)

    def merges(self, x: torch.Tensor) -> bool:
        return True

    def stacked(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1]).float()
        if W8A8.calibrating:
            self.amax = torch.maximum(self.amax, flat.abs().amax(0))
            return torch.nn.functional.linear(x, self.weight)
        if self.smooth is not None:
            flat = flat * self.smooth
        s = flat.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
        qx = (torch.round(flat / s) + 128).to(torch.uint8)
        y = torch.ops.onednn.qlinear_pointwise(qx, 1.0, 128, self.packed, self.scales, self.zeros, None, 1.0, 0,
                                               torch.float32, "none", [], "")  # fmt: skip
        return (y * s).to(torch.bfloat16).view(*x.shape[:-1], -1)

    def __call__(self, x: torch.Tensor, merge: bool | None = None) -> torch.Tensor | list[torch.Tensor]:
        out = self.stacked(x)
        return out if len(self.sizes) == 1 else list(out.split(self.sizes, dim=-1))


def quantized(target, head: bool) -> list[W8A8]:
    forward = target.lean
    products: list[W8A8] = []
    for layer, module in zip(forward.layers, forward.body.layers):
        attn, mlp = module.self_attn, module.mlp
        layer.qkv = W8A8([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
        layer.o = W8A8([attn.o_proj.weight])
        layer.gate_up = W8A8([mlp.gate_proj.weight, mlp.up_proj.weight])
        layer.down = W8A8([mlp.down_proj.weight])
        layer.qk_norm = lean._qk_norm(layer.norms, forward.heads, forward.kv_heads)
        products += [layer.qkv, layer.o, layer.gate_up, layer.down]
    if head:
        project = W8A8([target.model.lm_head.weight])
        softcap = target.model.config.final_logit_softcapping
        forward.logits_of = lambda h: torch.tanh(project(h) / softcap) * softcap if softcap else project(h)
        products.append(project)
    return products


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alpha", type=float, default=0.5, help="SmoothQuant's migration strength (0: none)")
    parser.add_argument("--head", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--prompts-per-lang", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--data-root", default="")
    parser.add_argument("-o", "--output")
    args = parser.parse_args()
    root = real_root("w8a8_target", args.data_root)
    base = load_target(DEFAULT_TARGET, dtype="bfloat16")
    quant = load_target(DEFAULT_TARGET, dtype="bfloat16")
    products = quantized(quant, args.head)
    W8A8.calibrating = True
    for lang in LANGS:  # calibration on dev-split prompts, never the test sentences measured
        real = real_data(lang, root)
        for p in task_prompts("translation", lang, base.tokenizer, "test", 2, sources=(real.shots, real.shots),
                              root=str(root)):  # fmt: skip
            quant.lean.forward(torch.tensor([list(p.prompt_ids)]), quant.lean.new_cache(), logits_to_keep=1)
    W8A8.calibrating = False
    for product in products:
        product.build(args.alpha)

    greedy = SamplingConfig(greedy=True)
    runs = []
    for lang in LANGS:
        for p in flores_prompts(lang, base.tokenizer, args.prompts_per_lang, root):
            ids = list(p.prompt_ids)
            outs = [generate(t, make_drafter("none", t), ids, max_new_tokens=args.max_new_tokens, sampling=greedy,
                             stop_strings=p.stop_strings) for t in (base, quant)]  # fmt: skip
            a, b = (o.token_ids for o in outs)
            parted = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            seq, k = torch.tensor([ids + a]), len(a)
            tops = [t.lean.forward(seq, t.lean.new_cache(), logits_to_keep=k + 1)[:-1].float().argmax(-1)
                    for t in (base, quant)]  # fmt: skip
            runs.append({"lang": lang, "tokens": k, "parted_at": parted,
                         "agreement": float((tops[0] == tops[1]).float().mean()),
                         "bf16_tokens_per_s": outs[0].n_tokens / (outs[0].wall_seconds - outs[0].prefill_seconds),
                         "w8a8_tokens_per_s": outs[1].n_tokens / (outs[1].wall_seconds - outs[1].prefill_seconds)})

    def summary(rows: list[dict]) -> dict:
        return {"teacher_forced_agreement": round(sum(r["agreement"] * r["tokens"] for r in rows)
                                                  / sum(r["tokens"] for r in rows), 3),
                "median_parted_at": statistics.median(r["parted_at"] for r in rows),
                "speedup": round(statistics.median(r["w8a8_tokens_per_s"] / r["bf16_tokens_per_s"] for r in rows), 3)}  # fmt: skip

    out = {"benchmark": "w8a8_target", "alpha": args.alpha, "head": args.head, "execution": execution_info(base),
           "threads": torch.get_num_threads(), "all": summary(runs),
           "per_lang": {lang: summary([r for r in runs if r["lang"] == lang]) for lang in LANGS}, "runs": runs}  # fmt: skip
    text = json.dumps(out, indent=1)
    print(text)
    if args.output:
        write_text_atomic(Path(args.output), text + "\n")


if __name__ == "__main__":
    main()
