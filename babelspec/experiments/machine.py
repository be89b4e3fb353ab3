"""What a generation ran on: the machine fingerprint every record carries.

Wall-clock ratios are only meaningful between generations measured on the same kind of
machine (same CPU model or GPU, same dtype, same thread count), so the report pairs and
groups speed figures by ``machine_kind`` and never divides a time from one kind by a time
from another. The host name is kept for diagnosis but is not part of the kind: two nodes
with the same hardware and settings measure the same thing.
"""

from __future__ import annotations

import socket
from typing import Any

from babelspec.models.machine import cpu_model, dtype_name, model_dtype, precision_mode


def machine_fingerprint(target: Any = None) -> dict[str, Any]:
    """host, device (GPU name or CPU model), dtype of the target's weights, torch threads."""
    import torch

    device = getattr(target, "device", None)
    if device is not None and getattr(device, "type", "") == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = cpu_model()
    dtype = ""
    model = getattr(target, "model", None)
    if model is not None:
        try:
            dtype = dtype_name(model_dtype(model))
        except StopIteration:
            pass
    return {"host": socket.gethostname(), "device": name, "dtype": dtype,
            "threads": torch.get_num_threads()}  # fmt: skip


def machine_kind(machine: dict[str, Any] | None) -> str:
    """The part of a fingerprint that determines speed: device, dtype, threads ("" if unknown)."""
    if not machine:
        return ""
    return f"{_device(machine)} | {machine.get('dtype', '')} | {machine.get('threads', '')} threads"


def _device(machine: dict[str, Any]) -> str:
    """The GPU's name, else the CPU model (older fingerprints: the ``cpu`` field)."""
    return machine.get("gpu") or machine.get("device") or machine.get("cpu", "")


def machines_summary(machines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The machine kinds a run's generations were measured on, most generations first:
    ``{"kind", "device", "dtype", "mode", "threads", "generations", "hosts"}`` each."""
    kinds: dict[str, dict[str, Any]] = {}
    for machine in machines:
        if not machine:
            continue
        kind = machine_kind(machine)
        entry = kinds.setdefault(kind, {
            "kind": kind, "device": _device(machine),
            "dtype": machine.get("dtype", ""),
            "mode": precision_mode(machine["dtype"]) if machine.get("dtype") else "",
            "threads": machine.get("threads"), "generations": 0, "hosts": set()})  # fmt: skip
        entry["generations"] += 1
        entry["hosts"].add(machine.get("host", ""))
    out = sorted(kinds.values(), key=lambda e: -e["generations"])
    for entry in out:
        entry["hosts"] = sorted(entry["hosts"])
    return out


def describe_machines(summary: list[dict[str, Any]]) -> str:
    """One line for a report: what the generations' speed figures were measured on."""

    def one(e: dict[str, Any]) -> str:
        hosts = len(e["hosts"])
        where = f" on {hosts} hosts" if hosts > 1 else ""
        threads = f"{e['threads']} thread{'' if e['threads'] == 1 else 's'}"
        return f"{e['dtype']} ({e['mode']} mode), {threads} per generation, {e['device']}{where}"

    if len(summary) == 1:
        return one(summary[0])

    def count(n: int) -> str:
        return f"{n} generation{'' if n == 1 else 's'}"

    parts = "; ".join(f"{one(e)} ({count(e['generations'])})" for e in summary)
    return f"{len(summary)} machine kinds (speed ratios only within one): {parts}"
