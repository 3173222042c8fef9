"""What an endpoint says about itself, for a result file: URL, role, emulated or not, setup."""
from __future__ import annotations

import subprocess
from pathlib import Path

from rollout.client import EndpointError, request

KEEP = ("attention_backend", "page_size", "tp_size", "context_length", "speculative_algorithm",
        "speculative_num_draft_tokens", "kv_cache_dtype", "version", "model_path", "emulated_arm",
        "MLA_VERIFY_BACKEND", "time_scale", "fault", "speed_model", "accept_length")


def describe(url: str, role: str, timeout: float = 30.0, api_key: str | None = None) -> dict:
    """{"url", "role", "emulated", "server_info": {...subset}}; emulated comes from the
    X-Emulator header or server_info's "emulator" flag, never from the URL. Only the KEEP
    fields are kept: SGLang's /server_info also returns api_key and launch_command."""
    status, headers, info = request(url, "GET", "/server_info", timeout=timeout, api_key=api_key)
    if status != 200 or not isinstance(info, dict):
        raise EndpointError(f"{url}/server_info: HTTP {status}", url, transient=status >= 500, status=status)
    emulated = "x-emulator" in headers or bool(info.get("emulator"))
    return {"url": url, "role": role, "emulated": emulated,
            "server_info": {k: info[k] for k in KEEP if k in info}}


def provenance(endpoints: list[dict]) -> dict:
    """The contract's common fields. Remote endpoints rarely report their GPU: then null."""
    infos = [e["server_info"] for e in endpoints]
    gpu = next((i["speed_model"].get("gpu") for i in infos if isinstance(i.get("speed_model"), dict)), None)
    emulated = any(e["emulated"] for e in endpoints)
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                                cwd=Path(__file__).resolve().parent).stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        commit = None
    return {"gpu": f"{gpu} (emulated)" if emulated and gpu else gpu, "sms": None, "driver": None, "cuda": None,
            "torch": None, "commit": commit}
