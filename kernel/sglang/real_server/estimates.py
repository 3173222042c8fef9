"""Predicted wall time of each step of the real-server job, printed before the step starts so
the steps can be split over device calls of at most 10 minutes.

The rates are one-H200 measurements of this model and these flags: the triton arm's from the
audit (../shared/reading/audit-2026-12-02/real-server.md: 185,000 tokens prefilled in 25.4 s at 4
layers and 86.1 s at 16; a decode step of 174 -> 600 ms from 4 to 16 layers), the flash arm's from
the job's own run with EAGLE's draft extend on the kernel (reports/data/real-server-h200-
20261202T075043Z.json, ...T080028Z, ...T080302Z: prefill 8.7 / 29.2 / 105.6 s and a step of 5.0 /
8.0 / 20.5 ms at 4 / 16 / 61 layers); a server healthy 56-71 s after start, the first on a fresh
machine 143-178 s (SGLang JIT-compiles its kernels; the job's five `up` steps of 2026-12-02, EAGLE
and DFLASH alike: reports/data/real-server-h200-*.json); accept length 1.02. Between the
measured layer counts linear in layers, beyond them the nearest two points' line; prefill linear
in tokens. The other constants are allowances for requests, stops and file work, not measurements.

Issue 26's follow-ups (extend_over_prefix.py): a follow-up of up to 256 new tokens is one EXTEND
forward over the cached prompt plus the draft's extend, taken here as one decode step's time of
its arm (a verify step is an extend of 8 tokens over the same prefix; SGLang's extend kernel's
grid grows with the new tokens but stays under the SM count up to 256), plus a request allowance.
"""
from __future__ import annotations

MEASURED_CONTEXT = 185000
PREFILL_S = {"triton": {4: 25.4, 16: 86.1}, "flash": {4: 8.7, 16: 29.2, 61: 105.6}}
STEP_MS = {"triton": {4: 174.0, 16: 600.0}, "flash": {4: 5.0, 16: 8.0, 61: 20.5}}
ACCEPT_LENGTH = 1.02
START_FIRST_S = 180.0
START_S = 70.0
STOP_S = 10.0
GATE_CHECKS_S = 10.0          # arm, health_generate, metrics reads
SHORT_NUMERICS_S = 16.0       # 8 prompts of 64 tokens: 4 requests each, both arms
UNPACK_S = 15.0
KERNEL_BUILD_S = 150.0        # nvcc, five archs, when the bundle's prebuilt library does not match
PROFILE_EXPORT_S = 25.0       # torch profiler trace export and its classification
REQUEST_S = 0.05              # one small request's HTTP and scheduling allowance


