"""Every record says what machine it ran on, and speed ratios never mix machine kinds."""

from __future__ import annotations

import pytest
from experiments_fixtures import record
from tiny import tiny_gemma3

from babelspec.experiments.aggregate import setting_stats
from babelspec.experiments.runner import STORE_NAME
from babelspec.experiments.store import Store
from babelspec.machine import machine_fingerprint, machine_kind


def test_fingerprint_names_host_device_dtype_and_threads():
    import torch

    from babelspec.target import Target

    fp = machine_fingerprint(Target(tiny_gemma3()))
    assert fp["host"] and fp["device"] and fp["dtype"] == "float32"
    assert fp["threads"] == torch.get_num_threads()
    other_host = {**fp, "host": "elsewhere"}
    assert machine_kind(other_host) == machine_kind(fp)  # the same hardware measures the same
    assert machine_kind({**fp, "threads": fp["threads"] + 1}) != machine_kind(fp)
    assert machine_kind({**fp, "dtype": "bfloat16"}) != machine_kind(fp)
    w8a8 = {**fp, "dtype": "bfloat16", "precision": "w8a8"}  # a target mode: another model and speed
    assert machine_kind(w8a8) != machine_kind({**fp, "dtype": "bfloat16"}) and "bfloat16 w8a8" in machine_kind(w8a8)
    target = Target(tiny_gemma3())
    target.precision = "w8a8"
    assert machine_fingerprint(target)["precision"] == "w8a8"


def test_speedups_pair_only_generations_of_one_machine_kind():
    fast = {"host": "a", "device": "GPU X", "dtype": "bfloat16", "threads": 1}
    slow = {"host": "b", "device": "CPU Y", "dtype": "float32", "threads": 2}
    recs = []
    for p, spec_machine in [(0, fast), (1, slow)]:  # prompt 1's unit was split over two machines
        base = record("amh", "story", "none", 0, p, wall=2.0)
        base.machine = fast
        spec = record("amh", "story", "self1", 2, p, wall=1.0 if spec_machine is fast else 10.0)
        spec.machine = spec_machine
        recs += [base, spec]
    stats = {(s.drafter, s.gamma): s for s in setting_stats(recs)}
    s = stats[("self1", 2)]
    assert s.n_pairs == 1 and s.speedup == pytest.approx(2.0)  # not the cross-machine 0.2
    assert s.verify_cost != s.verify_cost  # NaN: its forward times come from two machine kinds


def test_a_store_from_before_machine_fingerprints_takes_new_records(tmp_path):
    path = tmp_path / STORE_NAME
    with Store(path) as store:  # a run stored before records had a machine column
        store.add(record("amh", "story", "none", 0, 0, wall=2.0))
        store.db.execute("ALTER TABLE examples DROP COLUMN machine")
    with Store(path) as store:
        new = record("amh", "story", "none", 0, 1, wall=2.0)
        new.machine = {"host": "h", "device": "CPU Y", "dtype": "float32", "threads": 2}
        assert store.add(new)
        old, added = store.records()
    assert old.machine == {} and added.machine == new.machine


def test_the_report_names_the_machines_generations_ran_on_not_the_drivers():
    from babelspec.machine import describe_machines, machines_summary

    worker = {"host": "w1", "device": "CPU X", "dtype": "bfloat16", "threads": 1}
    summary = machines_summary([worker, {**worker, "host": "w2"}, {}])
    assert [(e["threads"], e["generations"], e["hosts"]) for e in summary] == [(1, 2, ["w1", "w2"])]
    assert describe_machines(summary) == "bfloat16 (fast mode), 1 thread per generation, CPU X on 2 hosts"

    mixed = machines_summary([worker, worker, {**worker, "threads": 4}])
    line = describe_machines(mixed)
    assert line.startswith("2 machine kinds (speed ratios only within one): ")
    assert "1 thread per generation, CPU X (2 generations); " in line
    assert line.endswith("bfloat16 (fast mode), 4 threads per generation, CPU X (1 generation)")
    w8a8 = machines_summary([{**worker, "precision": "w8a8"}])
    assert describe_machines(w8a8) == "bfloat16 (fast mode), w8a8 target, 1 thread per generation, CPU X"


def test_every_result_records_its_execution_plan():
    import torch
    from tiny import tiny_qwen3

    from babelspec.forward import ForwardOptions
    from babelspec.forward.kernels import onednn_packs_bf16
    from babelspec.forward.native import glue
    from babelspec.machine import describe, describe_machines, execution_info, machines_summary
    from babelspec.target import Target

    bf16 = tiny_gemma3().to(torch.bfloat16)
    bf16.set_attn_implementation("eager")
    target = Target(bf16)
    plan = machine_fingerprint(target)["plan"]
    assert plan["forward"] == "lean" and plan["weights"] == "bfloat16"
    assert plan["glue"] == (glue() is not None and target.lean.glue is not None)
    assert plan["cache"] == ("float32" if target.lean.cache_dtype == torch.float32 else "bfloat16")
    off_target = Target(bf16, options=ForwardOptions(native=False))  # no glue, a bf16 cache: said so
    off = execution_info(off_target)["plan"]
    assert not off["glue"] and off["cache"] == "bfloat16" and "no C glue" in describe(execution_info(off_target))
    assert execution_info(Target(tiny_qwen3()))["plan"]["forward"] == "hf"  # a family without the lean forward
    line = describe_machines(machines_summary([machine_fingerprint(target)]))
    assert "lean forward" in line and f"{plan['cache']} KV cache" in line
    if onednn_packs_bf16():
        assert plan["exact"] == "bf16 rows invariant" and "bfloat16 (exact mode)" in line
        assert "exact: bf16 rows invariant" in line
        assert off["exact"] == "bf16 rows invariant"  # the torch operations keep the property
    else:  # an AVX2-only CPU: said so, with the gguf mode as the way out
        assert plan["exact"] == "no" and "does not pack bf16" in plan["exact_why"]
    # where the exact path is off, the plan says no and why, naming the fix
    f32_model = tiny_gemma3()
    f32_model.set_attn_implementation("eager")
    f32 = execution_info(Target(f32_model))["plan"]
    assert f32["forward"] == "lean"
    assert f32["exact"] == "no" and "MKL" in f32["exact_why"] and "bfloat16" in f32["exact_why"]
    unfused = execution_info(Target(bf16, options=ForwardOptions(fuse=False)))["plan"]
    assert unfused["exact"] == "no" and "fuse=False" in unfused["exact_why"]
    hf = execution_info(Target(tiny_qwen3()))["plan"]
    assert hf["exact"] == "no" and "Hugging Face's forward" in hf["exact_why"]

