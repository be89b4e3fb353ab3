"""A bench's server process logs to a file, never to a pipe nobody reads: one that writes more than
a pipe holds to stderr still answers, and one that dies shows the tail of its log."""

from __future__ import annotations

import sys

import pytest

from babelspec.bench.processes import free_port, start, stop

SERVER = """
import sys, http.server
sys.stderr.write("x" * 400_000 + "\\n")  # more than a pipe's buffer: a piped server would block here
sys.stderr.flush()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        sys.stderr.write("request\\n")
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_a_server_that_logs_more_than_a_pipe_holds_still_starts_and_its_log_goes_with_it():
    port = free_port()
    proc = start([sys.executable, "-c", SERVER, str(port)], port, "a chatty server", timeout=30)
    log = proc.log
    try:
        assert log.is_file() and log.stat().st_size > 400_000
    finally:
        stop(proc)
    assert not log.exists()


def test_a_server_that_exits_shows_the_tail_of_its_log():
    port = free_port()
    with pytest.raises(RuntimeError, match=r"exited with 3: .*no model here"):
        start([sys.executable, "-c", "import sys; sys.stderr.write('no model here'); sys.exit(3)"], port,
              "a broken server", timeout=30)  # fmt: skip
