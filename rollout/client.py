"""Minimal HTTP client for SGLang's native API (stdlib only, so `python -m rollout` starts fast).

Every failure is an EndpointError naming the URL and what went wrong; callers turn it into a
gate result, never into a traceback in the middle of a rollout. The error carries the base URL
(`.url`), so a gate can tell a failing control from a failing candidate, and whether it is
worth a retry (`.transient`: the connection, a timeout, a 5xx, a cut stream) or not (4xx).

With an API key, every request carries `Authorization: Bearer <key>`, as SGLang's
`--api-key` middleware expects (sglang/srt/utils/auth.py). The key never appears in an error.
"""
from __future__ import annotations

import http.client
import json
import socket
import time
from urllib.parse import urlsplit

from rollout.redact import scrub


class EndpointError(RuntimeError):
    def __init__(self, message: str, url: str | None = None, transient: bool = True, status: int | None = None):
        super().__init__(scrub(message))
        self.url, self.transient, self.status = url, transient, status


def _conn(base: str, timeout: float) -> http.client.HTTPConnection:
    u = urlsplit(base)
    if u.scheme != "http" or not u.hostname:
        raise EndpointError(f"{base}: only http://host:port URLs are supported", base, transient=False)
    return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=max(timeout, 0.01))


def headers(api_key: str | None, json_body: bool) -> dict:
    h = {"Content-Type": "application/json"} if json_body else {}
    if api_key:
        h["Authorization"] = f"Bearer {api_key}"
    return h


def _status_error(base: str, path: str, status: int, payload) -> EndpointError:
    hint = " (the server wants an API key: set [auth] in the inventory)" if status == 401 else ""
    return EndpointError(f"{base}{path}: HTTP {status}{hint}: {str(payload)[:300]}", base,
                         transient=status >= 500, status=status)


def request(base: str, method: str, path: str, body=None, timeout: float = 30.0, api_key: str | None = None):
    """One request; returns (status, headers dict, parsed JSON or text)."""
    conn = _conn(base, timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers=headers(api_key, data is not None))
        r = conn.getresponse()
        raw = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
    except (OSError, http.client.HTTPException) as e:
        raise EndpointError(f"{base}{path}: {type(e).__name__}: {e or 'no answer'}", base) from None
    finally:
        conn.close()
    text = raw.decode(errors="replace")
    try:
        payload = json.loads(text) if text else None
    except json.JSONDecodeError:
        payload = text
    return r.status, hdrs, payload


def get_json(base: str, path: str, timeout: float = 30.0, api_key: str | None = None):
    status, _, payload = request(base, "GET", path, timeout=timeout, api_key=api_key)
    if status != 200:
        raise _status_error(base, path, status, payload)
    return payload


def get_text(base: str, path: str, timeout: float = 30.0, api_key: str | None = None) -> str:
    status, _, payload = request(base, "GET", path, timeout=timeout, api_key=api_key)
    if status != 200:
        raise _status_error(base, path, status, payload)
    return payload if isinstance(payload, str) else json.dumps(payload)


def post_json(base: str, path: str, body: dict, timeout: float = 300.0, api_key: str | None = None):
    status, _, payload = request(base, "POST", path, body, timeout=timeout, api_key=api_key)
    if status != 200:
        raise _status_error(base, path, status, payload)
    return payload


def check_finished(base: str, meta: dict) -> None:
    """SGLang streams a scheduler abort as an ordinary chunk with finish_reason type "abort"
    (tokenizer_manager.py): such an answer is cut short and must not count as a result."""
    fr = meta.get("finish_reason")
    if isinstance(fr, dict) and fr.get("type") == "abort":
        raise EndpointError(f"{base}/generate: request aborted by the server: {fr.get('message', fr)}", base)


def stream_generate(base: str, body: dict, timeout: float = 900.0, api_key: str | None = None):
    """POST /generate with stream=true; yields (monotonic arrival time s, chunk dict).

    Raises EndpointError if the stream ends before `data: [DONE]` (a server that died
    mid-request must not look like a short, fast answer) or was aborted by the server.
    """
    conn = _conn(base, timeout)
    try:
        conn.request("POST", "/generate", body=json.dumps({**body, "stream": True}).encode(),
                     headers=headers(api_key, True))
        r = conn.getresponse()
        if r.status != 200:
            raise _status_error(base, "/generate", r.status, r.read()[:300])
        while True:
            line = r.readline()
            if not line:
                raise EndpointError(f"{base}/generate: stream ended without [DONE] (server died mid-stream?)", base)
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                return
            t = time.monotonic()
            chunk = json.loads(data)
            if "error" in chunk:
                raise EndpointError(f"{base}/generate: error in stream: {chunk['error']}", base)
            check_finished(base, chunk.get("meta_info") or {})
            yield t, chunk
    except (OSError, http.client.HTTPException, socket.timeout, json.JSONDecodeError) as e:
        raise EndpointError(f"{base}/generate (stream): {type(e).__name__}: {e or 'connection lost'}", base) from None
    finally:
        conn.close()
