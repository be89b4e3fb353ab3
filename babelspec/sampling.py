"""Turning logits into the distributions both models are judged by, and sampling from them.

The same warping (repetition penalty, temperature, top-k, top-p) is applied to the target's
and the draft's logits, as in the paper's code. Greedy decoding is the limit case: a
point mass at the arg-max of the penalised logits, so one rejection rule serves both.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch

from babelspec.errors import UserError

# Warping divides logits by the temperature and scales them by the penalty: outside these
# bounds a float32 row can overflow to inf and its probabilities to NaN, which would make the
# rejection sampler accept every drafted token (no longer lossless). Refused at the boundary.
MIN_TEMPERATURE = 1e-3
PENALTY_RANGE = (1e-3, 1e3)

# The paper's decoding settings (``SamplingConfig.paper``): every default of the CLI and server.
PAPER_TOP_K = 100
PAPER_TOP_P = 0.9
PAPER_REPETITION_PENALTY = 1.1
PAPER_REPETITION_WINDOW = 16


def nucleus_size(weights: np.ndarray, top_p: float, cumulative: np.ndarray | None = None) -> int:
    """How many of ``weights`` (sorted in descending order, not normalised) the top-p rule keeps.

    A token is dropped once the mass before it reaches ``top_p`` of the total; the first always
    stays. ``cumulative`` is ``np.cumsum(weights)`` where the caller has it already."""
    if cumulative is None:
        cumulative = np.cumsum(weights, dtype=np.float64)
    return max(1, int(np.searchsorted(cumulative - weights, top_p * cumulative[-1], side="left")))


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
        if not self.greedy and not (math.isfinite(self.temperature) and self.temperature > 0):
            raise UserError(
                f"temperature must be > 0 (got {self.temperature}); use greedy decoding for T = 0"
            )
        if not self.greedy and self.temperature < MIN_TEMPERATURE:
            raise UserError(f"temperature must be at least {MIN_TEMPERATURE} (got {self.temperature}): "
                             "below it warping overflows; use greedy decoding for T = 0")
        if self.top_k < 0:
            raise UserError(f"top_k must be >= 0 (got {self.top_k}); 0 turns it off")
        if not 0.0 < self.top_p <= 1.0:
            raise UserError(f"top_p must be in (0, 1] (got {self.top_p}); 1.0 turns it off")
        if self.repetition_penalty <= 0:
            raise UserError(
                f"repetition_penalty must be > 0 (got {self.repetition_penalty}); 1.0 turns it off"
            )
        low, high = PENALTY_RANGE
        if not (math.isfinite(self.repetition_penalty) and low <= self.repetition_penalty <= high):
            raise UserError(f"repetition_penalty must be in [{low:g}, {high:g}] (got {self.repetition_penalty}); "
                             "1.0 turns it off")
        if not 0 <= self.seed < 1 << 63:
            raise UserError(f"seed must be an integer in [0, 2**63) (got {self.seed})")
        if self.repetition_window < 0:
            raise UserError(f"repetition_window must be >= 0 (got {self.repetition_window})")

    @classmethod
    def paper(cls, seed: int = 0, *, greedy: bool = False, repetition_penalty: float | None = None,
              **overrides) -> SamplingConfig:
        """The paper's decoding settings: top-k 100, top-p 0.9, penalty 1.1 over 16 tokens.

        ``greedy`` decodes by arg-max with the penalty off unless ``repetition_penalty`` is
        given; ``overrides`` replace any other field (``temperature``, ``top_k``, ...)."""
        if repetition_penalty is None:
            repetition_penalty = 1.0 if greedy else PAPER_REPETITION_PENALTY
        fields = {"top_k": PAPER_TOP_K, "top_p": PAPER_TOP_P, "repetition_window": PAPER_REPETITION_WINDOW,
                  **overrides}
        return cls(greedy=greedy, repetition_penalty=repetition_penalty, seed=seed, **fields)

    def to_dict(self) -> dict:
        return asdict(self)


def _as_numpy(x, dtype) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.asarray(x, dtype=dtype)
    return x[None] if x.ndim == 1 else x


def draw_index(probs: np.ndarray, u: float) -> int:
    """Index drawn from the (unnormalised) row ``probs`` by inverting its CDF at ``u`` in [0, 1).

    The first entry whose cumulative mass exceeds u * total: never an entry of probability 0."""
    cdf = np.cumsum(probs, dtype=np.float64)
    j = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return j if j < len(cdf) else int(np.flatnonzero(probs)[-1])


class Probs:
    """Distributions over a vocabulary, one per row: the one type that drafters hand to the
    verifier and that warping returns (a point mass is a row of width one, as in vLLM's sampler).

    Row i puts ``probs[i, j]`` on token ``ids[i, j]``; entries of probability 0 are padding (any
    id). ``ids`` None means full rows: column j is token j. Arrays are NumPy: the judge works on
    a few hundred candidates, where a NumPy operation costs about 1 µs and an eager torch one 5.
    The verifier's rows are warped on first use (``lazy``): the judge stops at the first
    rejection, and the rows after it are never needed."""

    _row: Callable[[int], tuple[np.ndarray, np.ndarray | None]] | None = None  # lazy rows' maker

    def __init__(self, probs: np.ndarray | torch.Tensor, ids: np.ndarray | torch.Tensor | None = None) -> None:
        self.probs = _as_numpy(probs, np.float32)  # [n, m] float32, each row sums to 1
        self.ids = None if ids is None else _as_numpy(ids, np.int64)  # [n, m] token ids, or None: full rows
        if self.ids is not None and self.ids.shape != self.probs.shape:
            raise ValueError(f"ids {self.ids.shape} and probs {self.probs.shape} must have one shape")

    @classmethod
    def _of(cls, probs: np.ndarray, ids: np.ndarray | None) -> Probs:
        """From arrays already of the right types and shapes (no checks: the hot path)."""
        out = object.__new__(cls)
        out.probs, out.ids = probs, ids
        return out

    @classmethod
    def lazy(cls, n: int, row: Callable[[int], tuple[np.ndarray, np.ndarray | None]]) -> Probs:
        """n rows, row i made by ``row(i)`` -> (probs [m], ids [m] or None) when first used."""
        out = object.__new__(cls)
        out._n, out._row, out._made = n, row, {}
        return out

    def __getattr__(self, name: str):  # a lazy Probs makes its arrays when they are asked for
        if name in ("probs", "ids") and self._row is not None:
            rows = [self._made_row(i) for i in range(self._n)]
            if all(ids is None for _, ids in rows):
                self.probs, self.ids = np.stack([p for p, _ in rows]), None
            else:
                full = Probs.cat([Probs._of(p[None], ids[None]) for p, ids in rows])
                self.probs, self.ids = full.probs, full.ids
            return self.__dict__[name]
        raise AttributeError(name)

    def _made_row(self, i: int) -> tuple[np.ndarray, np.ndarray | None]:
        made = self._made.get(i)
        if made is None:
            made = self._made[i] = self._row(i)
        return made

    @classmethod
    def point(cls, tokens: torch.Tensor | np.ndarray | list[int]) -> Probs:
        """A point mass at each of ``tokens`` (greedy drafts, n-gram top-1 lookups)."""
        ids = _as_numpy(tokens, np.int64).reshape(-1, 1)
        return cls._of(np.ones(ids.shape, dtype=np.float32), ids)

    @classmethod
    def cat(cls, rows: list[Probs]) -> Probs:
        """Stack rows; compact rows of different widths are padded with probability 0."""
        if all(r.ids is None for r in rows):
            return cls._of(np.concatenate([r.probs for r in rows]), None)
        width = max(r.width for r in rows)
        if all(r.width == width and r.ids is not None for r in rows):
            return cls._of(np.concatenate([r.probs for r in rows]), np.concatenate([r.ids for r in rows]))
        probs = np.zeros((sum(len(r) for r in rows), width), dtype=np.float32)
        ids = np.zeros(probs.shape, dtype=np.int64)
        i = 0
        for r in rows:
            r_ids = r.ids if r.ids is not None else np.broadcast_to(np.arange(r.width), r.probs.shape)
            probs[i : i + len(r), : r.width] = r.probs
            ids[i : i + len(r), : r.width] = r_ids
            i += len(r)
        return cls._of(probs, ids)

    def __len__(self) -> int:
        return self.probs.shape[0] if self._row is None else self._n

    @property
    def width(self) -> int:
        return self.probs.shape[1]

    def support(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Row i as (token ids, probabilities)."""
        if self._row is not None:
            probs, ids = self._made_row(i)
        else:
            probs, ids = self.probs[i], self.ids[i] if self.ids is not None else None
        return (np.arange(len(probs)) if ids is None else ids), probs

    def prob(self, i: int, token: int) -> float:
        """Row i's probability of ``token``."""
        if self._row is not None:
            probs, ids = self._made_row(i)
        elif self.ids is None:
            return float(self.probs[i, token])
        else:
            probs, ids = self.probs[i], self.ids[i]
        return float(probs[token] if ids is None else probs[ids == token].sum())

    def prob_of(self, tokens: np.ndarray) -> np.ndarray:
        """Row i's probability of ``tokens[i]``, for each of the first len(tokens) rows."""
        return np.array([self.prob(i, int(t)) for i, t in enumerate(tokens)], dtype=np.float32)

    def prob_at(self, i: int, tokens: np.ndarray) -> np.ndarray:
        """Row i's probability of each of ``tokens``."""
        ids, probs = self.support(i)
        if len(ids) == 1:
            return np.where(tokens == ids[0], probs[0], np.float32(0))
        mass = probs > 0  # padding may repeat a real id
        row = _scratch(max(int(tokens.max()), int(ids.max())) + 1)
        row[ids[mass]] = probs[mass]
        out = row[tokens]
        row[ids] = 0.0
        return out

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
        return int(ids[0]) if len(ids) == 1 else int(ids[draw_index(probs, u)])

    def sample(self, generator: np.random.Generator | torch.Generator | None = None) -> np.ndarray:
        """One token per row, by inverting each row's CDF."""
        if self._row is None and self.width == 1:
            return self.ids[:, 0].copy() if self.ids is not None else np.zeros(len(self), dtype=np.int64)
        if isinstance(generator, np.random.Generator):
            u = generator.random(len(self))
        else:
            u = torch.rand(len(self), generator=generator, dtype=torch.float64).numpy()
        return np.array([self.draw(i, float(u[i])) for i in range(len(self))], dtype=np.int64)

    def draw_residual(self, i: int, draft: Probs, u: float) -> int:
        """Row i's token from norm(max(0, q - p)) with p = the draft's row i (Leviathan et al.,
        Alg. 1): q - p is positive only where q is, so q's support is enough."""
        ids, q = self.support(i)
        r = np.maximum(q - draft.prob_at(i, ids), 0.0)
        if not r.sum() > 0:  # q == p up to rounding: a rejection is then a measure-zero event
            r = q
        return int(ids[draw_index(r, u)])

    def rows(self, index: list[int]) -> Probs:
        """The rows at ``index``, in that order."""
        return Probs._of(self.probs[index], None if self.ids is None else self.ids[index])

    def with_ids(self, id_of: np.ndarray) -> Probs:
        """The same rows with ids (or column numbers, for full rows) mapped through ``id_of``."""
        cols = self.ids if self.ids is not None else np.broadcast_to(np.arange(self.width), self.probs.shape)
        return Probs._of(self.probs, id_of[cols])


_SCRATCH = [np.zeros(0, dtype=np.float32)]


def _scratch(size: int) -> np.ndarray:
    """A zeroed row of at least ``size`` entries, reused (callers zero what they write)."""
    if len(_SCRATCH[0]) < size:
        _SCRATCH[0] = np.zeros(max(size, 2 * len(_SCRATCH[0])), dtype=np.float32)
    return _SCRATCH[0]


def _window_ids(sequence: torch.Tensor | np.ndarray, first_position: int, n: int, window: int) -> np.ndarray:
    """[n, window]: the ids row i's repetition penalty looks at (those before first_position + i).

    Positions before the sequence start repeat the row's first valid token (no effect)."""
    seq = sequence.numpy() if isinstance(sequence, torch.Tensor) else np.asarray(sequence)
    if n == 1 and first_position >= window:
        return seq[None, first_position - window : first_position]
    positions = (first_position + np.arange(n))[:, None] + np.arange(-window, 0)[None, :]
    if first_position < window:
        positions = np.maximum(positions, 0)
    return seq[positions]


def _top_candidates(x: np.ndarray, k: int) -> np.ndarray:
    """Ids of the entries of the row ``x`` at or above its k-th largest value, ascending: the k
    largest and every entry tied with the k-th, as transformers' ``TopKLogitsWarper`` keeps them
    (so more than k where bf16 logits tie at the k-th, which they often do at the 100th). The
    choice depends only on the values, never on where the search looked, so a row whose other
    entries are -inf (the certified head's, which keeps every tie) gives the full row's.

    On a large vocabulary one pass takes the maxima of 4,096 strided chunks, and only the k
    chunks with the largest maxima are searched: every entry of the top k lies in one of them
    (k chunk maxima above its own chunk's would be k entries above it)."""
    vocab = len(x)
    chunks = 4096
    length = vocab // chunks
    pool = None  # the entries searched: all, or the k best chunks' (and the columns after them)
    if not (length < 16 or 4 * k > chunks):
        main = length * chunks  # x[l * chunks + c]: chunk c is {c, c + chunks, c + 2 chunks, ...}
        maxima = x[:main].reshape(length, chunks).max(axis=0)
        best = np.argpartition(maxima, chunks - k)[chunks - k :]
        pool = (np.arange(0, main, chunks)[:, None] + best[None, :]).ravel()
        if main < vocab:  # the columns after the last whole row of chunks are always candidates
            pool = np.concatenate([pool, np.arange(main, vocab)])
        kth = _kth_largest(x[pool], k)
        maxima[best] = -np.inf
        tied = np.flatnonzero(maxima >= kth)  # other chunks that may hold a tie of the k-th
        if len(tied):
            pool = np.concatenate([pool, (np.arange(0, main, chunks)[:, None] + tied[None, :]).ravel()])
            kth = _kth_largest(x[pool], k)
        if np.isnan(kth):
            pool = None
    if pool is None:
        top = np.argpartition(x, vocab - k)[vocab - k :]  # NaNs sort last: a broken row keeps them
        kth = x[top].min()
        if np.isnan(kth):  # which warping then refuses (``_check_finite``)
            return np.sort(top)
    values = x if pool is None else x[pool]
    above = np.flatnonzero(values >= kth)  # the entries above the k-th, and all its ties
    return np.sort(above if pool is None else pool[above])


def _kth_largest(values: np.ndarray, k: int) -> float:
    return values[np.argpartition(values, len(values) - k)[len(values) - k :]].min()


def _penalised(values: np.ndarray, penalty: float) -> np.ndarray:
    """CTRL penalty: positive logits divided by it, negative ones multiplied."""
    return values * np.where(values > 0, np.float32(1 / penalty), np.float32(penalty))


def _warp_row(x: np.ndarray, window: np.ndarray | None, config: SamplingConfig) -> tuple[np.ndarray, np.ndarray | None]:
    """(probabilities, ids or None for a full row) of one row of logits ``x`` (left unchanged)."""
    vocab = len(x)
    if window is not None:
        # Penalise in place, then restore (a token seen twice is written twice with the same
        # value: penalised once, as in Hugging Face's processor).
        saved = x[window]
        x[window] = _penalised(saved, config.repetition_penalty)
    try:
        if config.greedy:  # a point mass at the arg-max (the first one, as torch.argmax)
            best = int(np.argmax(x))
            if not math.isfinite(float(x[best])):
                _check_finite(math.nan)
            return _ONE, np.array([best])
        if 0 < config.top_k < vocab:
            ids = _top_candidates(x, config.top_k)
            values = x[ids]
        else:
            ids, values = None, x.copy() if window is not None else x
    finally:
        if window is not None:
            x[window] = saved
    if config.temperature != 1.0:
        values = values / np.float32(config.temperature)
    if ids is not None or config.top_p < 1.0:
        order = np.argsort(-values, kind="stable")  # descending
        values = values[order]
        ids = order if ids is None else ids[order]
    weights = np.exp(values - values[0] if ids is not None else values - values.max())  # softmax numerators
    cumulative = np.cumsum(weights, dtype=np.float64)
    _check_finite(float(cumulative[-1]))
    if config.top_p < 1.0:
        # Drop a token when the mass before it already reaches top_p (the first always stays);
        # the row is sorted, so the mass before each token grows along it.
        kept = nucleus_size(weights, config.top_p, cumulative)
        return weights[:kept] / np.float32(cumulative[kept - 1]), ids[:kept]
    return weights / np.float32(cumulative[-1]), ids


def _check_finite(total: float) -> None:
    """A warped row must be a distribution: a NaN or infinite row would be accepted wholesale."""
    if not (math.isfinite(total) and total > 0):
        raise FloatingPointError(
            f"a warped row of logits is not a distribution (mass {total}): the logits hold NaN or "
            "infinite values; the model's forward or the sampling settings are broken")


_ONE = np.ones(1, dtype=np.float32)


def _logit_rows(logits: torch.Tensor) -> np.ndarray:
    """``logits`` [n, vocab] as float32 NumPy rows, each contiguous (a view where it can be)."""
    if logits.dtype == torch.float32 and logits.device.type == "cpu" and not logits.requires_grad:
        x = logits.numpy()
    else:
        x = logits.detach().float().cpu().numpy()
    return np.ascontiguousarray(x) if x.strides[1] != x.itemsize else x


def warp(
    logits: torch.Tensor,
    config: SamplingConfig,
    sequence: torch.Tensor | np.ndarray | None = None,
    first_position: int = 0,
    windows: np.ndarray | None = None,
) -> Probs:
    """Warp ``logits`` [n, vocab] under ``config``: penalty, temperature, top-k, top-p.

    Row i is the distribution of the token at position ``first_position + i`` of ``sequence``
    (needed only for the repetition penalty). ``windows`` [n, repetition_window] gives each
    row's penalised ids instead (the rows of a token tree each follow their own path). With
    top-k (or greedy decoding) the vocabulary is read once and only the k candidates go
    further: a handful of NumPy operations per row.
    """
    x = _logit_rows(logits)
    window = None
    if config.repetition_penalty != 1.0 and config.repetition_window > 0:
        if windows is not None:
            window = np.asarray(windows, dtype=np.int64)
        elif sequence is not None:
            window = _window_ids(sequence, first_position, len(x), config.repetition_window)
    if len(x) == 1:
        probs, ids = _warp_row(x[0], None if window is None else window[0], config)
        return Probs._of(probs[None], None if ids is None else ids[None])
    return Probs.lazy(len(x), lambda i: _warp_row(x[i], None if window is None else window[i], config))


def top_rows(logits: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` most likely ids of each row of ``logits`` [n, vocab], most likely first, and
    their probabilities renormalised over those k (a softmax of their logits): [n, k] each.

    What a drafter that recycles the target's own candidates keeps of a verification (Token
    Recycling, Luo et al. 2024); one strided pass per row (``_top_candidates``), about 50 µs
    on a 262k vocabulary."""
    x = _logit_rows(logits)
    n, vocab = x.shape
    k = min(k, vocab)
    ids = np.empty((n, k), dtype=np.int64)
    probs = np.empty((n, k), dtype=np.float32)
    for r in range(n):
        row = x[r]
        top = _top_candidates(row, k)
        values = row[top]
        order = np.argsort(-values, kind="stable")[:k]  # ties at the k-th: the lowest ids
        ids[r] = top[order]
        weights = np.exp(values[order] - values[order[0]])
        probs[r] = weights / weights.sum()
    return ids, probs


def logits_to_probs(
    logits: torch.Tensor,
    config: SamplingConfig,
    sequence: torch.Tensor | None = None,
    first_position: int = 0,
) -> torch.Tensor:
    """Warp ``logits`` [n, vocab] into dense probabilities [n, vocab] (see ``warp``)."""
    return warp(logits, config, sequence, first_position).dense(logits.shape[1])
