"""The OpenAI wire format: request bodies in, responses and stream chunks out.

Sampling defaults are those of ``babelspec generate`` (the paper's: top-k 100, top-p 0.9,
repetition penalty 1.1 over 16 tokens; penalty off for greedy, i.e. ``temperature: 0``), so a
request and the command with the same fields and seed give the same tokens. Extra body
fields: ``top_k``, ``repetition_penalty``, ``gamma``, ``lang``, ``task``, ``drafter``.
"""

from __future__ import annotations

import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from babelspec.numeric import json_number
from babelspec.sampling import SamplingConfig

DEFAULT_MAX_TOKENS = 128  # as `babelspec generate --max-new-tokens`
# Fields of the OpenAI API this server does not implement: given with a non-default value,
# they are refused rather than silently ignored.
UNSUPPORTED = {
    "logprobs": (None, False), "top_logprobs": (None, 0), "echo": (None, False), "best_of": (None, 1),
    "suffix": (None, ""), "logit_bias": (None, {}), "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0), "tools": (None, []), "functions": (None, []),
}  # fmt: skip


class APIError(Exception):
    """An error answered as OpenAI does: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type_: str = "invalid_request_error", headers: dict[str, str] | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type, self.headers = type_, headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad(param: str, message: str) -> APIError:
    return APIError(400, message, param=param, code="invalid_value")


@dataclass
class ModelInfo:
    """What the request parser needs to know of the served model."""

    model_id: str
    tokenizer: Any
    max_context: int | None


@dataclass
class GenerationRequest:
    kind: str  # "completion" | "chat"
    prompt_ids: list[int]
    text: str  # the text the language is detected from (the prompt, or the user turns)
    max_tokens: int
    sampling: SamplingConfig
    seed_given: bool
    stop: tuple[str, ...]
    gamma: int | None  # None: drafters.base.resolve_gamma's choice, as `babelspec generate`
    drafter: str | None  # None: the server's --drafter
    lang: str | None  # None: detect it from ``text``
    task: str | None
    stream: bool
    include_usage: bool
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))


def _fields(parse: type, body: dict):
    """The body checked against its Pydantic model (types, ranges): a 400 naming the first bad field."""
    from babelspec.serve.schema import RequestFieldError, parse_body

    try:
        return parse_body(parse, body)
    except RequestFieldError as err:
        hint = _MISSING.get(err.field) if err.message.startswith("missing") else None
        raise bad(err.field, f"{err.message}: {hint}" if hint else err.message) from None


_MISSING = {
    "prompt": 'give the text to continue, e.g. "prompt": "Once upon a time"',
    "messages": 'give a list such as [{"role": "user", "content": "Hello"}]',
}


def check_model(body: dict, model: ModelInfo) -> None:
    name = body.get("model")
    if name is None:
        raise bad("model", f"missing 'model': this server serves {model.model_id!r}")
    if name != model.model_id:
        raise APIError(404, f"The model {name!r} does not exist here; this server serves {model.model_id!r} "
                       "(GET /v1/models lists it)", param="model", code="model_not_found")  # fmt: skip


def _check_unsupported(body: dict) -> None:
    for name, defaults in UNSUPPORTED.items():
        if name in body and body[name] not in defaults:
            raise bad(name, f"{name} is not supported by babelspec serve; leave it out")
    fmt = body.get("response_format")
    if fmt not in (None, {}) and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise bad("response_format", "response_format other than text is not supported; leave it out")


def _lang(v: str | None) -> str | None:
    from babelspec.data.languages import get_language

    if v is None:
        return None
    try:
        return get_language(v.strip()).code
    except ValueError as err:
        raise bad("lang", f"{err}; or leave 'lang' out to detect the language of the prompt") from None


def _sampling(f) -> tuple[SamplingConfig, bool]:
    greedy = f.temperature == 0
    seed = f.seed if f.seed is not None else secrets.randbelow(1 << 31)  # reported back, so it can be replayed
    given = {k: v for k, v in (("top_k", f.top_k), ("top_p", f.top_p)) if v is not None}
    if not greedy and f.temperature is not None:
        given["temperature"] = f.temperature
    config = SamplingConfig.paper(seed, greedy=greedy, repetition_penalty=f.repetition_penalty, **given)
    return config, f.seed is not None


def _max_tokens(name: str, v: int | None, prompt_len: int, model: ModelInfo) -> int:
    window = model.max_context
    if window is not None and prompt_len >= window:
        raise bad("prompt", f"the prompt is {prompt_len} tokens, longer than the model's context window of "
                  f"{window} tokens; shorten the prompt")  # fmt: skip
    limit = window if window is not None else 1 << 20
    if v is None:
        return DEFAULT_MAX_TOKENS if window is None else min(DEFAULT_MAX_TOKENS, window - prompt_len)
    if not 1 <= v <= limit:
        hint = "" if window is None else f"; {window} is the model's context window"
        raise bad(name, f"{name} must be an integer in [1, {limit}] (got {v}){hint}")
    if window is not None and prompt_len + v > window:
        raise bad(name, f"the prompt ({prompt_len} tokens) + {name} ({v}) exceeds the model's context window of "
                  f"{window} tokens; shorten the prompt or lower {name} to at most {window - prompt_len}")  # fmt: skip
    return v


def _common(kind: str, f, model: ModelInfo, prompt_ids: list[int], text: str, max_name: str,
            max_tokens: int | None) -> GenerationRequest:  # fmt: skip
    sampling, seed_given = _sampling(f)
    if not prompt_ids:
        raise bad("prompt", "the prompt is empty after tokenisation; give at least one token")
    stops = () if f.stop is None else (f.stop,) if isinstance(f.stop, str) else tuple(f.stop)
    return GenerationRequest(
        kind=kind, prompt_ids=prompt_ids, text=text,
        max_tokens=_max_tokens(max_name, max_tokens, len(prompt_ids), model), sampling=sampling,
        seed_given=seed_given, stop=stops, gamma=f.gamma,
        drafter=f.drafter.strip() if f.drafter else None, lang=_lang(f.lang),
        task=f.task.strip() if f.task else None, stream=f.stream,
        include_usage=bool(f.stream_options and f.stream_options.include_usage),
    )  # fmt: skip


def parse_completion(body: dict, model: ModelInfo) -> GenerationRequest:
    from babelspec.serve.schema import CompletionRequest

    check_model(body, model)
    f = _fields(CompletionRequest, body)
    _check_unsupported(body)
    prompt = f.prompt
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        ids, text = list(model.tokenizer(prompt)["input_ids"]), prompt  # as `babelspec generate --prompt`
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        vocab = len(model.tokenizer)
        if not all(0 <= t < vocab for t in prompt):
            raise bad("prompt", f"prompt token ids must lie in [0, {vocab})")
        ids, text = list(prompt), model.tokenizer.decode(prompt, skip_special_tokens=True)
    else:
        raise bad("prompt", "prompt must be a string or a list of token ids (one prompt per request)")
    return _common("completion", f, model, ids, text, "max_tokens", f.max_tokens)


def parse_chat(body: dict, model: ModelInfo) -> GenerationRequest:
    from babelspec.serve.schema import ChatCompletionRequest

    check_model(body, model)
    tokenizer = model.tokenizer
    if not getattr(tokenizer, "chat_template", None):
        raise bad("messages", f"the model {model.model_id!r} has no chat template (a base model): send the "
                  "text to POST /v1/completions as 'prompt' instead")  # fmt: skip
    f = _fields(ChatCompletionRequest, body)
    _check_unsupported(body)
    turns = [{"role": m.role, "content": m.content if isinstance(m.content, str) else
              "".join(part.text for part in m.content)} for m in f.messages]  # fmt: skip
    try:
        text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    except Exception as err:  # noqa: BLE001 - a template may refuse a conversation (roles, order)
        raise bad("messages", f"the model's chat template refused these messages: {err}") from None
    # As the experiment runner does: a template that writes the BOS token itself gets no second one.
    bos = getattr(tokenizer, "bos_token", None)
    ids = list(tokenizer(text, add_special_tokens=not (bos and text.startswith(bos)))["input_ids"])
    user_text = "\n".join(t["content"] for t in turns if t["role"] == "user")
    name = "max_completion_tokens" if f.max_completion_tokens is not None else "max_tokens"
    limit = f.max_completion_tokens if f.max_completion_tokens is not None else f.max_tokens
    return _common("chat", f, model, ids, user_text, name, limit)


def finish_reason(stop_reason: str) -> str:
    return "length" if stop_reason == "length" else "stop"


def usage(req: GenerationRequest, n_tokens: int) -> dict:
    return {"prompt_tokens": len(req.prompt_ids), "completion_tokens": n_tokens,
            "total_tokens": len(req.prompt_ids) + n_tokens}  # fmt: skip


def babelspec_info(outcome) -> dict:
    """The extra ``babelspec`` object: how this request was drafted and how it went."""
    r, d = outcome.result, outcome.drafting
    return {
        "drafter": d.offer, "drafter_name": d.name, "gamma": d.gamma, "route": d.route,
        "alpha": json_number(r.alpha), "lang": d.lang, "lang_source": d.lang_source,
        "detected_lang": d.detected_lang, "seed": outcome.seed, "token_ids": r.token_ids,
        "proposed": r.proposed, "accepted": r.accepted, "steps": r.steps,
        "wall_seconds": round(r.wall_seconds, 6), "queue_seconds": round(outcome.queue_seconds, 6),
    }  # fmt: skip


def response(req: GenerationRequest, model_id: str, outcome) -> dict:
    r = outcome.result
    if req.kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": r.text},
                  "finish_reason": finish_reason(r.stop_reason), "logprobs": None}  # fmt: skip
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": r.text, "finish_reason": finish_reason(r.stop_reason), "logprobs": None}
        obj = "text_completion"
    prefix = "chatcmpl-" if req.kind == "chat" else "cmpl-"
    return {"id": prefix + req.id, "object": obj, "created": req.created, "model": model_id,
            "choices": [choice], "usage": usage(req, r.n_tokens), "babelspec": babelspec_info(outcome)}  # fmt: skip


def chunk(req: GenerationRequest, model_id: str, text: str | None, *, finish: str | None = None,
          first: bool = False, extra: dict | None = None, usage_only: dict | None = None) -> dict:  # fmt: skip
    """One server-sent event: a text delta (one accepted block), or the final or usage chunk."""
    if req.kind == "chat":
        obj, prefix = "chat.completion.chunk", "chatcmpl-"
        delta: dict = {} if text is None else {"content": text}
        if first:
            delta["role"] = "assistant"
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
    else:
        obj, prefix = "text_completion", "cmpl-"
        choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
    out = {"id": prefix + req.id, "object": obj, "created": req.created, "model": model_id,
           "choices": [] if usage_only is not None else [choice]}  # fmt: skip
    if usage_only is not None:
        out["usage"] = usage_only
    if extra is not None:
        out["babelspec"] = extra
    return out


class TextStream:
    """Text deltas of a growing token sequence that never take back what was sent.

    Decodes incrementally (tokenizers' ``DecodeStream``: each token once, linear in the output;
    an incomplete UTF-8 character waits for its last byte) and holds back any tail that could
    begin a stop string, so the deltas add up to the final text, which the engine cuts before a
    stop string. A tokenizer without a fast backend is decoded whole at each block instead.
    """

    def __init__(self, tokenizer: Any, stops: tuple[str, ...]) -> None:
        from tokenizers.decoders import DecodeStream

        self.tokenizer, self.stops = tokenizer, stops
        self._backend = getattr(tokenizer, "backend_tokenizer", None)
        self._stream = DecodeStream(skip_special_tokens=True) if self._backend is not None else None
        self._ids: list[int] = []  # only without a fast backend
        self._hold = max((len(s) for s in stops), default=0)
        self.text = ""  # everything decoded so far
        self.sent = 0  # characters of it sent

    def _extend(self, ids: list[int]) -> None:
        if self._stream is not None:
            self.text += "".join(piece for piece in (self._stream.step(self._backend, i) for i in ids) if piece)
            return
        self._ids.extend(ids)
        text = self.tokenizer.decode(self._ids, skip_special_tokens=True).rstrip("\ufffd")
        if text.startswith(self.text):
            self.text = text

    def push(self, ids: list[int]) -> str:
        self._extend(ids)
        safe = len(self.text)
        start = max(0, self.sent - self._hold)  # a stop string ends after what was sent
        for s in self.stops:
            i = self.text.find(s, start)
            if i >= 0:
                safe = min(safe, i)
                continue
            for k in range(min(len(s) - 1, len(self.text)), 0, -1):
                if self.text.endswith(s[:k]):
                    safe = min(safe, len(self.text) - k)
                    break
        if safe <= self.sent:
            return ""
        delta, self.sent = self.text[self.sent : safe], safe
        return delta

    def finish(self, final_text: str) -> str:
        """The rest of ``final_text`` after what was sent (which is always a prefix of it)."""
        sent = self.text[: self.sent]
        if not final_text.startswith(sent):
            raise RuntimeError(f"streamed text {sent[-40:]!r} is not a prefix of the final text; "
                               "the tokenizer's incremental decoding disagrees with its decode")
        rest = final_text[self.sent :]
        self.text, self.sent = final_text, len(final_text)
        return rest
