"""Decode step time of an emulated server, from the kernel measurements in reports/data/.

    step_ms(S, arm) = layers x attention_ms(S, arm) + fixed_ms

attention_ms has its absolute level from the newest `sglang-integration-*.json` (per-layer
time inside SGLang: plugin_us = flash arm, triton_us = triton arm, at the cases' S) and its
shape in S from the newest `bench-*.json` (sweep "S", T=8, H=8, scattered, page 1: impl
"flash" for the flash arm, "sglang_extend" for the triton arm), linearly interpolated.
The ratio integration/bench at the measured S is the calibration, interpolated in S too.
"""
from __future__ import annotations

import json
from pathlib import Path

LAYERS = 61
BENCH_IMPL = {"flash": "flash", "triton": "sglang_extend"}
INTEGRATION_KEY = {"flash": "plugin_us", "triton": "triton_us"}


class MissingMeasurements(FileNotFoundError):
    pass


def newest(data_dir: str | Path, prefix: str, kind: str) -> tuple[Path, dict]:
    """The file `<prefix>-*.json` of this kind with the latest "date" (ISO-8601 sorts as text)."""
    data_dir = Path(data_dir)
    found = []
    for p in sorted(data_dir.glob(f"{prefix}-*.json")):
        try:
            d = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise MissingMeasurements(f"{p}: unreadable measurement file: {e}") from None
        if d.get("kind") == kind:
            found.append((str(d.get("date", "")), p, d))
    if not found:
        raise MissingMeasurements(
            f"no {prefix}-*.json of kind {kind!r} in {data_dir.resolve()}: the emulator's speed model needs "
            f"the lead's GPU measurements (make gpu-run), or a fixture directory via --data-dir")
    _, path, d = max(found, key=lambda x: x[0])
    return path, d


def interp(points: list[tuple[float, float]], x: float, *, extrapolate: bool) -> float:
    """Piecewise-linear y(x) through sorted points; beyond the ends, the end segment's line
    (attention time is linear in S) or the end value when extrapolate is False."""
    if len(points) == 1:
        x0, y0 = points[0]
        return y0 * x / x0 if extrapolate else y0
    if x <= points[0][0]:
        (x0, y0), (x1, y1) = points[0], points[1]
        if not extrapolate:
            return y0
    elif x >= points[-1][0]:
        (x0, y0), (x1, y1) = points[-2], points[-1]
        if not extrapolate:
            return y1
    else:
        i = next(i for i in range(1, len(points)) if points[i][0] >= x)
        (x0, y0), (x1, y1) = points[i - 1], points[i]
    y = y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return max(y, 1e-6)


def _average_by_s(pairs) -> list[tuple[float, float]]:
    acc: dict[float, list[float]] = {}
    for s, v in pairs:
        acc.setdefault(float(s), []).append(float(v))
    return sorted((s, sum(v) / len(v)) for s, v in acc.items())


class SpeedModel:
    def __init__(self, data_dir: str | Path = "reports/data", *, fixed_ms: float = 15.0, H: int = 8, T: int = 8):
        self.fixed_ms = fixed_ms
        self.bench_path, bench = newest(data_dir, "bench", "bench")
        self.integ_path, integ = newest(data_dir, "sglang-integration", "sglang-integration")
        self.layers = int(integ.get("layers", LAYERS))
        self.gpu = integ.get("gpu") or bench.get("gpu")
        self.curve, self.scale = {}, {}
        cases = [c for c in integ.get("cases", []) if c.get("H") == H and c.get("T") == T]
        if not cases:
            raise MissingMeasurements(f"{self.integ_path}: no case with H={H}, T={T}")
        for arm, impl in BENCH_IMPL.items():
            rows = [r for r in bench.get("rows", []) if r.get("sweep") == "S" and r.get("T") == T and r.get("H") == H
                    and r.get("layout") == "scattered" and r.get("page_size") == 1 and r.get("batch", 1) == 1
                    and r.get("impl") == impl]
            if not rows:
                raise MissingMeasurements(f"{self.bench_path}: no sweep 'S' row with impl {impl!r}, T={T}, H={H}, "
                                          f"layout 'scattered', page_size 1 (needed for the {arm} arm)")
            self.curve[arm] = _average_by_s((r["S"], r["time_us"]) for r in rows)
            key = INTEGRATION_KEY[arm]
            self.scale[arm] = _average_by_s(
                (c["S"], c[key] / interp(self.curve[arm], c["S"], extrapolate=True)) for c in cases)

    def attention_ms(self, S: float, arm: str) -> float:
        """Per-layer verify attention time (ms) at S prefix tokens for arm 'flash' or 'triton'."""
        if arm not in self.curve:
            raise ValueError(f"arm must be 'flash' or 'triton', got {arm!r}")
        us = interp(self.curve[arm], S, extrapolate=True) * interp(self.scale[arm], S, extrapolate=False)
        return us / 1000.0

    def step_ms(self, S: float, arm: str) -> float:
        """One TARGET_VERIFY decode step (ms): all layers of attention plus the rest of the step."""
        return self.layers * self.attention_ms(S, arm) + self.fixed_ms

    def describe(self) -> dict:
        return {"layers": self.layers, "fixed_ms": self.fixed_ms, "gpu": self.gpu,
                "bench_file": str(self.bench_path), "integration_file": str(self.integ_path),
                "formula": "step_ms = layers * attention_ms(S, arm) + fixed_ms",
                "step_ms_at_185000": {a: round(self.step_ms(185000, a), 3) for a in self.curve}}
