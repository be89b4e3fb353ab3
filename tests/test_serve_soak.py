"""A soak of a real `babelspec serve` on 127.0.0.1: 1,000 requests from 16 clients, with bad
requests, clients gone mid-stream and clients that time out mixed in among good ones.

Every good request gets exactly the answer it gets alone, every bad one a 400 naming its field,
no request a 5xx; the server ends idle, its memory grows by at most 50 MB over the soak, and the
good requests' latency percentiles are printed (``-s``). Bounded: a tiny model, 4-token answers,
and a time limit.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import openai
import pytest
from experiments_fixtures import tiny_model_dir
from serve_helpers import Server

PROMPTS = ["Ẹ kú àárọ̀, báwo ni", "The weather is nice today and", "እያንዳንዱ ሰው የዘር የቀለም", "Once upon a time"]
REQUESTS, CLIENTS = 1000, 16


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("soak")
    model = tiny_model_dir(root / "model")
    s = Server("--target", model, "--drafter", "self:1", "--queue-size", "64", "--request-timeout", "60",
               log=root / "server.log").wait()
    try:
        yield s, model
    finally:
        s.close()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's RSS from /proc")
def test_a_soak_of_1000_requests_with_faults_mixed_in(server):
    s, model = server
    client = s.client()
    alone = {p: client.completions.create(model=model, prompt=p, max_tokens=4, temperature=0).choices[0].text
             for p in PROMPTS}  # fmt: skip
    for i in range(50):  # warm-up: caches, allocator pools and the tokenizers settle first
        client.completions.create(model=model, prompt=PROMPTS[i % 4], max_tokens=4, temperature=0)
    before = rss_mb(s.proc.pid)
    outcomes: Counter[str] = Counter()
    errors: list[str] = []
    latencies: list[float] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        prompt, kind = PROMPTS[i % 4], ("bad", "gone", "timeout")[i % 10] if i % 10 < 3 else "good"
        started = time.monotonic()
        try:
            if kind == "bad":  # a different bad field each time
                field, value = [("temperature", -1), ("top_p", 2.0), ("max_tokens", 0), ("seed", -5)][i // 10 % 4]
                try:
                    client.completions.create(model=model, prompt=prompt, **{field: value})
                    raise AssertionError(f"{field}={value} was accepted")
                except openai.BadRequestError as err:
                    assert err.body["param"] == field, err.body
            elif kind == "gone":  # a streaming client that leaves after its first chunk
                stream = client.completions.create(model=model, prompt=prompt, max_tokens=200, stream=True)
                next(iter(stream))
                stream.close()
            elif kind == "timeout":  # a client that stops waiting long before the answer
                try:
                    s.client(timeout=0.05).completions.create(model=model, prompt=prompt, max_tokens=2000, temperature=0)
                except (openai.APITimeoutError, openai.APIConnectionError):
                    pass
            else:
                text = client.completions.create(model=model, prompt=prompt, max_tokens=4, temperature=0).choices[0].text
                assert text == alone[prompt]
                with lock:
                    latencies.append(time.monotonic() - started)
            with lock:
                outcomes[kind] += 1
        except Exception as err:  # noqa: BLE001 - collected, the test fails below
            with lock:
                errors.append(f"request {i} ({kind}): {type(err).__name__}: {err}")

    started = time.monotonic()
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(one, range(REQUESTS)))
    wall = time.monotonic() - started
    assert not errors, errors[:5]
    assert sum(outcomes.values()) == REQUESTS and outcomes["good"] == 700
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (s.health()["running"] or s.health()["queued"]):
        time.sleep(0.1)
    assert s.health()["running"] == 0 and s.health()["queued"] == 0  # nothing left behind
    growth = rss_mb(s.proc.pid) - before
    p50, p99 = np.percentile(latencies, [50, 99])
    print(f"\nsoak: {REQUESTS} requests from {CLIENTS} clients in {wall:.1f} s; good requests p50 "
          f"{p50 * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms; server RSS {before:.0f} MB -> +{growth:.1f} MB")
    assert growth <= 50, f"the server's RSS grew by {growth:.1f} MB over the soak"
    assert wall < 600
