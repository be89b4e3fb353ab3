"""The OpenAI wire format: request bodies in, responses and stream chunks out.

Sampling defaults are those of ``babelspec generate`` (the paper's: top-k 100, top-p 0.9,
repetition penalty 1.1 over 16 tokens; penalty off for greedy, i.e. ``temperature: 0``), so a
request and the command with the same fields and seed give the same tokens. Extra body
fields: ``top_k``, ``repetition_penalty``, ``gamma``, ``lang``, ``task``, ``drafter``.
"""

from __future__ import annotations

import math
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from babelspec.numeric import json_number
from babelspec.sampling import MIN_TEMPERATURE, PAPER_TOP_K, PAPER_TOP_P, PENALTY_RANGE, SamplingConfig

DEFAULT_MAX_TOKENS = 128  # as `babelspec generate --max-new-tokens`
MAX_GAMMA = 64
MAX_STOP_STRINGS = 4  # OpenAI's limit
CHAT_ROLES = ("system", "developer", "user", "assistant")
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


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def _number(body: dict, name: str, default: float | None, ok, rule: str) -> float | None:
    v = body.get(name)
    if v is None:
        return default
    if not _is_number(v) or not ok(v):
        raise bad(name, f"{name} must be a number {rule} (got {v!r})")
    return float(v)


def _integer(body: dict, name: str, default: int | None, lo: int, hi: int, hint: str = "") -> int | None:
    v = body.get(name)
    if v is None:
        return default
    if not _is_int(v) or not lo <= v <= hi:
        raise bad(name, f"{name} must be an integer in [{lo}, {hi}] (got {v!r}){hint}")
    return v


def _string(body: dict, name: str) -> str | None:
    v = body.get(name)
    if v is not None and (not isinstance(v, str) or not v.strip()):
        raise bad(name, f"{name} must be a non-empty string (got {v!r})")
    return v.strip() if v is not None else None


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
    if body.get("n") not in (None, 1):
        raise bad("n", f"n must be 1 (got {body.get('n')!r}): one completion per request")
    fmt = body.get("response_format")
    if fmt not in (None, {}) and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise bad("response_format", "response_format other than text is not supported; leave it out")


def _stop(body: dict) -> tuple[str, ...]:
    v = body.get("stop")
    if v is None:
        return ()
    stops = [v] if isinstance(v, str) else v
    if (not isinstance(stops, list) or not 1 <= len(stops) <= MAX_STOP_STRINGS
            or not all(isinstance(s, str) and s for s in stops)):  # fmt: skip
        raise bad("stop", f"stop must be a non-empty string or a list of 1 to {MAX_STOP_STRINGS} of them (got {v!r})")
    return tuple(stops)


def _lang(body: dict) -> str | None:
    from babelspec.data.languages import get_language

    v = _string(body, "lang")
    if v is None:
        return None
    try:
        return get_language(v).code
    except ValueError as err:
        raise bad("lang", f"{err}; or leave 'lang' out to detect the language of the prompt") from None


def _sampling_fields(body: dict) -> tuple[SamplingConfig, bool]:
    temperature = _number(body, "temperature", 1.0, lambda v: v == 0 or MIN_TEMPERATURE <= v <= 2,
                          f"in [{MIN_TEMPERATURE}, 2], or 0 for greedy decoding")
    top_p = _number(body, "top_p", PAPER_TOP_P, lambda v: 0 < v <= 1, "in (0, 1]; 1 turns it off")
    top_k = _integer(body, "top_k", PAPER_TOP_K, 0, 1 << 30, "; 0 turns it off")
    greedy = temperature == 0
    penalty = _number(body, "repetition_penalty", None, lambda v: PENALTY_RANGE[0] <= v <= PENALTY_RANGE[1],
                      f"in [{PENALTY_RANGE[0]:g}, {PENALTY_RANGE[1]:g}]; 1 turns it off")
    seed = _integer(body, "seed", None, 0, (1 << 63) - 1)
    seed_given = seed is not None
    if seed is None:
        seed = secrets.randbelow(1 << 31)  # reported back in the response, so it can be replayed
    config = SamplingConfig.paper(seed, greedy=greedy, repetition_penalty=penalty, top_k=top_k, top_p=top_p,
                                  temperature=temperature if not greedy else 1.0)
    return config, seed_given


