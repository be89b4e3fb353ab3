"""The HTTP routes: OpenAI's completions and chat completions (plain JSON or server-sent
events, one event per accepted block), models, health and Prometheus metrics."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from babelspec.serve.protocol import (
    APIError,
    GenerationRequest,
    ModelInfo,
    TextStream,
    babelspec_info,
    chunk,
    finish_reason,
    parse_chat,
    parse_completion,
    response,
    usage,
)  # fmt: skip
from babelspec.serve.scheduler import Job, Scheduler, timeout_error

DEFAULT_MAX_BODY_BYTES = 1 << 20


def _json(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False, allow_nan=False)


def _sse(obj: dict) -> str:
    return f"data: {_json(obj)}\n\n"


async def read_json(request: Request, limit: int) -> dict:
    too_big = APIError(413, f"the request body is larger than this server's limit of {limit} bytes; send a "
                       "shorter prompt or start the server with a larger --max-body-bytes",
                       param=None, code="body_too_large")  # fmt: skip
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise too_big
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > limit:
            raise too_big
    try:
        data = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise APIError(400, f"the request body is not UTF-8 ({err}); send a JSON object", code="invalid_json") from None
    except json.JSONDecodeError as err:
        raise APIError(400, f"the request body is not valid JSON ({err.msg} at line {err.lineno} column "
                       f"{err.colno}); send a JSON object", code="invalid_json") from None  # fmt: skip
    except RecursionError:
        raise APIError(400, "the request body nests arrays or objects too deeply to parse; send a flat JSON "
                       "object", code="invalid_json") from None
    if not isinstance(data, dict):
        raise APIError(400, f"the request body must be a JSON object, not {type(data).__name__}", code="invalid_json")
    return data


class _Endpoints:
    """The server's endpoints over one scheduler (``worker``): parsing, streaming, errors, metrics."""

    def __init__(self, worker: Scheduler, max_body_bytes: int) -> None:
        self.worker, self.max_body_bytes = worker, max_body_bytes
        self.metrics = worker.metrics
        self.model: ModelInfo = worker.model

    def answer(self, endpoint: str, status: int) -> None:
        self.metrics.requests.labels(endpoint, str(status)).inc()

    def error_response(self, err: APIError, endpoint: str) -> JSONResponse:
        self.answer(endpoint, err.status)
        self.metrics.errors.labels(err.code or err.type).inc()
        return JSONResponse(err.body(), status_code=err.status, headers=err.headers)

    async def watch_disconnect(self, request: Request, job: Job) -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                job.cancelled.set()  # the engine stops this request at its next step
                job.events.put_nowait(("disconnected", None))
                return

    async def next_event(self, job: Job, started: bool) -> tuple[str, object]:
        if started:
            return await job.events.get()  # the engine ends a running request at its deadline
        try:
            return await asyncio.wait_for(job.events.get(), timeout=max(0.0, job.deadline - time.monotonic()))
        except TimeoutError:
            job.cancelled.set()  # still queued: the engine skips it
            return "error", timeout_error(self.worker.request_timeout)

    async def generation(self, request: Request, endpoint: str, parse: Callable[[dict, ModelInfo], GenerationRequest]):
        try:
            req = parse(await read_json(request, self.max_body_bytes), self.model)
            job = self.worker.submit(req, endpoint)
        except APIError as err:
            return self.error_response(err, endpoint)
        watcher = asyncio.create_task(self.watch_disconnect(request, job))
        started = False
        try:
            while True:  # until the first block (streams) or the whole answer
                kind, payload = await self.next_event(job, started)
                started = started or kind == "started"
                if kind == "error":
                    return self.error_response(payload, endpoint)
                if kind == "disconnected":
                    self.answer(endpoint, 499)  # nginx's "client closed request"; nobody reads it
                    return Response(status_code=499)
                if kind == "done" and not req.stream:
                    self.answer(endpoint, 200)
                    return Response(_json(response(req, self.model.model_id, payload)), media_type="application/json")
                if req.stream and kind in ("block", "done"):
                    break
        finally:
            watcher.cancel()
        self.answer(endpoint, 200)
        return StreamingResponse(self.stream(job, (kind, payload)), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})  # fmt: skip

    async def stream(self, job: Job, first: tuple[str, object]) -> AsyncIterator[str]:
        req = job.request
        text = TextStream(self.model.tokenizer, req.stop)
        event: tuple[str, object] | None = first
        opening = True
        try:
            while True:
                kind, payload = event if event is not None else await job.events.get()
                event = None
                if kind == "block":
                    delta = text.push(payload)
                    yield _sse(chunk(req, self.model.model_id, delta, first=opening, extra={"token_ids": payload}))
                    opening = False
                elif kind == "done":
                    result = payload.result
                    yield _sse(chunk(req, self.model.model_id, text.finish(result.text), first=opening,
                                     finish=finish_reason(result.stop_reason), extra=babelspec_info(payload)))  # fmt: skip
                    if req.include_usage:
                        yield _sse(chunk(req, self.model.model_id, None, usage_only=usage(req, result.n_tokens)))
                    yield "data: [DONE]\n\n"
                    return
                elif kind == "error":
                    self.metrics.errors.labels(payload.code or payload.type).inc()
                    yield _sse(payload.body())
                    return
        finally:
            job.cancelled.set()  # a client gone mid-stream frees the engine at its next step

    async def completions(self, request: Request):
        return await self.generation(request, "completions", parse_completion)

    async def chat_completions(self, request: Request):
        return await self.generation(request, "chat_completions", parse_chat)

    async def models(self, request: Request):
        self.answer("models", 200)
        return JSONResponse({"object": "list", "data": [
            {"id": self.model.model_id, "object": "model", "created": 0, "owned_by": "babelspec",
             "context_window": self.model.max_context, "drafter": self.worker.default_offer,
             "drafters": list(self.worker.offers)}]})  # fmt: skip

    async def health(self, request: Request):
        return JSONResponse({"status": "ok", "model": self.model.model_id, "drafter": self.worker.default_offer,
                             "drafters": list(self.worker.offers),
                             "running": self.worker.running, "queued": self.worker.queued,
                             "queue_size": self.worker.queue_size, "batch": self.worker.batch})  # fmt: skip

    async def openapi(self, request: Request):
        from babelspec.serve.schema import openapi as schema

        return JSONResponse(schema())

    async def prometheus(self, request: Request):
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(self.metrics.text(), media_type=CONTENT_TYPE_LATEST)

    async def http_error(self, request: Request, exc: HTTPException):
        hint = {404: "the endpoints are POST /v1/completions, POST /v1/chat/completions, GET /v1/models, "
                     "GET /health, GET /self.metrics, GET /openapi.json",
                405: f"{request.method} is not allowed on {request.url.path}"}.get(exc.status_code, "")  # fmt: skip
        err = APIError(exc.status_code, f"{exc.detail}: {request.url.path}; {hint}".rstrip("; "),
                       code="not_found" if exc.status_code == 404 else None)  # fmt: skip
        return self.error_response(err, "other")

    async def server_error(self, request: Request, exc: Exception):
        err = APIError(500, f"internal error: {type(exc).__name__}: {exc}", type_="server_error", code="internal_error")
        return self.error_response(err, "other")


def create_app(worker: Scheduler, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> Starlette:
    e = _Endpoints(worker, max_body_bytes)
    routes = [
        Route("/v1/completions", e.completions, methods=["POST"]),
        Route("/v1/chat/completions", e.chat_completions, methods=["POST"]),
        Route("/v1/models", e.models, methods=["GET"]),
        Route("/health", e.health, methods=["GET"]),
        Route("/metrics", e.prometheus, methods=["GET"]),
        Route("/openapi.json", e.openapi, methods=["GET"]),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        yield
        worker.close()

    return Starlette(routes=routes, exception_handlers={HTTPException: e.http_error, Exception: e.server_error},
                     lifespan=lifespan)  # fmt: skip
