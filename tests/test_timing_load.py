"""The load beside each timing: generations timed while other work ran on the machine are
counted and named in the analysis and the report (``aggregate.timing_load``)."""

from __future__ import annotations

import math

from babelspec.experiments.aggregate import timing_load
from babelspec.experiments.store import ExampleRecord
from babelspec.report.build import _load_caveat


def _record(lang: str, load: float, threads: int = 2) -> ExampleRecord:
    return ExampleRecord(language=lang, task="translation", drafter="bigram", gamma=4, prompt_index=0, seed=0,
                         load_average=load, machine={"threads": threads})  # fmt: skip


def test_other_work_beside_a_timing_is_counted_and_named():
    quiet = [_record("yor", 2.1), _record("amh", 2.6, threads=2), _record("npi", 1.0, threads=1)]
    assert timing_load(quiet)["beside_other_work"] == 0  # the run's own threads are its load
    busy = quiet + [_record("ita_Latn", 3.9), _record("rus_Cyrl", 4.4), _record("tur_Latn", math.nan)]
    load = timing_load(busy)
    assert (load["recorded"], load["beside_other_work"], load["max_other_load"]) == (5, 2, 2.4)
    assert load["cells"] == ["ita_Latn translation", "rus_Cyrl translation"]
    line = _load_caveat(load)
    assert "Other work ran beside 2 of 5 timed generations" in line and "ita_Latn translation" in line
    assert _load_caveat(timing_load(quiet)).startswith("No other work ran beside the timings")
    assert "not recorded" in _load_caveat(timing_load([_record("yor", math.nan)]))
