"""``adaptive:SPEC``: any drafter, its gamma chosen every step from what this generation measured.

A fixed gamma pays when the drafter's acceptance and cost are what it was chosen for. Here each
step drafts the gamma (0 to the one asked for) that maximises the expected tokens per second,

    E[tokens | g] / (V + g * d),   E[tokens | g] = (1 - a^(g+1)) / (1 - a),

against plain decoding's 1 token per P, where a is this generation's acceptance so far
(matched / (matched + rejections), with one matched and one rejected token of prior), d the
measured seconds per drafted token, V the measured seconds of the rest of a drafted step (the
verification forward and the bookkeeping) and P those of a plain step (V until one is
measured). Gamma 0 is plain decoding: the router's switch-off (``drafters.auto``) for every
drafter and every generation. While drafting does not pay, one step in ``PROBE_EVERY`` drafts
anyway, so the estimate can recover. A draft that costs nothing drafts the gamma asked for
(more tokens can only add); one that costs a little, as an n-gram's lookup does, drafts fewer
where acceptance is low, since the later tokens' a^k then adds less than they cost.

The output distribution is the target's whatever gamma a step drafts: verification judges each
step's draft as it is.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import torch

from babelspec.drafters.base import Draft, Drafter, DrafterWrapper, Verdict
from babelspec.errors import UserError
from babelspec.sampling import SamplingConfig
from babelspec.speedup import expected_tokens_per_step

if TYPE_CHECKING:
    from collections.abc import Callable

    from babelspec.target import Target

WARMUP_STEPS = 4  # drafted steps at the gamma asked for before the choice starts
PROBE_EVERY = 16  # while plain decoding pays better, one step in this many drafts anyway
SMOOTHING = 0.2  # weight of the newest timing in the running estimates of d, V and P


def best_gamma(alpha: float, max_gamma: int, draft_s: float, step_s: float, plain_s: float) -> int:
    """The gamma in 0..max_gamma with the most expected tokens per second (ties: the larger)."""
    best, rate = 0, 1.0 / plain_s
    for g in range(1, max_gamma + 1):
        r = expected_tokens_per_step(alpha, g) / (step_s + g * draft_s)
        if r >= rate:
            best, rate = g, r
    return best


class _Running:
    """An exponentially smoothed mean (NaN until the first value)."""

    def __init__(self) -> None:
        self.value = math.nan

    def add(self, x: float) -> None:
        self.value = x if math.isnan(self.value) else (1 - SMOOTHING) * self.value + SMOOTHING * x


class AdaptiveDrafter(DrafterWrapper):
    """The inner drafter at the gamma this generation's measurements say pays most."""

    def __init__(self, inner: Drafter, *, draft_cost: float | None = None, verify_cost: float | None = None,
                 warmup: int = WARMUP_STEPS, probe_every: int = PROBE_EVERY) -> None:  # fmt: skip
        """``draft_cost`` (a drafted token) and ``verify_cost`` (the rest of a drafted step), in
        plain decode steps, replace the timings this generation measures where given (a route's
        measured costs, or a test's); ``warmup`` drafted steps run at the gamma asked for."""
        super().__init__(inner)
        if warmup < 0 or probe_every < 1:
            raise UserError(f"warmup must be >= 0 and probe_every >= 1 (got {warmup}, {probe_every})")
        for label, cost in (("draft_cost", draft_cost), ("verify_cost", verify_cost)):
            if cost is not None and not (math.isfinite(cost) and cost >= 0):
                raise UserError(f"{label} must be a finite cost >= 0 in plain decode steps (got {cost})")
        self.name = f"adaptive[{inner.name}]"
        self.draft_cost, self.verify_cost = draft_cost, verify_cost
        self.warmup, self.probe_every = warmup, probe_every
        self.gammas: list[int] = []  # the gamma of each step of the last generation

    def start(self, context_ids: list[int], sampling: SamplingConfig, generator: torch.Generator) -> None:
        self.matched, self.rejections, self.drafted_steps, self.plain_run = 1, 1, 0, 0
        self.draft_s, self.step_s, self.plain_s = _Running(), _Running(), _Running()
        self.gammas = []
        self._started = self._draft_seconds = math.nan
        self._gamma = 0
        self.inner.start(context_ids, sampling, generator)

    @property
    def alpha(self) -> float:
        return self.matched / (self.matched + self.rejections)

    def costs(self) -> tuple[float, float, float]:
        """(a drafted token, the rest of a drafted step, a plain step): given, else measured."""
        d = self.draft_cost if self.draft_cost is not None else self.draft_s.value
        v = self.verify_cost if self.verify_cost is not None else self.step_s.value
        if self.draft_cost is not None and self.verify_cost is not None:
            return d, v, 1.0
        p = self.plain_s.value if not math.isnan(self.plain_s.value) else v
        return d, v, p

    def choose(self, gamma: int) -> int:
        """This step's gamma, at most ``gamma``."""
        d, v, p = self.costs()
        if self.drafted_steps < self.warmup or gamma <= 0 or math.isnan(d) or math.isnan(v):
            return gamma
        g = best_gamma(self.alpha, gamma, max(d, 0.0), v, p)
        if g == 0 and self.plain_run + 1 >= self.probe_every:
            g = max(1, best_gamma(self.alpha, gamma, max(d, 0.0), v, math.inf))  # a probe
        return g

    def propose(self, gamma: int) -> Draft:
        self._gamma = self.choose(gamma)
        self.gammas.append(self._gamma)
        self._started = time.perf_counter()
        if self._gamma == 0:
            self._draft_seconds = 0.0
            return Draft.empty()
        draft = self.inner.propose(self._gamma)
        self._draft_seconds = time.perf_counter() - self._started
        if len(draft):
            self.draft_s.add(self._draft_seconds / len(draft))
        return draft

    def commit(self, verdict: Verdict) -> None:
        # the step's time from the proposal to its verdict: the verification and its bookkeeping
        rest = time.perf_counter() - self._started - self._draft_seconds if not math.isnan(self._started) else math.nan
        if self._gamma == 0:
            self.plain_run += 1
            if not math.isnan(rest):
                self.plain_s.add(rest)
        else:
            self.plain_run = 0
            if not math.isnan(rest):
                self.step_s.add(rest)
            if verdict.drafted:
                self.drafted_steps += 1
                self.matched += len(verdict.kept)
                self.rejections += int(verdict.rejected)
        self.inner.commit(verdict)  # every step: the inner drafter follows the text even while idle


def adaptive_drafter(arg: str, target: Target, context: dict[str, Any], make: Callable[..., Drafter]) -> Drafter:
    """``adaptive:SPEC``: the drafter ``SPEC`` names, at the gamma each step measures pays most."""
    if not arg or arg.startswith(("adaptive", "none")):
        raise UserError(f"adaptive: wraps a drafter spec, e.g. adaptive:int8:amh or adaptive:ngram:FILE (got {arg!r})")
    return AdaptiveDrafter(make(arg, target, **context))
