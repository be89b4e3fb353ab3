"""What a measurement ran on: dtype (exact or fast mode), threads, device and CPU model.

Every speed figure depends on these, so benchmarks and runs record them beside their numbers.
"""

from __future__ import annotations

import platform
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# float32 is the exact mode: greedy speculative output equals greedy plain (and HF) output, held
# by the equivalence tests. bfloat16 is the fast mode: a verification forward of k tokens and k
# one-token forwards may round differently, so near-ties can flip (agreement rate measured by
# ``babelspec bench equivalence --dtype bfloat16``).
EXACT_DTYPES = ("float32", "float64")


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


def dtype_name(dtype: "torch.dtype | str") -> str:
    """``bfloat16`` for ``torch.bfloat16`` (and for the string ``"bfloat16"``)."""
    return str(dtype).removeprefix("torch.")


def precision_mode(dtype: "torch.dtype | str") -> str:
    """``exact`` (float32) or ``fast`` (bfloat16, float16)."""
    return "exact" if dtype_name(dtype) in EXACT_DTYPES else "fast"


def model_dtype(model: "torch.nn.Module") -> "torch.dtype":
    return next(model.parameters()).dtype


def execution_info(target: Any = None, dtype: "torch.dtype | None" = None) -> dict[str, Any]:
    """``{"dtype", "mode", "threads", "device", "cpu"}`` for a target (a ``CausalLM``) or dtype."""
    import torch

    if dtype is None and target is not None:
        dtype = model_dtype(target.model)
    device = getattr(target, "device", torch.device("cpu"))
    info: dict[str, Any] = {
        "dtype": dtype_name(dtype) if dtype is not None else "",
        "mode": precision_mode(dtype) if dtype is not None else "",
        "threads": torch.get_num_threads(),
        "device": str(device),
        "cpu": cpu_model(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def describe(info: dict[str, Any]) -> str:
    """One line for a report: ``bfloat16 (fast mode), 2 threads, AMD EPYC ...``."""
    if not info:
        return "dtype, threads and CPU not recorded"
    where = info.get("gpu") or info.get("cpu", "")
    return (f"{info.get('dtype', '?')} ({info.get('mode', '?')} mode), "
            f"{info.get('threads', '?')} threads, {where}")
