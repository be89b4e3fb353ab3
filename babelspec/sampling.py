"""Turning logits into the distributions both models are judged by, and sampling from them.

The same warping (repetition penalty, temperature, top-k, top-p) is applied to the target's
and the draft's logits, as in the paper's code. Greedy decoding is the limit case: a
point mass at the arg-max of the penalised logits, so one rejection rule serves both.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class SamplingConfig:
    greedy: bool = False  # arg-max decoding (temperature, top-k and top-p are then ignored)
    temperature: float = 1.0  # logits are divided by this before top-k / top-p
    top_k: int = 0  # keep the k most likely tokens; 0 = off
    top_p: float = 1.0  # keep the smallest set with this much mass (nucleus); 1.0 = off
    repetition_penalty: float = 1.0  # CTRL-style penalty on tokens of the last window; 1.0 = off
    repetition_window: int = 16  # how many previous tokens the penalty looks at
    seed: int = 0  # seed of the generation's random generator

    def __post_init__(self) -> None:
        if self.temperature <= 0 and not self.greedy:
            raise ValueError(
                f"temperature must be > 0 (got {self.temperature}); use greedy decoding for T = 0"
            )
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (got {self.top_k}); 0 turns it off")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] (got {self.top_p}); 1.0 turns it off")
        if self.repetition_penalty <= 0:
            raise ValueError(
                f"repetition_penalty must be > 0 (got {self.repetition_penalty}); 1.0 turns it off"
            )
        if self.repetition_window < 0:
            raise ValueError(f"repetition_window must be >= 0 (got {self.repetition_window})")

    @classmethod
    def paper(cls, seed: int = 0) -> "SamplingConfig":
        """The paper's decoding settings: top-k 100, top-p 0.9, penalty 1.1 over 16 tokens."""
        return cls(top_k=100, top_p=0.9, repetition_penalty=1.1, repetition_window=16, seed=seed)

    def to_dict(self) -> dict:
        return asdict(self)


def _as_numpy(x, dtype) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.asarray(x, dtype=dtype)
    return x[None] if x.ndim == 1 else x


def _draw(probs: np.ndarray, u: float) -> int:
    """Index drawn from the (unnormalised) row ``probs`` by inverting its CDF at ``u`` in [0, 1).

    The first entry whose cumulative mass exceeds u * total: never an entry of probability 0."""
    cdf = np.cumsum(probs, dtype=np.float64)
    j = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return j if j < len(cdf) else int(np.flatnonzero(probs)[-1])


