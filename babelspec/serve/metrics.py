"""The server's Prometheus metrics, in a registry of its own (``GET /metrics``)."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from babelspec.speedup import acceptance_rate

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("babelspec_requests", "HTTP requests answered, by endpoint and status",
                                ["endpoint", "status"], registry=r)  # fmt: skip
        self.errors = Counter("babelspec_errors", "Error answers, by kind (the error's type or code)",
                              ["kind"], registry=r)  # fmt: skip
        self.generations = Counter("babelspec_generations", "Generations by outcome: complete, cancelled "
                                   "(client gone), timeout, error", ["outcome"], registry=r)  # fmt: skip
        self.tokens = Counter("babelspec_generated_tokens", "Tokens generated, per language", ["lang"], registry=r)
        self.engine_seconds = Counter("babelspec_generation_seconds", "Engine wall time, per language",
                                      ["lang"], registry=r)  # fmt: skip
        self.tokens_per_second = Gauge("babelspec_tokens_per_second", "Tokens per second of the engine so far "
                                       "(generated tokens / generation seconds), per language", ["lang"], registry=r)  # fmt: skip
        self.choice = Counter("babelspec_drafter_choice", "Requests per language and the drafter they got",
                              ["lang", "drafter"], registry=r)  # fmt: skip
        self.accepted = Counter("babelspec_draft_accepted_tokens", "Drafted tokens the verifier kept",
                                ["lang", "drafter"], registry=r)  # fmt: skip
        self.proposed = Counter("babelspec_draft_proposed_tokens", "Drafted tokens proposed",
                                ["lang", "drafter"], registry=r)  # fmt: skip
        self.acceptance = Gauge("babelspec_acceptance", "Acceptance α = accepted / (accepted + rejections) "
                                "over all requests so far, per language and drafter", ["lang", "drafter"], registry=r)  # fmt: skip
        self.queue_length = Gauge("babelspec_queue_length", "Requests waiting for the engine", registry=r)
        self.running = Gauge("babelspec_running", "Requests being generated now (at most the server's --batch)", registry=r)
        self.latency = Histogram("babelspec_request_seconds", "From arrival to the last token, completed "
                                 "generations", ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)  # fmt: skip
        self._lock = threading.Lock()
        self._judged: dict[tuple[str, str], list[int]] = {}  # (lang, drafter) -> [accepted, rejections]
        self._speed: dict[str, list[float]] = {}  # lang -> [tokens, seconds]

    def generation(self, lang: str, drafter: str, result) -> None:
        with self._lock:
            self.tokens.labels(lang).inc(result.n_tokens)
            self.engine_seconds.labels(lang).inc(result.wall_seconds)
            speed = self._speed.setdefault(lang, [0, 0.0])
            speed[0] += result.n_tokens
            speed[1] += result.wall_seconds
            if speed[1] > 0:
                self.tokens_per_second.labels(lang).set(speed[0] / speed[1])
            if result.proposed:
                self.proposed.labels(lang, drafter).inc(result.proposed)
                self.accepted.labels(lang, drafter).inc(result.accepted)
                judged = self._judged.setdefault((lang, drafter), [0, 0])
                judged[0] += result.accepted
                judged[1] += result.rejections
                if sum(judged):
                    self.acceptance.labels(lang, drafter).set(acceptance_rate(*judged))

    def text(self) -> bytes:
        return generate_latest(self.registry)
