"""Counting n-grams of token ids with NumPy: sorts and segment sums, no loop per token.

Every order k+1 (context length k = 0 … n−1) is counted from the same concatenated token
array: an n-gram is one unsigned code (its k+1 dense ids packed by shifts, ceil(log2 U) bits
each, U = distinct tokens), so counting is one in-place sort plus a diff. N-grams never cross a document boundary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from babelspec.errors import UserError
from babelspec.ngram.model import NgramModel, NgramTable


@dataclass(frozen=True)
class CountConfig:
    order: int = 2  # n: the longest n-gram counted (the paper's bigram is n = 2)
    min_count: int = 1  # drop (context, next) pairs seen fewer times (not applied to unigrams)
    max_continuations: int = 0  # keep at most this many continuations per context; 0 = all

    def __post_init__(self) -> None:
        if self.order < 1:
            raise UserError(f"order must be >= 1 (got {self.order}); 2 is the paper's bigram")
        if self.min_count < 1:
            raise UserError(f"min_count must be >= 1 (got {self.min_count})")
        if self.max_continuations < 0:
            raise UserError(f"max_continuations must be >= 0 (got {self.max_continuations}); 0 keeps all")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _smallest_uint(max_value: int) -> np.dtype:
    for dt in (np.uint16, np.uint32, np.uint64):
        if max_value <= np.iinfo(dt).max:
            return np.dtype(dt)
    raise ValueError(f"value {max_value} does not fit in 64 bits")


def _unique_counts(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and their multiplicities (np.unique without its extra passes)."""
    if codes.size == 0:
        return codes, np.zeros(0, dtype=np.int64)
    codes.sort()  # in place: the caller's array is scratch
    starts = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1])))
    counts = np.diff(np.append(starts, codes.size))
    return codes[starts], counts


