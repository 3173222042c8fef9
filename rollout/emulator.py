"""An SGLang-0.5.23-compatible HTTP endpoint on loopback for tests and demos. Not a model.

    python -m rollout.emulator --arm flash --port 30000 --data-dir reports/data [--time-scale 0.01]
                               [--enable-metrics] [--api-key KEY] [--fault F --fault-arm flash]

Speaks /health, /health_generate, /server_info, /model_info, /generate (streaming SSE and
not, meta_info as SGLang's, logprobs in SGLang's exact layout), /v1/completions,
/flush_cache, and with --enable-metrics /metrics (SGLang's metric names and the mla-verify
plugin's arm series; --no-plugin leaves those out, as a server without the plugin would).
With --api-key every path but /health*, /ready, /metrics answers 401 without
`Authorization: Bearer KEY`, as SGLang does. Decode speed comes from rollout.speed_model (the
recorded kernel measurements); tokens per verify step = the accept length. Tokens and logprobs
come from rollout.emulator_model: prefill and verify are separate paths, as in SGLang.
--speculative-algorithm names what it emulates (server_info, and whether it returns logprobs:
an algorithm outside rollout.launch.LOGPROB_ALGORITHMS, such as DDTREE, answers return_logprob
with HTTP 400); --draft-tokens is the tokens verified per request (DFLASH's block, DDTree's
budget + 1), the T its speed model is at. Faults on demand: see FAULTS; SIGUSR1 makes every later /generate answer 500. Every response carries `X-Emulator: mla-verify` and
/server_info has "emulator": true.

Time: each delay is slept in real time (time-scaled), so the endpoint behaves like a server for
deadlines, drains and timeouts. Each request also keeps the emulator's modelled clock, the
seconds its delays were meant to take (time-scaled, so what an idle machine would measure):
every /generate chunk's meta_info carries it as `emulated_clock_s` (since the request arrived),
and the emulator's own latency metrics are read from it. The speed gate times emulators by that
clock (rollout/ab.py), so a busy machine cannot change a verdict between two emulators.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from rollout.emulator_metrics import Metrics
from rollout.emulator_model import Model, detokenize, input_logprobs, tokenize
from rollout.launch import ARMS, BACKEND_ENV, LOGPROB_ALGORITHMS
from rollout.speed_model import MissingMeasurements, SpeedModel

FAULTS = {
    "fail_start": "exit with an error instead of serving",
    "hang_health": "/health never answers",
    "die_midstream": "crash half-way through a streamed request",
    "slower": "decode steps take --slow-factor times longer",
    "different_tokens": "another model altogether",
    "corrupt_verify": "the verify path (decode after the first token) is wrong; prefill is right",
    "corrupt_prefill": "the prefill path (prompt scoring, first token) is wrong; verify is right",
    "low_accept": "half the accept length (what a subtly wrong verify kernel does to EAGLE)",
    "drop_request": "drop the connection of the --drop-request-th /generate (once: a transient error)",
    "fail_after": "answer HTTP 500 to every /generate after the --fail-after-th",
}
EMULATOR_HEADER = ("X-Emulator", "mla-verify rollout.emulator (not a real SGLang server)")
CLOCK_KEY = "emulated_clock_s"   # meta_info: the request's modelled seconds so far (rollout/ab.py reads it)


class Emulator:
    def __init__(self, args, speed: SpeedModel):
        self.a, self.speed = args, speed
        self.fault = args.fault if args.fault_arm in (None, args.arm) else None
        corrupt = {"corrupt_verify": {"verify"}, "corrupt_prefill": {"prefill"}}.get(self.fault, set())
        self.model = Model(args.arm, 1 if self.fault == "different_tokens" else 0, frozenset(corrupt))
        self.accept_length = args.accept_length * (0.5 if self.fault == "low_accept" else 1.0)
        self.ready_at = time.monotonic() + args.startup_s
        self.started = time.time()
        self.draining = False
        self.lock = threading.Lock()
        self.inflight = 0
        self.generate_count = 0
        self.failing = False  # SIGUSR1: every /generate from now on answers 500 (live-traffic errors)
        self.cache: list[tuple[int, ...]] = []
        ranks = len(os.environ.get("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7").split(","))
        self.ranks = ranks
        self.metrics = Metrics(args.model_path, args.arm, ranks, plugin=not args.no_plugin)
        self.stats = {"last_gen_throughput": 0.0, "last_accept_length": 0.0}

    def ready(self) -> bool:
        return not self.draining and time.monotonic() >= self.ready_at

    def sleep_ms(self, ms: float) -> float:
        """Sleep `ms` modelled milliseconds (time-scaled); returns the seconds it meant to sleep."""
        s = max(ms, 0.0) * self.a.time_scale / 1000.0
        time.sleep(s)
        return s

    def cached_prefix(self, ids: list[int]) -> int:
        best = 0
        with self.lock:
            entries = list(self.cache)
        for c in entries:
            n = min(len(c), len(ids) - 1)  # the last token is always recomputed, as SGLang does
            if c[:n] == tuple(ids[:n]):
                best = max(best, n)
            else:
                best = max(best, next(i for i in range(n) if c[i] != ids[i]))
        return best

    def remember(self, ids: list[int]):
        with self.lock:
            self.cache = ([tuple(ids)] + self.cache)[:8]

    def generate(self, ids: list[int], sp: dict, *, rid: str, emit, logprob: dict, streaming: bool = False):
        """Runs one request; calls emit(new_ids, meta_info) per decode step. Returns meta_info.
        Latencies (meta_info's CLOCK_KEY, the metrics' TTFT, ITL, e2e) are modelled seconds."""
        t0 = time.monotonic()
        max_new = int(sp.get("max_new_tokens", 128))
        ignore_eos = bool(sp.get("ignore_eos", False))
        cached = self.cached_prefix(ids)
        if logprob.get("return_logprob") and logprob.get("logprob_start_len", -1) not in (None, -1):
            # SGLang recomputes the positions whose input logprobs were asked for
            cached = min(cached, int(logprob["logprob_start_len"]))
        clock = self.sleep_ms((len(ids) - cached) / self.a.prefill_tok_s * 1000.0)
        ctx, out, lps, steps, finish = list(ids), [], [], 0, None
        slow = self.a.slow_factor if self.fault == "slower" else 1.0
        ttft, last_t, itl = None, None, []
        while len(out) < max_new and finish is None:
            if out:  # the first token comes from prefill; later ones from verify steps
                clock += self.sleep_ms(self.speed.step_ms(len(ctx), self.a.arm) * slow)
                steps += 1
                want = min(max_new, 1 + int(steps * self.accept_length)) - len(out)
                path = "verify"
            else:
                want, path = 1, "prefill"
            new = []
            for _ in range(max(want, 1)):
                tok, lp = self.model.top1(ctx, path)
                new.append(tok), lps.append(lp), ctx.append(tok), out.append(tok)
                if not ignore_eos and len(out) >= 4 and tok % 97 == 0:
                    finish = {"type": "stop", "matched": tok}
                    break
            if ttft is None:
                ttft = clock
            elif last_t is not None:
                itl += [(clock - last_t) / len(new)] * len(new)
            last_t = clock
            if self.fault == "die_midstream" and streaming and len(out) >= max(2, max_new // 2):
                os._exit(3)  # a crash, not a clean error: the client sees the socket drop
            emit(new, self.meta(rid, ids, out, cached, steps, None, t0, clock))
        finish = finish or {"type": "length", "length": max_new}
        meta = self.meta(rid, ids, out, cached, steps, finish, t0, clock)
        if logprob.get("return_logprob"):
            meta.update(self.logprobs(ids, out, lps, logprob))
        self.remember(ids + out)
        e2e = clock
        throughput = len(out) / e2e if e2e > 0 else 0.0
        accept = meta.get("spec_accept_length", 0.0)
        self.metrics.finished(prompt=len(ids), generated=len(out), steps=steps, ttft=ttft or e2e, e2e=e2e,
                              itl=itl, accept_length=accept, throughput=throughput)
        with self.lock:
            self.stats.update(last_gen_throughput=throughput, last_accept_length=accept)
        return out, meta

    def meta(self, rid, ids, out, cached, steps, finish, t0, clock) -> dict:
        m = {"id": rid, "finish_reason": finish, "prompt_tokens": len(ids), "completion_tokens": len(out),
             "cached_tokens": cached, "reasoning_tokens": 0, "weight_version": "default", "num_retractions": 0,
             CLOCK_KEY: clock}
        if finish is not None:
            m["e2e_latency"] = time.monotonic() - t0
            if steps:
                m.update(spec_verify_ct=steps, spec_accept_length=len(out) / steps,
                         spec_accept_rate=(len(out) / steps - 1) / (self.a.draft_tokens - 1),
                         spec_num_correct_drafts=len(out) - steps, spec_num_proposed_drafts=steps * (self.a.draft_tokens - 1))
        return m

    def logprobs(self, ids, out, lps, req) -> dict:
        """SGLang's layout: logprob_start_len -1 (the default) means no input positions;
        output_token_logprobs[0] from prefill, the rest from verify (compute_spec_logprobs)."""
        start = req.get("logprob_start_len", -1)
        start = len(ids) if start is None or start < 0 else start
        top_n = int(req.get("top_logprobs_num", 0) or 0)
        m = {"output_token_logprobs": [[lp, t, None] for lp, t in zip(lps, out)], **input_logprobs(
            self.model, ids, start, top_n)}
        if top_n:
            m["output_top_logprobs"] = [[[lp, t, None]] for lp, t in zip(lps, out)]
        return m

    def server_info(self) -> dict:
        a = self.a
        launch = f"python -m sglang.launch_server --port {a.port}" + (" --api-key " + a.api_key if a.api_key else "")
        return {
            "emulator": True,
            "emulator_note": "rollout.emulator: an HTTP stand-in whose decode speed is modelled from "
                             "recorded kernel measurements; no model runs here",
            "emulated_arm": a.arm, BACKEND_ENV: a.arm, "fault": self.fault, "time_scale": a.time_scale,
            "speed_model": self.speed.describe(), "accept_length": self.accept_length,
            "prefill_tok_s": a.prefill_tok_s,
            "model_path": a.model_path, "served_model_name": a.model_path, "attention_backend": "triton",
            "page_size": 1, "tp_size": self.ranks, "kv_cache_dtype": a.kv_cache_dtype,
            "context_length": 200000, "speculative_algorithm": a.speculative_algorithm,
            "speculative_num_draft_tokens": a.draft_tokens, "host": a.host, "port": a.port,
            "enable_metrics": a.enable_metrics,
            # SGLang returns every server arg, the key and the launch command included: a
            # caller must keep only what it needs (rollout.endpoint_info.KEEP)
            "api_key": a.api_key, "launch_command": launch,
            "version": "0.5.23 (emulated)", "startup_time": self.started,
            "internal_states": [{"avg_spec_accept_length": self.stats["last_accept_length"],
                                 "last_gen_throughput": self.stats["last_gen_throughput"],
                                 "memory_usage": {}, "effective_max_running_requests_per_dp": 1}],
        }

    def metrics_text(self) -> str:
        return self.metrics.text(self.inflight, {"model_name": self.a.model_path, "arm": self.a.arm})

    def allowed(self, path: str, authorization: str | None) -> bool:
        """SGLang's rule for --api-key (utils/auth.py decide_request_auth, NORMAL endpoints):
        health, readiness and metrics are open; everything else needs `Bearer <key>`."""
        if not self.a.api_key or path.startswith(("/health", "/ready", "/metrics")):
            return True
        scheme, _, token = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(token, self.a.api_key)


class Handler(BaseHTTPRequestHandler):
    server_version = "mla-verify-emulator/0.1"
    emu: Emulator  # set on the class by serve()

    def log_message(self, fmt, *args):
        if self.emu.a.verbose:
            sys.stderr.write("emulator: " + fmt % args + "\n")

    def _head(self, status: int, ctype: str, length: int | None = None):
        self.emu.metrics.response(urlsplit(self.path).path, self.command, status)
        self.send_response(status)
        self.send_header(*EMULATOR_HEADER)
        self.send_header("Content-Type", ctype)
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.end_headers()

    def _send(self, status: int, payload):
        body = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        self._head(status, "application/json" if not isinstance(payload, str) else "text/plain", len(body))
        self.wfile.write(body)

    def _sse(self, obj):
        self.wfile.write(b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n")
        self.wfile.flush()

    def _body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}") if n else {}

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def _route(self, method: str):
        emu, path = self.emu, urlsplit(self.path).path
        try:
            if not emu.allowed(path, self.headers.get("Authorization")):
                return self._send(401, {"error": "Unauthorized"})
            if path in ("/health", "/health_generate"):
                if emu.fault == "hang_health":
                    time.sleep(3600)  # never answers; the client's timeout and the deadline decide
                if not emu.ready():
                    return self._send(503, "")
                if path == "/health_generate":
                    emu.sleep_ms(emu.speed.step_ms(1, emu.a.arm))
                return self._send(200, "")
            if path in ("/server_info", "/get_server_info"):
                return self._send(200, emu.server_info())
            if path in ("/model_info", "/get_model_info"):
                return self._send(200, {"model_path": emu.a.model_path, "tokenizer_path": emu.a.model_path,
                                        "served_model_name": emu.a.model_path, "is_generation": True,
                                        "preferred_sampling_params": None, "weight_version": "default",
                                        "model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"],
                                        "emulator": True})
            if path == "/metrics" and emu.a.enable_metrics:
                return self._send(200, emu.metrics_text())
            if path == "/flush_cache":
                if emu.inflight:
                    return self._send(400, "Cache not flushed: requests are running.\n")
                with emu.lock:
                    emu.cache.clear()
                return self._send(200, "Cache flushed.\n")
            if not emu.ready():
                return self._send(503, {"error": {"message": "server is starting or draining"}})
            if method == "POST" and path == "/generate":
                with emu.lock:
                    emu.generate_count += 1
                    n = emu.generate_count
                if emu.fault == "drop_request" and n == emu.a.drop_request:
                    self.close_connection = True
                    return self.connection.shutdown(2)  # no answer at all: the client sees a reset
                if emu.failing or (emu.fault == "fail_after" and n > emu.a.fail_after):
                    return self._send(500, {"error": {"message": "emulated internal error (fault fail_after)"}})
                return self._generate(self._body())
            if method == "POST" and path == "/v1/completions":
                return self._completions(self._body())
            return self._send(404, {"detail": "Not Found"})
        except (BrokenPipeError, ConnectionResetError):
            pass
        except (ValueError, TypeError, KeyError) as e:
            self._send(400, {"error": {"message": f"{type(e).__name__}: {e}"}})

    def _run(self, ids, sp, rid, stream, logprob, on_chunk):
        emu = self.emu
        with emu.lock:
            emu.inflight += 1
        try:
            return emu.generate(ids, sp, rid=rid, emit=on_chunk if stream else (lambda *_: None), logprob=logprob,
                                streaming=stream)
        finally:
            with emu.lock:
                emu.inflight -= 1

    def _generate(self, req: dict):
        if "input_ids" in req:
            ids = req["input_ids"]
        elif "text" in req:
            ids = tokenize(req["text"]) if isinstance(req["text"], str) else req["text"]
        else:
            raise ValueError("one of text or input_ids is required")
        if not ids or not all(isinstance(i, int) for i in ids):
            raise ValueError("batched or empty requests are not emulated: send one prompt")
        if req.get("return_logprob") and self.emu.a.speculative_algorithm not in LOGPROB_ALGORITHMS:
            raise ValueError(f"{self.emu.a.speculative_algorithm} does not return logprobs (emulated: DDTree's worker "
                             "raises on return_logprob)")
        start = req.get("logprob_start_len")
        if req.get("return_logprob") and isinstance(start, int) and start > len(ids):
            # SGLang aborts such a request with this message (scheduler.py)
            raise ValueError(f"req.logprob_start_len={start} is higher than the number of input tokens "
                             f"len(req.origin_input_ids)={len(ids)}. Please use a smaller logprob_start_len.")
        rid = req.get("rid") or uuid.uuid4().hex
        sp, stream = req.get("sampling_params") or {}, bool(req.get("stream"))
        all_out: list[int] = []
        if stream:
            self._head(200, "text/event-stream")

            def on_chunk(new, meta):
                all_out.extend(new)
                self._sse({"text": detokenize(all_out), "output_ids": list(all_out), "meta_info": meta, "index": 0})
        else:
            on_chunk = None
        out, meta = self._run(ids, sp, rid, stream, req, on_chunk)
        if stream:
            self._sse({"text": detokenize(out), "output_ids": out, "meta_info": meta, "index": 0})
            self._sse(b"[DONE]")
        else:
            self._send(200, {"text": detokenize(out), "output_ids": out, "meta_info": meta})

    def _completions(self, req: dict):
        prompt = req.get("prompt")
        ids = tokenize(prompt) if isinstance(prompt, str) else prompt
        if not ids or not all(isinstance(i, int) for i in ids):
            raise ValueError("prompt must be a string or a list of token ids")
        sp = {"max_new_tokens": req.get("max_tokens", 16), "ignore_eos": req.get("ignore_eos", False)}
        cid, stream = "cmpl-" + uuid.uuid4().hex, bool(req.get("stream"))
        base = {"id": cid, "object": "text_completion", "created": int(time.time()), "model": self.emu.a.model_path}
        if stream:
            self._head(200, "text/event-stream")

            def on_chunk(new, meta):
                self._sse({**base, "choices": [{"index": 0, "text": detokenize(new), "logprobs": None,
                                                "finish_reason": None}]})
        else:
            on_chunk = None
        out, meta = self._run(ids, sp, cid, stream, {}, on_chunk)
        usage = {"prompt_tokens": len(ids), "completion_tokens": len(out), "total_tokens": len(ids) + len(out)}
        choice = {"index": 0, "text": "" if stream else detokenize(out), "logprobs": None,
                  "finish_reason": meta["finish_reason"]["type"]}
        if stream:
            self._sse({**base, "choices": [choice], "usage": usage})
            self._sse(b"[DONE]")
        else:
            self._send(200, {**base, "choices": [choice], "usage": usage})


def serve(args) -> int:
    try:
        speed = SpeedModel(args.data_dir, fixed_ms=args.fixed_ms, T=args.draft_tokens)
    except MissingMeasurements as e:
        print(f"emulator: {e}", file=sys.stderr)
        return 2
    fault = args.fault if args.fault_arm in (None, args.arm) else None
    if fault == "fail_start":
        time.sleep(min(args.startup_s, 1.0))
        print(f"emulator: arm {args.arm}: emulated startup failure (fault fail_start)", file=sys.stderr)
        return 1
    emu = Emulator(args, speed)
    Handler.emu = emu
    httpd = ThreadingHTTPServer((args.host, args.port), Handler)
    httpd.daemon_threads = True
    args.port = httpd.server_address[1]
    stop = threading.Event()

    def on_term(signum, frame):
        # SGLang's drain: health goes 503 at once, in-flight requests finish, then exit.
        emu.draining = True
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGUSR1, lambda signum, frame: setattr(emu, "failing", True))
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    print(f"listening on http://{args.host}:{args.port} arm={args.arm} (emulator)", flush=True)
    # Timed waits, not one wait(): a signal the kernel hands to a server thread only sets a flag
    # that the main thread acts on when it next runs Python, and a main thread blocked in an
    # untimed wait never does (under load, SIGUSR1 went unseen for over 5 s in 22 of 60 tries).
    while not stop.wait(0.05):
        pass
    t0 = time.monotonic()
    while emu.inflight and time.monotonic() - t0 < args.drain_s:
        time.sleep(0.02)
    httpd.shutdown()
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rollout.emulator", description=__doc__.split("\n\n")[0])
    p.add_argument("--arm", choices=ARMS, default=os.environ.get(BACKEND_ENV, "triton"),
                   help=f"which verify attention to emulate (default: ${BACKEND_ENV} or triton)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000, help="0 = any free port (printed on stdout)")
    p.add_argument("--data-dir", default="reports/data", help="where bench-*.json and sglang-integration-*.json are")
    p.add_argument("--time-scale", type=float, default=1.0, help="multiply every emulated delay (tests: 0.01)")
    p.add_argument("--fixed-ms", type=float, default=15.0, help="assumed non-attention time per decode step, ms")
    p.add_argument("--accept-length", type=float, default=2.5, help="tokens per verify step (assumed)")
    p.add_argument("--draft-tokens", type=int, default=8, help="tokens verified per request (the speed model's T)")
    p.add_argument("--speculative-algorithm", default="EAGLE", help="the algorithm emulated (DDTREE: no logprobs)")
    p.add_argument("--prefill-tok-s", type=float, default=8000.0, help="assumed prefill speed, tokens/s")
    p.add_argument("--startup-s", type=float, default=0.0, help="real seconds of 503 before ready (weights, graphs)")
    p.add_argument("--drain-s", type=float, default=30.0, help="on SIGTERM, wait this long for in-flight requests")
    p.add_argument("--fault", choices=sorted(FAULTS), default=None,
                   help="; ".join(f"{k}: {v}" for k, v in FAULTS.items()))
    p.add_argument("--fault-arm", choices=ARMS, default=None, help="apply --fault only when running as this arm")
    p.add_argument("--slow-factor", type=float, default=10.0, help="fault 'slower': decode steps take this many times longer")
    p.add_argument("--drop-request", type=int, default=1, help="fault 'drop_request': which /generate (1-based)")
    p.add_argument("--fail-after", type=int, default=0, help="fault 'fail_after': /generate requests that still work")
    p.add_argument("--enable-metrics", action="store_true", help="serve /metrics (SGLang mounts it only with this flag)")
    p.add_argument("--no-plugin", action="store_true", help="leave out the mla-verify plugin's metrics")
    p.add_argument("--api-key", default=None, help="require `Authorization: Bearer KEY` as SGLang does")
    p.add_argument("--model-path", default="emulated/Kimi-K2")
    p.add_argument("--kv-cache-dtype", default="auto",
                   help="the KV pool reported in server_info, as SGLang echoes its flag (no effect on speed or tokens)")
    p.add_argument("--verbose", action="store_true")
    return p


class EmulatorHandle:
    """A running emulator process: .url, .pid, .stop(); a context manager."""

    def __init__(self, proc: subprocess.Popen, url: str, log):
        self.proc, self.url, self.pid, self._log = proc, url, proc.pid, log

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start_emulator(arm: str, *, port: int = 0, data_dir="reports/data", time_scale: float = 1.0,
                   fault: str | None = None, extra_args: list[str] | None = None,
                   ready_timeout: float = 30.0, metrics: bool = True) -> EmulatorHandle:
    """Start `python -m rollout.emulator` as a child process and wait until it listens.

    A separate process, so fault 'die_midstream' kills the emulator and not the caller.
    metrics: serve /metrics (the launch template always passes --enable-metrics).
    Raises RuntimeError with the emulator's stderr if it does not come up (no measurements,
    fault 'fail_start').
    """
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"fault must be one of {FAULTS} or None, got {fault!r}")
    argv = [sys.executable, "-m", "rollout.emulator", "--arm", arm, "--port", str(port), "--data-dir", str(data_dir),
            "--time-scale", str(time_scale)] + (["--fault", fault] if fault else []) + \
        (["--enable-metrics"] if metrics else []) + list(extra_args or [])
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(ready_timeout)
    if not line or not line[0].startswith("listening on "):
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        log.seek(0)
        err = log.read().strip()
        log.close()
        raise RuntimeError(f"emulator (arm {arm}) did not start: exit {proc.returncode}: {err or 'no output'}")
    return EmulatorHandle(proc, line[0].split()[2], log)


if __name__ == "__main__":
    sys.exit(serve(parser().parse_args()))
