"""Minimal HTTP client for SGLang's native API (stdlib only, so `python -m rollout` starts fast).

Every failure is an EndpointError naming the URL and what went wrong; callers turn it into a
failed gate, never into a traceback in the middle of a rollout.
"""
from __future__ import annotations

import http.client
import json
import socket
import time
from urllib.parse import urlsplit


class EndpointError(RuntimeError):
    pass


def _conn(base: str, timeout: float) -> http.client.HTTPConnection:
    u = urlsplit(base)
    if u.scheme != "http" or not u.hostname:
        raise EndpointError(f"{base}: only http://host:port URLs are supported")
    return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)


def request(base: str, method: str, path: str, body=None, timeout: float = 30.0):
    """One request; returns (status, headers dict, parsed JSON or text)."""
    conn = _conn(base, timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        r = conn.getresponse()
        raw = r.read()
        headers = {k.lower(): v for k, v in r.getheaders()}
    except (OSError, http.client.HTTPException) as e:
        raise EndpointError(f"{base}{path}: {type(e).__name__}: {e or 'no answer'}") from None
    finally:
        conn.close()
    text = raw.decode(errors="replace")
    try:
        payload = json.loads(text) if text else None
    except json.JSONDecodeError:
        payload = text
    return r.status, headers, payload


def get_json(base: str, path: str, timeout: float = 30.0):
    status, _, payload = request(base, "GET", path, timeout=timeout)
    if status != 200:
        raise EndpointError(f"{base}{path}: HTTP {status}: {str(payload)[:300]}")
    return payload


def post_json(base: str, path: str, body: dict, timeout: float = 300.0):
    status, _, payload = request(base, "POST", path, body, timeout=timeout)
    if status != 200:
        raise EndpointError(f"{base}{path}: HTTP {status}: {str(payload)[:300]}")
    return payload


def stream_generate(base: str, body: dict, timeout: float = 900.0):
    """POST /generate with stream=true; yields (monotonic arrival time s, chunk dict).

    Raises EndpointError if the stream ends before `data: [DONE]` (a server that died
    mid-request must not look like a short, fast answer).
    """
    conn = _conn(base, timeout)
    try:
        conn.request("POST", "/generate", body=json.dumps({**body, "stream": True}).encode(),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            raise EndpointError(f"{base}/generate: HTTP {r.status}: {r.read()[:300]!r}")
        while True:
            line = r.readline()
            if not line:
                raise EndpointError(f"{base}/generate: stream ended without [DONE] (server died mid-stream?)")
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                return
            t = time.monotonic()
            chunk = json.loads(data)
            if "error" in chunk:
                raise EndpointError(f"{base}/generate: error in stream: {chunk['error']}")
            yield t, chunk
    except (OSError, http.client.HTTPException, socket.timeout, json.JSONDecodeError) as e:
        raise EndpointError(f"{base}/generate (stream): {type(e).__name__}: {e or 'connection lost'}") from None
    finally:
        conn.close()
