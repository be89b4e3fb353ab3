"""Token trees in one forward: each node's ancestors and depth, and the additive attention mask over
the cache and the node's own path.
"""

from __future__ import annotations

import torch


def tree_mask(past: int, ancestors: torch.Tensor, depth: torch.Tensor, dtype: torch.dtype, device: torch.device,
              window: int | None = None) -> torch.Tensor:  # fmt: skip
    """Additive mask [n, past + n] for a token tree after ``past`` cached tokens (``ancestors``,
    ``depth``: ``tree_ancestors``): each token sees the cache and its own ancestors, and with a
    sliding ``window`` no key a window or more behind its position."""
    n = len(depth)
    allowed = torch.cat([torch.ones(n, past, dtype=torch.bool), ancestors], dim=1)
    if window is not None:
        query = (past + depth)[:, None]
        key = torch.cat([torch.arange(past), past + depth])[None, :]
        allowed = allowed & (key > query - window)
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed.to(device), torch.finfo(dtype).min)


def tree_ancestors(parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(ancestors [n, n] bool: token j is token i's ancestor or i itself, depth [n]: 0 for a
    child of the cache) of a block whose token i has parent ``parents[i]`` < i (-1: the cache)."""
    parents = [int(p) for p in parents]
    n = len(parents)
    ancestors = torch.eye(n, dtype=torch.bool)
    depth = torch.zeros(n, dtype=torch.long)
    for i, p in enumerate(parents):
        if not -1 <= p < i:
            raise ValueError(f"tree parents must point back (parents[{i}] = {p}): nodes in topological order")
        if p >= 0:
            ancestors[i] |= ancestors[p]
            depth[i] = depth[p] + 1
    return ancestors, depth
