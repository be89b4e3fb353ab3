"""The forward: what computes a block of new tokens' logits on top of a cache.

Two implementations stand behind ``babelspec.lm.CausalLM``: Hugging Face's forward, for any
family, and babelspec's own lean forward for Gemma-3 text models (``gemma3``), which does the
same arithmetic with less framework: a preallocated cache (``cache``), merged and prepacked
products (``kernels``), C glue between them in bf16 (``native``), token trees (``trees``), and
quantized products for drafters and the W8A8 target mode (``quantize``, ``w8a8``).
``lean_forward`` chooses: the lean forward where the family has one, unless ``forward="hf"``
asks for Hugging Face's (the command line's ``--forward hf``).
"""

from __future__ import annotations

from typing import Any

import torch

from babelspec.errors import UserError
from babelspec.forward.base import Forward
from babelspec.forward.certified import CertifiedHead, HeadRequest
from babelspec.forward.gemma3 import CACHE_ONLY, LeanGemma3
from babelspec.forward.hf import HFForward
from babelspec.forward.kernels import Linear, OutputHead
from babelspec.forward.native import glue
from babelspec.forward.options import ForwardOptions
from babelspec.forward.quantize import QUANTIZATIONS

__all__ = ["CACHE_ONLY", "FORWARDS", "Forward", "ForwardOptions", "HFForward", "HeadRequest", "LeanGemma3", "build_forward",
           "lean_forward"]


FORWARDS = ("lean", "hf")


def _gemma3_body(body: Any) -> bool:
    config = getattr(body, "config", None)
    return (type(body).__name__ == "Gemma3TextModel" and getattr(config, "model_type", "") == "gemma3_text"
            and config.attn_logit_softcapping is None and not config.use_bidirectional_attention
            and config.hidden_activation in ("gelu_pytorch_tanh", "gelu"))  # fmt: skip


def lean_forward(model: torch.nn.Module, forward: str | None = None, options: ForwardOptions | None = None,
                 quantize: str | None = None) -> LeanGemma3 | None:  # fmt: skip
    """The lean forward of ``model`` (a Gemma-3 text LM, or a restricted-head drafter over one),
    or None where Hugging Face's forward is used: other families, or ``forward="hf"``.
    ``options`` (``ForwardOptions``: packing, fusion, the C glue, the merge limit) default to
    the measured choices.
    ``quantize="int8"``: the layers' products on weight-only int8 copies (``Int8Linear``), a
    drafter's forward (not the target's: it is another model)."""
    if quantize not in QUANTIZATIONS:
        raise UserError(f"unknown quantization {quantize!r}; use one of {', '.join(map(str, QUANTIZATIONS))}")
    options = options if options is not None else ForwardOptions()
    forward = forward or "lean"
    if forward not in FORWARDS:
        raise UserError(f"unknown forward {forward!r}; use one of {', '.join(FORWARDS)}")
    if forward == "hf":
        return None
    logits_of = getattr(model, "logits_of", None)  # a drafter's own output head over the body
    body = getattr(model, "body", None) if logits_of is not None else getattr(model, "model", None)
    # Only under eager attention, whose arithmetic this forward repeats (SDPA rounds otherwise).
    if not _gemma3_body(body) or body.config._attn_implementation != "eager":
        return None
    if logits_of is None:
        head = getattr(model, "lm_head", None)
        if type(model).__name__ != "Gemma3ForCausalLM" or head is None or head.bias is not None:
            return None
        linear = Linear(head.weight, options.pack, pad_row=options.fuse)
        softcap = model.config.final_logit_softcapping
        certified = None
        if options.head == "certified":
            if softcap is not None:
                raise UserError("the certified head needs a head without final logit soft-capping; use head='full'")
            certified = CertifiedHead(head.weight, linear, glue() if options.native else None)
        logits_of = OutputHead(linear, head.weight, softcap, certified)
    return LeanGemma3(body, logits_of, options, quantize)


def build_forward(model: torch.nn.Module, device: torch.device, forward: str | None = None,
                  quantize: str | None = None, options: ForwardOptions | None = None) -> Forward:  # fmt: skip
    """The forward of ``model``: the lean one where its family has one (``lean_forward``), else
    Hugging Face's. ``quantize`` (a drafter's int8 layers) needs the lean forward."""
    lean = lean_forward(model, forward, options, quantize)
    if lean is not None:
        return lean
    if quantize is not None:
        kind = getattr(model.config, "model_type", type(model).__name__)
        raise UserError(f"{quantize} weights need the lean forward (a Gemma-3 text model under eager "
                         f"attention, not forward='hf'); this {kind} model has none")
    return HFForward(model, device)
