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

from babelspec.models.machine import cpu_model, model_dtype


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
            dtype = str(model_dtype(model)).removeprefix("torch.")
        except StopIteration:
            pass
    return {"host": socket.gethostname(), "device": name, "dtype": dtype,
            "threads": torch.get_num_threads()}  # fmt: skip


def machine_kind(machine: dict[str, Any] | None) -> str:
    """The part of a fingerprint that determines speed: device, dtype, threads ("" if unknown)."""
    if not machine:
        return ""
    name = machine.get("gpu") or machine.get("device") or machine.get("cpu", "")
    return f"{name} | {machine.get('dtype', '')} | {machine.get('threads', '')} threads"
