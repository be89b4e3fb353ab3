"""One untimed warm-up per engine, for every bench that compares engines side by side.

An engine's first call carries its one-time start-up (lazy imports, kernel choice, allocations,
a server's first request), which is no part of decoding. Each bench runs every engine it times
once here, on a short request, before its first timed call, and reports how long that took.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

WARM_UP_TOKENS = 4  # new tokens of a warm-up request: enough to pass prefill and a decode step


def warm_up(runs: Mapping[str, Callable[[], Any]]) -> dict[str, float]:
    """Call each engine's ``run`` once, in order, outside the timing; its seconds per engine."""
    seconds = {}
    for name, run in runs.items():
        started = time.perf_counter()
        run()
        seconds[name] = round(time.perf_counter() - started, 3)
    return seconds
