"""Speed gate: decode tokens/s at long context, candidate vs control, interleaved rounds.

Each round sends the same exact-length `input_ids` (prefix cache warmed first, so the
measured request decodes rather than prefills; then WARM_DECODE_TOKENS decoded untimed, so that
no arm's first timed round pays for its decode path's first use) as a streaming /generate with
ignore_eos and greedy sampling to both endpoints, candidate first on even rounds and control
first on odd ones (drift hits both arms). tokens/s per request = tokens after the first chunk /
time from the first chunk to the last, from the stream's arrival times (prefill and TTFT
excluded).
Pass when median(candidate)/median(control) >= 1 - threshold and the bootstrap CI's lower
bound is too.

Clock: a real server is timed by arrival on this machine ("wall"). When every live endpoint is
the project's emulator (rollout/emulator.py, which says so in /server_info), the stream's times
are the emulator's modelled clock instead (meta_info `emulated_clock_s`, "emulated"): the
emulator sleeps what its speed model says, but on a busy machine the arrival times would add
the machine's load to either arm, and the verdict between two models must not depend on it.
Both clocks are in seconds of this machine's time at the emulator's --time-scale, so on an idle
machine they agree; the result names the one it used.
"""
from __future__ import annotations

import datetime as dt
import random
import statistics

from rollout.client import EndpointError, post_json, stream_generate
from rollout.endpoint_info import describe, provenance
from rollout.stats import bootstrap_ratio_ci, ratio_of_medians

TOKEN_LO, TOKEN_HI = 1000, 31000  # inside any Kimi/DeepSeek vocabulary, clear of special tokens
# /server_info fields (endpoint_info.KEEP) that set what a decode-speed A/B measures besides the
# attention path: arms that differ in one (a bf16 control beside an fp8_e4m3 candidate, another
# draft length) would compare those, so the A/B refuses them before timing anything
SAME_CONFIG = ("kv_cache_dtype", "speculative_algorithm", "speculative_num_draft_tokens", "page_size", "tp_size")
CLOCKS = ("wall", "emulated")
EMULATED_CLOCK = "emulated_clock_s"   # rollout/emulator.py: CLOCK_KEY
# tokens the decode warm-up decodes, untimed: with the prefill's one token alone, a real EAGLE
# server's first timed round then ran 25 % below its other four (149.5 against 188-211 tokens/s,
# reports/data/rungs/rollout-h100-20261206T081647Z-e5bbaa.json)
WARM_DECODE_TOKENS = 8


def make_input_ids(context_tokens: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(TOKEN_LO, TOKEN_HI) for _ in range(context_tokens)]


def measure(url: str, ids: list[int], max_new_tokens: int, timeout: float, api_key: str | None = None,
            clock: str = "wall") -> dict:
    """One streaming request; returns tokens/s (decode), accept length, cached tokens, TTFT (s).

    clock: "wall" times chunks by their arrival here; "emulated" by the emulator's modelled
    clock in each chunk's meta_info (EndpointError when a chunk lacks it)."""
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0,
                                                  "ignore_eos": True}}
    chunks = list(stream_generate(url, body, timeout=timeout, api_key=api_key))
    if clock == "emulated":
        if any(EMULATED_CLOCK not in c.get("meta_info", {EMULATED_CLOCK: 0}) for _, c in chunks):
            raise EndpointError(f"{url}/generate: a stream chunk without meta_info.{EMULATED_CLOCK}, from an "
                                "endpoint that says it is the emulator", url, transient=False)
        chunks = [(c["meta_info"][EMULATED_CLOCK] if "meta_info" in c else t, c) for t, c in chunks]
    marks = [(t, c["meta_info"]["completion_tokens"]) for t, c in chunks if "meta_info" in c]
    marks = [m for i, m in enumerate(marks) if i == 0 or m[1] > marks[i - 1][1]]  # drop the repeated final chunk
    if len(marks) < 2 or marks[-1][0] <= marks[0][0]:
        raise EndpointError(f"{url}/generate: {len(marks)} token chunk(s); need 2 or more to time decode "
                            f"(max_new_tokens={max_new_tokens})", url)
    meta = chunks[-1][1]["meta_info"]
    return {"tok_s": (marks[-1][1] - marks[0][1]) / (marks[-1][0] - marks[0][0]),
            "completion_tokens": meta["completion_tokens"], "cached_tokens": meta.get("cached_tokens"),
            "accept_length": meta.get("spec_accept_length"), "e2e_latency": meta.get("e2e_latency")}


def config_mismatch(endpoints: list[dict]) -> str | None:
    """What the live arms (endpoint_info.describe's dicts, candidate first) differ in among
    SAME_CONFIG, in words, or None; a field an arm does not report is not compared, nor a pair of
    the emulator and a real server (a test rig: the emulator's /server_info is its model's)."""
    if len({bool(e["emulated"]) for e in endpoints}) > 1:
        return None
    infos = [(e["role"], e["url"], e["server_info"]) for e in endpoints]
    words = []
    for key in SAME_CONFIG:
        seen = [(role, url, info[key]) for role, url, info in infos if key in info]
        if len(seen) == len(infos) and len({repr(v) for _, _, v in seen}) > 1:
            words.append(f"{key} " + " against ".join(f"{v!r} ({role} {url})" for role, url, v in seen))
    if not words:
        return None
    return ("the arms serve different configurations: " + "; ".join(words)
            + ". A speed A/B between them would measure that, not the attention path: start both with the same flags")


