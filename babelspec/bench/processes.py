"""Server processes a bench starts: on a free local port, ready once ``/health`` answers, stopped
after (``bench serve``'s babelspec servers, ``bench llama-server``'s llama.cpp and babelspec ones)."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: list[str], port: int, what: str, timeout: float = 600) -> subprocess.Popen:
    """Start a server process and wait for its ``/health``; a clear error if it exits first."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return proc
        except OSError:  # not listening yet, or still loading (503)
            time.sleep(0.3)
    proc.kill()
    raise TimeoutError(f"{what} did not start within {timeout:g} s")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def serving(cmd: list[str], what: str) -> Iterator[int]:
    """A server started from ``cmd`` plus ``--port P`` on a free port, stopped after; its port."""
    port = free_port()
    proc = start([*cmd, "--port", str(port)], port, what)
    try:
        yield port
    finally:
        stop(proc)
