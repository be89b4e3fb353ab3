"""How the lean forward computes: one value passed in when a forward is built, never a module
global changed from outside. The defaults are the measured choices; each names its benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass

from babelspec.errors import UserError

HEADS = ("full", "certified")  # ``ForwardOptions.head``
MERGE_MAX_TOKENS = 16  # the default merge limit (``ForwardOptions.merge_max_tokens``)


@dataclass(frozen=True)
class ForwardOptions:
    """``pack``: bf16 CPU weights prepacked once for oneDNN (``Linear``).

    ``fuse``: bf16 projections of one input stacked into one product, and one-row products padded
    to two rows where one row alone rounds otherwise, so that a decode step rounds as a
    verification does (``benchmarks/results/lean_fusion.json``); ``False`` keeps Hugging Face's
    products one for one.

    ``native``: the C glue between the products in bf16 (``benchmarks/results/native_glue.json``)
    and attention row by row in C over the bf16 cache (``bs_attend``); without it the same
    row-invariant arithmetic runs in torch operations, slower. It needs ``fuse``.

    ``head``: ``"full"`` computes every logit; ``"certified"`` (``forward.certified``) gives rows
    whose caller asks only for the k largest logits (greedy, top-k sampling) those exactly, from
    an int8 pass and exact products on the candidates its error bound keeps. Full by default, as
    the certified head serves greedy and top-k rows only; ``babelspec bench head`` measured a plain decoding step 1.17x faster with it under greedy
    decoding and 1.10x under the paper's sampling (medians over the languages,
    ``benchmarks/results/certified_head.json``), and it serves greedy and top-k rows only.

    ``row_steps``: a block of one row (a decode step, a step of ``gguf:LANG``) on the GGUF's blocks
    runs each layer in two C calls around the activation (``native.bs_layer_attention`` and
    ``bs_layer_down``) instead of the glue's 20-odd calls and torch operations a layer: the same
    functions in the same order, so the same bits. A decode step 8.98 against 10.56 ms at 300
    cached tokens, 2 threads, 2-core Zen 4 (``benchmarks/stack_step.py --row-steps``,
    ``benchmarks/results/stack_step.json``). Needs ``native``.

    ``merge_max_tokens``: the batcher shares a forward only among blocks this short (decode steps
    and verifications; a prefill runs alone); on the paths that are not exact (float32, fuse off,
    int8 drafters) longer blocks also take Hugging Face's products one for one.

    bf16 on the CPU with ``fuse`` is exact (``LeanGemma3.exact``): every row of a block of any
    length gets the bits of the same row computed alone after the same cache, with the glue
    (``native``) or without it. An earlier fast path that was not (float32 attention for short
    blocks, Hugging Face's arithmetic for prefills) was no faster on decode, at most 8 % faster on
    verification and 21-24 % faster on prefill (1,078 and 896 tokens/s at 300 and 1,000 tokens
    against 870 and 742; ``benchmarks/results/exact_bf16.json``), so it is gone.
    """

    pack: bool = True
    fuse: bool = True
    native: bool = True
    merge_max_tokens: int = MERGE_MAX_TOKENS
    head: str = "full"
    row_steps: bool = True

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise UserError(f"unknown output head {self.head!r}; use one of {', '.join(HEADS)}")
        if not isinstance(self.merge_max_tokens, int) or self.merge_max_tokens < 1:
            raise UserError(f"merge_max_tokens must be a positive whole number of tokens, not {self.merge_max_tokens!r}")
