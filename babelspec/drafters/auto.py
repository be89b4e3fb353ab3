"""``auto`` / ``auto:ROUTER.json``: the drafter and gamma the router chose for the language.

The router (``babelspec.routing``, written by ``babelspec.experiments.router``) was built
from measured speedups, per language and task; this drafter builds the chosen one and
proposes at most the chosen gamma. It also watches its own acceptance during a generation:
once enough steps are judged and the online estimate of f falls below 1.0, it stops drafting
for the rest of that generation, so a language the table misjudged still decodes at plain
speed. The online f uses the route's measured verification cost and draft cost (both in
plain decode steps) and the number of tokens actually drafted per step, not gamma.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from babelspec.drafters.base import Draft, Drafter
from babelspec.numeric import finite_or
from babelspec.routing import Route, Router, default_router_path
from babelspec.sampling import SamplingConfig
from babelspec.speedup import acceptance_rate, theoretical_speedup

if TYPE_CHECKING:
    from collections.abc import Callable

    from babelspec.target import Target

WARMUP_STEPS = 8  # judged steps before the online estimate may switch drafting off


class RoutedDrafter(Drafter):
    def __init__(self, inner: Drafter | None, route: Route, min_speedup: float = 1.0) -> None:
        self.inner = inner
        self.route = route
        self.min_speedup = min_speedup
        self.vocab_size = inner.vocab_size if inner is not None else None
        self.name = f"auto[{route.drafter},g={route.gamma}]"
        self.preferred_gamma = max(1, route.gamma)
        self._reset_counts()

    def _reset_counts(self) -> None:
        self.matched = 0
        self.rejections = 0
        self.judged_steps = 0
        self.drafted = 0  # tokens drafted in the judged steps
        self.drafting = self.inner is not None and self.route.gamma > 0
        self._last = 0

    def start(self, context_ids: list[int], sampling: SamplingConfig, generator: torch.Generator) -> None:
        self._reset_counts()
        if self.inner is not None:
            self.inner.start(context_ids, sampling, generator)

    def propose(self, gamma: int) -> Draft:
        if not self.drafting:
            self._last = 0
            return Draft.empty()
        draft = self.inner.propose(min(gamma, self.route.gamma))
        self._last = len(draft)
        return draft

    def commit(self, n_accepted: int, next_token: int) -> None:
        if not self.drafting:
            return  # the inner drafter is no longer consulted in this generation
        if self._last:
            self.matched += n_accepted
            self.rejections += int(n_accepted < self._last)
            self.judged_steps += 1
            self.drafted += self._last
        self.inner.commit(n_accepted, next_token)
        if self.judged_steps >= WARMUP_STEPS and self.online_speedup() < self.min_speedup:
            self.drafting = False  # drafting costs more than it saves here: plain decoding

    def online_speedup(self) -> float:
        """f over this generation's judged steps; NaN until a step is judged or without costs.

        Costs come from the route in units of a plain decode step (older router files lack
        them: then verification counts 1 and a draft forward the route's c)."""
        if not self.judged_steps:
            return math.nan
        alpha = finite_or(acceptance_rate(self.matched, self.rejections), 0.0)
        gamma = self.drafted / self.judged_steps  # tokens actually drafted per step
        verify = finite_or(self.route.verify_cost, 1.0)
        draft = finite_or(self.route.draft_cost, finite_or(self.route.c, math.nan))
        return theoretical_speedup(alpha, gamma, draft, verify)

    def forward_seconds(self) -> list[float]:
        return self.inner.forward_seconds() if self.inner is not None else []


def auto_drafter(arg: str, target: Target, context: dict[str, Any],
                 make: Callable[..., Drafter]) -> Drafter:
    """``auto[:ROUTER]``: the routed drafter; ``make`` builds the route's drafter from its spec."""
    lang = context.get("lang")
    if not lang:
        raise ValueError("the auto drafter needs a language: pass --lang L (e.g. --lang amh)")
    from babelspec.data.languages import get_language

    lang = get_language(lang).code
    path = arg or default_router_path()
    try:
        router = Router.load(path)
    except ValueError as exc:
        raise ValueError(
            f"{exc}. Pass auto:runs/NAME/router.json (every `babelspec run` writes one), or make a "
            f"run's router the default with `babelspec run ... --install-router`"
        ) from None
    route = router.route(lang, context.get("task"))
    inner = None
    if route.spec != "none":
        inner = make(route.spec, target, lang=lang, task=context.get("task") or "translation")
    return RoutedDrafter(inner, route, min_speedup=router.min_speedup)
