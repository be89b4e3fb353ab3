"""Property-based fuzzing of the server from its own OpenAPI schema (schemathesis): 600
generated requests to a real server on 127.0.0.1, and not one answers 5xx or kills it."""

from __future__ import annotations

import pytest
from experiments_fixtures import tiny_model_dir
from serve_helpers import Server, get, with_chat_template

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402

EXAMPLES = {"/v1/completions": 360, "/v1/chat/completions": 240}  # 600 requests in all


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    model = with_chat_template(tiny_model_dir(root / "base"), root / "chat")
    s = Server("--target", model, "--drafter", "self:1", "--queue-size", "64", "--request-timeout", "30",
               log=root / "server.log").wait()  # fmt: skip
    try:
        yield s, model
    finally:
        s.close()


def test_the_published_schema_is_the_one_fuzzed(server):
    from babelspec.serve.schema import openapi

    status, body = get(server[0].url + "/openapi.json")
    assert status == 200 and body == openapi()
    assert set(body["paths"]) >= set(EXAMPLES)


@pytest.mark.parametrize("path", sorted(EXAMPLES))
def test_no_generated_request_gets_a_5xx(server, path):
    from babelspec.serve.schema import openapi

    s, model = server
    operation = schemathesis.openapi.from_dict(openapi())[path]["POST"]
    statuses: dict[int, int] = {}

    @settings(max_examples=EXAMPLES[path], deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(case=operation.as_strategy())
    def one(case):
        if isinstance(case.body, dict) and "model" in case.body:
            case.body["model"] = model  # the served model, so requests reach generation
            for name in ("max_tokens", "max_completion_tokens"):  # short generations keep the suite short
                value = case.body.get(name)
                if isinstance(value, int) and not isinstance(value, bool) and value > 4:
                    case.body[name] = 4
            if case.body.get("max_tokens") is None and case.body.get("max_completion_tokens") is None:
                case.body["max_tokens"] = 4
        response = case.call(base_url=s.url, timeout=60)
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        assert response.status_code < 500, response.text

    one()
    print(path, dict(sorted(statuses.items())))
    assert sum(statuses.values()) >= EXAMPLES[path]
    assert any(code == 200 for code in statuses) and any(400 <= code < 500 for code in statuses)
    assert s.proc.poll() is None  # still serving
