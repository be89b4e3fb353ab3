"""``auto`` / ``auto:ROUTER.json``: the drafter and gamma the router chose for the language.

The router (``babelspec.router``, written by ``babelspec.experiments.route_choice``) was built
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

from babelspec.drafters.base import Draft, Drafter, DrafterWrapper, NoDrafter, Verdict
from babelspec.errors import UserError
from babelspec.numeric import finite_or
from babelspec.router import Route, Router, default_router_path
from babelspec.sampling import SamplingConfig
from babelspec.speedup import acceptance_rate, theoretical_speedup

if TYPE_CHECKING:
    from collections.abc import Callable

    from babelspec.target import Target

WARMUP_STEPS = 8  # judged steps before the online estimate may switch drafting off


class RoutedDrafter(DrafterWrapper):
    """The route's drafter (``NoDrafter`` for a route to plain decoding), with γ capped at the
    route's and drafting switched off once the online f says it does not pay. Everything else
    of the drafter contract (trees, the target's candidates for recycling) reaches the route's
    drafter through ``DrafterWrapper``."""

    def __init__(self, inner: Drafter | None, route: Route, min_speedup: float = 1.0) -> None:
        super().__init__(inner if inner is not None else NoDrafter())
        self.route = route
        self.min_speedup = min_speedup
        self.name = f"auto[{route.drafter},g={route.gamma}]"
        self.preferred_gamma = max(1, route.gamma)
        self._reset_counts()

    @property
    def routes_to_plain(self) -> bool:
        return isinstance(self.inner, NoDrafter) or self.route.gamma <= 0

    def _reset_counts(self) -> None:
        self.matched = 0
        self.rejections = 0
        self.judged_steps = 0
        self.drafted = 0  # tokens (tree nodes) drafted in the judged steps
        self.depth = 0  # tokens on the longest path of each judged step's draft, summed
        self.drafting = not self.routes_to_plain
        self._last = (0, 0)  # (tokens, depth) of the last proposal

    @property
    def observes_top(self) -> int:  # type: ignore[override]
        return self.inner.observes_top if self.drafting else 0

    def start(self, context_ids: list[int], sampling: SamplingConfig, generator: torch.Generator) -> None:
        self._reset_counts()
        self.inner.start(context_ids, sampling, generator)

    def propose(self, gamma: int) -> Draft:
        if not self.drafting:
            self._last = (0, 0)
            return Draft.empty()
        draft = self.inner.propose(min(gamma, self.route.gamma))
        self._last = (len(draft), draft.depth())
        return draft

    def commit(self, verdict: Verdict) -> None:
        if not self.drafting:
            return  # the inner drafter is no longer consulted in this generation
        kept = len(verdict.kept)
        if verdict.drafted:  # the engine's verdicts carry the draft's shape
            self._judge(kept, verdict.rejected, verdict.drafted, verdict.depth)
        elif self._last[0]:  # another caller's: the shape of the last proposal
            self._judge(kept, kept < self._last[1], *self._last)
        self.inner.commit(verdict)
        self._maybe_stop()

    def _judge(self, kept: int, rejected: bool, drafted: int, depth: int) -> None:
        self.matched += kept
        self.rejections += int(rejected)
        self.judged_steps += 1
        self.drafted += drafted
        self.depth += depth

    def _maybe_stop(self) -> None:
        if self.judged_steps >= WARMUP_STEPS and self.online_speedup() < self.min_speedup:
            self.drafting = False  # drafting costs more than it saves here: plain decoding

    def online_speedup(self) -> float:
        """f over this generation's judged steps; NaN until a step is judged or without costs.

        A step keeps at most its draft's depth + 1 tokens and pays for every drafted token (a
        tree's nodes). Costs come from the route in units of a plain decode step (older router
        files lack them: then verification counts 1 and a draft forward the route's c)."""
        if not self.judged_steps:
            return math.nan
        alpha = finite_or(acceptance_rate(self.matched, self.rejections), 0.0)
        depth = self.depth / self.judged_steps
        nodes = self.drafted / self.judged_steps  # tokens actually drafted per step
        verify = finite_or(self.route.verify_cost, 1.0)
        draft = finite_or(self.route.draft_cost, finite_or(self.route.c, math.nan))
        return theoretical_speedup(alpha, depth, draft, verify, nodes=nodes)


def auto_drafter(arg: str, target: Target, context: dict[str, Any],
                 make: Callable[..., Drafter]) -> Drafter:
    """``auto[:ROUTER]``: the routed drafter; ``make`` builds the route's drafter from its spec."""
    lang = context.get("lang")
    if not lang:
        raise UserError("the auto drafter needs a language: pass --lang L (e.g. --lang amh)")
    from babelspec.data.languages import get_language

    lang = get_language(lang).code
    path = arg or default_router_path()
    try:
        router = Router.load(path)
    except ValueError as exc:
        raise UserError(
            f"{exc}. Pass auto:runs/NAME/router.json (every `babelspec run` writes one), or make a "
            f"run's router the default with `babelspec run ... --install-router`"
        ) from None
    task = context.get("task")
    route = router.route(lang, task)
    inner = None
    if route.spec != "none":
        task = task or "translation"
        # a route for every task ("*") may keep a setting's {task}: the request's task fills it
        inner = make(route.spec.replace("{task}", task), target, lang=lang, task=task)
    return RoutedDrafter(inner, route, min_speedup=router.min_speedup)
