"""One model in memory, a bounded queue in front of it, and the engine loop behind it.

Up to ``batch`` requests run at once on the engine's one thread (``batching.EngineLoop``), each
with its own KV cache: their decode rows and verification blocks share each target forward, and
requests join and leave between steps; each one's output is what it would be alone. With
``batch=1`` (or a target whose forward cannot batch) requests take turns on one
sequence. Waiting requests start in arrival order. A request is refused with 429 when
``queue_size`` are already waiting; it is ended at its deadline (``request_timeout``), and when
its client goes away the engine stops it at the next speculative step (``engine.generate``'s
``on_block`` returns true).

The drafter of a request is built as ``babelspec generate`` builds it (the drafter registry,
the same context), so the same seed gives the same tokens. With ``auto`` the router's route
for the request's language is used: ``lang`` if given, else the language the project's
character n-gram classifier detects in the prompt; a detected language the router has no
route for is decoded plainly.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from babelspec.data.langid import detect_language
from babelspec.drafters.base import resolve_gamma
from babelspec.errors import UserError
from babelspec.router import Router, default_router_path
from babelspec.serve.metrics import Metrics
from babelspec.serve.protocol import APIError, GenerationRequest, ModelInfo, bad

log = logging.getLogger("babelspec.serve")
DRAFTER_CACHE_SIZE = 8  # built drafters kept for reuse (an n-gram table, a model's weights)


def is_auto(spec: str) -> bool:
    return spec == "auto" or spec.startswith("auto:")


def parse_offers(entries: str | list[str] | dict[str, str]) -> dict[str, str]:
    """The drafters a server offers, ``{name: spec}`` in order (the first is the default), from
    ``--drafter`` entries ``NAME=SPEC`` or ``SPEC`` (named by itself). Plain decoding is always
    offered as ``none``."""
    if isinstance(entries, dict):
        offers = dict(entries)
    else:
        offers = {}
        for entry in [entries] if isinstance(entries, str) else entries:
            name, eq, spec = entry.partition("=")
            name, spec = (name.strip(), spec.strip()) if eq else (entry.strip(), entry.strip())
            if not name or not spec:
                raise UserError(f"--drafter {entry!r}: write SPEC or NAME=SPEC (e.g. bigram=ngram:amh.ngram)")
            if name in offers:
                raise UserError(f"--drafter: the name {name!r} is given twice")
            offers[name] = spec
    if not offers:
        offers = {"none": "none"}
    offers.setdefault("none", "none")
    return offers


@dataclass
class Drafting:
    """How a request was drafted, as the response's ``babelspec`` object reports it."""

    spec: str  # the drafter spec built, as `babelspec generate --drafter` takes it
    offer: str = ""  # the name the request chose among the server's drafters (the metrics' label)
    name: str = ""
    gamma: int = 0  # tokens drafted per step at most (0 for plain decoding)
    route: dict | None = None  # the router's route, for auto
    lang: str | None = None  # the language the drafter was built for
    lang_source: str | None = None  # "request" | "detected" | None
    detected_lang: str | None = None  # what the classifier says of the prompt


@dataclass
class Outcome:
    result: Any  # engine.GenerationResult
    drafting: Drafting
    seed: int
    queue_seconds: float


@dataclass
class Job:
    request: GenerationRequest
    endpoint: str
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)  # ("started"|"block"|"done"|"error", x)
    cancelled: threading.Event = field(default_factory=threading.Event)
    drafting: Drafting | None = None
    arrived: float = field(default_factory=time.monotonic)
    deadline: float = math.inf

    def emit(self, kind: str, payload: Any = None) -> None:
        self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, payload))


def timeout_error(seconds: float) -> APIError:
    return APIError(504, f"the request took longer than the server's request timeout of {seconds:g} s; lower "
                    "max_tokens, retry later, or start the server with a larger --request-timeout",
                    type_="timeout_error", code="timeout")  # fmt: skip


