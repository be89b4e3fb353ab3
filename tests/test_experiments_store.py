"""The result store: one row per example, unique keys, contents round-trip."""

from __future__ import annotations

import math
import sqlite3

from experiments_fixtures import record

from babelspec.experiments.store import ExampleRecord, Store


def test_round_trip_keeps_every_field(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    rec = record("amh", "story", "bigram", 3, 7, wall=1.25, accepted_per_step=[1, 3],
                 proposed_per_step=[3, 3], looped=True, text="ሰላም ለዓለም")
    rec.versions = {"torch": "2.13.0"}
    rec.in_language = None
    assert store.add(rec)
    [back] = store.records()
    assert back == rec
    assert isinstance(back, ExampleRecord) and back.in_language is None and back.looped is True


def test_same_key_is_never_duplicated(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    assert store.add(record("amh", "story", "bigram", 3, 0, wall=1.0))
    assert not store.add(record("amh", "story", "bigram", 3, 0, wall=9.0))
    assert store.count() == 1
    assert store.records()[0].wall_seconds == 1.0
    # another gamma, seed or prompt is another row
    store.add(record("amh", "story", "bigram", 2, 0, wall=1.0))
    store.add(record("amh", "story", "bigram", 3, 0, wall=1.0, seed=1))
    assert store.count() == 3
    assert ("amh", "story", "bigram", 3, 0, 1) in store.done_keys()


def test_store_is_wal_and_reopens(tmp_path):
    path = tmp_path / "r.sqlite"
    store = Store(path)
    store.add(record("yor", "translation", "none", 0, 0, wall=1.0))
    store.add_skip("distill-task", "yor", "babelspec.distill is not available")
    store.set_meta("config", {"a": 1})
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
    again = Store(path)
    assert again.count() == 1
    assert again.skips() == [("distill-task", "yor", "babelspec.distill is not available")]
    assert again.meta()["config"] == {"a": 1}


def test_an_alpha_where_nothing_was_judged_is_stored_as_null_not_zero(tmp_path):
    from types import SimpleNamespace

    from babelspec.engine import GenerationResult
    from babelspec.experiments.worker import Prompt, WorkItem, make_record

    # a drafter that never proposed (an n-gram table with no match, or plain decoding)
    result = GenerationResult(token_ids=[5, 6, 7], text="abc", stop_reason="length", gamma=3, steps=3,
                              proposed_per_step=[0, 0, 0], accepted_per_step=[0, 0, 0])
    check = SimpleNamespace(in_language=True, language_score=1.0, classifier_language="amh",
                            langid_language="", loop_ratio=0.0, looped=False)
    item = WorkItem("amh", "story", 0, 0, "ng", 3)
    rec = make_record(item, result, check, Prompt(ids=[1, 2]), {("ng", "amh"): "ngram:x"}, {}, {}, 0.0)
    assert math.isnan(rec.alpha) and math.isnan(rec.alpha_token) and math.isnan(rec.c)
    store = Store(tmp_path / "r.sqlite")
    store.add(rec)
    raw = store.db.execute("SELECT alpha, alpha_token, mean_accepted_length FROM examples").fetchone()
    assert raw == (None, None, 0.0)  # 0 accepted per step is a measurement, alpha is not
    [back] = store.records()
    assert math.isnan(back.alpha) and math.isnan(back.alpha_token) and back.mean_accepted_length == 0.0
