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


def _shingle_ids(text: str) -> np.ndarray:
    t = _shingle_text(text)
    if len(t) < _NGRAM:
        return np.empty(0, dtype=np.int64)
    grams = {t[i : i + _NGRAM] for i in range(len(t) - _NGRAM + 1)}
    return np.fromiter((stable_hash(g) % _HASH_BUCKETS for g in grams), dtype=np.int64, count=len(grams))


def _shingle_matrix(texts: Sequence[str]):
    from scipy import sparse

    rows, cols = [], []
    for i, text in enumerate(texts):
        ids = np.unique(_shingle_ids(text))
        rows.append(np.full(len(ids), i, dtype=np.int64))
        cols.append(ids)
    r = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)
    c = np.concatenate(cols) if cols else np.empty(0, dtype=np.int64)
    data = np.ones(len(r), dtype=np.float32)
    return sparse.csr_matrix((data, (r, c)), shape=(len(texts), _HASH_BUCKETS))


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
