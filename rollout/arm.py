"""Which verify arm a live SGLang server runs, read from the mla-verify plugin's metrics.

The plugin (kernel/sglang/metrics.py) publishes these Prometheus series from every scheduler
process; SGLang exports them on `/metrics` (multiprocess mode) when the server runs with
`--enable-metrics`. Their names belong to the writer (kernel/sglang/metric_names.py, no
imports); this module is the one reader of that contract, for the rollout tool and the phase 3
report alike; the plugin's tests check that what it writes parses here.

  mla_verify_backend_info{backend, kernel_hash, sglang_version, device}   gauge, 1 per rank
      backend: "flash" (our kernel installed) or "triton" (SGLang's own path)
  mla_verify_graph_captures_total{backend}      TARGET_VERIFY CUDA-graph captures
  mla_verify_kernel_calls_total                 eager TARGET_VERIFY calls that ran our kernel
  mla_verify_fallbacks_total{reason}            calls that went back to SGLang's kernel

Stdlib only, like the rest of `python -m rollout` (metric_names.py imports nothing).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from kernel.sglang.metric_names import ARMS, CALLS, CAPTURES, FALLBACKS, INFO

__all__ = ["ARMS", "CALLS", "CAPTURES", "FALLBACKS", "INFO", "ArmReport", "MetricsFormatError", "arm_from_metrics",
           "parse_prometheus", "read_arm"]

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class MetricsFormatError(ValueError):
    pass


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) for every sample line of Prometheus text exposition.

    Raises MetricsFormatError naming the line number for a line that is not a sample.
    """
    samples = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise MetricsFormatError(f"line {n} is not a Prometheus sample: {line[:120]!r}")
        name, labels, value = m.groups()
        try:
            v = float(value)
        except ValueError:
            raise MetricsFormatError(f"line {n}: value {value!r} is not a number") from None
        lab = {k: bytes(val, "utf-8").decode("unicode_escape") for k, val in _LABEL.findall(labels or "")}
        samples.append((name, lab, v))
    return samples


@dataclass
class ArmReport:
    """What an endpoint's metrics say about its verify arm.

    arm: "flash" or "triton" when every rank that reported agrees; "mixed" when ranks
    disagree; "unknown" when no rank reported (metrics off, plugin not loaded, whitelist).
    """
    arm: str
    ranks: int = 0
    kernel_hashes: list[str] = field(default_factory=list)
    sglang_versions: list[str] = field(default_factory=list)
    graph_captures: float = 0.0
    kernel_calls: float = 0.0
    fallbacks: dict[str, float] = field(default_factory=dict)
    # why the report is "unknown" when the metrics could not be read at all (read_arm)
    error: str = ""

    @property
    def confirmed(self) -> bool:
        return self.arm in ARMS

    def summary(self) -> str:
        if self.arm == "unknown" and self.error:
            return self.error
        if self.arm == "unknown":
            return ("no mla_verify_backend_info on /metrics (server without --enable-metrics, "
                    "plugin not loaded, or SGLANG_PLUGINS without mla_verify)")
        fb = sum(self.fallbacks.values())
        return (f"{self.arm} on {self.ranks} rank(s), kernel {','.join(self.kernel_hashes) or '-'}, "
                f"{self.graph_captures:g} graph captures, {self.kernel_calls:g} eager calls, {fb:g} fallbacks"
                + (f" ({', '.join(f'{k}: {v:g}' for k, v in sorted(self.fallbacks.items()))})" if fb else ""))


def arm_from_metrics(text: str) -> ArmReport:
    """The ArmReport for one `/metrics` body (Prometheus text)."""
    backends, hashes, versions = [], set(), set()
    captures = calls = 0.0
    fallbacks: dict[str, float] = {}
    for name, lab, v in parse_prometheus(text):
        if name == INFO and v > 0:
            backends.append(lab.get("backend", "?"))
            if lab.get("kernel_hash"):
                hashes.add(lab["kernel_hash"])
            if lab.get("sglang_version"):
                versions.add(lab["sglang_version"])
        elif name == CAPTURES and lab.get("backend", "flash") == "flash":
            captures += v
        elif name == CALLS:
            calls += v
        elif name == FALLBACKS:
            reason = lab.get("reason", "?")
            fallbacks[reason] = fallbacks.get(reason, 0.0) + v
    kinds = set(backends)
    if not kinds:
        arm = "unknown"
    elif len(kinds) == 1 and kinds <= set(ARMS):
        arm = kinds.pop()
    else:
        arm = "mixed"
    return ArmReport(arm, len(backends), sorted(hashes), sorted(versions), captures, calls, fallbacks)


def read_arm(url: str, api_key: str | None = None, timeout: float = 10.0) -> ArmReport:
    """The ArmReport of a live server from its `/metrics`. Never raises for an unreachable or
    odd endpoint: that is an "unknown" report whose summary says why (a caller must not gate a
    group whose arm it cannot confirm). The API key is sent when given: SGLang lets /metrics
    through without one, a proxy in front of it may not."""
    from rollout.client import EndpointError, get_text
    try:
        text = get_text(url, "/metrics", timeout=timeout, api_key=api_key)
    except EndpointError as e:
        why = f"{url}/metrics: none (a server started without --enable-metrics)" if e.status == 404 else str(e)
        return ArmReport("unknown", error=why)
    try:
        return arm_from_metrics(text)
    except MetricsFormatError as e:
        return ArmReport("unknown", error=f"{url}/metrics: {e}")
