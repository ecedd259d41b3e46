"""A stand-in OTLP/HTTP collector for the benchmarks: answers every POST 200 and counts requests and
bytes, in a process of its own (a real collector is one), on 127.0.0.1.

    python -m bench.otlp_sink          # prints its port on the first line, then serves until killed

No decoding: what a benchmark measures is the cost to the gateway of exporting, not the collector's.
"""

from __future__ import annotations

import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Sink(BaseHTTPRequestHandler):
    requests = 0
    received = 0

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        _Sink.requests += 1
        _Sink.received += length
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


class Sink:
    """The sink as a child process: `url` to export to; `close()` ends it."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.otlp_sink"], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    print(server.server_address[1], flush=True)
    server.serve_forever()
