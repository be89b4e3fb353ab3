"""The teacher's top-k log-probabilities, cached to disk in shards.

One example is a token sequence (prompt + response), a response mask, and for every response
token the teacher's top-k next-token entries at the position that predicts it. Shards are
safetensors files of flat arrays (CSR-style offsets), each written to a temporary name, fsynced
and renamed; the manifest is rewritten the same way after every shard. A build interrupted at any
point therefore leaves only whole shards, and a rerun skips them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save

from babelspec.errors import UserError
from babelspec.fileio import sha256_file, write_bytes_atomic, write_json_atomic

FORMAT = "babelspec-topk-cache"
VERSION = 1
MANIFEST = "manifest.json"


class SoftTargetsError(UserError):
    """A cache directory that cannot be used as asked (mismatch, corruption, bad arguments)."""


@dataclass
class Example:
    """One training (or evaluation) sequence with the teacher's top-k at its response tokens."""

    ids: np.ndarray  # [T] int32, prompt and response
    mask: np.ndarray  # [T] bool, True on response tokens (never on token 0: nothing predicts it)
    topk_ids: np.ndarray  # [R, k] int32, R = mask.sum(); row r predicts the r-th response token
    topk_values: np.ndarray  # [R, k] float16/float32: log-probs (or probs, see the manifest)

    def __post_init__(self) -> None:
        self.ids = np.asarray(self.ids, dtype=np.int32)
        self.mask = np.asarray(self.mask, dtype=bool)
        if self.ids.ndim != 1 or self.mask.shape != self.ids.shape:
            raise SoftTargetsError(f"ids {self.ids.shape} and mask {self.mask.shape} must be equal 1-D")
        if self.mask.size and self.mask[0]:
            raise SoftTargetsError("mask[0] must be False: no position predicts the first token")
        n_resp = int(self.mask.sum())
        if self.topk_ids.shape[0] != n_resp or self.topk_values.shape != self.topk_ids.shape:
            raise SoftTargetsError(
                f"top-k arrays {self.topk_ids.shape}/{self.topk_values.shape} must have one row "
                f"per response token ({n_resp})"
            )

    @property
    def n_response(self) -> int:
        return int(self.topk_ids.shape[0])


def pack_examples(examples: Sequence[Example]) -> dict[str, np.ndarray]:
    """Flatten examples into the shard's arrays (token offsets and response-row offsets)."""
    if not examples:
        raise SoftTargetsError("a shard needs at least one example")
    k = examples[0].topk_ids.shape[1]
    dtype = examples[0].topk_values.dtype
    for e in examples:
        if e.topk_ids.shape[1] != k or e.topk_values.dtype != dtype:
            raise SoftTargetsError("all examples of a shard must share k and the value dtype")
    lengths = np.array([e.ids.size for e in examples], dtype=np.int64)
    rows = np.array([e.n_response for e in examples], dtype=np.int64)
    return {
        "ids": np.concatenate([e.ids for e in examples]).astype(np.int32),
        "mask": np.concatenate([e.mask for e in examples]).astype(np.uint8),
        "token_offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        "row_offsets": np.concatenate([[0], np.cumsum(rows)]).astype(np.int64),
        "topk_ids": np.concatenate([e.topk_ids for e in examples]).astype(np.int32),
        "topk_values": np.concatenate([e.topk_values for e in examples]).astype(dtype),
    }


def unpack_examples(arrays: dict[str, np.ndarray]) -> list[Example]:
    t, r = arrays["token_offsets"], arrays["row_offsets"]
    return [
        Example(
            ids=arrays["ids"][t[i] : t[i + 1]],
            mask=arrays["mask"][t[i] : t[i + 1]].astype(bool),
            topk_ids=arrays["topk_ids"][r[i] : r[i + 1]],
            topk_values=arrays["topk_values"][r[i] : r[i + 1]],
        )
        for i in range(len(t) - 1)
    ]


