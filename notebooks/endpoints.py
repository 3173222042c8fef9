"""What an A/B endpoint says about itself, for the phase 3 report: emulated or live, and which
verify arm (flash or triton) it runs, read from its /server_info and the plugin's /metrics.

The page labels each arm from these answers, never from which parameters were passed: a URL
proves nothing about what serves it. The arm comes from the plugin's metrics contract
(`rollout.arm.arm_from_metrics`); an emulator that does not publish that contract yet is
labelled from its own /server_info claim (`emulated_arm`), and says so.
"""
from __future__ import annotations

import ipaddress
from pathlib import Path
from urllib.parse import urlsplit

from rollout.arm import ARMS, MetricsFormatError, arm_from_metrics, parse_prometheus
from rollout.client import EndpointError, request

EMULATOR_GAUGE = "mla_verify_emulator"
WANT = {"candidate": "flash", "control": "triton"}


# Spellings of the one loopback address a local server listens on (127.0.0.2 is another one).
LOOPBACK = {"localhost", "127.0.0.1", "::1"}


def endpoint_key(url: str) -> tuple[str, int]:
    """(host, port) with the spellings of one address folded together, for 'same endpoint'
    checks: localhost = 127.0.0.1 = [::1], [0:0::1] = [::1], port 80 by default."""
    u = urlsplit(url)
    host = (u.hostname or "").lower()
    try:
        host = str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if host in LOOPBACK:
        host = "loopback"
    try:
        port = u.port or 80
    except ValueError:
        raise EndpointError(f"{url}: bad port") from None
    return host, port


def identify(url: str, role: str, timeout: float = 30.0) -> dict:
    """{"url", "role", "emulated", "emulated_why", "arm", "arm_source", "arm_confirmed",
    "metrics", "server_info"} for one endpoint; EndpointError if /server_info does not answer.

    arm: "flash" / "triton" when the endpoint says so, "mixed" when its ranks disagree,
    "unknown" when nothing it serves names its arm.
    """
    status, headers, info = request(url, "GET", "/server_info", timeout=timeout)
    if status != 200 or not isinstance(info, dict):
        raise EndpointError(f"{url}/server_info: HTTP {status}: not SGLang's server_info")
    why = []
    if "x-emulator" in headers:
        why.append("X-Emulator header")
    if info.get("emulator"):
        why.append('"emulator": true in /server_info')
    m_status, _, text = request(url, "GET", "/metrics", timeout=timeout)
    metrics_note, report = "", None
    if m_status != 200 or not isinstance(text, str):
        metrics_note = f"/metrics: HTTP {m_status} (server without --enable-metrics?)"
    else:
        try:
            report = arm_from_metrics(text)
            if any(name == EMULATOR_GAUGE and v > 0 for name, _, v in parse_prometheus(text)):
                why.append(f"{EMULATOR_GAUGE} on /metrics")
            metrics_note = report.summary()
        except MetricsFormatError as e:
            metrics_note = f"/metrics is not Prometheus text: {e}"
    emulated = bool(why)
    claim = info.get("emulated_arm")
    if report is not None and report.arm != "unknown":
        arm, source = report.arm, "/metrics (mla_verify_backend_info, every rank)"
    elif emulated and claim in ARMS:
        arm, source = claim, ("the emulator's own /server_info (emulated_arm); its /metrics has "
                              "no mla_verify_backend_info")
    else:
        arm, source = "unknown", metrics_note or "no arm reported"
    return {"url": url, "role": role, "emulated": emulated, "emulated_why": why, "arm": arm,
            "arm_source": source, "arm_confirmed": arm in ARMS, "metrics": metrics_note,
            "server_info": {k: info[k] for k in ("version", "time_scale", "speed_model",
                                                 "accept_length", "attention_backend",
                                                 "model_path") if k in info}}


def check_pair(candidate: dict, control: dict) -> None:
    """Refuse an A/B that cannot mean anything: one endpoint for both arms, an arm that says it
    runs the other backend, or ranks that disagree. Raises EndpointError naming the URL."""
    if endpoint_key(candidate["url"]) == endpoint_key(control["url"]):
        raise EndpointError(f"candidate_url={candidate['url']!r} and control_url="
                            f"{control['url']!r} are the same endpoint: an A/B needs two servers")
    for e in (candidate, control):
        want = WANT[e["role"]]
        if e["arm"] == "mixed":
            raise EndpointError(f"{e['role']} {e['url']}: its ranks report different backends "
                                f"({e['metrics']})")
        if e["arm_confirmed"] and e["arm"] != want:
            raise EndpointError(f"{e['role']} {e['url']}: reports backend {e['arm']!r} "
                                f"({e['arm_source']}); the {e['role']} must run {want!r}")


def modelled(e: dict, context_tokens: int) -> dict | None:
    """An emulator's speed model at this context length: the assumed non-attention step time,
    accept length, and modelled step time. None for a live endpoint (nothing is modelled)."""
    sm = e["server_info"].get("speed_model")
    if not e["emulated"] or not isinstance(sm, dict):
        return None
    out = {"fixed_ms": sm.get("fixed_ms"), "layers": sm.get("layers"),
           "accept_length": e["server_info"].get("accept_length"),
           "formula": sm.get("formula"), "bench_file": Path(str(sm.get("bench_file"))).name,
           "step_ms": None}
    try:  # the emulator's own model, rebuilt from the files it names
        from rollout.speed_model import SpeedModel

        model = SpeedModel(Path(str(sm["bench_file"])).parent, fixed_ms=float(sm["fixed_ms"]), T=int(sm.get("T", 8)))
        out["step_ms"] = model.step_ms(context_tokens, e["arm"])
    except (OSError, KeyError, TypeError, ValueError):  # files not here: its value at 185,000
        at = (sm.get("step_ms_at_185000") or {}).get(e["arm"])
        out["step_ms"] = at if context_tokens == 185000 else None
    return out


def model_files(ends) -> list[str]:
    """The measurement files the emulators among these endpoints say their speed model read."""
    files = []
    for e in ends:
        sm = e["server_info"].get("speed_model") if e["emulated"] else None
        for key in ("bench_file", "integration_file"):
            f = sm.get(key) if isinstance(sm, dict) else None
            if f and f not in files:
                files.append(str(f))
    return files
