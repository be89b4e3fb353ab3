"""Deterministic train/test splits with no test text (exact or near-duplicate) in train.

Exact duplicates are found with :func:`babelspec.data.clean.norm_key` (case, punctuation, digits
and spaces ignored). Near duplicates are pairs whose character 4-gram sets have Jaccard ≥ 0.8,
or where ≥ 90 % of a test text's 4-grams lie inside a longer training text (a training paragraph
that quotes a test sentence). Both are computed with one sparse matrix product, not a loop over
pairs.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Sequence

import numpy as np

from babelspec.data.clean import norm_key

JACCARD_THRESHOLD = 0.8
CONTAINMENT_THRESHOLD = 0.9
CONTAINMENT_MIN_CHARS = 30  # short strings inside long ones ("Open" in "Open file") are not leaks
_NGRAM = 4
_HASH_BUCKETS = 1 << 22


def stable_hash(text: str, salt: str = "") -> int:
    """A hash that is the same on every machine and Python run (unlike ``hash``)."""
    return int.from_bytes(hashlib.blake2b((salt + text).encode("utf-8"), digest_size=8).digest(), "big")


def _shingle_text(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def _shingle_matrix(texts: Sequence[str]):
    """Binary [n_texts, buckets] matrix of hashed character 4-grams, built without a per-gram loop."""
    from scipy import sparse

    normed = [_shingle_text(t) for t in texts]
    lens = np.array([len(t) for t in normed], dtype=np.int64)
    cp = np.frombuffer("".join(normed).encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    n_grams = np.maximum(lens - _NGRAM + 1, 0)
    if len(cp) < _NGRAM or n_grams.sum() == 0:
        return sparse.csr_matrix((len(texts), _HASH_BUCKETS), dtype=np.float32)
    # polynomial hash of each window (uint64 wrap-around is intended), then a mixing step
    h = np.zeros(len(cp) - _NGRAM + 1, dtype=np.uint64)
    for k in range(_NGRAM):
        h = h * np.uint64(1_000_003) + cp[k : len(cp) - _NGRAM + 1 + k]
    h ^= h >> np.uint64(29)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(32)
    starts = np.cumsum(lens) - lens
    rows = np.repeat(np.arange(len(texts)), n_grams)
    # window positions that lie inside one text: offsets 0 .. len-4 from each text's start
    pos = np.repeat(starts, n_grams) + (np.arange(n_grams.sum()) - np.repeat(np.cumsum(n_grams) - n_grams, n_grams))
    cols = (h[pos] % np.uint64(_HASH_BUCKETS)).astype(np.int64)
    m = sparse.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(len(texts), _HASH_BUCKETS))
    m.sum_duplicates()
    m.data[:] = 1.0
    return m


def near_duplicates(train: Sequence[str], test: Sequence[str], *, chunk: int = 4096) -> np.ndarray:
    """Boolean mask over ``train``: True where the text duplicates some ``test`` text.

    Exact (after :func:`norm_key`) or near (4-gram Jaccard ≥ 0.8, or containment of a test text
    of ≥ 30 characters at ≥ 0.9).
    """
    mask = np.zeros(len(train), dtype=bool)
    if not len(train) or not len(test):
        return mask
    test_keys = {norm_key(t) for t in test}
    test_keys.discard("")
    mask |= np.fromiter((norm_key(t) in test_keys for t in train), dtype=bool, count=len(train))

    test_m = _shingle_matrix(test)
    test_sizes = np.asarray(test_m.sum(axis=1)).ravel()
    test_long = np.array([len(_shingle_text(t)) >= CONTAINMENT_MIN_CHARS for t in test])
    test_t = test_m.T.tocsr()
    for start in range(0, len(train), chunk):
        block = _shingle_matrix(train[start : start + chunk])
        sizes = np.asarray(block.sum(axis=1)).ravel()
        inter = (block @ test_t).tocoo()  # [n_train_block, n_test] shared 4-gram counts
        if inter.nnz == 0:
            continue
        i, j, shared = inter.row, inter.col, inter.data
        union = sizes[i] + test_sizes[j] - shared
        jaccard = shared / np.maximum(union, 1)
        containment = shared / np.maximum(test_sizes[j], 1)
        hit = (jaccard >= JACCARD_THRESHOLD) | (test_long[j] & (containment >= CONTAINMENT_THRESHOLD))
        mask[start + np.unique(i[hit])] = True
    return mask
