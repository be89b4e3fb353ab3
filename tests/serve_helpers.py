"""A real `babelspec serve` process on 127.0.0.1 for the server tests, and raw HTTP beside the
official client (for bodies the client will not send, such as malformed JSON)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")  # fmt: skip


def env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}  # fmt: skip


def with_chat_template(base: str, path: Path) -> str:
    """A copy of a model directory whose tokenizer has a (minimal) chat template."""
    from transformers import AutoTokenizer

    shutil.copytree(base, path)
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(path)
    return str(path)


def write_router(path: Path, ngram: str | None = None) -> str:
    """yor: self:1 at gamma 2 (any task), and with ``ngram`` (a table file) yor stories to that
    n-gram at gamma 3 (a token tree under greedy decoding); swh_Latn (a FLORES-200 language the
    bundled data lacks): self:1 at gamma 2; amh: plain decoding. Other languages have no route."""
    base = {"alpha": 0.5, "theoretical_f": 1.2, "predicted_speedup": 1.3, "source": "measured", "c": 0.1}
    routes = [{**base, "language": "yor", "task": t, "drafter": "self1", "spec": "self:1", "gamma": 2}
              for t in ("translation", "*")]  # fmt: skip
    if ngram:
        routes.append({**base, "language": "yor", "task": "story", "drafter": "bigram", "spec": f"ngram:{ngram}",
                       "gamma": 3})  # fmt: skip
    routes.append({**base, "language": "swh_Latn", "task": "*", "drafter": "self1", "spec": "self:1", "gamma": 2})
    routes.append({**base, "language": "amh", "task": "*", "drafter": "none", "spec": "none", "gamma": 0})
    path.write_text(json.dumps({"version": 1, "target": "tiny", "min_speedup": 1.0, "routes": routes}))
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`babelspec serve ARGS` on a free loopback port; ``wait()`` until /health answers."""

    def __init__(self, *args: str, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._log_file = open(log, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "babelspec", "serve", "--port", str(self.port), *args],
                                     stdout=self._log_file, stderr=subprocess.STDOUT, env=env())  # fmt: skip

    def wait(self, timeout: float = 600) -> Server:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                if get(self.url + "/health")[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"server not up after {timeout} s:\n{self.log.read_text()}")

    def client(self, **kwargs):
        import openai

        return openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0,
                             **{"timeout": 120, **kwargs})  # fmt: skip

    def health(self) -> dict:
        return get(self.url + "/health")[1]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log_file.close()


def get(url: str) -> tuple[int, dict | str]:
    with urllib.request.urlopen(url, timeout=30) as r:
        body = r.read().decode()
        return r.status, json.loads(body) if r.headers.get_content_type() == "application/json" else body


def post(url: str, data: bytes, headers: dict | None = None) -> tuple[int, dict, dict]:
    """POST raw bytes; (status, JSON body, headers) whatever the status."""
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), dict(err.headers)


def generate_cli(target: str, *args: str) -> dict:
    """What `babelspec generate --json` prints, run in this process (the command's own code, one
    process for all the references a module needs rather than a Python start and imports each)."""
    from typer.testing import CliRunner

    from babelspec.cli import app

    res = CliRunner().invoke(app, ["generate", "--target", target, "--json", *args])
    assert res.exit_code == 0, (res.output, res.exception)
    return json.loads(res.stdout.strip().splitlines()[-1])


def completions_at_once(client, model: str, jobs: list[tuple[list[int], str]], max_tokens: int) -> list[list[int]]:
    """Greedy completions of (prompt ids, drafter name) jobs sent all at once: each one's token ids."""
    from concurrent.futures import ThreadPoolExecutor

    def complete(job: tuple[list[int], str]) -> list[int]:
        prompt, drafter = job
        r = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                      extra_body={"drafter": drafter})  # fmt: skip
        return r.model_extra["babelspec"]["token_ids"]

    with ThreadPoolExecutor(len(jobs)) as pool:
        return list(pool.map(complete, jobs))
