"""The lean forward's key/value cache: preallocated per layer, cropped by setting its length, a
token tree's accepted path kept by a gather.
"""

from __future__ import annotations

import torch


class LeanLayerCache:
    """One layer's keys and values; the first ``length`` hold. Values are [1, kv_heads, capacity,
    head_dim]; keys the same, or transposed, [1, kv_heads, head_dim, capacity] (``keys_t``)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, keys_t: bool = False) -> None:
        self.keys, self.values, self.length, self.keys_t = keys, values, 0, keys_t

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cache ``k`` and ``v`` [1, kv_heads, n, head_dim]; every key and value cached, keys in
        the cache's layout."""
        end = self.length + k.shape[2]
        self.reserve(end)
        if self.keys_t:
            self.keys[..., self.length : end] = k.transpose(2, 3)
        else:
            self.keys[:, :, self.length : end] = k
        self.values[:, :, self.length : end] = v
        self.length = end
        return self.keys[..., :end] if self.keys_t else self.keys[:, :, :end], self.values[:, :, :end]

    def reserve(self, end: int) -> None:
        """Room for ``end`` tokens (the buffers grown, at least doubled, where they are shorter)."""
        if end > self.values.shape[2]:
            grow = max(end, 2 * self.values.shape[2])
            self.keys = _grown(self.keys, grow, self.length, 3 if self.keys_t else 2)
            self.values = _grown(self.values, grow, self.length, 2)

    def rows(self, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values of tokens ``start`` to ``end`` [1, kv_heads, n, head_dim] (views),
        as ``append`` takes them."""
        keys = self.keys[..., start:end].transpose(2, 3) if self.keys_t else self.keys[:, :, start:end]
        return keys, self.values[:, :, start:end]


def _grown(buffer: torch.Tensor, capacity: int, length: int, dim: int) -> torch.Tensor:
    shape = list(buffer.shape)
    shape[dim] = capacity
    out = buffer.new_empty(shape)
    out.narrow(dim, 0, length).copy_(buffer.narrow(dim, 0, length))
    return out


class LeanCache:
    """The lean forward's KV cache: ``crop`` and ``get_seq_length`` as ``DynamicCache`` has them."""

    is_croppable = True

    def __init__(self, layers: list[LeanLayerCache]) -> None:
        self.layers = layers

    def get_seq_length(self) -> int:
        return self.layers[0].length if self.layers else 0

    def keep(self, past: int, indices: torch.Tensor) -> None:
        """Keep the first ``past`` tokens and then the block entries at ``indices`` (positions
        after ``past``, ascending): the accepted path of a token tree, gathered in place."""
        n = len(indices)
        if n and bool((indices == torch.arange(n)).all()):
            self.crop(past + n - self.get_seq_length())  # a prefix of the block: a crop
            return
        at = past + indices
        for layer in self.layers:
            if layer.keys_t:
                layer.keys[..., past : past + n] = layer.keys[..., at]
            else:
                layer.keys[:, :, past : past + n] = layer.keys[:, :, at]
            layer.values[:, :, past : past + n] = layer.values[:, :, at]
            layer.length = past + n

    def crop(self, tokens: int) -> None:
        """Drop ``-tokens`` tokens from the end (``tokens`` <= 0, as ``DynamicCache.crop`` takes it)."""
        if tokens > 0:
            raise ValueError(f"crop takes minus the number of tokens to remove, got {tokens}")
        keep = max(self.get_seq_length() + tokens, 0)
        for layer in self.layers:
            layer.length = keep
