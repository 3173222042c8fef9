"""The emulator's `/metrics`: Prometheus text exposition with SGLang 0.5.23's metric names
(srt/observability/metrics_collector.py, http_request_metrics.py) and the mla-verify plugin's
arm series (the contract in rollout/arm.py), so the rollout tool reads an emulator exactly
as it reads a real server."""
from __future__ import annotations

import threading

from rollout.arm import CALLS, CAPTURES, FALLBACKS, INFO

# bucket bounds, seconds (SGLang's defaults are of this shape; exact bounds do not matter to the
# tool, which reads _sum and _count)
BUCKETS = {
    "time_to_first_token_seconds": (0.01, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 20.0, 60.0),
    "inter_token_latency_seconds": (0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5),
    "e2e_request_latency_seconds": (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0),
}


def _labels(d: dict) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in d.items()) + "}" if d else ""


class Histogram:
    def __init__(self, bounds):
        self.bounds, self.counts, self.sum, self.n = bounds, [0] * len(bounds), 0.0, 0

    def observe(self, v: float):
        for i, b in enumerate(self.bounds):
            if v <= b:
                self.counts[i] += 1
        self.sum += v
        self.n += 1

    def lines(self, name: str, labels: dict) -> list[str]:
        out = [f"{name}_bucket{_labels({**labels, 'le': b})} {c}" for b, c in zip(self.bounds, self.counts)]
        out.append(f"{name}_bucket{_labels({**labels, 'le': '+Inf'})} {self.n}")
        return out + [f"{name}_sum{_labels(labels)} {self.sum}", f"{name}_count{_labels(labels)} {self.n}"]


class Metrics:
    """Thread-safe counters of one emulated server."""

    def __init__(self, model_name: str, arm: str, ranks: int, plugin: bool):
        self.lock = threading.Lock()
        self.base = {"model_name": model_name}
        self.arm, self.ranks, self.plugin = arm, ranks, plugin
        self.counters = {"num_requests_total": 0, "prompt_tokens_total": 0, "generation_tokens_total": 0,
                         "spec_verify_calls_total": 0, "num_aborted_requests_total": 0}
        self.gauges = {"num_running_reqs": 0, "num_queue_reqs": 0, "gen_throughput": 0.0,
                       "spec_accept_length": 0.0}
        self.responses: dict[tuple[str, str, str], int] = {}
        self.hist = {name: Histogram(b) for name, b in BUCKETS.items()}

    def response(self, endpoint: str, method: str, status: int):
        with self.lock:
            key = (endpoint, str(status), method)
            self.responses[key] = self.responses.get(key, 0) + 1

    def finished(self, *, prompt: int, generated: int, steps: int, ttft: float, e2e: float,
                 itl: list[float], accept_length: float, throughput: float):
        with self.lock:
            c = self.counters
            c["num_requests_total"] += 1
            c["prompt_tokens_total"] += prompt
            c["generation_tokens_total"] += generated
            c["spec_verify_calls_total"] += steps
            self.gauges["spec_accept_length"] = accept_length
            self.gauges["gen_throughput"] = throughput
            self.hist["time_to_first_token_seconds"].observe(ttft)
            self.hist["e2e_request_latency_seconds"].observe(e2e)
            for v in itl:
                self.hist["inter_token_latency_seconds"].observe(v)

    def text(self, running: int, emulator_labels: dict) -> str:
        with self.lock:
            lines = ["# HELP mla_verify_emulator 1 when this endpoint is rollout.emulator, not SGLang",
                     "# TYPE mla_verify_emulator gauge", f"mla_verify_emulator{_labels(emulator_labels)} 1"]
            if self.plugin:
                lines += [f"# TYPE {INFO} gauge"]
                lines += [f'{INFO}{{backend="{self.arm}",device="cuda:{r}",kernel_hash="emulated",'
                          f'sglang_version="0.5.23"}} 1.0' for r in range(self.ranks)]
                flash = self.arm == "flash"
                lines += [f"# TYPE {CAPTURES} counter",
                          f'{CAPTURES}{{backend="{self.arm}"}} {float(self.ranks * 4 if flash else 0)}',
                          f"# TYPE {CALLS} counter",
                          f"{CALLS} {float(self.counters['spec_verify_calls_total'] if flash else 0)}",
                          f"# TYPE {FALLBACKS} counter", f'{FALLBACKS}{{reason="none"}} 0.0']
            gauges = {**self.gauges, "num_running_reqs": running}
            for name, v in gauges.items():
                lines += [f"# TYPE sglang:{name} gauge", f"sglang:{name}{_labels(self.base)} {float(v)}"]
            for name, v in self.counters.items():
                lines += [f"# TYPE sglang:{name} counter", f"sglang:{name}{_labels(self.base)} {float(v)}"]
            lines.append("# TYPE sglang:http_responses_total counter")
            for (endpoint, status, method), n in sorted(self.responses.items()):
                lines.append(f"sglang:http_responses_total"
                             f"{_labels({'endpoint': endpoint, 'status_code': status, 'method': method})} {float(n)}")
            for name, h in self.hist.items():
                lines.append(f"# TYPE sglang:{name} histogram")
                lines += h.lines(f"sglang:{name}", self.base)
            return "\n".join(lines) + "\n"