def _linear(points: dict, x: float) -> float:
    """Piecewise linear through the measured points; outside them, the nearest segment's line."""
    pts = sorted(points.items())
    i = next((k for k in range(1, len(pts) - 1) if x <= pts[k][0]), len(pts) - 1)
    (x0, y0), (x1, y1) = pts[i - 1], pts[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def prefill_s(layers: int, tokens: int = MEASURED_CONTEXT, arm: str = "triton") -> float:
    """Seconds for one server of `arm` to prefill `tokens` from nothing (the servers start on
    triton; a flash candidate's numerics warm-up and the breakdown's own server run flash)."""
    return max(_linear(PREFILL_S[arm], layers), 1.0) * tokens / MEASURED_CONTEXT


def step_ms(arm: str, layers: int) -> float:
    return max(_linear(STEP_MS[arm], layers), 1.0)


def decode_s(arm: str, layers: int, tokens: int) -> float:
    return tokens / ACCEPT_LENGTH * step_ms(arm, layers) / 1000.0


def start_s(first: bool) -> float:
    return START_FIRST_S if first else START_S


def numerics_s(layers: int, context: int, new_tokens: int = 16, candidate_cached: bool = False) -> float:
    """The numerics gate: short prompts, then the long prompt (the candidate prefills it unless
    cached), decoded on both arms and scored by teacher forcing."""
    warm = 0.0 if candidate_cached else prefill_s(layers, context, "flash")
    return SHORT_NUMERICS_S + warm + decode_s("flash", layers, new_tokens) + decode_s("triton", layers, new_tokens) + 4


def speed_s(layers: int, rounds: int, max_new_tokens: int, live_control: bool = True) -> float:
    per_round = decode_s("flash", layers, max_new_tokens) + (decode_s("triton", layers, max_new_tokens)
                                                             if live_control else 0.0)
    return rounds * (per_round + 0.5) + 2


def followups_s(layers: int, followups: int = 9, greedy_tokens: int = 16) -> float:
    """Issue 26's requests in the canary step, both arms: `followups` one-token answers per arm,
    then `greedy_tokens` greedy tokens per arm, and two /metrics reads per arm."""
    s = 0.0
    for arm in ("triton", "flash"):
        s += followups * (step_ms(arm, layers) / 1000.0 + REQUEST_S)
        s += step_ms(arm, layers) / 1000.0 + decode_s(arm, layers, greedy_tokens) + 3 * REQUEST_S
    return s


def step_estimate(step: str, *, layers: int, context: int = MEASURED_CONTEXT, rounds: int = 5,
                  max_new_tokens: int = 32, first_start: bool = False, servers_to_start: int = 2,
                  kernel_prebuilt: bool = True, flash_server_ready: bool = True) -> tuple[float, str]:
    """(seconds, how) for one step of kernel.sglang.real_server."""
    pre, pre_flash = prefill_s(layers, context), prefill_s(layers, context, "flash")
    if step == "setup":
        s = UNPACK_S + 5 + (0 if kernel_prebuilt else KERNEL_BUILD_S)
        return s, f"unpack {UNPACK_S:.0f} s, model 5 s" + ("" if kernel_prebuilt else f", nvcc {KERNEL_BUILD_S:.0f} s")
    if step == "up":
        starts = [start_s(first_start and i == 0) for i in range(servers_to_start)]
        s = sum(starts) + (pre if servers_to_start else 0) + 5
        return s, (f"{servers_to_start} server start(s) {' + '.join(f'{x:.0f}' for x in starts) or '0'} s; the "
                   f"second's wait covers the first's prefill; last prefill of {context:,} tokens {pre:.0f} s")
    if step == "planted":
        num = numerics_s(layers, context)
        s = STOP_S + start_s(first_start) + GATE_CHECKS_S + num + STOP_S + START_S + GATE_CHECKS_S
        return s, (f"canary restart {STOP_S + start_s(first_start):.0f} s, numerics {num:.0f} s (flash prefill {pre_flash:.0f} s), "
                   f"rollback restart {STOP_S + START_S:.0f} s")
    if step == "canary":
        num, spd = numerics_s(layers, context), speed_s(layers, rounds, max_new_tokens)
        direct = decode_s("flash", layers, max_new_tokens) + decode_s("triton", layers, max_new_tokens) + 2
        fu = followups_s(layers)
        s = 5 + STOP_S + start_s(first_start) + GATE_CHECKS_S + num + spd + direct + fu
        return s, (f"restart {STOP_S + start_s(first_start):.0f} s, numerics {num:.0f} s (flash prefill {pre_flash:.0f} s), speed "
                   f"{spd:.0f} s, one timed request per arm {direct:.0f} s, issue-26 follow-ups and greedy {fu:.0f} s")
    if step == "promote":
        num, spd = numerics_s(layers, context), speed_s(layers, rounds, max_new_tokens, live_control=False)
        s = GATE_CHECKS_S + STOP_S + START_S + GATE_CHECKS_S + num + spd
        return s, f"restart {STOP_S + START_S:.0f} s, numerics {num:.0f} s (flash prefill {pre_flash:.0f} s), speed {spd:.0f} s"
    if step == "breakdown":
        run = 2 * decode_s("flash", layers, max_new_tokens) + PROFILE_EXPORT_S + 2
        if flash_server_ready:
            return run, f"two {max_new_tokens}-token requests and a profiled one at {context:,} tokens"
        s = start_s(first_start) + pre_flash + run + STOP_S
        return s, (f"its own flash server: start {start_s(first_start):.0f} s, prefill {pre_flash:.0f} s, "
                   f"measure {run:.0f} s")
    if step == "down":
        return 2 * STOP_S, "drain and stop every server this root started"
    raise ValueError(f"step: unknown step {step!r}")
