"""babelspec's drafters for any transformers causal LM, as a call shaped like ``model.generate``.

transformers' ``generate`` takes no custom candidate generator, so this runs babelspec's
speculative loop on the model's own forward (Hugging Face's, not babelspec's lean one: the
arithmetic is the model's as transformers computes it). Verification keeps the output exact:
greedy decoding gives ``model.generate(do_sample=False)``'s tokens, and sampling draws from the
model's warped distribution (temperature, then top-k, then top-p, as transformers warps)::

    from transformers import AutoModelForCausalLM, AutoTokenizer
    from babelspec.integrations.transformers import generate

    model = AutoModelForCausalLM.from_pretrained(PATH)
    tokenizer = AutoTokenizer.from_pretrained(PATH)
    ids = tokenizer("Translate to Yoruba: Good morning.", return_tensors="pt").input_ids
    out = generate(model, ids, tokenizer=tokenizer, drafter="ngram:yor.ngram", max_new_tokens=64)
    print(tokenizer.decode(out[0, ids.shape[1]:]))

``drafter`` is any babelspec drafter spec (``ngram:FILE``, ``auto`` with ``lang`` and ``task``,
``model:PATH``, ...) or a built ``Drafter``.
"""

from __future__ import annotations

from typing import Any

import torch

from babelspec.drafters import Drafter, make_drafter
from babelspec.drafters.base import resolve_gamma
from babelspec.engine import GenerationResult
from babelspec.engine import generate as speculative_generate
from babelspec.errors import UserError
from babelspec.sampling import SamplingConfig
from babelspec.target import Target

__all__ = ["generate", "generate_with_stats"]


def _prompt(input_ids: Any) -> list[int]:
    ids = torch.as_tensor(input_ids)
    if ids.dim() == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.dim() != 1 or ids.numel() == 0 or ids.dtype not in (torch.int64, torch.int32):
        raise UserError(f"input_ids must be one non-empty sequence of token ids ([1, n] or [n] integers), "
                         f"got shape {tuple(torch.as_tensor(input_ids).shape)}; generate one prompt per call")  # fmt: skip
    return ids.tolist()


def generate_with_stats(model: torch.nn.Module, input_ids: Any, *, tokenizer: Any = None,
                        drafter: str | Drafter = "none", lang: str | None = None, task: str | None = None,
                        gamma: int | None = None, max_new_tokens: int = 128, do_sample: bool = False,
                        temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                        repetition_penalty: float = 1.0, repetition_window: int = 16, seed: int = 0,
                        eos_token_id: int | list[int] | None = None) -> tuple[torch.Tensor, GenerationResult]:  # fmt: skip
    """``generate``'s tensor and babelspec's record of the generation (α, steps, timings)."""
    prompt = _prompt(input_ids)
    sampling = SamplingConfig(greedy=not do_sample, temperature=temperature, top_k=top_k, top_p=top_p,
                              repetition_penalty=repetition_penalty, repetition_window=repetition_window,
                              seed=seed)  # fmt: skip
    target = Target(model, tokenizer, forward="hf")
    if isinstance(drafter, str):
        context = {k: v for k, v in (("lang", lang), ("task", task)) if v is not None}
        drafter = make_drafter(drafter, target, **context)
    if eos_token_id is None:
        eos_token_id = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    eos = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id or [])
    result = speculative_generate(target, drafter, prompt, gamma=resolve_gamma(gamma, drafter),
                                  max_new_tokens=max_new_tokens, sampling=sampling, eos_token_ids=eos)  # fmt: skip
    return torch.tensor([prompt + result.token_ids], dtype=torch.long), result


def generate(model: torch.nn.Module, input_ids: Any, **options: Any) -> torch.Tensor:
    """The prompt and its continuation, [1, prompt + new] (as ``model.generate`` returns them),
    decoded speculatively with ``drafter``; options as ``generate_with_stats``."""
    return generate_with_stats(model, input_ids, **options)[0]
