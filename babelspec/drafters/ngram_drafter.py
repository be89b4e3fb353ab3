"""The n-gram drafter: walk a counted model (``babelspec.ngram``) to propose up to γ tokens.

Spec: ``ngram:FILE[,option=value...]``, e.g. ``ngram:amh.ngram,mode=top1,unseen=backoff``.
Options (see ``NgramDraftConfig``): ``mode``, ``unseen``, ``threshold``, ``min_backoff``,
``width``, ``lookup``, ``lookup_min``, ``tree``, ``branch``, ``recycle``.

The hot path is plain Python over ints and lists: each context's row (its continuations,
cumulative counts and padded probability arrays) is built from the memory-mapped CSR arrays
once, on first use, and then reused, so a drafted token costs a dict lookup, one random
number and a bisection. Torch tensors are made once per proposal, from NumPy buffers.
"""

from __future__ import annotations

import heapq
import itertools
import random
import time
from array import array
from bisect import bisect_right
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from babelspec.drafters.base import Draft, Drafter, Verdict
from babelspec.errors import UserError
from babelspec.ngram.model import NgramModel
from babelspec.sampling import Probs, SamplingConfig, nucleus_size

if TYPE_CHECKING:
    from babelspec.target import Target

MODES = ("sample", "top1", "nucleus", "auto")
# Tree budget (nodes) when a spec gives none, per decoding mode, where the target verifies trees
# (0 = a chain). `babelspec bench tree` (6 languages x 3 held-out FLORES-200 sentences, 48 tokens,
# bigram on real text, depth 4; benchmarks/results/tree_vs_chain.json, Intel Xeon with AMX, bf16):
# greedy, a tree of 8 nodes yielded 2.53 tokens per verification against 2.18 for the chain of 4
# and decoded 2.62x plain against 2.38x (15 nodes: 2.56, 2.37x); under the paper's sampling the
# point-mass tree kept fewer tokens than the sampled chain (1.28 against 1.38; 1.09x against
# 1.22x). Sampled trees are now independent chains (``_propose_sampled_chains``): `bench tree
# --modes sample --budgets 8 --branches 2,4 --prompts-per-lang 5` (tree_vs_chain_sampled.json)
# kept 1.40 tokens per verification with 4 chains of 2 against 1.34 for the chain of 8 (1.04x)
# and decoded 1.25x plain against 1.20x for the chain of 4, but amh fell to 1.00x from 1.10x; so
# sampling keeps the chain, and trees are there to ask for (tree=8). Depth is the engine's γ: at
# γ 8 the default tree kept 2.82 tokens per verification against 2.35 for the chain of 8 and
# decoded 2.88x plain (`bench tree --modes greedy`, tree_vs_chain_deep.json, "tree 8 deep").
DEFAULT_TREE = {"greedy": 8, "sample": 0}
UNSEEN_POLICIES = ("stop", "backoff", "uniform")
COUNT_SCALE = 1e6  # probabilities (recycled rows, mixtures) as integer counts: p * COUNT_SCALE, at least 1


