"""Fixture measurement JSON for the rollout tests (tmp dirs only; never reports/data/).

The shapes follow the contract in the common brief; the numbers are fixture values chosen so
that the flash arm is clearly faster, not measurements."""
from __future__ import annotations

import json
from pathlib import Path

COMMON = {"gpu": "FIXTURE GPU", "sms": 1, "driver": "fixture", "cuda": "fixture", "torch": "fixture",
          "commit": "fixture"}
S_POINTS = (4096, 16384, 65536, 185000)


def bench_rows(extend_us_per_token: float = 0.18, flash_us_per_token: float = 0.0005):
    rows = []
    for S in S_POINTS:
        for impl, per_tok, fixed in (("sglang_extend", extend_us_per_token, 20.0), ("flash", flash_us_per_token, 8.0)):
            rows.append({"sweep": "S", "S": S, "prefix_lens": [S], "T": 8, "H": 8, "layout": "scattered",
                         "page_size": 1, "batch": 1, "impl": impl, "time_us": fixed + per_tok * S})
    # the "T" sweep at 185k (T = 8 is the S sweep's row): SGLang's extend grows with T (one more
    # row block per 16 tokens), ours by a tenth per 8 tokens (math, not bytes)
    for T in (1, 16, 32, 64):
        for impl, per_tok, fixed in (("sglang_extend", extend_us_per_token, 20.0), ("flash", flash_us_per_token, 8.0)):
            base = fixed + per_tok * 185000
            factor = max(1.0, T / 8) if impl == "sglang_extend" else 1 + 0.1 * (T - 8) / 8
            rows.append({"sweep": "T", "S": 185000, "prefix_lens": [185000], "T": T, "H": 8, "layout": "scattered",
                         "page_size": 1, "batch": 1, "impl": impl, "time_us": base * factor})
    # rows of other sweeps and layouts must be ignored by the speed model
    rows.append({"sweep": "layout", "S": 185000, "T": 8, "H": 8, "layout": "fragmented", "page_size": 1,
                 "batch": 1, "impl": "flash", "time_us": 1e9})
    return rows


def write_measurements(data_dir: Path, *, date: str = "2026-11-30T00:00:00Z", integration_scale: float = 1.1) -> Path:
    """Writes bench-*.json and sglang-integration-*.json into data_dir; returns data_dir."""
    data_dir.mkdir(parents=True, exist_ok=True)
    rows = bench_rows()
    (data_dir / "bench-fixture.json").write_text(json.dumps(
        {"kind": "bench", "date": date, **COMMON, "ceilings": {"read_GBps": 4000.0, "mma_TFLOPs": 700.0},
         "rows": rows}))
    at = {r["impl"]: r["time_us"] for r in rows if r["S"] == 185000 and r["sweep"] == "S"}
    case = {"S": 185000, "H": 8, "T": 8, "tree": "chain", "plugin_us": at["flash"] * integration_scale,
            "triton_us": at["sglang_extend"] * integration_scale}
    case["plugin_ms_per_step"] = case["plugin_us"] * 61 / 1000
    case["triton_ms_per_step"] = case["triton_us"] * 61 / 1000
    (data_dir / "sglang-integration-fixture.json").write_text(json.dumps(
        {"kind": "sglang-integration", "date": date, **COMMON, "layers": 61, "cases": [case]}))
    return data_dir
