"""A local HTTP endpoint for the phase 3 tests that says what the test tells it to say.

/server_info answers the given dict, /metrics the given text (None: HTTP 404, a server without
--enable-metrics); every other request is forwarded to an upstream server (an emulator), SSE
streams included, without its X-Emulator header. So a whole A/B can run against an endpoint
that presents itself as a live SGLang server serving the plugin's metrics contract, or as one
that says nothing about its arm. Listens on 127.0.0.1 only.
"""
from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from rollout.arm import CALLS, CAPTURES, INFO


def contract_metrics(backend: str, ranks: int = 8, kernel_hash: str = "f1x7u7e") -> str:
    """Prometheus text as the plugin publishes it (rollout/arm.py), one info sample per rank."""
    lines = [f"# HELP {INFO} verify attention installed by mla_verify", f"# TYPE {INFO} gauge"]
    lines += [f'{INFO}{{backend="{backend}",kernel_hash="{kernel_hash}",sglang_version="0.5.23",'
              f'device="cuda:{r}"}} 1' for r in range(ranks)]
    lines += [f"# TYPE {CAPTURES} counter", f'{CAPTURES}{{backend="{backend}"}} 3',
              f"# TYPE {CALLS} counter", f"{CALLS} 0"]
    return "\n".join(lines) + "\n"


class FakeEndpoint:
    def __init__(self, server_info: dict, metrics: str | None, upstream: str | None = None,
                 emulator_header: bool = False):
        self.server_info, self.metrics, self.upstream = server_info, metrics, upstream
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, status: int, ctype: str, body: bytes):
                self.send_response(status)
                if emulator_header:
                    self.send_header("X-Emulator", "fake")
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _route(self, method: str):
                path = urlsplit(self.path).path
                if path in ("/server_info", "/get_server_info"):
                    info = json.dumps(fake.server_info).encode()
                    return self._reply(200, "application/json", info)
                if path == "/metrics":
                    if fake.metrics is None:
                        return self._reply(404, "text/plain", b"Not Found")
                    return self._reply(200, "text/plain", fake.metrics.encode())
                if not fake.upstream:
                    return self._reply(404, "text/plain", b"Not Found")
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                u = urlsplit(fake.upstream)
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
                try:
                    conn.request(method, self.path, body=body,
                                 headers={"Content-Type": "application/json"} if body else {})
                    r = conn.getresponse()
                    self.send_response(r.status)
                    for k in ("Content-Type", "Content-Length"):
                        if r.getheader(k):
                            self.send_header(k, r.getheader(k))
                    self.end_headers()
                    while chunk := r.read1(65536):  # SSE: pass each event on as it comes
                        self.wfile.write(chunk)
                        self.wfile.flush()
                finally:
                    conn.close()

            def do_GET(self):
                self._route("GET")

            def do_POST(self):
                self._route("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
