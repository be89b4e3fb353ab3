"""An n-gram model as llama.cpp's static lookup cache (``common/ngram-cache``: the file
``llama-lookup --lookup-cache-static`` reads), and a reader of that format.

The file is a sequence of records, little endian, one per context: the context as
``LLAMA_NGRAM_MAX`` = 4 int32 tokens (unused slots -1), an int32 count n of continuations, then n
pairs (int32 token, int32 count). llama.cpp keys its static cache by the last
``LLAMA_NGRAM_STATIC`` = 2 tokens, so a model of order 3 or more exports its 2-token table
(with the target's token ids); a bigram has no 2-token contexts to offer.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from babelspec.errors import UserError
from babelspec.fileio import write_bytes_atomic
from babelspec.ngram.model import NgramModel

NGRAM_MAX = 4  # llama.cpp's LLAMA_NGRAM_MAX: tokens per key, -1 padded
STATIC_CONTEXT = 2  # llama.cpp's LLAMA_NGRAM_STATIC: the static cache's context length


def export_llamacpp(model: NgramModel, path: str | os.PathLike) -> dict[str, int]:
    """Write ``model``'s 2-token contexts as a llama.cpp static lookup cache; its sizes."""
    if model.order <= STATIC_CONTEXT:
        raise UserError(f"llama.cpp's static lookup cache is keyed by {STATIC_CONTEXT}-token contexts and this "
                         f"is an order-{model.order} model; train one of order {STATIC_CONTEXT + 1} or more "
                         f"(babelspec ngram train --order {STATIC_CONTEXT + 1})")  # fmt: skip
    table = model.tables[STATIC_CONTEXT]
    bits = model.key_bits
    keys = table.keys.astype(np.uint64)
    dense = np.stack([(keys >> np.uint64(bits * (STATIC_CONTEXT - 1 - i))) & np.uint64((1 << bits) - 1)
                      for i in range(STATIC_CONTEXT)], axis=1).astype(np.int64)  # oldest token first
    context = model.vocab_map[dense].astype(np.int64)
    n = np.diff(table.offsets.astype(np.int64))
    counts = table.counts.astype(np.int64)
    if counts.size and (counts.min() < 1 or counts.max() >= 2**31):
        raise UserError("llama.cpp stores counts as positive int32; this model's counts do not fit")
    # One int32 array: per context, NGRAM_MAX key slots and n, then n (token, count) pairs.
    sizes = NGRAM_MAX + 1 + 2 * n
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    out = np.full(int(sizes.sum()), -1, dtype="<i4")
    for i in range(STATIC_CONTEXT):
        out[starts + i] = context[:, i]
    out[starts + NGRAM_MAX] = n
    row = np.repeat(np.arange(len(n)), n)  # the context of each continuation
    within = np.arange(counts.size) - np.repeat(table.offsets[:-1].astype(np.int64), n)
    pair = starts[row] + NGRAM_MAX + 1 + 2 * within
    out[pair] = model.vocab_map[table.next_tokens.astype(np.int64)]
    out[pair + 1] = counts
    write_bytes_atomic(path, out.tobytes())
    return {"contexts": int(len(n)), "continuations": int(counts.size), "bytes": int(out.nbytes)}


def read_llamacpp(path: str | os.PathLike) -> dict[tuple[int, ...], dict[int, int]]:
    """The records of a llama.cpp lookup cache: {context tokens (without -1 padding): {token: count}}."""
    data = np.fromfile(Path(path), dtype="<i4")
    out: dict[tuple[int, ...], dict[int, int]] = {}
    i = 0
    while i < data.size:
        if i + NGRAM_MAX + 1 > data.size:
            raise UserError(f"{path}: truncated record at int32 {i}")
        key = tuple(int(t) for t in data[i : i + NGRAM_MAX] if t != -1)
        n = int(data[i + NGRAM_MAX])
        pairs = data[i + NGRAM_MAX + 1 : i + NGRAM_MAX + 1 + 2 * n]
        if n < 1 or pairs.size != 2 * n:
            raise UserError(f"{path}: bad record at int32 {i} (n = {n})")
        out[key] = dict(zip(pairs[0::2].tolist(), pairs[1::2].tolist()))
        i += NGRAM_MAX + 1 + 2 * n
    return out
