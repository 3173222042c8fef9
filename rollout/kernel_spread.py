"""The verify kernel's measured bf16 spread, quoted beside the numerics gate's thresholds.

Read from the newest validation file in reports/data (`validation-*.json`, which kernel.gpu_run
writes, or a superseded one kept as `validation-*.json.gz`; newest by its recorded date): per case
the attention output's relative error against the float64 oracle, and for the SGLang
comparison cases SGLang's own Triton kernel's error and the kernel-vs-SGLang difference. The
numbers say how far apart two correct bf16 kernels are per attention call; they are context
for the gate's logprob thresholds, which are not derived from them (rollout.numerics).
"""
from __future__ import annotations

import statistics
from pathlib import Path

from kernel.bench import data_files

DATA_DIR = Path(__file__).resolve().parents[1] / "reports" / "data"


def _summary(values: list[float]) -> dict | None:
    vals = [v for v in values if isinstance(v, (int, float))]
    if not vals:
        return None
    return {"cases": len(vals), "min": min(vals), "median": statistics.median(vals), "max": max(vals)}


def bf16_spread(data_dir: str | Path = DATA_DIR) -> dict | None:
    """{"file", "date", "gpu", "kernel_vs_oracle", "sglang_vs_oracle", "kernel_vs_sglang",
    "max_prefix_tokens"} from the newest validation file; None when there is none."""
    found = []
    for p in data_files.files(data_dir, "validation-"):
        try:
            d = data_files.read_json(p)
        except data_files.UNREADABLE:
            continue
        if d.get("kind") == "validation":
            found.append((str(d.get("date", "")), p, d))
    if not found:
        return None
    _, path, d = max(found, key=lambda x: x[0])
    cases, sg = d.get("cases", []), (d.get("sglang") or {}).get("cases", [])
    return {"file": path.name, "date": d.get("date"), "gpu": d.get("gpu"),
            "kernel_vs_oracle": _summary([c.get("rel_err") for c in cases]),
            "sglang_vs_oracle": _summary([c.get("sglang_rel_err") for c in sg]),
            "kernel_vs_sglang": _summary([c.get("rel_err_vs_sglang") for c in sg]),
            "max_prefix_tokens": max((max(c.get("prefix_lens") or [0]) for c in cases), default=None)}
