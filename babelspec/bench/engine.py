"""``babelspec bench engine``: the speculative loop's own cost per step, beyond its forwards."""

from __future__ import annotations

import statistics

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from babelspec.drafters.model import ModelDrafter
from babelspec.engine import generate
from babelspec.sampling import SamplingConfig
from babelspec.target import Target


def _tiny_model(vocab: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                         max_position_embeddings=4096, tie_word_embeddings=True)
    return Qwen3ForCausalLM(config).eval()


def engine_overhead(steps: int = 300, gamma: int = 4, vocabs: tuple[int, ...] = (512, 262_144)) -> dict:
    """Median per-step time of the loop minus the target and draft forwards, on tiny models,
    under the paper's sampling settings (top-k 100, top-p 0.9, repetition penalty)."""
    torch.set_num_threads(1)
    figures: dict = {"gamma": gamma, "steps": steps, "sampling": "paper (top-k 100, top-p 0.9, penalty 1.1/16)"}
    for vocab in vocabs:
        target = Target(_tiny_model(vocab, 0))
        drafter = ModelDrafter(_tiny_model(vocab, 1))
        per_step: list[float] = []
        done = 0
        seed = 0
        while done < steps:
            r = generate(target, drafter, [1, 2, 3, 4], gamma=gamma, max_new_tokens=64,
                         sampling=SamplingConfig.paper(seed=seed))
            forwards = r.target_seconds + sum(r.draft_forward_seconds)
            per_step.append((r.wall_seconds - r.prefill_seconds - r.draft_start_seconds - forwards) / r.steps)
            done += r.steps
            seed += 1
        key = f"vocab_{vocab}"
        figures[key] = {"overhead_us_per_step": statistics.median(per_step) * 1e6, "steps": done}
    figures["overhead_us_per_step"] = figures[f"vocab_{vocabs[0]}"]["overhead_us_per_step"]
    figures["goal_us_per_step"] = 300
    figures["meets_goal"] = figures["overhead_us_per_step"] <= 300
    return figures
