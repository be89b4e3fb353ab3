"""What a measurement ran on: dtype (exact or fast mode), threads, device and CPU model.

Every speed figure depends on these, so benchmarks and runs record them beside their numbers.

Each generation of a study carries a machine fingerprint. Wall-clock ratios are only meaningful
between generations measured on the same kind of machine (same CPU model or GPU, same dtype,
same thread count), so the report pairs and groups speed figures by ``machine_kind`` and never
divides a time from one kind by a time from another. The host name is kept for diagnosis but is
not part of the kind: two nodes with the same hardware and settings measure the same thing.
"""

from __future__ import annotations

import platform
import socket
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# bf16 is exact on the lean forward's exact path (``LeanGemma3.exact``: every row of a block gets
# the bits of the row alone, so the plan records ``exact: bf16 rows invariant``), and so is the
# gguf mode on it. Elsewhere the plan records ``exact: no`` and why (``not_exact_reason``): on
# Hugging Face's forward, and in float32, whose MKL products round a row by its block's size, a
# verification of k tokens and k one-token forwards may round differently and near-ties can flip
# (far more rarely in float32: the "exact mode" of the dtype choice, as near float64 as it gets).
EXACT_DTYPES = ("float32", "float64")
EXACT_BF16 = "bf16 rows invariant"  # the plan's ``exact`` for the lean forward's exact path


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags (``avx512_bf16``, ``amx_bf16``, ...); empty where none can be read."""
    try:
        with open(cpuinfo) as handle:
            for line in handle:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's marketing name (``/proc/cpuinfo`` on Linux, ``platform`` elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def dtype_name(dtype: torch.dtype | str) -> str:
    """``bfloat16`` for ``torch.bfloat16`` (and for the string ``"bfloat16"``)."""
    return str(dtype).removeprefix("torch.")


def precision_mode(dtype: torch.dtype | str) -> str:
    """``exact`` (float32) or ``fast`` (bfloat16, float16)."""
    return "exact" if dtype_name(dtype) in EXACT_DTYPES else "fast"


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype


def execution_plan(target: Any) -> dict[str, Any]:
    """What runs a target's forward, decided when it was built: ``forward`` (``lean``, babelspec's
    own, or ``hf``), ``glue`` (the lean forward's C glue built and on), the ``weights`` and KV
    ``cache`` dtypes, the target mode (``precision``, e.g. w8a8) where one is set, and ``exact``:
    whether every row of a block gets the row alone's bits, with ``exact_why`` where it is no."""
    impl = getattr(target, "impl", None)
    model = getattr(target, "model", None)
    weights = ""
    if model is not None:
        try:
            weights = dtype_name(model_dtype(model))
        except StopIteration:
            pass
    cache = getattr(impl, "cache_dtype", None)
    plan: dict[str, Any] = {"forward": getattr(impl, "kind", "") or "hf",
                            "glue": getattr(impl, "glue", None) is not None, "weights": weights,
                            "cache": dtype_name(cache) if cache is not None else weights}  # fmt: skip
    if getattr(target, "precision", None):
        plan["precision"] = target.precision
    if getattr(impl, "product_kernel", None):  # the gguf mode: products on the file's blocks
        plan["weights"], plan["kernel"] = "gguf", impl.product_kernel
    if hasattr(impl, "row_steps_in_c"):  # a one-row block's layers: in C (``LeanGemma3._one_row_layers``)
        plan["row_steps"] = "c" if impl.row_steps_in_c else "block"  # or as any block's
    if getattr(impl, "exact", False):
        plan["exact"] = EXACT_BF16
    else:
        plan["exact"] = "no"
        if getattr(impl, "not_exact_reason", ""):
            plan["exact_why"] = impl.not_exact_reason
    if getattr(impl, "certifies_head", False):
        plan["head"] = "certified"  # greedy and top-k rows from the certified head (``forward.certified``)
    return plan


def describe_plan(plan: dict[str, Any] | None) -> str:
    """``lean forward, C glue, float32 KV cache`` (empty where no plan was recorded)."""
    if not plan:
        return ""
    parts = [f"{plan.get('forward', '?')} forward", "C glue" if plan.get("glue") else "no C glue",
             f"{plan.get('cache', '?')} KV cache"]
    if plan.get("kernel"):
        parts.append(f"{plan['weights']} weights ({plan['kernel']} kernel)")
    if plan.get("row_steps") == "c":
        parts.append("one-row steps in C")
    if plan.get("exact"):
        parts.append(f"exact: {plan['exact']}")
    if plan.get("head"):
        parts.append(f"{plan['head']} output head")
    return ", ".join(parts)


def execution_info(target: Any = None, dtype: torch.dtype | None = None) -> dict[str, Any]:
    """``{"dtype", "mode", "threads", "device", "cpu"}`` for a target (a ``CausalLM``) or dtype,
    and the target's execution ``plan`` (``execution_plan``)."""
    import torch

    if dtype is None and target is not None:
        dtype = model_dtype(target.model)
    device = getattr(target, "device", torch.device("cpu"))
    info: dict[str, Any] = {
        "dtype": dtype_name(dtype) if dtype is not None else "",
        "mode": ("exact" if getattr(getattr(target, "impl", None), "exact", False)
                 else precision_mode(dtype) if dtype is not None else ""),
        "threads": torch.get_num_threads(),
        "device": str(device),
        "cpu": cpu_model(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    if getattr(target, "precision", None):
        info["precision"] = target.precision
    if target is not None:
        info["plan"] = execution_plan(target)
    return info


def describe(info: dict[str, Any]) -> str:
    """One line for a report: ``bfloat16 (fast mode), 2 threads, AMD EPYC ...``."""
    if not info:
        return "dtype, threads and CPU not recorded"
    where = info.get("gpu") or info.get("cpu", "")
    mode = f"{info.get('dtype', '?')} ({info.get('mode', '?')} mode)"
    if info.get("precision"):
        mode += f", {info['precision']} target"
    plan = describe_plan(info.get("plan"))
    return (f"{mode}, " + (f"{plan}, " if plan else "")
            + f"{info.get('threads', '?')} threads, {where}")


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
    out = {"host": socket.gethostname(), "device": name, "dtype": dtype, "threads": torch.get_num_threads()}
    if getattr(target, "precision", None):
        out["precision"] = target.precision  # a target mode (w8a8): another model, another speed
    if target is not None:
        out["plan"] = execution_plan(target)
    return out


def machine_kind(machine: dict[str, Any] | None) -> str:
    """The part of a fingerprint that determines speed: device, dtype (and target mode, as
    ``bfloat16 w8a8``), threads ("" if unknown)."""
    if not machine:
        return ""
    dtype = " ".join(filter(None, (machine.get("dtype", ""), machine.get("precision", ""))))
    return f"{_device(machine)} | {dtype} | {machine.get('threads', '')} threads"


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
            "mode": ("exact" if (machine.get("plan") or {}).get("exact") == EXACT_BF16
                     else precision_mode(machine["dtype"]) if machine.get("dtype") else ""),
            "precision": machine.get("precision", ""), "plan": machine.get("plan", {}),
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
        target = f", {e['precision']} target" if e.get("precision") else ""
        plan = describe_plan(e.get("plan"))
        plan = f", {plan}" if plan else ""
        return f"{e['dtype']} ({e['mode']} mode){target}{plan}, {threads} per generation, {e['device']}{where}"

    if len(summary) == 1:
        return one(summary[0])

    def count(n: int) -> str:
        return f"{n} generation{'' if n == 1 else 's'}"

    parts = "; ".join(f"{one(e)} ({count(e['generations'])})" for e in summary)
    return f"{len(summary)} machine kinds (speed ratios only within one): {parts}"