class Scheduler:
    def __init__(self, target: Any, model_id: str, *, drafter: str | list[str] | dict[str, str] = "none",
                 router: str | None = None, queue_size: int = 16, request_timeout: float = 600.0,
                 detector: Any = None, detect: bool = False, metrics: Metrics | None = None,
                 batch: int = 1) -> None:  # fmt: skip
        """``drafter``: the drafters requests may choose from, fixed here (``parse_offers``);
        ``router``: the router of ``auto``, loaded here (else an ``auto:PATH`` entry's, else the
        installed default where ``auto`` is offered); ``batch``: requests that run at once,
        sharing each target forward (``batching``; 1 where the target's forward cannot);
        ``detector``: the language classifier of requests that name no language, or, with
        ``detect``, one trained here on the bundled languages and every language of the router
        (SIB-200 text from the corpora folder for those the bundled data lacks)."""
        self.target, self.model_id = target, model_id
        self.offers = parse_offers(drafter)
        self.default_offer = next(iter(self.offers))
        autos = [spec for spec in self.offers.values() if is_auto(spec)]
        if len(set(autos)) > 1:
            raise UserError(f"--drafter: one router per server (got {', '.join(autos)}); name it with --router")
        if router is None and autos:
            router = autos[0].partition(":")[2] or str(default_router_path())
        self.router_path = router
        if router is not None:  # auto is offered under its own name, with the router fixed now
            for name, spec in list(self.offers.items()):
                if is_auto(spec):
                    self.offers[name] = f"auto:{router}"
            self.offers.setdefault("auto", f"auto:{router}")
        self.queue_size, self.request_timeout = queue_size, request_timeout
        self.detector = detector
        self.metrics = metrics or Metrics()
        self.model = ModelInfo(model_id, target.tokenizer, getattr(target, "max_context", None))
        if batch < 1:
            raise UserError(f"batch must be at least 1, got {batch}")
        from babelspec.batching import EngineLoop

        try:
            self.engine = EngineLoop(target, batch)
        except ValueError as err:
            if batch == 1:
                raise
            log.warning("requests run one at a time: %s", err)
            self.engine = EngineLoop(target, 1)
        self.batch = self.engine.batch
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self.admitted = 0  # waiting + running
        self.running = 0
        self._seconds_per_request = 1.0  # moving average, for Retry-After
        self._drafters: OrderedDict[tuple, Any] = OrderedDict()
        self._router = None
        if router is not None:  # a missing or broken router fails at start, not per request
            try:
                self._router = Router.load(router)
            except ValueError as err:
                raise UserError(f"{err}. Give the server --router runs/NAME/router.json (every `babelspec run` "
                                 "writes one)") from None  # fmt: skip
        if detector is None and detect:
            from babelspec.data.langid import OutputChecker

            routed = sorted({r.language for r in self._router.routes}) if self._router else []
            self.detector = OutputChecker.from_corpora(routed, use_langid=False).classifier

    # --- admission ---
    @property
    def queued(self) -> int:
        return self.admitted - self.running

    def submit(self, request: GenerationRequest, endpoint: str) -> Job:
        job = Job(request, endpoint, asyncio.get_running_loop(), drafting=self.resolve(request))
        job.deadline = job.arrived + self.request_timeout
        with self._lock:
            if self.admitted >= self.queue_size + self.batch:  # the running requests + queue_size waiting
                wait = max(1, math.ceil(self._seconds_per_request * (self.queued + 1)))
                raise APIError(429, f"the server's queue is full ({self.queue_size} requests waiting); retry "
                               f"after {wait} s", type_="rate_limit_error", code="queue_full",
                               headers={"Retry-After": str(wait)})  # fmt: skip
            self.admitted += 1
            self.metrics.queue_length.set(self.queued)
        try:
            self.engine.submit(lambda index, target: self._run(job, index, target))
        except RuntimeError:  # closed: the server is stopping
            with self._lock:
                self.admitted -= 1
            raise APIError(503, "the server is shutting down; retry on another instance or later",
                           type_="server_error", code="shutting_down") from None
        return job

    # --- drafting ---
    def detect(self, text: str) -> str | None:
        return detect_language(self.detector, text)

    def offered(self, name: str) -> str:
        """The spec of a drafter the request named; 400 for any other name, with no file read
        and no model loaded (a request cannot name a path or a model, only a name)."""
        if name not in self.offers:
            shown = name if len(name) <= 64 else name[:61] + "..."
            raise bad("drafter", f"drafter {shown!r} is not offered by this server; choose one of "
                      f"{', '.join(self.offers)} (the server's --drafter sets them)")  # fmt: skip
        return self.offers[name]

    def resolve(self, req: GenerationRequest) -> Drafting:
        """The drafter spec and language of a request (cheap: nothing is built here)."""
        from babelspec.data.languages import LANGUAGES

        detected = self.detect(req.text)
        lang = req.lang or (detected if detected in LANGUAGES else None)
        source = "request" if req.lang else ("detected" if lang else None)
        offer = req.drafter or self.default_offer
        spec = self.offered(offer)
        d = Drafting(spec=spec, offer=offer, lang=lang, lang_source=source, detected_lang=detected,
                     gamma=req.gamma or 0)
        if spec == "none":
            d.gamma = 0
        if not is_auto(spec):
            return d
        router = self._router
        try:
            if lang is None:
                raise UserError("no language given or detected")
            route = router.route(lang, req.task)
        except ValueError as err:
            if req.lang:
                raise bad("lang", f"{err}; or leave 'lang' out and the prompt's language is detected") from None
            # A language the router was not built for: plain decoding, as the router's fallback.
            d.spec, d.gamma, d.route = "none", 0, {"drafter": "none", "reason": str(err)}
            return d
        d.gamma = min(req.gamma or route.gamma, route.gamma)
        d.route = {"drafter": route.drafter, "gamma": route.gamma, "source": route.source,
                   "predicted_speedup": route.predicted_speedup if math.isfinite(route.predicted_speedup) else None}  # fmt: skip
        return d

    def _drafter(self, d: Drafting, task: str | None, slot: int, target: Any) -> Any:
        """The request's drafter, built for the slot's target (a drafter holds one sequence's
        state, so each slot has its own), kept for reuse."""
        from babelspec.drafters import make_drafter

        key = (slot, d.spec, d.lang, task)
        with self._lock:
            drafter = self._drafters.get(key)
            if drafter is not None:
                self._drafters.move_to_end(key)
                return drafter
        context = {k: v for k, v in (("lang", d.lang), ("task", task)) if v is not None}
        try:
            drafter = make_drafter(d.spec, target, **context)
        except (ValueError, FileNotFoundError) as err:
            raise bad("drafter", f"cannot build drafter {d.spec!r}: {err}") from None
        with self._lock:
            self._drafters[key] = drafter
            while len(self._drafters) > DRAFTER_CACHE_SIZE * self.batch:
                self._drafters.popitem(last=False)
        return drafter

    # --- the engine thread ---
    def run(self, stop: Any = None) -> None:
        """Generate on this thread (best the one that loaded the model: ``batching``) until
        ``close``, or until ``stop()`` is true while no request is running."""
        self.engine.run(stop=stop)

    def _run(self, job: Job, index: int, target: Any) -> None:
        from babelspec.engine import generate

        req = job.request
        started = time.monotonic()
        outcome_kind = "error"
        started_running = False
        try:
            if job.cancelled.is_set() or self._closing.is_set():
                outcome_kind = "cancelled"
                return
            if started > job.deadline:
                outcome_kind = "timeout"
                job.emit("error", timeout_error(self.request_timeout))
                return
            started_running = True
            with self._lock:
                self.running += 1
                self.metrics.running.set(self.running)
                self.metrics.queue_length.set(self.queued)
            job.emit("started")
            d = job.drafting
            drafter = self._drafter(d, req.task, index, target)
            d.name = getattr(drafter, "name", d.spec)
            # as `babelspec generate`: without a gamma, the drafter's preferred one, else 4
            gamma = resolve_gamma(req.gamma, drafter)
            if d.spec != "none" and d.route is None and not d.gamma:
                d.gamma = gamma

            def on_block(ids: list[int]) -> bool:
                job.emit("block", ids)
                return job.cancelled.is_set() or self._closing.is_set() or time.monotonic() > job.deadline

            result = generate(target, drafter, req.prompt_ids, gamma=gamma, max_new_tokens=req.max_tokens,
                              sampling=req.sampling, stop_strings=req.stop, on_block=on_block)  # fmt: skip
            lang = d.lang or "unknown"
            self.metrics.choice.labels(lang, d.offer).inc()
            self.metrics.generation(lang, d.offer, result)
            if result.stop_reason == "stopped":
                if job.cancelled.is_set() or self._closing.is_set():
                    outcome_kind = "cancelled"
                    return
                outcome_kind = "timeout"
                job.emit("error", timeout_error(self.request_timeout))
                return
            outcome_kind = "complete"
            self.metrics.latency.labels(job.endpoint).observe(time.monotonic() - job.arrived)
            job.emit("done", Outcome(result, d, req.sampling.seed, started - job.arrived))
        except APIError as err:
            outcome_kind = "rejected"
            job.emit("error", err)
        except ValueError as err:  # the engine's own checks of a request
            outcome_kind = "rejected"
            job.emit("error", APIError(400, str(err), code="invalid_value"))
        except Exception as err:  # noqa: BLE001 - answered as a 500, logged with its traceback
            log.error("generation failed:\n%s", traceback.format_exc())
            job.emit("error", APIError(500, f"internal error during generation: {type(err).__name__}: {err}",
                                       type_="server_error", code="internal_error"))  # fmt: skip
        finally:
            self.metrics.generations.labels(outcome_kind).inc()
            with self._lock:
                self.admitted -= 1
                if started_running:
                    self.running -= 1
                elapsed = time.monotonic() - started
                # a request's share of the engine, for Retry-After: its time over the requests at once
                self._seconds_per_request = 0.8 * self._seconds_per_request + 0.2 * elapsed / self.batch
                self.metrics.running.set(self.running)
                self.metrics.queue_length.set(self.queued)

    def close(self) -> None:
        """Stop the running generation at its next step and drop the waiting ones."""
        self._closing.set()
        self.engine.close()