def _max_tokens(body: dict, names: tuple[str, ...], prompt_len: int, model: ModelInfo) -> int:
    window = model.max_context
    if window is not None and prompt_len >= window:
        raise bad("prompt", f"the prompt is {prompt_len} tokens, longer than the model's context window of "
                  f"{window} tokens; shorten the prompt")  # fmt: skip
    name = next((n for n in names if body.get(n) is not None), names[0])
    limit = window if window is not None else 1 << 20
    v = _integer(body, name, None, 1, limit, "" if window is None else f"; {window} is the model's context window")
    if v is None:
        return DEFAULT_MAX_TOKENS if window is None else min(DEFAULT_MAX_TOKENS, window - prompt_len)
    if window is not None and prompt_len + v > window:
        raise bad(name, f"the prompt ({prompt_len} tokens) + {name} ({v}) exceeds the model's context window of "
                  f"{window} tokens; shorten the prompt or lower {name} to at most {window - prompt_len}")  # fmt: skip
    return v


def _common(kind: str, body: dict, model: ModelInfo, prompt_ids: list[int], text: str,
            max_names: tuple[str, ...]) -> GenerationRequest:  # fmt: skip
    sampling, seed_given = _sampling_fields(body)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("stream", f"stream must be true or false (got {stream!r})")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise bad("stream_options", "stream_options must be an object such as {\"include_usage\": true}")
    if not prompt_ids:
        raise bad("prompt", "the prompt is empty after tokenisation; give at least one token")
    return GenerationRequest(
        kind=kind, prompt_ids=prompt_ids, text=text,
        max_tokens=_max_tokens(body, max_names, len(prompt_ids), model), sampling=sampling,
        seed_given=seed_given, stop=_stop(body),
        gamma=_integer(body, "gamma", None, 1, MAX_GAMMA, "; drafter 'none' is plain decoding"),
        drafter=_string(body, "drafter"), lang=_lang(body), task=_string(body, "task"),
        stream=stream, include_usage=bool(options.get("include_usage")),
    )  # fmt: skip


def parse_completion(body: dict, model: ModelInfo) -> GenerationRequest:
    check_model(body, model)
    _check_unsupported(body)
    prompt = body.get("prompt")
    if prompt is None:
        raise bad("prompt", "missing 'prompt': give the text to continue, e.g. \"prompt\": \"Once upon a time\"")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        ids, text = list(model.tokenizer(prompt)["input_ids"]), prompt  # as `babelspec generate --prompt`
    elif isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        vocab = len(model.tokenizer)
        if not all(0 <= t < vocab for t in prompt):
            raise bad("prompt", f"prompt token ids must lie in [0, {vocab})")
        ids, text = list(prompt), model.tokenizer.decode(prompt, skip_special_tokens=True)
    else:
        raise bad("prompt", "prompt must be a string or a list of token ids (one prompt per request)")
    return _common("completion", body, model, ids, text, ("max_tokens",))


def _content(message: Any, i: int) -> tuple[str, str]:
    if not isinstance(message, dict) or message.get("role") not in CHAT_ROLES:
        raise bad("messages", f"messages[{i}] must be an object with a role in {list(CHAT_ROLES)} and a content")
    content = message.get("content")
    if isinstance(content, list):  # content parts: only text is understood
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                   for p in content):  # fmt: skip
            raise bad("messages", f"messages[{i}].content: only text parts are supported")
        content = "".join(p["text"] for p in content)
    if not isinstance(content, str):
        raise bad("messages", f"messages[{i}].content must be a string")
    return message["role"], content


def parse_chat(body: dict, model: ModelInfo) -> GenerationRequest:
    check_model(body, model)
    _check_unsupported(body)
    tokenizer = model.tokenizer
    if not getattr(tokenizer, "chat_template", None):
        raise bad("messages", f"the model {model.model_id!r} has no chat template (a base model): send the "
                  "text to POST /v1/completions as 'prompt' instead")  # fmt: skip
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "missing 'messages': give a list such as [{\"role\": \"user\", \"content\": \"Hello\"}]")
    turns = [dict(zip(("role", "content"), _content(m, i))) for i, m in enumerate(messages)]
    try:
        text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    except Exception as err:  # noqa: BLE001 - a template may refuse a conversation (roles, order)
        raise bad("messages", f"the model's chat template refused these messages: {err}") from None
    # As the experiment runner does: a template that writes the BOS token itself gets no second one.
    bos = getattr(tokenizer, "bos_token", None)
    ids = list(tokenizer(text, add_special_tokens=not (bos and text.startswith(bos)))["input_ids"])
    user_text = "\n".join(t["content"] for t in turns if t["role"] == "user")
    return _common("chat", body, model, ids, user_text, ("max_completion_tokens", "max_tokens"))


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