@dataclass(frozen=True)
class NgramDraftConfig:
    # sample: draw from the n-gram distribution (the paper); top1: point mass at the most
    # likely continuation; nucleus: draw from the n-gram distribution cut by the target's own
    # top-k / top-p; auto: top1 under greedy decoding, else sample. Under the paper's sampling
    # settings sample beats top1 by 2x (mean expected α 0.227 vs 0.112 on amh, npi, yor).
    mode: str = "auto"
    # what to do when the (n-1)-token context was never seen: stop drafting (llama.cpp), back
    # off to shorter contexts, or draw from a uniform distribution over the vocabulary (the
    # paper). backoff keeps the most accepted tokens per position (0.227 vs 0.225 for both).
    unseen: str = "backoff"
    threshold: float = 0.0  # stop when the context's most likely continuation is less probable
    min_backoff: int = 0  # shortest context length backed off to (0 = the unigram)
    width: int = 32  # keep the `width` most frequent continuations of a context (renormalised)
    # prompt lookup: longest context (in tokens) matched in prompt + output; 0 = off. On by
    # default: +0.02-0.05 expected α on amh, npi, yor, both tasks (benchmarks/ngram_acceptance.py)
    lookup: int = 3
    lookup_min: int = 2  # shortest lookup match that overrides the trained model
    # token tree: draft up to `tree` nodes, expanding the node whose path is most probable under
    # the n-gram (EAGLE-2's rule), each node's `branch` most likely continuations as candidates,
    # to depth gamma; the verifier tries a node's candidates in order. 0 = a chain; -1 (the
    # default) = DEFAULT_TREE for the decoding mode where the target verifies trees, else a chain.
    tree: int = -1
    branch: int = 4
    # Token Recycling (Luo et al. 2024): keep, per token, the target's `recycle` most likely next
    # tokens from the last verified row that read it (per request), and draft from their even
    # mixture with the corpus model's row; prompt lookup still comes first. 0 = off.
    recycle: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UserError(f"unknown n-gram mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.unseen not in UNSEEN_POLICIES:
            raise UserError(
                f"unknown unseen-context policy {self.unseen!r}; choose one of {', '.join(UNSEEN_POLICIES)}"
            )
        if not 0.0 <= self.threshold <= 1.0:
            raise UserError(f"threshold must be in [0, 1] (got {self.threshold})")
        if self.width < 1:
            raise UserError(f"width must be >= 1 (got {self.width})")
        if self.min_backoff < 0 or self.lookup < 0 or self.lookup_min < 1:
            raise UserError("min_backoff and lookup must be >= 0 and lookup_min >= 1")
        if not 0 <= self.recycle <= self.width:
            raise UserError(f"recycle must be in [0, width={self.width}] (got {self.recycle}); "
                             "0 turns Token Recycling off")
        if self.tree < -1 or self.branch < 1:
            raise UserError(f"tree must be >= 0 (0 drafts a chain; leave it out for the measured default) "
                             f"and branch >= 1 (got tree={self.tree}, branch={self.branch})")

    @classmethod
    def from_options(cls, options: dict[str, str]) -> NgramDraftConfig:
        """The config from a spec's ``name=value`` options, each checked and converted to its
        field's type (pydantic); a bad option is a ``ValueError`` naming it."""
        from pydantic import ValidationError

        try:
            return _options_adapter().validate_python(options)
        except ValidationError as err:
            error = err.errors()[0]
            if error["type"] == "value_error":  # __post_init__'s own message
                raise UserError(str(error["ctx"]["error"])) from None
            name = str(error["loc"][0]) if error["loc"] else ""
            kinds = {f.name: str(f.type) for f in fields(cls)}
            if name not in kinds:
                raise UserError(f"unknown n-gram drafter option {name!r}; known: {', '.join(kinds)}") from None
            kind = {"int": "an int", "float": "a float"}.get(kinds[name], f"a {kinds[name]}")
            raise UserError(f"n-gram drafter option {name}={options[name]!r} is not {kind}") from None


@lru_cache(maxsize=1)
def _options_adapter():
    from pydantic import ConfigDict, TypeAdapter, with_config

    return TypeAdapter(with_config(ConfigDict(extra="forbid"))(NgramDraftConfig))


class Row(NamedTuple):
    """A context's continuations, built from the memory-mapped CSR arrays on first use."""

    tokens: list[int]  # continuation token ids, most frequent first
    cumulative: list[int]  # running sums of their counts: a draw is one bisection
    total: int  # their total count
    top_prob: float  # probability of the most frequent continuation
    id_bytes: bytes  # the ids padded to `width`, as int64 bytes (copied into a Draft's buffer)
    prob_bytes: bytes  # the probabilities padded to `width`, as float32 bytes


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


UNIFORM = _Marker("UNIFORM")  # no row, but unseen=uniform: draw uniformly over the vocabulary
NEVER_SEEN = _Marker("NEVER_SEEN")  # in a row cache: the model has no row for this context


class _Walk:
    """Where a proposal stands: the contexts the next token is looked up with."""

    __slots__ = ("history", "context", "last", "token")

    def __init__(self, history: list[int] | None, context: list[int], last: int, token: int) -> None:
        self.history = history  # recent target ids, for prompt lookup (None: lookup off)
        self.context = context  # dense ids of the last n - 1 tokens (-1: not in the corpus)
        self.last = last  # dense id of the last token (the bigram fast path)
        self.token = token  # target id of the last token (Token Recycling's key)

    def copy(self) -> _Walk:
        return _Walk(None if self.history is None else list(self.history), list(self.context), self.last,
                     self.token)


class NgramDrafter(Drafter):
    name = "ngram"

    def __init__(self, model: NgramModel, config: NgramDraftConfig = NgramDraftConfig(), vocab_size: int | None = None,
                 trees_verified: bool = False):
        self.model = model
        self.config = config
        self.vocab_size = vocab_size if vocab_size is not None else model.vocab_size
        self._vocab_map = model.vocab_map.astype(np.int64)
        self._dense_of: dict[int, int] = dict(zip(self._vocab_map.tolist(), range(model.base)))
        self._bits = model.key_bits
        self._ctx_len = model.order - 1
        self._rows: list[dict[int, Any]] = [dict() for _ in range(model.order)]
        self._mode = "sample"
        self._cut: tuple[int, float] = (0, 1.0)  # (top_k, top_p) applied to rows in nucleus mode
        self._dense: list[int] = []  # dense ids of the context so far (-1: not in the corpus)
        self._history: list[int] = []  # target token ids of the context so far
        self._lookup: dict[tuple[int, ...], dict[int, int]] = {}
        self._lookup_rows: dict[tuple[int, ...], Row] = {}
        self._recycled: dict[int, Row] = {}  # target id -> the target's top continuations after it
        self._mixed: dict[int, tuple[Row, Row, Row]] = {}  # target id -> (recycled, trained, mixture)
        self.observes_top = config.recycle
        self._rng = random.Random(0)
        self._tree = 0  # the node budget of this generation's proposals (0: chains)
        self.trees_verified = trees_verified  # the verifier takes token trees (the factory asks the target)
        self._seconds: list[float] = []
        self._capacity = 0
        self._allocate(8)

    # --- the Drafter interface -------------------------------------------------------------
    def start(self, context_ids: list[int], sampling: SamplingConfig, generator: torch.Generator) -> None:
        mode = self.config.mode
        if mode == "auto":
            mode = "top1" if sampling.greedy else "sample"
        cut = (sampling.top_k, sampling.top_p) if mode == "nucleus" else (0, 1.0)
        if (mode, cut) != (self._mode, self._cut):
            self._rows = [dict() for _ in range(self.model.order)]  # rows depend on the cut
        self._mode, self._cut = mode, cut
        tree = self.config.tree
        if tree < 0:  # the measured default: trees where the verifier takes them and they pay
            tree = DEFAULT_TREE["greedy" if sampling.greedy else "sample"] if self.trees_verified else 0
        self._tree = tree
        # One draw from the engine's generator seeds ours: reproducible, and no torch per token.
        self._rng = random.Random(int(torch.randint(0, 2**62, (1,), generator=generator)))
        self._history = [int(t) for t in context_ids]
        get = self._dense_of.get
        self._dense = [get(t, -1) for t in self._history]
        self._lookup = {}
        self._lookup_rows: dict[tuple[int, ...], Row] = {}
        if self.config.lookup:
            self._index_lookup(0)
        self._recycled = {}
        self._mixed = {}
        self._seconds = []

    def propose(self, gamma: int) -> Draft:
        if self._tree:
            return self._propose_tree(gamma, self._tree)
        t0 = time.perf_counter()
        if gamma > self._capacity:
            self._allocate(gamma)
        walk = self._walk()
        threshold = self.config.threshold
        drafted: list[int] = []
        rows: list[Row | _Marker] = []
        for _ in range(gamma):
            row = self._next_row(walk)
            if row is None or (row is not UNIFORM and row.top_prob < threshold):
                break  # nothing (confident) to say: stop drafting, as llama.cpp does
            token = self._draw(row)
            drafted.append(token)
            rows.append(row)
            self._advance(walk, token)
        if not drafted:
            return Draft.empty()
        draft = self._draft(drafted, rows)
        self._seconds.append((time.perf_counter() - t0) / len(drafted))
        return draft

    def _propose_tree(self, gamma: int, budget: int) -> Draft:
        """A token tree of up to ``budget`` nodes and depth ``gamma``. Drawing (``sample``,
        ``nucleus``): ``_propose_sampled_chains``. Else best first by the path's n-gram
        probability, each node's ``branch`` most likely continuations as point-mass candidates
        (so the verifier's multi-candidate rule keeps it lossless)."""
        if self._mode != "top1":
            return self._propose_sampled_chains(gamma, budget)
        t0 = time.perf_counter()
        branch = self.config.branch
        tokens: list[int] = []
        parents: list[int] = []
        heap: list[tuple[float, int, int, int, _Walk, int]] = []
        order = itertools.count()

        def expand(node: int, walk: _Walk, score: float, depth: int) -> None:
            if depth >= gamma:
                return
            row = self._next_row(walk)
            if row is None or row is UNIFORM:
                return
            previous = 0
            for token, cumulative in zip(row.tokens[:branch], row.cumulative):
                p = (cumulative - previous) / row.total
                previous = cumulative
                heapq.heappush(heap, (-score * p, next(order), node, token, walk, depth + 1))

        expand(-1, self._walk(), 1.0, 0)
        while heap and len(tokens) < budget:
            neg, _, parent, token, walk, depth = heapq.heappop(heap)
            child = walk.copy()
            self._advance(child, token)
            tokens.append(token)
            parents.append(parent)
            expand(len(tokens) - 1, child, -neg, depth)
        if not tokens:
            return Draft.empty()
        self._seconds.append((time.perf_counter() - t0) / len(tokens))
        return Draft.tree(tokens, parents, Probs.point(tokens), forwards=len(tokens))

    def _propose_sampled_chains(self, gamma: int, budget: int) -> Draft:
        """``branch`` chains drawn independently from the n-gram, sharing the pending token as
        their root, each of depth min(gamma, budget // branch): the root's children are i.i.d.
        draws from its row and every other node has one child drawn from its own, so the
        verifier's multi-candidate rule (each candidate judged by its own row against the
        residual) keeps the tree lossless. Under sampling, where a bigram's first token is kept
        about a third of the time, several first guesses beat one longer chain (``bench tree``)."""
        t0 = time.perf_counter()
        width = max(1, min(self.config.branch, budget))
        depth = min(gamma, budget // width)
        if width * depth > self._capacity:
            self._allocate(width * depth)
        tokens: list[int] = []
        parents: list[int] = []
        rows: list[Row | _Marker] = []
        root = self._walk()
        first = self._next_row(root)
        threshold = self.config.threshold
        for _ in range(width if depth else 0):
            walk = root.copy()
            parent, row = -1, first
            for _ in range(depth):
                if row is None or (row is not UNIFORM and row.top_prob < threshold):
                    break
                token = self._draw(row)
                tokens.append(token)
                parents.append(parent)
                rows.append(row)
                parent = len(tokens) - 1
                self._advance(walk, token)
                row = self._next_row(walk)
        if not tokens:
            return Draft.empty()
        chained = self._draft(tokens, rows)
        self._seconds.append((time.perf_counter() - t0) / len(tokens))
        return Draft.tree(chained.tokens, parents, chained.probs, forwards=len(tokens))

    def recycle(self, inputs: list[int], ids: np.ndarray, probs: np.ndarray) -> None:
        """Token Recycling: the target's candidates after each token it just read replace that
        token's row (the most recent context wins)."""
        scaled = np.maximum(np.rint(np.nan_to_num(probs) * COUNT_SCALE), 1).astype(np.int64).tolist()
        ids_list = ids.tolist()
        finite = np.isfinite(probs).all(axis=1).tolist()
        for r, token in enumerate(inputs):
            if finite[r]:
                self._recycled[token] = self._row(ids_list[r], scaled[r])

    def _mix(self, a: Row, b: Row) -> Row:
        """The even mixture of two rows (its ``width`` most likely tokens, renormalised by
        ``_row``)."""
        weights: dict[int, float] = {}
        for row in (a, b):
            previous = 0
            for token, cumulative in zip(row.tokens, row.cumulative):
                weights[token] = weights.get(token, 0.0) + (cumulative - previous) / row.total / 2
                previous = cumulative
        items = sorted(weights.items(), key=lambda kv: -kv[1])[: self.config.width]
        return self._row([t for t, _ in items], [max(1, round(p * COUNT_SCALE)) for _, p in items])

    def candidates(self, path: list[int], k: int) -> list[int]:
        """The ``k`` most likely next tokens after the context extended by ``path`` (not
        committed): the candidates a point-mass tree offers at that node."""
        walk = self._walk()
        for token in path:
            self._advance(walk, token)
        row = self._next_row(walk)
        return [] if row is None or row is UNIFORM else row.tokens[:k]

    def _walk(self) -> _Walk:
        n_ctx = self._ctx_len
        return _Walk(history=self._history[-self.config.lookup :] if self.config.lookup else None,
                     context=self._dense[-n_ctx:] if n_ctx > 1 else [],
                     last=self._dense[-1] if n_ctx == 1 and self._dense else -1,
                     token=self._history[-1] if self._history else -1)

    def _next_row(self, walk: _Walk) -> Row | _Marker | None:
        """The row the next token is drawn from: prompt lookup first, then the target's recycled
        candidates mixed evenly with the trained model's row (the trained row alone when nothing
        was recycled for the last token; the recycled one alone where the model has none)."""
        row = self._lookup_row(walk.history) if walk.history is not None else None
        if row is not None:
            return row
        if self._ctx_len == 1:  # the bigram fast path: one dict lookup per token
            row = self._rows[1].get(walk.last) if walk.last >= 0 else None
            row = self._find_row([walk.last]) if row is None or row is NEVER_SEEN else row
        else:
            row = self._find_row(walk.context)
        if self._recycled:
            recycled = self._recycled.get(walk.token)
            if recycled is not None:
                if row is None or row is UNIFORM:
                    return recycled
                cached = self._mixed.get(walk.token)  # (recycled row, trained row, their mixture)
                if cached is None or cached[0] is not recycled or cached[1] is not row:
                    cached = self._mixed[walk.token] = (recycled, row, self._mix(recycled, row))
                return cached[2]
        return row

    def _draw(self, row: Row | _Marker) -> int:
        if row is UNIFORM:
            return self._rng.randrange(self.vocab_size)
        if self._mode == "top1":
            return row.tokens[0]
        return row.tokens[bisect_right(row.cumulative, int(self._rng.random() * row.total))]

    def _advance(self, walk: _Walk, token: int) -> None:
        walk.token = token
        dense = self._dense_of.get(token, -1)
        if self._ctx_len == 1:
            walk.last = dense
        elif self._ctx_len:
            walk.context.append(dense)
            if len(walk.context) > self._ctx_len:
                del walk.context[0]
        if walk.history is not None:
            walk.history.append(token)

    def _draft(self, drafted: list[int], rows: list[Row | _Marker]) -> Draft:
        """The Draft of a walk: a view of the preallocated buffers (see ``_allocate``)."""
        k = len(drafted)
        self._token_buffer[:k] = drafted
        tokens = self._token_views[k]
        if any(row is UNIFORM for row in rows):
            probs = self._full_rows(rows, drafted)
        elif self._mode == "top1":
            probs = Probs.point(self._token_buffer[:k])
        else:  # one bytes copy per buffer: cheaper than k NumPy row assignments
            ids, ps = b"".join([r.id_bytes for r in rows]), b"".join([r.prob_bytes for r in rows])
            self._id_bytes[: len(ids)] = ids
            self._prob_bytes[: len(ps)] = ps
            probs = Probs(self._prob_buffer[:k], self._id_buffer[:k])
        return Draft(tokens=tokens, probs=probs, forwards=k)

    def _allocate(self, capacity: int) -> None:
        """Buffers a proposal is written into, and token views for every draft length k.

        Torch costs about 1 µs per tensor made, more than a drafted token; so a Draft's arrays
        are views of these buffers, valid until the next ``propose`` (the engine consumes a
        draft before asking for the next one; copy them to keep them longer)."""
        width = self.config.width
        tokens = torch.zeros(capacity, dtype=torch.long)
        self._token_buffer = tokens.numpy()
        self._token_views = {k: tokens[:k] for k in range(1, capacity + 1)}
        self._id_buffer = np.zeros((capacity, width), dtype=np.int64)
        self._prob_buffer = np.zeros((capacity, width), dtype=np.float32)
        self._id_bytes = memoryview(self._id_buffer).cast("B")
        self._prob_bytes = memoryview(self._prob_buffer).cast("B")
        self._capacity = capacity

    def commit(self, verdict: Verdict) -> None:
        if verdict.top is not None and self.observes_top:
            self.recycle(verdict.inputs, *verdict.top)
        new = [int(t) for t in verdict.kept] + [int(verdict.next_token)]
        start = len(self._history)
        self._history.extend(new)
        get = self._dense_of.get
        self._dense.extend([get(t, -1) for t in new])
        if self.config.lookup:
            self._index_lookup(start)

    def forward_seconds(self) -> list[float]:
        """Seconds per drafted token of each proposal (one table walk is one draft 'forward')."""
        return list(self._seconds)

    # --- rows ------------------------------------------------------------------------------
    def _find_row(self, ctx: list[int]) -> Any:
        """The row of the longest usable context, following the unseen-context policy."""
        cfg = self.config
        longest = min(len(ctx), self._ctx_len)
        lowest = min(cfg.min_backoff, longest) if cfg.unseen == "backoff" else longest
        for k in range(longest, lowest - 1, -1):
            sub = ctx[len(ctx) - k :]
            if k == 1:
                key = sub[0]
                if key < 0:
                    continue
            else:
                key = 0
                for d in sub:
                    if d < 0:
                        key = -1
                        break
                    key = (key << self._bits) | d
                if key < 0:
                    continue
            cache = self._rows[k]
            row = cache.get(key)
            if row is None:  # not cached yet
                row = self._build_row(k, key) or NEVER_SEEN
                cache[key] = row
            if row is not NEVER_SEEN:
                return row
        if cfg.unseen == "uniform" and self.vocab_size:
            return UNIFORM
        return None

    def _build_row(self, k: int, key: int) -> Row | None:
        table = self.model.tables[k]
        c = int(table.keys.searchsorted(key))
        if c >= table.n_contexts or int(table.keys[c]) != key:
            return None
        lo, hi = int(table.offsets[c]), int(table.offsets[c + 1])
        hi = min(hi, lo + self.config.width)  # rows are sorted by count: keep the most frequent
        if hi <= lo:
            return None
        counts = table.counts[lo:hi].tolist()
        top_k, top_p = self._cut
        if top_k:
            counts = counts[:top_k]
        if top_p < 1.0:  # the target's top-p rule, on the row's counts (sorted by count)
            counts = counts[: nucleus_size(np.asarray(counts, dtype=np.float64), top_p)]
        tokens = self._vocab_map[table.next_tokens[lo : lo + len(counts)]].tolist()
        return self._row(tokens, counts)

    def _row(self, tokens: list[int], counts: list[int]) -> Row:
        pad = self.config.width - len(tokens)
        total = sum(counts)
        ids = array("q", tokens).tobytes() + bytes(8 * pad)
        probs = array("f", [c / total for c in counts]).tobytes() + bytes(4 * pad)
        return Row(tokens, list(itertools.accumulate(counts)), total, counts[0] / total, ids, probs)

    def _full_rows(self, rows: list[Row | _Marker], drafted: list[int]) -> Probs:
        out = np.zeros((len(rows), self.vocab_size), dtype=np.float32)
        for i, row in enumerate(rows):
            if row is UNIFORM:
                out[i] = 1.0 / self.vocab_size
            elif self._mode == "top1":
                out[i, drafted[i]] = 1.0
            else:  # the padding repeats id 0 with probability 0
                np.add.at(out[i], np.frombuffer(row.id_bytes, dtype=np.int64),
                          np.frombuffer(row.prob_bytes, dtype=np.float32))
        return Probs(out)

    # --- prompt lookup ---------------------------------------------------------------------
    def _index_lookup(self, start: int) -> None:
        """Count, for each new position, its continuation after the lookup_min…lookup tokens
        before it (the context cache of prompt lookup, updated as the text grows)."""
        h, table, rows, longest = self._history, self._lookup, self._lookup_rows, self.config.lookup
        for i in range(max(start, 1), len(h)):
            nxt = h[i]
            for n in range(self.config.lookup_min, min(longest, i) + 1):
                key = tuple(h[i - n : i])
                cont = table.setdefault(key, {})
                cont[nxt] = cont.get(nxt, 0) + 1
                rows.pop(key, None)  # its row changed

    def _lookup_row(self, hist: list[int]) -> Row | None:
        """The continuations of the longest suffix of the text seen before in this text."""
        table, rows = self._lookup, self._lookup_rows
        for n in range(min(self.config.lookup, len(hist)), self.config.lookup_min - 1, -1):
            key = tuple(hist[len(hist) - n :])
            row = rows.get(key)
            if row is not None:
                return row
            cont = table.get(key)
            if cont:
                items = sorted(cont.items(), key=lambda kv: -kv[1])[: self.config.width]
                row = rows[key] = self._row([t for t, _ in items], [c for _, c in items])
                return row
        return None


def parse_spec(arg: str) -> tuple[str, dict[str, str]]:
    """``FILE[,option=value...]`` -> (FILE, options)."""
    path, *rest = arg.split(",")
    if not path:
        raise UserError("the ngram drafter needs a file: ngram:FILE[,option=value...]")
    options = {}
    for item in rest:
        name, eq, value = item.partition("=")
        if not eq:
            raise UserError(f"n-gram drafter option {item!r} must be written name=value")
        options[name.strip()] = value.strip()
    return path, options


def ngram_drafter(arg: str, target: Target, context: dict[str, Any]) -> Drafter:
    from babelspec.models.tokenizers import tokenizer_fingerprint

    path, options = parse_spec(arg)
    config = NgramDraftConfig.from_options(options)
    model = NgramModel.load(Path(path))
    if getattr(target, "tokenizer", None) is not None:
        model.check_tokenizer(tokenizer_fingerprint(target.tokenizer))
    if model.base and int(model.vocab_map[-1]) >= target.vocab_size:
        raise UserError(
            f"{path}: token id {int(model.vocab_map[-1])} is outside the target's vocabulary of "
            f"{target.vocab_size}; the file was trained with another tokenizer"
        )
    return ngram_drafter_of(model, config, target, f"ngram:{Path(path).name}")


def ngram_drafter_of(model: NgramModel, config: NgramDraftConfig, target: Target, name: str) -> NgramDrafter:
    """The drafter of ``model`` for ``target``: trees where the target verifies them, and an
    explicit tree's budget as its preferred γ."""
    drafter = NgramDrafter(model, config, vocab_size=target.vocab_size,
                           trees_verified=bool(getattr(target, "supports_trees", False)))
    if config.tree > 0:  # a tree's depth is γ: unless asked otherwise, as deep as its budget
        drafter.preferred_gamma = config.tree
    drafter.name = name
    return drafter
