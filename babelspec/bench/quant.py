"""The target as its own drafter at lower precision, per language: ``babelspec bench quant``.

``int8:LANG`` drafts with the target's own layers and an output head restricted to LANG's tokens,
on weight-only int8 copies (``lean.Int8Linear``); ``head:LANG`` is the same drafter in the
target's own precision. Side by side with plain decoding and the corpus bigram, on held-out
FLORES-200 translation prompts (``tree.real_sentence_runs``: interleaved per prompt, greedy and
the paper's sampling), per language: α, the cost ratio c, tokens per verification and the
speedup over plain decoding. ``alpha_loss`` is α in the target's precision minus α in int8: what
quantization costs each language's acceptance.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from babelspec.bench.tree import clean, real_root, real_sentence_runs, setting_table
from babelspec.models.presets import DEFAULT_TARGET

QUANT_LANGS = ("amh", "npi", "yor", "ibo", "grn")  # the quick profile's languages and two more


@dataclass
class QuantBenchConfig:
    target: str = DEFAULT_TARGET
    langs: tuple[str, ...] = QUANT_LANGS
    prompts_per_lang: int = 4
    max_new_tokens: int = 48
    gammas: tuple[int, ...] = (4,)  # each drafter at each γ, side by side in the same rounds
    # "head" and "int8..." take each prompt's language; "bigram" is the corpus bigram as shipped
    drafters: tuple[str, ...] = ("head", "int8", "int8:12@", "bigram")
    modes: tuple[str, ...] = ("greedy", "sample")
    data_root: str = ""
    dtype: str = "auto"
    forward: str | None = None  # babelspec's target forward (load_target), None: lean
    options: Any = None  # its ForwardOptions, None: the defaults


def setting_name(spec: str, gamma: int, gammas: tuple[int, ...]) -> str:
    """The spec itself where one γ is run; ``"SPEC γ=G"`` where several are."""
    return spec if len(gammas) == 1 else f"{spec} γ={gamma}"


def spec_for(spec: str, lang: str, bigram: Path) -> str:
    """A drafter spec with the language (``head``, ``int8``, ``int8:K@``) or the bigram filled in."""
    if spec == "bigram":
        return f"ngram:{bigram}"
    if spec in ("head", "int8"):
        return f"{spec}:{lang}"
    if spec.endswith("@"):
        return spec + lang
    return spec


def quant_bench(cfg: QuantBenchConfig, progress: bool = True) -> dict[str, Any]:
    from babelspec.drafters import make_drafter
    from babelspec.machine import execution_info
    from babelspec.target import load_target

    root = real_root("quant", cfg.data_root)
    target = load_target(cfg.target, dtype=cfg.dtype, forward=cfg.forward, options=cfg.options)

    def settings_for(lang: str, bigram: Path) -> dict[str, tuple[Any, int]]:
        settings = {"plain": (make_drafter("none", target), 1)}
        for spec in cfg.drafters:
            drafter = make_drafter(spec_for(spec, lang, bigram), target, lang=lang)
            for gamma in cfg.gammas:
                settings[setting_name(spec, gamma, cfg.gammas)] = (drafter, gamma)
        return settings

    started = time.perf_counter()
    records, settings = real_sentence_runs(target, cfg.langs, cfg.prompts_per_lang, cfg.max_new_tokens,
                                           cfg.modes, root, settings_for, progress)  # fmt: skip
    out: dict[str, Any] = {"benchmark": "quant", "config": asdict(cfg),
                           "wall_seconds": round(time.perf_counter() - started, 1),
                           "threads": torch.get_num_threads(), "execution": execution_info(target), "modes": {}}  # fmt: skip
    for mode in cfg.modes:
        table = setting_table(records, cfg.langs, mode, settings)
        for name in settings:
            full = name.replace("int8", "head", 1) if name.startswith("int8") and ":" not in name else None
            if full in table:  # the same drafter in the target's precision: what int8 costs in α
                table[name]["alpha_loss"] = {lang: table[full]["per_lang"][lang]["alpha"] - row["alpha"]
                                             for lang, row in table[name]["per_lang"].items()}  # fmt: skip
        out["modes"][mode] = table
    return clean(out)
