"""How the lean forward computes: one value passed in when a forward is built, never a module
global changed from outside. The defaults are the measured choices; each names its benchmark.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

HEADS = ("full", "certified")  # ``ForwardOptions.head``
MERGE_MAX_TOKENS = 16  # the default merge limit (``ForwardOptions.merge_max_tokens``)
NATIVE_ENV = "BABELSPEC_NATIVE"  # "0": the default options keep the torch operations (``native=False``)


def native_default() -> bool:
    """On unless ``BABELSPEC_NATIVE=0`` (how CI runs the exactness tests once more without it)."""
    return os.environ.get(NATIVE_ENV, "1").strip() != "0"


@dataclass(frozen=True)
class ForwardOptions:
    """``pack``: bf16 CPU weights prepacked once for oneDNN (``Linear``).

    ``fuse``: bf16 projections of one input stacked into one product, and one-row products padded
    to two rows where one row alone rounds otherwise, so that a decode step rounds as a
    verification does (``benchmarks/results/lean_fusion.json``); ``False`` keeps Hugging Face's
    products one for one.

    ``native``: the C glue between the products in bf16 and float32 attention over a float32
    cache, where they give a block's rows a decode step's bits (``benchmarks/results/native_glue.json``);
    it needs ``fuse``.

    ``head``: ``"full"`` computes every logit; ``"certified"`` (``forward.certified``) gives rows
    whose caller asks only for the k largest logits (greedy, top-k sampling) those exactly, from
    an int8 pass and exact products on the candidates its error bound keeps. Full by default:
    ``babelspec bench forward --heads full,certified`` measured it no faster on a 2-core Zen 4.

    ``exact``: the bf16 forward's every row, in a block of any length (a decode step, a
    verification chain or tree, a prefill whole or in chunks, a batched slot), gets the bits of
    the same row computed alone after the same cache: attention row by row in a decode step's
    order (``bs_attend``), the products in row-invariant pieces (``LeanGemma3.exact_rows``), one
    path for every block length. So speculative greedy output is plain greedy output, bit for
    bit, and a drafted token is judged on the row plain decoding computes (docs/statistics.md).
    ``False`` restores the earlier fast mode (float32 attention over a float32 cache for blocks of
    up to ``merge_max_tokens``, Hugging Face's arithmetic for longer ones), which is not exact on
    real prompts; ``babelspec bench exact`` measures the two side by side.

    ``merge_max_tokens``: with ``exact=False``, blocks of at most this many tokens (decode steps
    and verifications) run the merges and the glue, longer ones (prefills) Hugging Face's
    products one for one. The batcher merges only blocks this short, on either path.
    """

    exact: bool = True
    pack: bool = True
    fuse: bool = True
    native: bool = field(default_factory=native_default)
    merge_max_tokens: int = MERGE_MAX_TOKENS
    head: str = "full"

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise ValueError(f"unknown output head {self.head!r}; use one of {', '.join(HEADS)}")
        if not isinstance(self.merge_max_tokens, int) or self.merge_max_tokens < 1:
            raise ValueError(f"merge_max_tokens must be a positive whole number of tokens, not {self.merge_max_tokens!r}")
