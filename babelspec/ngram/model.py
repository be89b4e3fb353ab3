"""The n-gram model in memory and on disk.

An order-n model keeps one table per context length k = 0 … n−1 (k = 0 is the unigram), so a
drafter can back off from an unseen (n−1)-token context to shorter ones. Each table is CSR:

* ``keys[C]``     sorted context keys (the k context tokens' dense ids, ``key_bits`` bits each),
* ``offsets[C+1]`` row c's continuations are ``offsets[c]:offsets[c+1]``,
* ``next[E]``     continuation tokens, most frequent first within a row,
* ``counts[E]``   their training counts.

Token ids inside the tables are *dense* ids: the index of the token in ``vocab_map`` (the sorted
target-vocabulary ids seen in the corpus). That keeps keys small enough for higher orders in a
uint64 and lets ``next``/``counts`` use uint16 when the corpus is small.

File layout (little endian), memory-mappable::

    8 bytes  magic b"BSNGRAM\\0"
    4 bytes  format version (uint32)
    4 bytes  header length H (uint32)
    H bytes  header: UTF-8 JSON (arrays with dtype/shape/offset, tokenizer fingerprint,
             training metadata, payload length and sha256)
    padding to a 64-byte boundary, then the payload: every array, each 64-byte aligned.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from babelspec.errors import UserError

MAGIC = b"BSNGRAM\x00"
FORMAT_VERSION = 1
_ALIGN = 64
_PREFIX = struct.Struct("<8sII")


class NgramFileError(UserError):
    """An n-gram file that cannot be read: not one of ours, truncated, corrupted or too new."""


class TokenizerMismatchError(UserError):
    """An n-gram model used with a tokenizer other than the one it was trained with."""


@dataclass
class NgramTable:
    """Continuations of every seen context of one length (CSR, see the module docstring)."""

    context_length: int
    keys: np.ndarray
    offsets: np.ndarray
    next_tokens: np.ndarray
    counts: np.ndarray

    @property
    def n_contexts(self) -> int:
        return int(self.keys.shape[0])

    @property
    def n_entries(self) -> int:
        return int(self.next_tokens.shape[0])

    def row(self, key: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(dense next tokens, counts) of one context key, or None when it was never seen."""
        c = int(np.searchsorted(self.keys, key))
        if c >= self.keys.shape[0] or int(self.keys[c]) != key:
            return None
        lo, hi = int(self.offsets[c]), int(self.offsets[c + 1])
        return self.next_tokens[lo:hi], self.counts[lo:hi]


