"""The request bodies as Pydantic models: their types and ranges, checked before anything else
reads a field, and the OpenAPI schema the server publishes at ``/openapi.json``.

What depends on the served model (the context window, tokenisation, the chat template) and on
the server (which drafters it offers) is checked after, in ``protocol``. A failed check answers
400 naming the field: ``NAME must be an integer in [LO, HI] (got V)``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from babelspec.errors import UserError
from babelspec.sampling import MIN_TEMPERATURE, PENALTY_RANGE

MAX_GAMMA = 64
MAX_STOP_STRINGS = 4  # OpenAI's limit
CHAT_ROLES = ("system", "developer", "user", "assistant")
INT63 = (1 << 63) - 1

Text = Annotated[str, Field(min_length=1)]
# The rules of the fields whose rule is not a plain interval, as a failure states them.
TEMPERATURE_RULE = f"a number in [{MIN_TEMPERATURE}, 2], or 0 for greedy decoding"
STOP_RULE = f"a non-empty string or a list of 1 to {MAX_STOP_STRINGS} of them"


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    include_usage: bool = False


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]


class _Generation(BaseModel):
    """Fields both endpoints take: OpenAI's, and babelspec's extras (``top_k``,
    ``repetition_penalty``, ``gamma``, ``lang``, ``task``, ``drafter``)."""

    # strict: "5" is not 5 and true is not 1; other fields of OpenAI's API pass through
    # (those this server does not implement are refused by protocol, by name).
    model_config = ConfigDict(extra="allow", strict=True)

    model: str = Field(description="The served model's id (GET /v1/models).")
    temperature: float | None = Field(None, description=f"0 for greedy decoding, else in [{MIN_TEMPERATURE}, 2]; "
                                      "default 1.")  # fmt: skip
    top_p: float | None = Field(None, gt=0, le=1, description="Nucleus filter; 1 turns it off; default 0.9.")
    top_k: int | None = Field(None, ge=0, le=1 << 30, description="Top-k filter; 0 turns it off; default 100.")
    repetition_penalty: float | None = Field(None, ge=PENALTY_RANGE[0], le=PENALTY_RANGE[1],
                                             description="Windowed (16 tokens); 1 turns it off; default 1.1 when "
                                             "sampling, 1 when greedy.")  # fmt: skip
    seed: int | None = Field(None, ge=0, le=INT63, description="Sampling seed; drawn at random when left out.")
    stop: Text | list[Text] | None = Field(None, description=f"Up to {MAX_STOP_STRINGS} non-empty stop strings.")
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1, le=1, description="Completions per request: 1.")
    gamma: int | None = Field(None, ge=1, le=MAX_GAMMA, description="Tokens drafted per step at most.")
    drafter: Text | None = Field(None, description="The name of one of the server's drafters (GET /v1/models).")
    lang: Text | None = Field(None, description="ISO 639-3 code; detected from the prompt when left out.")
    task: Text | None = Field(None, description="translation or story, for the auto drafter's route.")

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, v: float | None) -> float | None:
        if v is not None and not (v == 0 or MIN_TEMPERATURE <= v <= 2):
            raise ValueError(TEMPERATURE_RULE)
        return v

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: Any) -> Any:
        if isinstance(v, list) and not 1 <= len(v) <= MAX_STOP_STRINGS:
            raise ValueError(STOP_RULE)
        return v


class CompletionRequest(_Generation):
    prompt: str | list[int] | list[str] | list[list[int]] = Field(
        description="The text to continue, or its token ids (one prompt per request).")
    max_tokens: int | None = Field(None, description="Most tokens to generate; default 128.")


class ChatCompletionRequest(_Generation):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = Field(None, description="Most tokens to generate; default 128.")


_KIND = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
_RULES = {  # fixed wording for fields whose rule is not a plain interval
    "stop": STOP_RULE,
    "stream": "true or false",
    "stream_options": 'an object such as {"include_usage": true}',
    "n": "1: one completion per request",
    "temperature": TEMPERATURE_RULE,
    "prompt": "a string or a list of token ids (one prompt per request)",
    "messages": f"a non-empty list of objects with a role in {list(CHAT_ROLES)} and a content (a string or "
                "text parts)",
}
_OFF = {"top_p": "; 1 turns it off", "repetition_penalty": "; 1 turns it off", "top_k": "; 0 turns it off"}


def _interval(field: Any) -> str:
    lo = hi = None
    left, right = "[", "]"
    for m in field.metadata:
        if getattr(m, "ge", None) is not None:
            lo = m.ge
        if getattr(m, "gt", None) is not None:
            lo, left = m.gt, "("
        if getattr(m, "le", None) is not None:
            hi = m.le
        if getattr(m, "lt", None) is not None:
            hi, right = m.lt, ")"
    if lo is None and hi is None:
        return ""
    lo_text = "-inf" if lo is None else f"{lo:g}" if isinstance(lo, float) else str(lo)
    hi_text = "inf" if hi is None else f"{hi:g}" if isinstance(hi, float) else str(hi)
    return f" in {left}{lo_text}, {hi_text}{right}"


def parse_body(model: type[_Generation], body: dict) -> _Generation:
    """``model`` validated from ``body``; the first failure as ``(field, message)`` in a ``ValueError``."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        name = str(error["loc"][0]) if error["loc"] else ""
        value = body.get(name)
        if error["type"] == "missing":
            raise RequestFieldError(name, f"missing {name!r}") from None
        field = model.model_fields.get(name)
        if name in _RULES:
            rule = _RULES[name]
        elif error["type"] == "value_error":
            rule = str(error["ctx"]["error"])
        elif field is not None:
            base = next((t for t in (bool, int, float, str) if t in _types(field.annotation)), None)
            rule = f"{_KIND.get(base, 'valid')}{_interval(field)}{_OFF.get(name, '')}"
        else:
            rule = error["msg"]
        shown = repr(value) if isinstance(value, (int, float, str, bool, type(None))) else type(value).__name__
        raise RequestFieldError(name, f"{name} must be {rule} (got {shown})") from None


