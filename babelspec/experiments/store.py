"""The crash-safe result store: one SQLite row per generated example.

SQLite in WAL mode with ``synchronous=FULL`` fsyncs every commit, and each example is written
in its own transaction, so a run killed at any moment loses at most the example it was
generating. The unique key (language, task, drafter, gamma, prompt_index, seed) makes a
resumed run skip what is done and never duplicate a row.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
STORE_NAME = "results.sqlite"  # the store's file name inside a run directory

Key = tuple[str, str, str, int, int, int]  # language, task, drafter, gamma, prompt_index, seed


@dataclass
class ExampleRecord:
    """Everything measured about one generation."""

    language: str
    task: str
    drafter: str  # the setting's name ("none" = plain decoding)
    gamma: int  # 0 for plain decoding
    prompt_index: int
    seed: int
    drafter_spec: str = ""
    trained_on: str = ""
    # NaN (NULL in the database) where nothing was judged: plain decoding, or a drafter that
    # never proposed. Aggregation pools counts instead of averaging these.
    alpha: float = math.nan  # matched / (matched + rejections), the paper's definition
    alpha_token: float = math.nan
    mean_accepted_length: float = math.nan
    proposed: int = 0
    accepted: int = 0
    rejections: int = 0
    steps: int = 0
    accepted_per_step: list[int] = field(default_factory=list)
    proposed_per_step: list[int] = field(default_factory=list)  # drafted tokens (a tree's nodes)
    # Tokens on the longest path of each step's draft (a chain: its length) and 1 where the
    # step ended in a rejection; empty in stores from before they were recorded.
    depth_per_step: list[int] = field(default_factory=list)
    rejected_per_step: list[int] = field(default_factory=list)
    draft_seconds: float = 0.0
    target_seconds: float = 0.0
    wall_seconds: float = 0.0  # the whole generation: the prompt's prefill and decoding
    # The target's prefill (NULL before it was stored). Until draft_start_seconds was stored it
    # also held the drafter's start, so older stores leave a neural drafter's prefill out of
    # decode_seconds; since then the drafter's start is decode time, counted against it.
    prefill_seconds: float = math.nan
    draft_start_seconds: float = math.nan  # the drafter's start on the prompt (NULL in older stores)
    draft_forward_seconds: list[float] = field(default_factory=list)
    target_forward_seconds: list[float] = field(default_factory=list)
    c: float = math.nan  # mean draft forward / mean target forward of this generation
    n_tokens: int = 0
    n_chars: int = 0
    prompt_tokens: int = 0
    stop_reason: str = ""
    text: str = ""
    in_language: bool | None = None
    language_score: float = 0.0  # share of letters in the language's script(s)
    classifier_language: str = ""  # the character n-gram classifier's choice
    langid_language: str = ""  # the shipped lang-ID package's choice ("" where not covered)
    loop_ratio: float = 0.0  # repeated n-gram ratio
    looped: bool = False
    versions: dict[str, str] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)  # machine.machine_fingerprint()
    started_at: float = 0.0  # unix seconds
    finished_at: float = 0.0
    # What else the machine ran while this generation was timed (NULL in older stores): the
    # process's CPU seconds over the generation (all its threads), and the 1-minute load average
    # at its end, which counts the run's own threads too (``aggregate.timing_load``).
    cpu_seconds: float = math.nan
    load_average: float = math.nan

    @property
    def decode_seconds(self) -> float:
        """Wall time after the prefill: what speculation can speed up. Plain and speculative
        decoding of a prompt prefill the same tokens, but their outputs differ in length under
        sampling, so prefill spread over the tokens would bias every per-token ratio (a 7-token
        output carries its whole prompt's prefill). Stores from before prefill was recorded
        fall back to the wall time."""
        if math.isfinite(self.prefill_seconds) and 0.0 <= self.prefill_seconds <= self.wall_seconds:
            return self.wall_seconds - self.prefill_seconds
        return self.wall_seconds

    @property
    def key(self) -> Key:
        return (self.language, self.task, self.drafter, self.gamma, self.prompt_index, self.seed)


_JSON_FIELDS = {
    "accepted_per_step", "proposed_per_step", "depth_per_step", "rejected_per_step", "draft_forward_seconds",
    "target_forward_seconds", "versions", "machine",
}  # fmt: skip
_DICT_FIELDS = {"versions", "machine"}
_KEY_FIELDS = ("language", "task", "drafter", "gamma", "prompt_index", "seed")


def _sql_type(f) -> str:
    if f.name in _JSON_FIELDS:
        return "TEXT"
    return {"str": "TEXT", "int": "INTEGER", "float": "REAL"}.get(str(f.type), "INTEGER")


class Store:
    """``Store(path)`` opens (creating if needed) a run's result database."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")  # fsync at every commit
        self._create()

    def _create(self) -> None:
        cols = ", ".join(f"{f.name} {_sql_type(f)}" for f in fields(ExampleRecord))
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(
                f"CREATE TABLE IF NOT EXISTS examples ({cols}, "
                f"UNIQUE ({', '.join(_KEY_FIELDS)}))"
            )
            self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS skips (drafter TEXT, language TEXT, reason TEXT, "
                "at REAL, UNIQUE (drafter, language))"
            )
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS divergence (language TEXT, drafter TEXT, "
                "n_texts INTEGER, n_tokens INTEGER, n_chars INTEGER, tv_sum REAL, "
                "tv_per_token REAL, tv_per_char REAL, covered REAL, expected_alpha REAL, "
                "UNIQUE (language, drafter))"
            )
            self.db.execute(
                "INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
            # A store written before a field existed gets the column (NULL in its old rows).
            have = {row[1] for row in self.db.execute("PRAGMA table_info(examples)")}
            for f in fields(ExampleRecord):
                if f.name not in have:
                    self.db.execute(f"ALTER TABLE examples ADD COLUMN {f.name} {_sql_type(f)}")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- examples ---
    def add(self, record: ExampleRecord) -> bool:
        """Write one example in its own transaction; False if its key was already there."""
        row = asdict(record)
        values = [json.dumps(row[k]) if k in _JSON_FIELDS else row[k] for k in row]
        names = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        self.db.execute("BEGIN IMMEDIATE")
        try:
            cur = self.db.execute(
                f"INSERT INTO examples ({names}) VALUES ({marks}) ON CONFLICT DO NOTHING", values
            )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return cur.rowcount == 1

    def done_keys(self) -> set[Key]:
        cur = self.db.execute(f"SELECT {', '.join(_KEY_FIELDS)} FROM examples")
        return {tuple(r) for r in cur}  # type: ignore[misc]

    def count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM examples").fetchone()[0])

    def records(self, **where: Any) -> list[ExampleRecord]:
        return list(self.iter_records(**where))

    def iter_records(self, **where: Any) -> Iterator[ExampleRecord]:
        names = [f.name for f in fields(ExampleRecord)]
        sql = f"SELECT {', '.join(names)} FROM examples"
        if where:
            sql += " WHERE " + " AND ".join(f"{k} = ?" for k in where)
        sql += " ORDER BY language, task, prompt_index, seed, drafter, gamma"
        bools = {"in_language", "looped"}
        floats = [f.name for f in fields(ExampleRecord) if str(f.type) == "float"]
        for row in self.db.execute(sql, tuple(where.values())):
            data = dict(zip(names, row))
            for k in floats:  # SQLite stores NaN as NULL
                if data[k] is None:
                    data[k] = math.nan
            for k in _JSON_FIELDS:
                data[k] = json.loads(data[k]) if data[k] else ({} if k in _DICT_FIELDS else [])
            for k in bools:
                data[k] = None if data[k] is None else bool(data[k])
            yield ExampleRecord(**data)

    # --- run metadata, skipped settings, divergence ---
    def set_meta(self, key: str, value: Any) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(
                "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, json.dumps(value)),
            )

    def meta(self) -> dict[str, Any]:
        out = {}
        for key, value in self.db.execute("SELECT key, value FROM meta"):
            try:
                out[key] = json.loads(value)
            except json.JSONDecodeError:
                out[key] = value
        return out

    def add_skip(self, drafter: str, language: str, reason: str) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(
                "INSERT INTO skips VALUES (?, ?, ?, ?) ON CONFLICT (drafter, language) "
                "DO UPDATE SET reason = excluded.reason, at = excluded.at",
                (drafter, language, reason, time.time()),
            )

    def clear_skip(self, drafter: str, language: str) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute("DELETE FROM skips WHERE drafter = ? AND language = ?", (drafter, language))

    def skips(self) -> list[tuple[str, str, str]]:
        return [tuple(r) for r in self.db.execute(
            "SELECT drafter, language, reason FROM skips ORDER BY drafter, language")]  # type: ignore[misc]

    def add_divergence(self, row: dict[str, Any]) -> None:
        cols = ("language", "drafter", "n_texts", "n_tokens", "n_chars", "tv_sum",
                "tv_per_token", "tv_per_char", "covered", "expected_alpha")  # fmt: skip
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(
                f"INSERT INTO divergence ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)}) "
                "ON CONFLICT (language, drafter) DO UPDATE SET "
                + ", ".join(f"{c} = excluded.{c}" for c in cols[2:]),
                tuple(row[c] for c in cols),
            )

    def divergence(self) -> list[dict[str, Any]]:
        cur = self.db.execute("SELECT * FROM divergence ORDER BY language, drafter")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur]

