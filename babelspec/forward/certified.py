"""The certified output head: each row's ``k`` largest logits, bit for bit those of the full bf16
head, from an int8 pass over all of the head's rows and exact bf16 products on the few rows
that pass's error bound cannot rule out.

Under greedy decoding and under top-k sampling (the paper's: top-k 100, then top-p, temperature
and a repetition penalty), the next-token distribution depends only on the ``k`` largest logits
after the penalty. For a hidden state ``h`` (bf16) and a head row ``W_r``:

- ``W_r = s_r q_r + e_r`` with ``q_r`` int8 and one float32 scale ``s_r`` per row (``e_r`` is the
  rounding, its norm kept per row);
- ``h = t1 p1 + t2 p2 + d`` with ``p1``, ``p2`` int8 under one scale each: ``h`` quantized,
  then what that left (so the activation's rounding ``d`` is about 127 times smaller);
- ``W_r . h = s_r t1 (q_r . p1) + s_r t2 (q_r . p2) + s_r (q_r . d) + e_r . h``, the two
  integer sums exact in oneDNN's int8 product (two rows of one product), and
  ``|s_r (q_r . d)| <= s_r |q_r| |d|`` (Cauchy-Schwarz);
- ``|e_r . h| <= |e_r| |h_R| + s_r / 2 |h_O|_1``: ``O`` the hidden state's ``OUTLIERS`` largest
  channels, bounded one by one (``|e_rj| <= s_r / 2``), ``R`` the rest (Cauchy-Schwarz). Some
  languages' hidden states carry a few huge channels; Cauchy-Schwarz over all of them would
  keep most of the vocabulary.

The bound also covers the float32 rounding of the scaled sums and of the full head's own sum
(``n u |W_r| |h|`` for ``n`` products). It holds by construction, for any hidden state; no data
went into it. ``L``, the k-th largest lower bound among tokens outside the penalty's, is then
at most the k-th largest exact logit, and a token whose upper bound stays below ``L`` (less a
margin for the bf16 rounding of the logits, which may tie values) cannot be among the ``k``
largest. The candidates and every token the penalty touches get exact logits from the bf16
weight rows (the same product as the full head's, bit for bit: ``tests/test_certified.py``);
every other logit comes back as -inf, which top-k, top-p, temperature and the penalty ignore.
Rows whose candidates pass ``cap`` take the full head, and the head counts them.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from babelspec.errors import UserError
from babelspec.forward.native import Glue
from babelspec.forward.quantize import w8a8_activation_levels, w8a8_available

CERTIFIED_TOP_K = 100  # the largest top-k certified: the paper's
CANDIDATE_CAP = 16384  # more candidates than this: the row takes the full head (6 % of its bytes)
# For speed only (``babelspec bench head``): blocks of more rows take the full head (the int8 pass
# over two activation levels per row grows with the rows: a 2-row block took 16.2 ms certified
# against 12.7 ms full on a 2-core Zen 4), and so do rows whose estimated bound passes the limit
# for k = 1 or for larger k (their candidates would pass the cap: Amharic's and Nepali's rows)
MAX_ROWS = 1
BOUND_LIMITS = (2.4, 1.45)
BOUND_TERMS = ("weights", "activations", "rounding")  # every term of the error bound (``CertifiedHead``)
_ROUND_UP = 1.0 + 2.0**-20  # float64 norms stored as float32, rounded up past any rounding
LEFT_OUT = -(2.0**100)  # an approximate sum that puts a token far below any logit: left out of the search
OUTLIERS = 16  # a hidden state's largest channels, bounded one by one (|e_rj| <= s_r / 2)


@dataclass(frozen=True)
class HeadRequest:
    """What a forward's caller needs of the output head: each row's ``k`` largest logits exactly
    (1 for greedy decoding), and the logits of ``exact`` (the tokens a repetition penalty
    touches) exactly. Others may come back as -inf."""

    k: int
    exact: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.k, int) or self.k < 1:
            raise UserError(f"a head request's k must be a positive whole number, not {self.k!r}")


class HeadStats:
    """What the certified head did: rows certified, rows that fell back to the full head (their
    candidates passed the cap), rows that took it without trying (a block too long, or a bound
    estimated too wide), rows that asked for the full head (no request, or k above
    ``CERTIFIED_TOP_K``), and the candidate-set sizes of the
    last ``keep`` certified rows."""

    def __init__(self, keep: int = 100_000) -> None:
        self.keep = keep
        self.reset()

    def reset(self) -> None:
        self.certified = self.fallbacks = self.skipped = self.full = 0
        self.sizes: collections.deque[int] = collections.deque(maxlen=self.keep)

    def summary(self) -> dict:
        sizes = sorted(self.sizes)
        pick = (lambda q: sizes[min(len(sizes) - 1, int(q * len(sizes)))]) if sizes else (lambda q: None)
        asked = self.certified + self.fallbacks + self.skipped
        return {"rows_certified": self.certified, "rows_fallback": self.fallbacks, "rows_skipped": self.skipped,
                "rows_full": self.full, "fallback_rate": round((self.fallbacks + self.skipped) / asked, 4) if asked else None,
                "candidates_median": pick(0.5), "candidates_p99": pick(0.99)}  # fmt: skip


class CertifiedHead:
    """The certified top-k head over a bf16 head ``weight`` [vocab, hidden]; ``full`` is the full
    head's product (rows without a request, and fallbacks). ``glue``: the C candidate search
    (``native``), else the same search in torch operations. ``terms``: the bound's terms, all of
    them by default; fewer make a wrong bound, which the exactness test must catch.

    For speed only (the logits are exact either way): blocks of more than ``max_rows`` rows take
    the full head, and so do rows whose bound, estimated from the hidden state before the int8
    pass, passes ``limits`` (for k = 1, for larger k): their candidates would pass the cap."""

    def __init__(self, weight: torch.Tensor, full: Callable[[torch.Tensor], torch.Tensor], glue: Glue | None = None,
                 cap: int = CANDIDATE_CAP, terms: Sequence[str] = BOUND_TERMS, max_rows: int = MAX_ROWS,
                 limits: tuple[float, float] = BOUND_LIMITS) -> None:  # fmt: skip
        if unknown := set(terms) - set(BOUND_TERMS):
            raise UserError(f"unknown bound terms {sorted(unknown)}; use some of {', '.join(BOUND_TERMS)}")
        if not can_certify(weight):
            raise UserError("the certified head needs a bf16 head on a CPU with oneDNN's int8 product "
                             f"(this one: {weight.dtype} on {weight.device.type}, torch {torch.__version__}); load the "
                             "target with dtype='bfloat16' or use head='full'")  # fmt: skip
        self.weight, self.full, self.glue, self.cap = weight.detach(), full, glue, cap
        if not _gathered_rows_agree(self.weight, full):
            raise UserError("the certified head cannot reproduce the full head's rounding on this CPU (a product on "
                             "gathered rows gave other bits than the full head); use head='full'")  # fmt: skip
        self.levels = w8a8_activation_levels()
        self.stats = HeadStats()
        self.terms = frozenset(terms)
        rows, self.scales, self.e, self.c, self.rounding = _quantize(self.weight)
        # the bound's per-token factors as the C search reads them: bf16, rounded up
        self.factors = tuple(_bf16_up(v) for v in (self.e, self.scales, self.c))
        self.packed = torch.ops.onednn.qlinear_prepack(rows, [1, rows.shape[1]])
        self.zeros = torch.zeros(rows.shape[0], dtype=torch.long)
        self.typical = (float(self.e.median()), float(self.scales.median()))  # a typical row's e and s
        self.max_rows, self.limits = max_rows, limits

    def __call__(self, hidden: torch.Tensor, requests: Sequence[HeadRequest | None]) -> torch.Tensor:
        """Logits [..., rows, vocab] (bf16) of ``hidden`` [..., rows, hidden]: row i certified for
        ``requests[i]``, or the full head's where it is None."""
        flat = hidden.reshape(-1, hidden.shape[-1])
        if len(requests) != flat.shape[0]:
            raise ValueError(f"{len(requests)} head requests for {flat.shape[0]} rows")
        asked = [i for i, r in enumerate(requests) if r is not None and r.k <= CERTIFIED_TOP_K]
        if len(asked) > self.max_rows:
            self.stats.skipped += len(asked)
            asked = []
        out = torch.full((flat.shape[0], self.weight.shape[0]), float("-inf"), dtype=self.weight.dtype)
        done = set()
        if asked:
            x = flat[asked].double()
            channels = _channel_norms(x)
            keep = self._promising(channels, [requests[i].k for i in asked])
            self.stats.skipped += len(asked) - sum(keep)
            asked, x, channels = [i for i, ok in zip(asked, keep) if ok], x[keep], (channels[0][keep], channels[1][keep])
        if asked:
            sums, per_row = self._approximate(x, channels)
            for j, i in enumerate(asked):
                approx = (sums[0][j], sums[1][j]), tuple(float(v[j]) for v in per_row)
                if self._exact_row(flat[i], requests[i], out[i], approx):
                    done.add(i)
        rest = [i for i in range(flat.shape[0]) if i not in done]
        # rows that asked for the full head: no request, or more candidates than it certifies
        self.stats.full += sum(1 for i in rest if requests[i] is None or requests[i].k > CERTIFIED_TOP_K)
        if rest:
            out[rest] = self.full(flat[rest].unsqueeze(0))[0]
        return out.view(*hidden.shape[:-1], -1)

    def _promising(self, channels: tuple[torch.Tensor, torch.Tensor], ks: list[int]) -> list[bool]:
        """Whether each row's bound, estimated for a typical head row from its hidden state's
        ``channels`` (``_channel_norms``) alone, stays within ``limits``."""
        estimate = self.typical[0] * channels[0] + self.typical[1] * channels[1]
        return [float(b) <= self.limits[0 if k == 1 else 1] for b, k in zip(estimate, ks)]

    def _approximate(self, x: torch.Tensor, channels: tuple[torch.Tensor, torch.Tensor]) -> tuple[tuple, tuple]:
        """The int8 pass over the hidden states ``x`` [rows, hidden] (float64): the two activation
        levels' scaled sums (float32 [rows, vocab] each), and per row the bound's factors
        (float64 [rows] each): the two levels' scales, ``channels`` (``_channel_norms``) where
        the weights' term is on, the activation's rounding ``|d|`` and the float32 sums' term."""
        levels = self.levels

        def level(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            t = (v.abs().amax(dim=1) / levels).float().clamp(min=2.0**-100)
            return t, torch.round(v / t.double()[:, None]).clamp(-levels, levels)

        t1, p1 = level(x)
        r1 = x - t1.double()[:, None] * p1  # exact in float64: a bf16 value less a float32 times 8 bits
        t2, p2 = level(r1)
        d = r1 - t2.double()[:, None] * p2
        quantized = (torch.cat([p1, p2]) + levels + 1).to(torch.uint8)
        sums = torch.ops.onednn.qlinear_pointwise(quantized, 1.0, levels + 1, self.packed, self.scales, self.zeros,
                                                  None, 1.0, 0, torch.float32, "none", [], "")  # fmt: skip
        rows = x.shape[0]
        zero = torch.zeros(rows, dtype=torch.float64)
        weights = "weights" in self.terms
        per_row = (t1.double(), t2.double(), channels[0] if weights else zero, channels[1] if weights else zero,
                   d.norm(dim=1) * _ROUND_UP if "activations" in self.terms else zero,
                   x.norm(dim=1) * self.rounding if "rounding" in self.terms else zero)  # fmt: skip
        return (sums[:rows], sums[rows:]), per_row

    def _exact_row(self, h: torch.Tensor, request: HeadRequest, out: torch.Tensor, approx: tuple) -> bool:
        """Fill ``out`` [vocab] with the exact logits of the row's candidates and of the
        request's exact tokens; False (``out`` untouched) where the candidates pass the cap."""
        exact = torch.tensor(sorted(set(request.exact)), dtype=torch.long)
        vocab = out.shape[0]
        if len(exact) and (int(exact[0]) < 0 or int(exact[-1]) >= vocab):
            raise UserError(f"a head request names token ids outside the vocabulary [0, {vocab})")
        (a1, a2), per_row = approx
        candidates = None
        if request.k <= vocab - len(exact) and all(math.isfinite(v) for v in per_row):
            a1[exact] = LEFT_OUT  # computed exactly anyway, and kept out of L: the penalty may move them
            candidates = self._candidates(request.k, (a1, a2), per_row)
        if candidates is None:
            self.stats.fallbacks += 1
            return False
        self.stats.certified += 1
        self.stats.sizes.append(len(candidates))
        ids = torch.cat([candidates, exact]) if len(exact) else candidates
        out[ids] = F.linear(h[None], self.weight.index_select(0, ids))[0]
        return True

    def _candidates(self, k: int, sums: tuple[torch.Tensor, torch.Tensor],
                    per_row: tuple[float, ...]) -> torch.Tensor | None:  # fmt: skip
        """The token ids that the bound cannot rule out of the k largest (``bs_certify`` in C,
        else the same search in torch operations, with the exact k-th largest lower bound)."""
        t1, t2, hr, ho, dn, extra = per_row
        if self.glue is not None:
            return self.glue.certify(k, sums, (t1, t2), self.factors, (hr, ho, dn, extra), self.cap)
        x1, x2 = sums[0].double() * t1, sums[1].double() * t2
        w = self.e.double() * hr + self.scales.double() * ho + self.c.double() * dn
        b = w + extra + 2.0**-18 * (x1.abs() + x2.abs() + w + extra)
        bound = float(torch.topk(x1 + x2 - b, k).values[-1])
        threshold = bound - 2.0**-6 * (abs(bound) + 1.0)
        candidates = torch.nonzero(x1 + x2 + b >= threshold).flatten()
        return None if len(candidates) > self.cap else candidates


def _channel_norms(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of ``x`` [rows, hidden] (float64), rounded up: ``|h_R|``, the norm of all channels
    but the ``OUTLIERS`` largest, and half ``|h_O|_1``, the sum of those (the weights' term of the
    bound is ``|e_r| |h_R| + s_r |h_O|_1 / 2``)."""
    magnitudes = x.abs().sort(dim=1, descending=True).values
    return (magnitudes[:, OUTLIERS:].norm(dim=1) * _ROUND_UP,
            magnitudes[:, :OUTLIERS].sum(dim=1) * 0.5 * _ROUND_UP)  # fmt: skip


def can_certify(weight: torch.Tensor) -> bool:
    """Whether a head ``weight`` can be certified here: bf16 on a CPU with oneDNN's int8 product."""
    return weight.dtype == torch.bfloat16 and weight.device.type == "cpu" and weight.dim() == 2 and w8a8_available()


def _gathered_rows_agree(weight: torch.Tensor, full: Callable[[torch.Tensor], torch.Tensor]) -> bool:
    """Whether the product on gathered weight rows (what the certified head computes its
    candidates with) gives the full head's bits, on random bf16 hidden states of varied scale and
    candidate sets of 1 to 16,384 rows. oneDNN picks its kernels by CPU and shape, so this is
    probed once per head; on the 2-core Zen 4 every row agreed (and over 10,010 positions of real
    text in ``babelspec bench head``)."""
    g = torch.Generator().manual_seed(0)
    vocab = weight.shape[0]
    for scale in (0.1, 3.0, 40.0):
        h = (torch.randn(1, 1, weight.shape[1], generator=g) * scale).to(weight.dtype)
        want = full(h)[0, 0]
        for n in (1, 7, 100, 1000, 16384):
            ids = torch.randperm(vocab, generator=g)[: min(n, vocab)].sort().values
            if not torch.equal(F.linear(h[0], weight.index_select(0, ids))[0], want[ids]):
                return False
    return True


def _bf16_up(x: torch.Tensor) -> torch.Tensor:
    """Non-negative float32 values as the nearest bf16 values at or above them."""
    bits = x.float().contiguous().view(torch.int32).to(torch.int64)
    return ((bits + 0xFFFF) >> 16).to(torch.int16).view(torch.bfloat16)


def _quantize(weight: torch.Tensor) -> tuple:
    """(int8 rows, float32 scales, e, c, rounding): per row, ``e = |e_r|`` (the weights' rounding)
    and ``c = s_r |q_r|`` (what multiplies ``|d|``), in float64 and rounded up into float32, in
    parts of 16,384 rows; ``rounding``: the largest ``2 n u |W_r|`` (the float32 sums of ``n``
    products, here and in the full head), a number that multiplies ``|h|``."""
    n = weight.shape[1]
    parts, rounding = [], 0.0
    for w in weight.split(16384):
        w = w.double()
        scales = (w.abs().amax(dim=1) / 127).float().clamp(min=2.0**-100)
        q = torch.round(w / scales.double()[:, None]).clamp(-127, 127)
        e = (w - scales.double()[:, None] * q).norm(dim=1)
        c = scales.double() * q.norm(dim=1)
        rounding = max(rounding, float(w.norm(dim=1).max()) * 2 * n * 2.0**-24 * _ROUND_UP)
        parts.append((q.to(torch.int8), scales, (e * _ROUND_UP).float(), (c * _ROUND_UP).float()))
    return (*(torch.cat([p[i] for p in parts]).contiguous() for i in range(4)), rounding)