def _types(annotation: Any) -> tuple[type, ...]:
    args = getattr(annotation, "__args__", None)
    return tuple(a for a in args if isinstance(a, type)) if args else ((annotation,) if isinstance(annotation, type) else ())


class RequestFieldError(UserError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


def openapi() -> dict:
    """The OpenAPI 3.1 description of the server's routes and request bodies."""
    from pydantic.json_schema import models_json_schema

    _, defs = models_json_schema([(CompletionRequest, "validation"), (ChatCompletionRequest, "validation")],
                                 ref_template="#/components/schemas/{model}")  # fmt: skip
    error = {"description": "An OpenAI-shaped error naming the field: {\"error\": {\"message\", \"type\", "
             "\"param\", \"code\"}}", "content": {"application/json": {"schema": {"type": "object"}}}}  # fmt: skip

    def generation(schema: str, summary: str) -> dict:
        return {"post": {"summary": summary, "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{schema}"}}}},
            "responses": {"200": {"description": "The completion (JSON), or server-sent events with stream: true",
                                  "content": {"application/json": {"schema": {"type": "object"}},
                                              "text/event-stream": {"schema": {"type": "string"}}}},
                          **{code: error for code in ("400", "404", "413", "429", "504")}}}}  # fmt: skip

    def get(summary: str, media: str = "application/json") -> dict:
        return {"get": {"summary": summary, "responses": {"200": {"description": summary, "content": {
            media: {"schema": {"type": "object" if media == "application/json" else "string"}}}}}}}  # fmt: skip

    return {
        "openapi": "3.1.0",
        "info": {"title": "babelspec serve", "version": "1",
                 "description": "OpenAI-compatible completions with speculative decoding per language."},
        "paths": {
            "/v1/completions": generation("CompletionRequest", "Continue a prompt"),
            "/v1/chat/completions": generation("ChatCompletionRequest", "Answer a conversation"),
            "/v1/models": get("The served model and its drafters"),
            "/health": get("Liveness and queue"),
            "/metrics": get("Prometheus metrics", "text/plain"),
        },
        "components": {"schemas": defs["$defs"]},
    }