@dataclass
class NgramModel:
    """An order-n model: ``tables[k]`` holds the contexts of length k (k = 0 … order−1)."""

    order: int
    vocab_map: np.ndarray  # [base] sorted target-vocabulary ids; dense id d <-> vocab_map[d]
    tables: list[NgramTable]
    tokenizer: dict[str, Any] = field(default_factory=dict)  # fingerprint, see corpus.py
    training: dict[str, Any] = field(default_factory=dict)  # corpus, sizes, pruning

    @property
    def base(self) -> int:
        """Radix of the context keys: the number of distinct tokens in the corpus."""
        return int(self.vocab_map.shape[0])

    @property
    def key_bits(self) -> int:
        """Bits per token in a context key: keys pack dense ids by shifts, not multiplications."""
        return max(1, (self.base - 1).bit_length())

    @property
    def vocab_size(self) -> int | None:
        return self.tokenizer.get("vocab_size")

    def dense_ids(self, token_ids: list[int] | np.ndarray) -> np.ndarray:
        """Dense ids of target token ids; −1 for tokens the corpus never contained."""
        ids = np.asarray(token_ids, dtype=np.int64)
        pos = np.searchsorted(self.vocab_map, ids).clip(max=max(self.base - 1, 0))
        hit = self.vocab_map[pos] == ids if self.base else np.zeros(ids.shape, bool)
        return np.where(hit, pos, -1)

    def context_key(self, dense_context: list[int]) -> int:
        key, bits = 0, self.key_bits
        for d in dense_context:
            key = (key << bits) | int(d)
        return key

    def continuations(self, token_ids: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
        """(target token ids, counts) following exactly ``token_ids`` (length < order)."""
        k = len(token_ids)
        if k >= self.order:
            raise ValueError(f"a context of an order-{self.order} model has at most {self.order - 1} tokens")
        dense = self.dense_ids(token_ids)
        if (dense < 0).any():
            return None
        found = self.tables[k].row(self.context_key(dense.tolist()))
        if found is None:
            return None
        nxt, cnt = found
        return self.vocab_map[nxt.astype(np.int64)], cnt.astype(np.int64)

    def probabilities(self, token_ids: list[int]) -> dict[int, float]:
        """The model's next-token distribution after exactly ``token_ids`` (no backoff)."""
        found = self.continuations(token_ids)
        if found is None:
            return {}
        tokens, counts = found
        return dict(zip(tokens.tolist(), (counts / counts.sum()).tolist()))

    # --- size accounting -------------------------------------------------------------------
    def n_triples(self) -> int:
        return sum(t.n_entries for t in self.tables)

    def raw_triples_bytes(self) -> int:
        """Size of the same counts as a plain table of int32 (context tokens…, next, count) rows."""
        return sum(t.n_entries * 4 * (t.context_length + 2) for t in self.tables)

    def stats(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "distinct_tokens": self.base,
            "tables": [
                {
                    "context_length": t.context_length,
                    "contexts": t.n_contexts,
                    "entries": t.n_entries,
                    "mean_continuations": round(t.n_entries / t.n_contexts, 3) if t.n_contexts else 0.0,
                }
                for t in self.tables
            ],
            "triples": self.n_triples(),
            "raw_triples_bytes": self.raw_triples_bytes(),
            "tokenizer": self.tokenizer,
            "training": self.training,
        }

    # --- file format -----------------------------------------------------------------------
    def _arrays(self) -> list[tuple[str, np.ndarray]]:
        arrays = [("vocab_map", self.vocab_map)]
        for t in self.tables:
            k = t.context_length
            arrays += [
                (f"k{k}.keys", t.keys),
                (f"k{k}.offsets", t.offsets),
                (f"k{k}.next", t.next_tokens),
                (f"k{k}.counts", t.counts),
            ]
        return arrays

    def save(self, path: str | os.PathLike) -> int:
        """Write the model atomically (temporary file, fsync, rename); returns the file size."""
        path = Path(path)
        specs, blobs, offset = [], [], 0
        digest = hashlib.sha256()
        for name, arr in self._arrays():
            arr = np.ascontiguousarray(arr)
            arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
            pad = (-offset) % _ALIGN
            if pad:
                blobs.append(b"\x00" * pad)
                digest.update(b"\x00" * pad)
                offset += pad
            raw = memoryview(arr).cast("B") if arr.size else b""
            specs.append({"name": name, "dtype": arr.dtype.str, "shape": list(arr.shape), "offset": offset})
            blobs.append(raw)
            digest.update(raw)
            offset += arr.nbytes
        header = {
            "format": "babelspec-ngram",
            "format_version": FORMAT_VERSION,
            "order": self.order,
            "base": self.base,
            "key_bits": self.key_bits,
            "tokenizer": self.tokenizer,
            "training": self.training,
            "arrays": specs,
            "payload_bytes": offset,
            "payload_sha256": digest.hexdigest(),
        }
        head = json.dumps(header, ensure_ascii=False, sort_keys=True).encode("utf-8")
        start = _PREFIX.size + len(head)
        head_pad = b"\x00" * ((-start) % _ALIGN)

        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_PREFIX.pack(MAGIC, FORMAT_VERSION, len(head)))
                f.write(head)
                f.write(head_pad)
                for blob in blobs:
                    f.write(blob)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        try:  # make the rename itself durable
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError:
            pass
        return path.stat().st_size

    @classmethod
    def load(cls, path: str | os.PathLike, *, verify: bool = True) -> NgramModel:
        """Memory-map a model file. ``verify`` checks the payload's sha256 (a full read)."""
        path = Path(path)
        if not path.is_file():
            raise NgramFileError(f"n-gram file {str(path)!r} does not exist; train one with `babelspec ngram train`")
        size = path.stat().st_size
        with open(path, "rb") as f:
            prefix = f.read(_PREFIX.size)
            if len(prefix) < _PREFIX.size:
                raise NgramFileError(f"{path}: truncated ({size} bytes): not a complete babelspec n-gram file")
            magic, version, head_len = _PREFIX.unpack(prefix)
            if magic != MAGIC:
                raise NgramFileError(f"{path}: not a babelspec n-gram file (bad magic {magic!r})")
            if version > FORMAT_VERSION:
                raise NgramFileError(
                    f"{path}: format version {version} is newer than this babelspec reads "
                    f"({FORMAT_VERSION}); upgrade babelspec"
                )
            head_bytes = f.read(head_len)
        if len(head_bytes) < head_len:
            raise NgramFileError(f"{path}: truncated inside its header ({size} bytes); retrain or copy it again")
        try:
            header = json.loads(head_bytes.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise NgramFileError(f"{path}: corrupted header ({exc}); retrain or copy it again") from exc
        start = _PREFIX.size + head_len
        start += (-start) % _ALIGN
        expected = start + int(header["payload_bytes"])
        if size < expected:
            raise NgramFileError(
                f"{path}: truncated: {size} bytes on disk, {expected} expected; retrain or copy it again"
            )
        if size > expected:
            raise NgramFileError(f"{path}: corrupted: {size - expected} unexpected trailing bytes")
        mm = np.memmap(path, dtype=np.uint8, mode="r")
        payload = mm[start:expected]
        if verify and hashlib.sha256(memoryview(payload)).hexdigest() != header["payload_sha256"]:
            raise NgramFileError(f"{path}: corrupted: checksum mismatch; retrain or copy it again")
        arrays: dict[str, np.ndarray] = {}
        for spec in header["arrays"]:
            dtype = np.dtype(spec["dtype"])
            count = int(np.prod(spec["shape"])) if spec["shape"] else 1
            lo = int(spec["offset"])
            arrays[spec["name"]] = payload[lo : lo + count * dtype.itemsize].view(dtype).reshape(spec["shape"])
        order = int(header["order"])
        tables = [
            NgramTable(
                context_length=k,
                keys=arrays[f"k{k}.keys"],
                offsets=arrays[f"k{k}.offsets"],
                next_tokens=arrays[f"k{k}.next"],
                counts=arrays[f"k{k}.counts"],
            )
            for k in range(order)
        ]
        return cls(
            order=order,
            vocab_map=arrays["vocab_map"],
            tables=tables,
            tokenizer=header.get("tokenizer", {}),
            training=header.get("training", {}),
        )

    def check_tokenizer(self, fingerprint: dict[str, Any], where: str = "the target") -> None:
        """Fail clearly unless ``fingerprint`` (see ``tokenizer_fingerprint``) is the model's."""
        mine = self.tokenizer
        if not mine:
            raise TokenizerMismatchError("the n-gram model carries no tokenizer fingerprint; retrain it")
        if mine.get("vocab_size") != fingerprint.get("vocab_size") or mine.get("vocab_sha256") != fingerprint.get(
            "vocab_sha256"
        ):
            raise TokenizerMismatchError(
                f"the n-gram model was trained with tokenizer {mine.get('name')!r} "
                f"(vocabulary {mine.get('vocab_size')}, sha256 {str(mine.get('vocab_sha256'))[:12]}…) but "
                f"{where} uses {fingerprint.get('name')!r} (vocabulary {fingerprint.get('vocab_size')}, "
                f"sha256 {str(fingerprint.get('vocab_sha256'))[:12]}…); retrain it with "
                f"`babelspec ngram train --tokenizer` set to {where}'s tokenizer"
            )