def _build_table(k: int, ctx: np.ndarray, nxt: np.ndarray, cnt: np.ndarray, config: CountConfig) -> NgramTable:
    """CSR table from (context key, next, count) sorted by context key; rows by count descending."""
    if k > 0 and config.min_count > 1:
        keep = cnt >= config.min_count
        ctx, nxt, cnt = ctx[keep], nxt[keep], cnt[keep]
    n = ctx.size
    if n:
        new_row = np.concatenate(([True], ctx[1:] != ctx[:-1]))
        group = np.cumsum(new_row) - 1
        cmax = int(cnt.max())
        # One sort key: row first, then count descending, then token id (unique, so the fast
        # unstable sort is deterministic).
        nbits = max(1, int(nxt.max()).bit_length())
        cbits = max(1, cmax.bit_length())
        if int(group[-1]).bit_length() + cbits + nbits <= 63:
            # Sort packed (row, count descending, token) keys themselves (a direct sort beats an
            # argsort, and the keys are unique so it is deterministic), then unpack them.
            key = (group << (cbits + nbits)) | ((cmax - cnt) << nbits) | nxt.astype(np.int64)
            key.sort()
            nxt = key & ((1 << nbits) - 1)
            cnt = cmax - ((key >> nbits) & ((1 << cbits) - 1))
        else:
            order = np.lexsort((nxt, -cnt, group))
            nxt, cnt = nxt[order], cnt[order]
        row_starts = np.flatnonzero(new_row)
        if config.max_continuations:
            rank = np.arange(n) - row_starts[group]
            keep = rank < config.max_continuations
            nxt, cnt, group = nxt[keep], cnt[keep], group[keep]
        keys = ctx[row_starts]
        sizes = np.bincount(group, minlength=keys.size)
    else:
        keys = np.zeros(0, dtype=np.uint64)
        sizes = np.zeros(0, dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    return NgramTable(
        context_length=k,
        keys=keys.astype(_smallest_uint(max(int(keys.max()) if keys.size else 0, 2**16)), copy=False),
        offsets=offsets.astype(_smallest_uint(max(int(offsets[-1]), 2**16)), copy=False),
        next_tokens=nxt.astype(_smallest_uint(int(nxt.max()) if nxt.size else 0), copy=False),
        counts=cnt.astype(_smallest_uint(int(cnt.max()) if cnt.size else 0), copy=False),
    )


def _checked_documents(tokens: np.ndarray, doc_lengths: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``tokens`` as a 1-D array of ids >= 0 and the documents' lengths (one document when
    None), which must add up to it; a clear error otherwise."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 1:
        raise ValueError(f"tokens must be a 1-D array of token ids (got shape {tokens.shape})")
    if tokens.size and int(tokens.min()) < 0:
        raise ValueError("token ids must be >= 0")
    if doc_lengths is None:
        doc_lengths = np.array([tokens.size], dtype=np.int64)
    doc_lengths = np.asarray(doc_lengths, dtype=np.int64)
    if int(doc_lengths.sum()) != tokens.size:
        raise ValueError(f"document lengths sum to {int(doc_lengths.sum())} but there are {tokens.size} tokens")
    return tokens, doc_lengths


def count_ngrams(
    tokens: np.ndarray,
    doc_lengths: np.ndarray | None = None,
    config: CountConfig = CountConfig(),
    *,
    tokenizer: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
) -> NgramModel:
    """Count every n-gram of order 1 … ``config.order`` in ``tokens``.

    ``tokens`` holds the documents back to back; ``doc_lengths`` their lengths (one document
    when None). ``tokenizer`` is the fingerprint stored with the model.
    """
    tokens, doc_lengths = _checked_documents(tokens, doc_lengths)
    n_tokens = int(tokens.size)
    present = np.bincount(tokens, minlength=1) > 0 if n_tokens else np.zeros(0, bool)
    vocab_map = np.flatnonzero(present).astype(np.uint32)
    base = int(vocab_map.size)
    bits = max(1, (base - 1).bit_length())
    if bits * config.order >= 64:  # the all-ones code stays free as the boundary sentinel
        raise UserError(
            f"order {config.order} is too high for a corpus with {base} distinct tokens "
            f"(n-gram codes of {bits} bits per token must fit in 64 bits); use order <= {63 // bits}"
        )
    code_dtype = np.uint32 if bits * config.order < 32 else np.uint64  # uint32 sorts faster
    lookup = np.zeros(int(vocab_map[-1]) + 1 if base else 1, dtype=code_dtype)
    lookup[vocab_map] = np.arange(base, dtype=code_dtype)
    dense = lookup[tokens]
    del lookup
    doc_starts = (np.cumsum(doc_lengths) - doc_lengths)[doc_lengths > 0]
    sentinel = np.iinfo(code_dtype).max  # marks n-grams that would cross a document boundary
    shift, mask = code_dtype(bits), code_dtype((1 << bits) - 1)

    tables: list[NgramTable] = []
    for k in range(config.order):
        if k == 0:
            counts = np.bincount(dense, minlength=base) if base else np.zeros(0, np.int64)
            nxt = np.flatnonzero(counts)
            ctx = np.zeros(nxt.size, dtype=np.uint64)
            tables.append(_build_table(0, ctx, nxt, counts[nxt], config))
            continue
        m = n_tokens - k
        if m <= 0:
            empty = np.zeros(0, dtype=np.uint64)
            tables.append(_build_table(k, empty, empty, np.zeros(0, np.int64), config))
            continue
        code = dense[0:m].copy()
        for j in range(1, k + 1):
            code <<= shift
            code |= dense[j : j + m]
        # The n-gram starting at position s - j (j = 1..k) spans the start s of a document.
        for j in range(1, k + 1):
            bad = doc_starts - j
            code[bad[(bad >= 0) & (bad < m)]] = sentinel
        codes, counts = _unique_counts(code)
        del code
        if codes.size and codes[-1] == sentinel:
            codes, counts = codes[:-1], counts[:-1]
        ctx, nxt = codes >> shift, codes & mask
        tables.append(_build_table(k, ctx.astype(np.uint64), nxt, counts, config))

    meta = dict(training or {})
    meta.update(
        {
            "tokens": n_tokens,
            "documents": int(doc_lengths.size),
            "distinct_tokens": base,
            **config.to_dict(),
        }
    )
    return NgramModel(
        order=config.order, vocab_map=vocab_map, tables=tables, tokenizer=dict(tokenizer or {}), training=meta
    )


def count_weighted(
    contexts: np.ndarray,
    next_tokens: np.ndarray,
    weights: np.ndarray,
    config: CountConfig = CountConfig(),
    *,
    tokenizer: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
) -> NgramModel:
    """An n-gram model from weighted observations instead of running text.

    Observation i says that ``next_tokens[i]`` followed the ``config.order - 1`` token ids
    ``contexts[i]`` (oldest first; −1 where the text had not started), ``weights[i]`` times.
    Weights are non-negative integers: soft counts, e.g. a teacher's next-token probabilities
    scaled to integers (``babelspec.distill.ngram_distill``). Equal (context, next) pairs add up; a
    shorter context k takes the last k columns, so every order's table sums the same weights.
    """
    n_ctx = config.order - 1
    contexts = np.asarray(contexts, dtype=np.int64).reshape(-1, n_ctx) if n_ctx else \
        np.zeros((len(next_tokens), 0), dtype=np.int64)  # fmt: skip
    next_tokens = np.asarray(next_tokens, dtype=np.int64)
    weights = np.asarray(weights)
    if not (contexts.shape[0] == next_tokens.shape[0] == weights.shape[0]) or next_tokens.ndim != 1:
        raise ValueError(
            f"contexts [{contexts.shape[0]}, {n_ctx}], next_tokens {next_tokens.shape} and weights "
            f"{weights.shape} must describe the same observations"
        )
    if weights.size and (weights.dtype.kind not in "iu" or int(weights.min()) < 0):
        raise ValueError("weights must be non-negative integers (scale probabilities before counting)")
    if next_tokens.size and int(next_tokens.min()) < 0:
        raise ValueError("next token ids must be >= 0")
    keep = weights > 0
    contexts, next_tokens, weights = contexts[keep], next_tokens[keep], weights[keep].astype(np.int64)
    seen = np.concatenate([next_tokens, contexts[contexts >= 0]])
    vocab_map = np.unique(seen).astype(np.uint32)
    base = int(vocab_map.size)
    bits = max(1, (base - 1).bit_length())
    if bits * config.order >= 64:
        raise UserError(f"order {config.order} is too high for {base} distinct tokens; use order <= {63 // bits}")
    dense_next = np.searchsorted(vocab_map, next_tokens).astype(np.uint64)
    dense_ctx = np.where(contexts >= 0, np.searchsorted(vocab_map, contexts), -1)
    tables: list[NgramTable] = []
    for k in range(config.order):
        cols = dense_ctx[:, n_ctx - k :]
        valid = (cols >= 0).all(axis=1)
        code = np.zeros(int(valid.sum()), dtype=np.uint64)
        for j in range(k):
            code = (code << np.uint64(bits)) | cols[valid, j].astype(np.uint64)
        code = (code << np.uint64(bits)) | dense_next[valid]
        codes, inverse = np.unique(code, return_inverse=True)
        counts = np.bincount(inverse, weights=weights[valid], minlength=codes.size).astype(np.int64)
        mask = np.uint64((1 << bits) - 1)
        tables.append(_build_table(k, codes >> np.uint64(bits), codes & mask, counts, config))
    meta = dict(training or {})
    meta.update({"observations": int(next_tokens.size), "weight": int(weights.sum()),
                 "distinct_tokens": base, **config.to_dict()})
    return NgramModel(order=config.order, vocab_map=vocab_map, tables=tables,
                      tokenizer=dict(tokenizer or {}), training=meta)