class SoftTargetShards:
    """A directory of shards plus ``manifest.json``.

    ``meta`` identifies what was cached (teacher, mode, language, k, prompt settings). Opening an
    existing cache with different ``meta`` is an error, so a cache is never silently mixed.
    """

    def __init__(self, directory: str | os.PathLike, meta: dict[str, Any] | None = None) -> None:
        self.directory = Path(directory)
        self.manifest_path = self.directory / MANIFEST
        if self.manifest_path.exists():
            try:
                self.manifest = json.loads(self.manifest_path.read_text())
            except json.JSONDecodeError as err:
                raise SoftTargetsError(f"{self.manifest_path} is not valid JSON ({err}); delete the "
                                 "directory to rebuild the cache") from err
            if self.manifest.get("format") != FORMAT or self.manifest.get("version") != VERSION:
                raise SoftTargetsError(f"{self.manifest_path} is not a {FORMAT} v{VERSION} manifest")
            if meta is not None and self.manifest["meta"] != _jsonable(meta):
                raise SoftTargetsError(
                    f"the cache in {self.directory} was built for {self.manifest['meta']}, not "
                    f"{_jsonable(meta)}; use another directory or delete this one"
                )
        else:
            if meta is None:
                raise SoftTargetsError(f"no soft-target shards in {self.directory} (missing {MANIFEST})")
            self.manifest = {"format": FORMAT, "version": VERSION, "meta": _jsonable(meta),
                             "shards": {}, "complete": False}

    @property
    def meta(self) -> dict[str, Any]:
        return self.manifest["meta"]

    @property
    def complete(self) -> bool:
        return bool(self.manifest.get("complete"))

    def shard_path(self, index: int) -> Path:
        return self.directory / f"shard-{index:05d}.safetensors"

    def has_shard(self, index: int) -> bool:
        entry = self.manifest["shards"].get(str(index))
        if entry is None:
            return False
        return entry["file"] is None or self.shard_path(index).exists()

    def write_shard(self, index: int, examples: Sequence[Example]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        arrays = pack_examples(examples)
        path = self.shard_path(index)
        write_bytes_atomic(path, save(arrays))
        self.manifest["shards"][str(index)] = {
            "file": path.name,
            "examples": len(examples),
            "tokens": int(arrays["ids"].size),
            "response_tokens": int(arrays["topk_ids"].shape[0]),
            "sha256": sha256_file(path),
        }
        write_json_atomic(self.manifest_path, self.manifest)

    def write_empty_shard(self, index: int) -> None:
        """Record that every item of shard ``index`` was filtered out (so a rerun skips it)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.manifest["shards"][str(index)] = {
            "file": None, "examples": 0, "tokens": 0, "response_tokens": 0, "sha256": None,
        }
        write_json_atomic(self.manifest_path, self.manifest)

    def read_shard(self, index: int, verify: bool = True) -> list[Example]:
        entry = self.manifest["shards"].get(str(index))
        if entry is not None and entry["file"] is None:
            return []
        path = self.shard_path(index)
        if entry is None or not path.exists():
            raise SoftTargetsError(f"shard {index} is missing from {self.directory}")
        if verify and sha256_file(path) != entry["sha256"]:
            raise SoftTargetsError(f"{path} does not match its checksum; delete it and rebuild the cache")
        return unpack_examples(load_file(str(path)))

    def mark_complete(self, n_examples: int) -> None:
        self.manifest["complete"] = True
        self.manifest["examples"] = n_examples
        write_json_atomic(self.manifest_path, self.manifest)

    def shard_indices(self) -> list[int]:
        return sorted(int(i) for i in self.manifest["shards"])

    def __iter__(self) -> Iterator[Example]:
        for index in self.shard_indices():
            yield from self.read_shard(index)

    def load_all(self) -> list[Example]:
        return list(self)

    def summary(self) -> dict[str, Any]:
        shards = self.manifest["shards"].values()
        return {
            "directory": str(self.directory),
            "shards": len(self.manifest["shards"]),
            "examples": sum(s["examples"] for s in shards),
            "tokens": sum(s["tokens"] for s in shards),
            "response_tokens": sum(s["response_tokens"] for s in shards),
            "complete": self.complete,
        }


def build_soft_targets(
    directory: str | os.PathLike,
    meta: dict[str, Any],
    n_items: int,
    make_shard: Callable[[int, int], list[Example]],
    shard_size: int = 64,
    progress: Callable[[int], None] | None = None,
) -> SoftTargetShards:
    """Fill ``directory`` with shards of ``make_shard(start, stop)`` over ``range(n_items)``.

    Shards already written (by an earlier, possibly interrupted run with the same ``meta``) are
    skipped, so the expensive teacher calls are made once. ``progress(n)`` is told how many items
    each finished or skipped shard covered.
    """
    if shard_size < 1:
        raise SoftTargetsError(f"shard_size must be >= 1 (got {shard_size})")
    cache = SoftTargetShards(directory, {**meta, "shard_size": shard_size, "items": n_items})
    total = 0
    for index, start in enumerate(range(0, n_items, shard_size)):
        stop = min(start + shard_size, n_items)
        if not cache.has_shard(index):
            examples = make_shard(start, stop)
            if examples:
                cache.write_shard(index, examples)
            else:  # every item was filtered out: record the shard as done and empty
                cache.write_empty_shard(index)
        if progress is not None:
            progress(stop - start)
        total += cache.manifest["shards"][str(index)]["examples"]
    cache.mark_complete(total)
    return cache


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, sort_keys=True))
