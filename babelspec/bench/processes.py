"""Server processes a bench starts: on a free local port, ready once ``/health`` answers, stopped
after (``bench serve``'s babelspec servers, ``bench llama-server``'s llama.cpp and babelspec ones)."""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: list[str], port: int, what: str, timeout: float = 600) -> subprocess.Popen:
    """Start a server process and wait for its ``/health``; a clear error, with the tail of its
    log, if it exits first or does not answer in time. Its stderr goes to a temporary file
    (``proc.log``), never to a pipe that nobody reads: a server that logs a lot (llama-server
    does, on stderr) would fill the pipe and stall mid-bench."""
    log = tempfile.NamedTemporaryFile(prefix="babelspec-server-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    proc.log = Path(log.name)  # type: ignore[attr-defined]
    log.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {log_tail(proc)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return proc
        except OSError:  # not listening yet, or still loading (503)
            time.sleep(0.3)
    proc.kill()
    proc.wait()
    raise TimeoutError(f"{what} did not start within {timeout:g} s: {log_tail(proc)}")


def log_tail(proc: subprocess.Popen, chars: int = 2000) -> str:
    """The last ``chars`` characters of a started server's stderr."""
    path = getattr(proc, "log", None)
    try:
        return Path(path).read_text(errors="replace")[-chars:] if path else ""
    except OSError:
        return ""


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    path = getattr(proc, "log", None)
    if path:
        Path(path).unlink(missing_ok=True)


@contextmanager
def serving(cmd: list[str], what: str) -> Iterator[int]:
    """A server started from ``cmd`` plus ``--port P`` on a free port, stopped after; its port."""
    port = free_port()
    proc = start([*cmd, "--port", str(port)], port, what)
    try:
        yield port
    finally:
        stop(proc)