@dataclass
class Probs:
    """Distributions over a vocabulary, one per row: the one type that drafters hand to the
    verifier and that warping returns (a point mass is a row of width one, as in vLLM's sampler).

    Row i puts ``probs[i, j]`` on token ``ids[i, j]``; entries of probability 0 are padding (any
    id). ``ids`` None means full rows: column j is token j. Arrays are NumPy: the judge works on
    a few hundred candidates, where a NumPy operation costs about 1 µs and an eager torch one 5."""

    probs: np.ndarray  # [n, m] float32, each row sums to 1
    ids: np.ndarray | None = None  # [n, m] int64 token ids, or None for full rows

    @classmethod
    def _of(cls, probs: np.ndarray, ids: np.ndarray | None) -> "Probs":
        """From arrays already of the right types and shapes (no checks: the hot path)."""
        out = object.__new__(cls)
        out.probs, out.ids = probs, ids
        return out

    def __post_init__(self) -> None:
        self.probs = _as_numpy(self.probs, np.float32)
        if self.ids is not None:
            self.ids = _as_numpy(self.ids, np.int64)
            if self.ids.shape != self.probs.shape:
                raise ValueError(f"ids {self.ids.shape} and probs {self.probs.shape} must have one shape")

    @classmethod
    def point(cls, tokens: torch.Tensor | np.ndarray | list[int]) -> "Probs":
        """A point mass at each of ``tokens`` (greedy drafts, n-gram top-1 lookups)."""
        ids = _as_numpy(tokens, np.int64).reshape(-1, 1)
        return cls(np.ones(ids.shape, dtype=np.float32), ids)

    @classmethod
    def cat(cls, rows: "list[Probs]") -> "Probs":
        """Stack rows; compact rows of different widths are padded with probability 0."""
        if all(r.ids is None for r in rows):
            return cls(np.concatenate([r.probs for r in rows]))
        width = max(r.width for r in rows)
        probs = np.zeros((sum(len(r) for r in rows), width), dtype=np.float32)
        ids = np.zeros(probs.shape, dtype=np.int64)
        i = 0
        for r in rows:
            r_ids = r.ids if r.ids is not None else np.broadcast_to(np.arange(r.width), r.probs.shape)
            probs[i : i + len(r), : r.width] = r.probs
            ids[i : i + len(r), : r.width] = r_ids
            i += len(r)
        return cls(probs, ids)

    def __len__(self) -> int:
        return self.probs.shape[0]

    @property
    def width(self) -> int:
        return self.probs.shape[1]

    def support(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Row i as (token ids, probabilities)."""
        if self.ids is None:
            return np.arange(self.width), self.probs[i]
        return self.ids[i], self.probs[i]

    def prob_of(self, tokens: np.ndarray) -> np.ndarray:
        """Row i's probability of ``tokens[i]``, for each of the first len(tokens) rows."""
        k = len(tokens)
        if self.ids is None:
            return self.probs[np.arange(k), tokens]
        return (self.probs[:k] * (self.ids[:k] == tokens[:, None])).sum(axis=1)

    def prob_at(self, i: int, tokens: np.ndarray) -> np.ndarray:
        """Row i's probability of each of ``tokens``."""
        if self.ids is None:
            return self.probs[i, tokens]
        if len(tokens) * self.width <= 1 << 16:
            return (self.probs[i] * (tokens[:, None] == self.ids[i][None, :])).sum(axis=1)
        lookup = np.zeros(max(int(tokens.max()), int(self.ids[i].max())) + 1, dtype=np.float32)
        np.add.at(lookup, self.ids[i], self.probs[i])
        return lookup[tokens]

    def dense(self, vocab_size: int | None = None) -> torch.Tensor:
        """Full rows [n, vocab_size] as a torch tensor."""
        if self.ids is None:
            return torch.from_numpy(self.probs.copy())
        if vocab_size is None:
            raise ValueError("compact rows need the vocabulary size to be made dense")
        out = np.zeros((len(self), vocab_size), dtype=np.float32)
        np.add.at(out, (np.arange(len(self))[:, None], self.ids), self.probs)
        return torch.from_numpy(out)

    def draw(self, i: int, u: float) -> int:
        """Row i's token at uniform ``u`` (no draw for a point mass)."""
        ids, probs = self.support(i)
        return int(ids[0]) if len(ids) == 1 else int(ids[_draw(probs, u)])

    def sample(self, generator: torch.Generator | None = None) -> np.ndarray:
        """One token per row, by inverting each row's CDF."""
        if self.width == 1:
            return self.ids[:, 0].copy() if self.ids is not None else np.zeros(len(self), dtype=np.int64)
        u = torch.rand(len(self), generator=generator, dtype=torch.float64).numpy()
        return np.array([self.draw(i, float(u[i])) for i in range(len(self))], dtype=np.int64)

    def draw_residual(self, i: int, draft: "Probs", u: float) -> int:
        """Row i's token from norm(max(0, q - p)) with p = the draft's row i (Leviathan et al.,
        Alg. 1): q - p is positive only where q is, so q's support is enough."""
        ids, q = self.support(i)
        r = np.maximum(q - draft.prob_at(i, ids), 0.0)
        if not r.sum() > 0:  # q == p up to rounding: a rejection is then a measure-zero event
            r = q
        return int(ids[_draw(r, u)])

    def with_ids(self, id_of: np.ndarray) -> "Probs":
        """The same rows with ids (or column numbers, for full rows) mapped through ``id_of``."""
        cols = self.ids if self.ids is not None else np.broadcast_to(np.arange(self.width), self.probs.shape)
        return Probs(self.probs, id_of[cols])


def _window_ids(sequence: torch.Tensor | np.ndarray, first_position: int, n: int, window: int) -> np.ndarray:
    """[n, window]: the ids row i's repetition penalty looks at (those before first_position + i).

    Positions before the sequence start repeat the row's first valid token (no effect)."""
    seq = sequence.numpy() if isinstance(sequence, torch.Tensor) else np.asarray(sequence)
    positions = (first_position + np.arange(n))[:, None] + np.arange(-window, 0)[None, :]
    if first_position < window:
        positions = np.maximum(positions, 0)
    return seq[positions]


def _top_candidates(x: np.ndarray, k: int) -> np.ndarray:
    """[n, k] column ids holding each row's k largest entries, in no order (ties broken
    arbitrarily, as by torch.topk).

    On a large vocabulary one pass takes the maxima of 4,096 strided chunks, and only the k
    chunks with the largest maxima are searched: every entry of the top k lies in one of them
    (k chunk maxima above its own chunk's would be k entries above it)."""
    n, vocab = x.shape
    chunks = 4096
    length = vocab // chunks
    if length < 16 or 4 * k > chunks:
        return np.argpartition(x, vocab - k, axis=1)[:, vocab - k :]
    main = length * chunks
    # x3[r, l, c] = x[r, l * chunks + c]: chunk c is {c, c + chunks, c + 2 chunks, ...}
    x3 = np.lib.stride_tricks.as_strided(x, (n, length, chunks), (x.strides[0], chunks * x.strides[1], x.strides[1]))
    best = np.argpartition(x3.max(axis=1), chunks - k, axis=1)[:, chunks - k :]  # [n, k] chunks
    ids = (np.arange(0, main, chunks)[None, :, None] + best[:, None, :]).reshape(n, -1)
    if main < vocab:  # the columns after the last whole row of chunks are always candidates
        ids = np.concatenate([ids, np.broadcast_to(np.arange(main, vocab), (n, vocab - main))], axis=1)
    rows = np.arange(n)[:, None]
    pick = np.argpartition(x[rows, ids], ids.shape[1] - k, axis=1)[:, ids.shape[1] - k :]
    return ids[rows, pick]


def _penalised(values: np.ndarray, penalty: float) -> np.ndarray:
    """CTRL penalty: positive logits divided by it, negative ones multiplied."""
    return np.where(values > 0, values / np.float32(penalty), values * np.float32(penalty))


def warp(
    logits: torch.Tensor,
    config: SamplingConfig,
    sequence: torch.Tensor | np.ndarray | None = None,
    first_position: int = 0,
) -> Probs:
    """Warp ``logits`` [n, vocab] under ``config``: penalty, temperature, top-k, top-p.

    Row i is the distribution of the token at position ``first_position + i`` of ``sequence``
    (needed only for the repetition penalty). With top-k (or greedy decoding) only the k
    largest penalised logits go further: the vocabulary is read once, and what follows works
    on k candidates, a few NumPy operations per block of rows.
    """
    if logits.dtype == torch.float32 and logits.device.type == "cpu" and not logits.requires_grad:
        x = logits.numpy()
    else:
        x = logits.detach().float().cpu().numpy()
    if x.strides[1] != x.itemsize:
        x = np.ascontiguousarray(x)
    n, vocab = x.shape
    rows = np.arange(n)[:, None]
    keep = 1 if config.greedy else (config.top_k if 0 < config.top_k < vocab else 0)
    window = saved = None
    if sequence is not None and config.repetition_penalty != 1.0 and config.repetition_window > 0:
        window = _window_ids(sequence, first_position, n, config.repetition_window)
        saved = x[rows, window]
        if not keep:
            x = x.copy()
        # Penalise in place (a token seen twice is written twice with the same value, so it is
        # penalised once, as in Hugging Face's processor); restored below when x is the caller's.
        x[rows, window] = _penalised(saved, config.repetition_penalty)
    try:
        if keep:
            ids = _top_candidates(x, keep)
            values = x[rows, ids]
        else:
            ids, values = None, x
    finally:
        if window is not None and keep:
            x[rows, window] = saved
    if config.greedy:  # a point mass at the arg-max; ties go to the smallest id, as torch.argmax
        best = np.where(values == values.max(axis=1, keepdims=True), ids, np.iinfo(np.int64).max)
        return Probs._of(np.ones((n, 1), dtype=np.float32), best.min(axis=1, keepdims=True))
    if config.temperature != 1.0:
        values = values / np.float32(config.temperature)
    if keep or config.top_p < 1.0:
        order = np.argsort(-values, axis=1, kind="stable")  # descending
        values = values[rows, order]
        ids = order if ids is None else ids[rows, order]
    weights = np.exp(values - values.max(axis=1, keepdims=True))  # softmax numerators
    cumulative = np.cumsum(weights, axis=1, dtype=np.float64)
    if config.top_p < 1.0:
        # Drop a token when the mass before it already reaches top_p (the first always stays);
        # rows are sorted, so the kept tokens are a prefix of each row.
        kept = ((cumulative - weights) < config.top_p * cumulative[:, -1:]).sum(axis=1)
        width = int(kept.max())
        weights, ids = weights[:, :width], ids[:, :width]
        if kept.min() < width:
            weights = np.where(np.arange(width)[None, :] < kept[:, None], weights, np.float32(0))
        total = cumulative[rows[:, 0], kept - 1][:, None].astype(np.float32)
    else:
        total = cumulative[:, -1:].astype(np.float32)
    return Probs._of((weights / total).astype(np.float32, copy=False), ids)


def logits_to_probs(
    logits: torch.Tensor,
    config: SamplingConfig,
    sequence: torch.Tensor | None = None,
    first_position: int = 0,
) -> torch.Tensor:
    """Warp ``logits`` [n, vocab] into dense probabilities [n, vocab] (see ``warp``)."""
    return warp(logits, config, sequence, first_position).dense(logits.shape[1])
