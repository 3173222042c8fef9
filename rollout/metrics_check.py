"""Metric check over SGLang's own `/metrics`, candidate vs control, over a window between two
scrapes: during the gates (the gates' requests and any live traffic) and over the pause after
the canary (live traffic only), as Argo Rollouts' and Flagger's analysis do.

Series read (SGLang 0.5.23, srt/observability/metrics_collector.py, http_request_metrics.py):
  sglang:http_responses_total{endpoint,status_code}     5xx answers of the generate endpoints
  sglang:num_aborted_requests_total                     requests the scheduler aborted
  sglang:inter_token_latency_seconds  (_sum, _count)    mean inter-token latency in the window
  sglang:e2e_request_latency_seconds  (_sum, _count)    mean request latency (reported only)
  sglang:num_queue_reqs                                 queue length now
  sglang:spec_accept_length                             EAGLE accept length now (a verify
                                                        kernel that is subtly wrong lowers it)
Checks: error rate <= max_error_rate, queue <= max_queue_reqs, accept length ratio
candidate/control >= min_accept_length_ratio, inter-token latency ratio <= max_itl_ratio
(ratios only when both windows saw at least min_metric_requests requests).
"""
from __future__ import annotations

import time

from rollout.arm import MetricsFormatError, parse_prometheus
from rollout.client import EndpointError, get_text

GENERATE_ENDPOINTS = ("/generate", "/v1/completions", "/v1/chat/completions")
COUNTERS = ("responses", "errors", "aborted", "itl_sum", "itl_count", "e2e_sum", "e2e_count")


def scrape(url: str, api_key: str | None = None, timeout: float = 10.0) -> dict:
    """The aggregates this check needs from one /metrics body. Raises EndpointError."""
    text = get_text(url, "/metrics", timeout=timeout, api_key=api_key)
    try:
        samples = parse_prometheus(text)
    except MetricsFormatError as e:
        raise EndpointError(f"{url}/metrics: {e}", url, transient=False) from None
    s = {k: 0.0 for k in COUNTERS}
    queue, accept = [], []
    for name, lab, v in samples:
        if name == "sglang:http_responses_total" and lab.get("endpoint") in GENERATE_ENDPOINTS:
            s["responses"] += v
            if lab.get("status_code", "").startswith("5"):
                s["errors"] += v
        elif name == "sglang:num_aborted_requests_total":
            s["aborted"] += v
        elif name == "sglang:inter_token_latency_seconds_sum":
            s["itl_sum"] += v
        elif name == "sglang:inter_token_latency_seconds_count":
            s["itl_count"] += v
        elif name == "sglang:e2e_request_latency_seconds_sum":
            s["e2e_sum"] += v
        elif name == "sglang:e2e_request_latency_seconds_count":
            s["e2e_count"] += v
        elif name == "sglang:num_queue_reqs":
            queue.append(v)
        elif name == "sglang:spec_accept_length":
            accept.append(v)
    s["queue"] = sum(queue) if queue else None
    s["accept_length"] = sum(accept) / len(accept) if accept else None
    s["time"] = time.time()
    return s


def window(before: dict, after: dict) -> dict:
    """Counter deltas from `before` to `after`; a counter that went down (the server restarted)
    counts from zero."""
    d = {}
    for k in COUNTERS:
        a, b = after.get(k, 0.0), before.get(k, 0.0)
        d[k] = a - b if a >= b else a
    return {"seconds": after["time"] - before["time"], "requests": d["responses"], "errors": d["errors"],
            "aborted": d["aborted"], "itl_mean_s": d["itl_sum"] / d["itl_count"] if d["itl_count"] else None,
            "e2e_mean_s": d["e2e_sum"] / d["e2e_count"] if d["e2e_count"] else None,
            "queue": after.get("queue"), "accept_length": after.get("accept_length")}


def check(cand: dict, ctrl: dict | None, gates: dict) -> dict:
    """{"passed", "reason", "checks": [...], "candidate": window, "control": window}."""
    checks = []

    def add(name, value, limit, ok, note=""):
        checks.append({"check": name, "value": value, "limit": limit, "passed": ok, "note": note})

    bad = cand["errors"] + cand["aborted"]
    rate = bad / cand["requests"] if cand["requests"] else 0.0
    add("error_rate", rate, gates["max_error_rate"], rate <= gates["max_error_rate"],
        f"{bad:g} errors/aborts in {cand['requests']:g} generate answers")
    if cand["queue"] is not None:
        add("queue_reqs", cand["queue"], gates["max_queue_reqs"], cand["queue"] <= gates["max_queue_reqs"])
    enough = ctrl is not None and min(cand["requests"], ctrl["requests"]) >= gates["min_metric_requests"]
    if enough and cand["accept_length"] and ctrl["accept_length"]:
        r = cand["accept_length"] / ctrl["accept_length"]
        add("accept_length_ratio", r, gates["min_accept_length_ratio"], r >= gates["min_accept_length_ratio"],
            f"spec_accept_length {cand['accept_length']:.2f} vs control {ctrl['accept_length']:.2f}")
    if enough and cand["itl_mean_s"] and ctrl["itl_mean_s"]:
        r = cand["itl_mean_s"] / ctrl["itl_mean_s"]
        add("itl_ratio", r, gates["max_itl_ratio"], r <= gates["max_itl_ratio"],
            f"mean inter-token latency {cand['itl_mean_s'] * 1e3:.2f} ms vs control {ctrl['itl_mean_s'] * 1e3:.2f} ms")
    failed = [c for c in checks if not c["passed"]]
    skipped = "" if enough else (" (no candidate/control ratios: fewer than "
                                 f"{gates['min_metric_requests']} requests in a window, or no control)")
    reason = ("; ".join(f"{c['check']} {c['value']:.4g} outside {c['limit']:g} ({c['note']})" for c in failed)
              if failed else "within limits: " + ", ".join(f"{c['check']} {c['value']:.4g}" for c in checks)) + skipped
    return {"passed": not failed, "reason": reason, "checks": checks, "candidate": cand, "control": ctrl}
