"""Small numeric helpers shared by the engine, the study, the report, the server and the benchmarks."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np


def is_finite(x: Any) -> bool:
    """True for an int or float that is neither NaN nor infinite (False for None and the rest)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def finite_or(x: Any, default: float) -> float:
    """``x`` where it is finite, else ``default``."""
    return float(x) if is_finite(x) else default


def median(values: Iterable[float]) -> float:
    """The median; NaN for no values (a NaN among them makes it NaN too)."""
    values = list(values)
    return float(np.median(values)) if values else math.nan


def json_number(x: Any, digits: int | None = None) -> float | None:
    """``x`` (rounded to ``digits``) where it is finite, else None: JSON has no NaN."""
    if not is_finite(x):
        return None
    return round(float(x), digits) if digits is not None else x
