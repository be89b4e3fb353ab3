"""The theoretical speedup f of speculative decoding, in one place for the engine, the study
and the ``auto`` drafter.

Leviathan et al. (2023), Thm 3.8: with acceptance rate a, gamma drafted tokens per step and
a draft forward costing c target forwards, a step yields (1 - a^(g+1)) / (1 - a) tokens in
expectation and costs g c + 1. The 1 assumes verifying g + 1 tokens costs one decode step;
``verify_cost`` puts the measured ratio (verification forward / plain decode step) in its
place, and then c should be in units of a plain decode step too.

A token tree of ``nodes`` tokens whose longest path holds ``depth`` of them keeps at most
depth + 1 tokens a step (one path and the verifier's token) but pays a draft cost for every
node: f = (1 - a^(d+1)) / ((1 - a)(n c + v)). A chain is the tree whose depth is its node
count.
"""

from __future__ import annotations

import math


def acceptance_rate(matched: int, rejections: int) -> float:
    """Acceptance α as the paper's code defines it: matched / (matched + rejections); NaN when
    nothing was judged. Tokens after a step's first rejection are never judged, so they do not
    count. Pooled over generations, pass the sums."""
    judged = matched + rejections
    return matched / judged if judged else math.nan


def expected_tokens_per_step(alpha: float, gamma: float) -> float:
    """E[tokens per verification] = (1 - a^(g+1)) / (1 - a); the limit g + 1 as a -> 1."""
    if gamma <= 0:
        return 1.0
    a = min(max(alpha, 0.0), 1.0)
    if a >= 1.0 - 1e-12:
        return gamma + 1.0
    return (1.0 - a ** (gamma + 1)) / (1.0 - a)


def theoretical_speedup(alpha: float, gamma: float, c: float, verify_cost: float = 1.0,
                        nodes: float | None = None) -> float:
    """f(a, g, c, v) = (1 - a^(g+1)) / ((1 - a)(n c + v)); NaN where a, c, v or n is unknown.

    ``gamma`` is the depth of a step's draft: the drafted tokens a step can keep (for a chain,
    its length). ``nodes`` is the tokens drafted and verified a step, which the cost counts;
    None for a chain (``nodes`` = ``gamma``). Both may be fractional (means per step).
    ``gamma <= 0`` is plain decoding: 1.0.
    """
    if gamma <= 0:
        return 1.0
    nodes = gamma if nodes is None else nodes
    if not all(math.isfinite(x) for x in (alpha, gamma, c, verify_cost, nodes)):
        return math.nan
    return expected_tokens_per_step(alpha, gamma) / (nodes * c + verify_cost)