def _arm_summary(samples: list[dict], clock: str) -> dict:
    acc = [s["accept_length"] for s in samples if s["accept_length"] is not None]
    return {"clock": clock, "tok_s": [s["tok_s"] for s in samples], "accept_length": acc,
            "cached_tokens": [s["cached_tokens"] for s in samples],
            "completion_tokens": [s["completion_tokens"] for s in samples],
            "median_tok_s": statistics.median(s["tok_s"] for s in samples),
            "median_accept_length": statistics.median(acc) if acc else None}


def run_ab(candidate_url: str, control_url: str | None, *, context_tokens: int = 185000, rounds: int = 5,
           max_new_tokens: int = 32, threshold: float = 0.02, seed: int = 0, progress=None,
           ci_level: float = 0.95, resamples: int = 2000, timeout: float = 900.0,
           recorded_control: dict | None = None, api_key: str | None = None) -> dict:
    """Interleaved A/B of decode tokens/s; returns the dict that goes into rollout-*.json.

    control_url None + recorded_control (a previous result's "control" block, same inputs)
    compares against those samples instead (the last group of a rollout has no live control
    left); the result then says "control_source": "recorded" and the CI is unpaired.
    """
    if rounds < 5:
        raise ValueError(f"rounds must be >= 5 (interleaved rounds per arm), got {rounds}")
    if context_tokens < 2:
        raise ValueError(f"context_tokens must be >= 2, got {context_tokens}")
    if max_new_tokens < 3:
        raise ValueError(f"max_new_tokens must be >= 3 to time decode, got {max_new_tokens}")
    if not 0 <= threshold < 1:
        raise ValueError(f"threshold must be in [0, 1), got {threshold}")
    if control_url is None and not recorded_control:
        raise ValueError("control_url is None and no recorded_control was given")
    say = progress or (lambda msg: None)
    live = {"candidate": candidate_url} | ({"control": control_url} if control_url else {})
    endpoints = [describe(url, role, api_key=api_key) for role, url in live.items()]
    differ = config_mismatch(endpoints)
    if differ:   # not transient: the rollout halts with every group serving, and says why
        raise EndpointError(differ, candidate_url, transient=False)
    clock = "emulated" if all(e["emulated"] for e in endpoints) else "wall"
    ids = make_input_ids(context_tokens, seed)
    warm = {}
    for role, url in live.items():
        say(f"warming the prefix cache on {role} ({context_tokens} tokens)")
        r = post_json(url, "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}},
                      timeout=timeout, api_key=api_key)
        warm[role] = {"cached_tokens_before": r.get("meta_info", {}).get("cached_tokens")}
    # apart from the prefill above: the time from a prefill's progress line to the next one is that
    # prefill's (kernel/sglang/real_server/extend_over_prefix.py reads it)
    for role, url in live.items():
        say(f"warming the decode path on {role} ({WARM_DECODE_TOKENS} tokens)")
        r = post_json(url, "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": WARM_DECODE_TOKENS,
                                                                               "temperature": 0.0, "ignore_eos": True}},
                      timeout=timeout, api_key=api_key)
        warm[role]["decoded_tokens"] = r.get("meta_info", {}).get("completion_tokens")
    samples: dict[str, list[dict]] = {role: [] for role in live}
    order = []
    for r in range(rounds):
        roles = list(live) if r % 2 == 0 else list(reversed(live))
        order.append(roles)
        for role in roles:
            s = measure(live[role], ids, max_new_tokens, timeout, api_key, clock)
            samples[role].append(s)
            say(f"round {r + 1}/{rounds} {role}: {s['tok_s']:.2f} tok/s, accept {s['accept_length']}")
    cand = _arm_summary(samples["candidate"], clock)
    ctrl = _arm_summary(samples["control"], clock) if control_url else recorded_control
    paired = control_url is not None
    ratio = ratio_of_medians(cand["tok_s"], ctrl["tok_s"])
    lo, hi = bootstrap_ratio_ci(cand["tok_s"], ctrl["tok_s"], paired=paired, level=ci_level,
                                resamples=resamples, seed=seed)
    floor = 1 - threshold
    passed = ratio >= floor and lo >= floor
    reason = (f"candidate/control decode tok/s = {ratio:.3f} (CI{ci_level:.0%} {lo:.3f}..{hi:.3f}); "
              f"{'pass' if passed else 'FAIL'}: needs ratio and CI low >= {floor:.3f}"
              + (" (timed by the emulators' modelled clock)" if clock == "emulated" else ""))
    return {"kind": "rollout-ab", **provenance(endpoints),
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "endpoints": endpoints, "emulated": any(e["emulated"] for e in endpoints),
            "context_tokens": context_tokens, "max_new_tokens": max_new_tokens, "rounds": rounds, "seed": seed,
            "threshold": threshold, "order": order, "warm": warm, "clock": clock,
            "control_source": "live" if paired else "recorded",
            "candidate": cand, "control": ctrl,
            "ratio": ratio, "ci": {"low": lo, "high": hi, "level": ci_level, "resamples": resamples,
                                   "method": "percentile bootstrap of median ratio, "
                                             + ("paired by round" if paired else "unpaired")},
            "passed": passed, "reason": reason}
