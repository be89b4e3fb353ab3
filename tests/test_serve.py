"""`babelspec serve` as applications meet it: a real server process on 127.0.0.1 with tiny
models, called with the official `openai` client (raw HTTP only for bodies it will not send).

Server `chat` (a tokenizer with a chat template, drafter self:1, a router for `auto`): outputs
equal to `babelspec generate`, streamed and not, per-language routing, every bad input, metrics,
a bounded load test. Server `base` (no chat template, a queue of 1, a 5 s timeout, a 64 KiB
body limit): chat refused, a full queue, a client gone mid-stream, a timeout, a body too large.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from experiments_fixtures import tiny_model_dir
from serve_helpers import Server, generate_cli, get, post, with_chat_template, write_router

PROMPT = "Ẹ kú àárọ̀, báwo ni"  # Yoruba: the classifier detects yor
ENGLISH = "The weather is nice today and"
AMHARIC = "እያንዳንዱ ሰው የዘር የቀለም"
SWAHILI = "Watoto wengi wanapenda kusoma vitabu shuleni kila siku"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    base = tiny_model_dir(root / "base")
    chat = with_chat_template(base, root / "chat")
    router = write_router(root / "router.json", ngram=_yoruba_bigram(base, root / "yor.ngram"))
    servers = {
        "chat": Server("--target", chat, "--drafter", "self:1", "--router", router, "--queue-size", "32",
                       "--request-timeout", "120", log=root / "chat.log"),
        "base": Server("--target", base, "--batch", "1", "--queue-size", "1", "--request-timeout", "5",
                       "--max-body-bytes", "65536", log=root / "base.log"),
    }  # fmt: skip
    try:
        # `babelspec generate` with the settings the tests send to the server, while the servers start
        cli = {
            "greedy": generate_cli(chat, "--drafter", "self:1", "--greedy", "--max-new-tokens", "24", "--prompt", PROMPT),
            "seeded": generate_cli(chat, "--drafter", "self:1", "--seed", "7", "--max-new-tokens", "24", "--prompt", PROMPT),
            "auto": generate_cli(chat, "--drafter", f"auto:{router}", "--lang", "yor", "--seed", "3",
                                 "--max-new-tokens", "24", "--prompt", PROMPT),
            "auto-tree": generate_cli(chat, "--drafter", f"auto:{router}", "--lang", "yor", "--task", "story",
                                      "--greedy", "--max-new-tokens", "24", "--prompt", PROMPT),
        }  # fmt: skip
        for s in servers.values():
            s.wait()
        yield {"servers": servers, "cli": cli, "model": chat,
               "base_model": base, "router": router}  # fmt: skip
    finally:
        for s in servers.values():
            s.close()


def _yoruba_bigram(model: str, path) -> str:
    from transformers import AutoTokenizer

    from babelspec.data import corpus
    from babelspec.ngram import CountConfig, train

    train(corpus.monolingual("yor", "train")[:400], AutoTokenizer.from_pretrained(model), CountConfig(order=2)).save(path)
    return str(path)


@pytest.fixture(scope="module")
def chat_server(setup):
    return setup["servers"]["chat"]


@pytest.fixture(scope="module")
def base_server(setup):
    return setup["servers"]["base"]


def complete(server, model, stream=False, **kwargs):
    """(text, token ids, finish reason, babelspec object) of a completion, streamed or not."""
    client = server.client()
    if not stream:
        r = client.completions.create(model=model, **kwargs)
        extra = r.model_extra["babelspec"]
        return r.choices[0].text, extra["token_ids"], r.choices[0].finish_reason, extra
    chunks = list(client.completions.create(model=model, stream=True, **kwargs))
    assert all(c.object == "text_completion" for c in chunks)
    blocks = [c.model_extra["babelspec"]["token_ids"] for c in chunks[:-1]]
    last = chunks[-1]
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1]) and last.choices[0].finish_reason
    # one chunk per accepted block: each block is 1 to gamma + 1 tokens
    extra = last.model_extra["babelspec"]
    assert len(blocks) == extra["steps"] and all(1 <= len(b) <= extra["gamma"] + 1 for b in blocks)
    return ("".join(c.choices[0].text for c in chunks), [t for b in blocks for t in b],
            last.choices[0].finish_reason, extra)  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
def test_greedy_completion_equals_babelspec_generate(setup, chat_server, stream):
    ref = setup["cli"]["greedy"]
    text, ids, finish, extra = complete(chat_server, setup["model"], stream, prompt=PROMPT, max_tokens=24,
                                        temperature=0)  # fmt: skip
    assert ids == ref["token_ids"] and text == ref["text"]
    assert finish == ("length" if ref["stop_reason"] == "length" else "stop")
    assert extra["drafter"] == "self:1" and extra["gamma"] == 4 and extra["proposed"] == ref["proposed"]
    assert extra["alpha"] == pytest.approx(ref["alpha"]) and extra["detected_lang"] == "yor"


@pytest.mark.parametrize("stream", [False, True])
def test_seeded_sampling_equals_babelspec_generate_with_that_seed(setup, chat_server, stream):
    ref = setup["cli"]["seeded"]
    text, ids, _, extra = complete(chat_server, setup["model"], stream, prompt=PROMPT, max_tokens=24, seed=7)
    assert ids == ref["token_ids"] and text == ref["text"] and extra["seed"] == 7


def test_stop_string_cuts_the_text_in_both_forms(setup, chat_server):
    args = {"prompt": PROMPT, "max_tokens": 40, "seed": 5, "extra_body": {"drafter": "none"}}
    full, _, _, _ = complete(chat_server, setup["model"], **args)
    stop = next(ch for ch in full[len(full) // 2 :] if ch != "\ufffd")
    for stream in (False, True):
        text, _, finish, _ = complete(chat_server, setup["model"], stream, stop=stop, **args)
        assert text == full[: full.find(stop)] and finish == "stop"


def test_auto_uses_the_route_of_the_given_or_detected_language(setup, chat_server):
    ref = setup["cli"]["auto"]
    model = setup["model"]
    for body in ({"drafter": "auto", "lang": "yor"}, {"drafter": "auto"}):  # given, then detected
        text, ids, _, extra = complete(chat_server, model, prompt=PROMPT, max_tokens=24, seed=3, extra_body=body)
        assert ids == ref["token_ids"] and text == ref["text"]
        assert extra["drafter"] == "auto" and extra["gamma"] == 2
        assert extra["route"]["drafter"] == "self1" and extra["lang"] == "yor"
        assert extra["lang_source"] == ("request" if "lang" in body else "detected")
        assert max(1, extra["proposed"]) <= 2 * extra["steps"]
    # Amharic routes to plain decoding; English has no route, so it is decoded plainly too.
    _, _, _, amh = complete(chat_server, model, prompt=AMHARIC, max_tokens=8, extra_body={"drafter": "auto"})
    assert amh["lang"] == "amh" and amh["route"]["drafter"] == "none" and amh["proposed"] == 0
    _, _, _, eng = complete(chat_server, model, prompt=ENGLISH, max_tokens=8, extra_body={"drafter": "auto"})
    assert eng["detected_lang"] == "eng" and eng["drafter"] == "auto" and eng["proposed"] == 0
    assert eng["route"]["drafter"] == "none" and "no language" in eng["route"]["reason"]


def test_auto_detects_and_routes_a_flores200_language_the_bundled_data_lacks(setup, chat_server):
    """The server's classifier learns the router's languages too (SIB-200 from the corpora folder)."""
    from babelspec.data.real import corpora_root

    if corpora_root() is None:
        pytest.skip("no corpora folder: the server cannot learn Swahili")
    _, _, _, swh = complete(chat_server, setup["model"], prompt=SWAHILI, max_tokens=8, extra_body={"drafter": "auto"})
    assert swh["detected_lang"] == "swh_Latn" and swh["lang_source"] == "detected"
    assert swh["route"]["drafter"] == "self1" and swh["gamma"] == 2


def test_greedy_auto_to_an_ngram_tree_answers_as_babelspec_generate(setup, chat_server):
    ref = setup["cli"]["auto-tree"]
    assert any(d < p for d, p in zip(ref["depth_per_step"], ref["proposed_per_step"]))  # token trees
    body = {"drafter": "auto", "lang": "yor", "task": "story"}
    for stream in (False, True):
        text, ids, _, extra = complete(chat_server, setup["model"], stream, prompt=PROMPT, max_tokens=24,
                                       temperature=0, extra_body=body)  # fmt: skip
        assert ids == ref["token_ids"] and text == ref["text"]
        assert extra["route"]["drafter"] == "bigram" and extra["proposed"] == ref["proposed"]


def test_chat_completion_streamed_and_not(setup, chat_server):
    client, model = chat_server.client(), setup["model"]
    messages = [{"role": "system", "content": "Answer in Yoruba."}, {"role": "user", "content": PROMPT}]
    r = client.chat.completions.create(model=model, messages=messages, max_tokens=16, temperature=0)
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert r.usage.completion_tokens == len(r.model_extra["babelspec"]["token_ids"]) <= 16
    assert r.model_extra["babelspec"]["detected_lang"] == "yor"
    chunks = list(client.chat.completions.create(model=model, messages=messages, max_tokens=16, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))  # fmt: skip
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == r.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    # the chat prompt is the template's rendering, continued by the completion endpoint alike
    rendered = f"<system>Answer in Yoruba.\n<user>{PROMPT}\n<assistant>"
    c = client.completions.create(model=model, prompt=rendered, max_tokens=16, temperature=0)
    assert c.choices[0].text == r.choices[0].message.content


def test_models_and_health(setup, chat_server):
    models = chat_server.client().models.list()
    assert [m.id for m in models.data] == [setup["model"]]
    health = chat_server.health()
    assert health["status"] == "ok" and health["queue_size"] == 32


# (request fields, status, param, words of the message)
BAD_COMPLETIONS = [
    ({"model": "no-such-model"}, 404, "model", "does not exist here; this server serves"),
    ({"max_tokens": -5}, 400, "max_tokens", "max_tokens must be an integer in [1, 8192] (got -5)"),
    ({"max_tokens": 10**9}, 400, "max_tokens", "8192 is the model's context window"),
    ({"max_tokens": 8190}, 400, "max_tokens", "exceeds the model's context window of 8192 tokens"),
    ({"prompt": [5] * 9000}, 400, "prompt", "9000 tokens, longer than the model's context window of 8192"),
    ({"temperature": -0.5}, 400, "temperature", "temperature must be a number in [0.001, 2], or 0 for greedy"),
    # warping would overflow to NaN and accept every drafted token: refused, never decoded
    ({"temperature": 1e-40}, 400, "temperature", "temperature must be a number in [0.001, 2], or 0 for greedy"),
    ({"repetition_penalty": 1e30}, 400, "repetition_penalty", "must be a number in [0.001, 1000]"),
    ({"seed": -1}, 400, "seed", "seed must be an integer in [0, 9223372036854775807] (got -1)"),
    ({"stop": ""}, 400, "stop", "stop must be a non-empty string"),
    ({"top_p": 0}, 400, "top_p", "top_p must be a number in (0, 1]"),
    ({"top_p": 1.5}, 400, "top_p", "top_p must be a number in (0, 1]"),
    ({"lang": "xx"}, 400, "lang", "unknown language 'xx'; name a FLORES-200 code"),
    ({"lang": "ibo", "drafter": "auto"}, 400, "lang", "no route for language 'ibo'"),
    ({"drafter": "bogus:1"}, 400, "drafter", "drafter 'bogus:1' is not offered by this server; choose one of "
     "self:1, none, auto"),
    # a request names one of the server's drafters, never a file or a model: nothing is read or loaded
    ({"drafter": "ngram:/etc/passwd"}, 400, "drafter", "drafter 'ngram:/etc/passwd' is not offered by this server"),
    ({"drafter": "auto:/etc/passwd"}, 400, "drafter", "drafter 'auto:/etc/passwd' is not offered by this server"),
    ({"drafter": "distilled:/etc"}, 400, "drafter", "drafter 'distilled:/etc' is not offered by this server"),
    ({"drafter": "model:some/hub-model"}, 400, "drafter", "drafter 'model:some/hub-model' is not offered"),
    ({"gamma": 0}, 400, "gamma", "gamma must be an integer in [1, 64]"),
    ({"n": 2}, 400, "n", "n must be 1"),
    ({"stop": ["a", "b", "c", "d", "e"]}, 400, "stop", "list of 1 to 4"),
    ({"logprobs": 3}, 400, "logprobs", "not supported"),
]  # fmt: skip


@pytest.mark.parametrize("fields,status,param,words", BAD_COMPLETIONS, ids=[str(b[0])[:40] for b in BAD_COMPLETIONS])
def test_bad_input_gets_an_openai_error_naming_the_field(setup, chat_server, fields, status, param, words):
    args = {"model": setup["model"], "prompt": "Hello", "max_tokens": 4}
    extra = {k: fields.pop(k) for k in list(fields) if k in ("lang", "drafter", "gamma", "repetition_penalty")}
    with pytest.raises(openai.APIStatusError) as info:
        chat_server.client().completions.create(**{**args, **fields}, extra_body=extra)
    err = info.value
    assert err.status_code == status and err.body["param"] == param and words in err.body["message"]
    assert err.body["type"] == "invalid_request_error"
    assert "root:" not in err.body["message"]  # no file's content, ever


def test_malformed_json_and_missing_prompt_are_400(setup, chat_server):
    url = chat_server.url + "/v1/completions"
    status, body, _ = post(url, b'{"model": "x", "prompt": ')
    assert status == 400 and "not valid JSON" in body["error"]["message"] and body["error"]["code"] == "invalid_json"
    status, body, _ = post(url, b"[" * 100_000)  # deeper than the JSON parser recurses: 400, not 500
    assert status == 400 and "nests arrays or objects too deeply" in body["error"]["message"]
    status, body, _ = post(url, b"[1, 2]")
    assert status == 400 and "must be a JSON object" in body["error"]["message"]
    status, body, _ = post(url, json.dumps({"model": setup["model"], "max_tokens": 3}).encode())
    assert status == 400 and body["error"]["param"] == "prompt" and "missing 'prompt'" in body["error"]["message"]
    status, body, _ = post(chat_server.url + "/v1/chat/completions", json.dumps({"model": setup["model"]}).encode())
    assert status == 400 and "missing 'messages'" in body["error"]["message"]
    status, body, _ = post(chat_server.url + "/v1/nothing", b"{}")
    assert status == 404 and "/v1/completions" in body["error"]["message"]


def test_metrics_in_prometheus_text(setup, chat_server):
    complete(chat_server, setup["model"], prompt=PROMPT, max_tokens=8, extra_body={"drafter": "auto", "lang": "yor"})
    status, text = get(chat_server.url + "/metrics")
    assert status == 200
    lines = text.splitlines()

    def value(prefix: str) -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(prefix))

    assert value('babelspec_requests_total{endpoint="completions",status="200"}') >= 1
    assert value('babelspec_drafter_choice_total{drafter="auto"') >= 1  # labels: the server's drafter names
    assert value('babelspec_generated_tokens_total{lang="yor"}') >= 8
    assert value('babelspec_tokens_per_second{lang="yor"}') > 0
    assert 0 <= value('babelspec_acceptance{drafter="self:1",lang="yor"}') <= 1
    assert value('babelspec_generations_total{outcome="complete"}') >= 1
    assert any(line.startswith("babelspec_queue_length ") for line in lines)
    assert any(line.startswith("babelspec_request_seconds_bucket") for line in lines)


def test_load_200_requests_from_16_clients_all_complete(setup, chat_server):
    """Bounded: 200 short requests, greedy and seeded sampling, half streamed, run up to 4 at
    once sharing forwards; none lost, no 5xx, each exactly the answer the same request gets alone."""
    model = setup["model"]
    prompts = [PROMPT, ENGLISH, AMHARIC, "Once upon a time"]
    kinds = [{"temperature": 0}, {"temperature": 1.0, "seed": 11}]
    alone = {(p, k): complete(chat_server, model, prompt=p, max_tokens=6, **kinds[k])[0]
             for p in prompts for k in range(len(kinds))}  # fmt: skip
    errors: list[str] = []
    answers: list[tuple[tuple[str, int], str]] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        key = (prompts[i % len(prompts)], (i // len(prompts)) % len(kinds))
        try:
            text, ids, finish, _ = complete(chat_server, model, stream=i % 2 == 1, prompt=key[0], max_tokens=6,
                                            **kinds[key[1]])  # fmt: skip
            assert finish in ("stop", "length") and (finish == "stop" or len(ids) == 6)
            with lock:
                answers.append((key, text))
        except Exception as err:  # noqa: BLE001 - collected, the test fails below
            with lock:
                errors.append(f"{type(err).__name__}: {err}")

    started = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(200)))
    assert not errors, errors[:3]
    assert len(answers) == 200 and all(text == alone[key] for key, text in answers)
    assert time.monotonic() - started < 300
    health = chat_server.health()
    assert health["queued"] == 0 and health["batch"] == 16


def test_chat_on_a_base_model_without_template_is_400(setup, base_server):
    with pytest.raises(openai.BadRequestError) as info:
        base_server.client().chat.completions.create(model=setup["base_model"], max_tokens=4,
                                                     messages=[{"role": "user", "content": "Hi"}])  # fmt: skip
    assert info.value.body["param"] == "messages"
    assert "no chat template (a base model)" in info.value.body["message"] and "/v1/completions" in info.value.body["message"]


def _wait_for(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_full_queue_is_429_and_a_client_gone_mid_stream_frees_the_engine(setup, base_server):
    model = setup["base_model"]
    client = base_server.client()
    # A long stream occupies the engine ...
    stream = client.completions.create(model=model, prompt="Hello", max_tokens=8000, temperature=0, stream=True)
    first = next(iter(stream))
    assert first.choices[0].finish_reason is None and base_server.health()["running"] == 1
    # ... one request waits in the queue of 1 ...
    queued = ThreadPoolExecutor(1).submit(client.completions.create, model=model, prompt="Hi", max_tokens=3)
    assert _wait_for(lambda: base_server.health()["queued"] == 1)
    # ... so the next one is refused with 429 and a Retry-After.
    with pytest.raises(openai.RateLimitError) as info:
        client.completions.create(model=model, prompt="Hi", max_tokens=3)
    assert info.value.response.headers["retry-after"].isdigit()
    assert "queue is full" in info.value.body["message"] and info.value.body["code"] == "queue_full"
    # The streaming client goes away: the engine stops that generation at its next step and
    # serves the waiting request.
    stream.close()
    assert queued.result(timeout=10).choices[0].finish_reason in ("length", "stop")
    assert _wait_for(lambda: base_server.health()["running"] == 0 and base_server.health()["queued"] == 0)
    _, metrics = get(base_server.url + "/metrics")
    assert 'babelspec_generations_total{outcome="cancelled"} 1.0' in metrics
    tokens = sum(float(x.rsplit(" ", 1)[1]) for x in metrics.splitlines() if x.startswith("babelspec_generated_tokens_total"))
    assert tokens < 8000 + 3  # the cancelled stream did not run to its end
    # A client that gives up on a plain (non-streamed) request frees the engine alike.
    with pytest.raises(openai.APITimeoutError):
        base_server.client(timeout=1.0).completions.create(model=model, prompt="Hello", max_tokens=8000, temperature=0)
    assert _wait_for(lambda: base_server.health()["running"] == 0, timeout=3.5)  # before its 5 s timeout
    assert 'babelspec_generations_total{outcome="cancelled"} 2.0' in get(base_server.url + "/metrics")[1]


def test_request_timeout_is_504(setup, base_server):
    started = time.monotonic()
    with pytest.raises(openai.InternalServerError) as info:
        base_server.client().completions.create(model=setup["base_model"], prompt="Hello", max_tokens=8000, temperature=0)
    assert info.value.status_code == 504 and "request timeout of 5 s" in info.value.body["message"]
    assert time.monotonic() - started < 30
    assert _wait_for(lambda: base_server.health()["running"] == 0)


def test_body_over_the_limit_is_413(setup, base_server):
    with pytest.raises(openai.APIStatusError) as info:
        base_server.client().completions.create(model=setup["base_model"], prompt="x" * 100_000, max_tokens=2)
    assert info.value.status_code == 413 and "limit of 65536 bytes" in info.value.body["message"]
