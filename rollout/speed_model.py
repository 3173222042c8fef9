"""Decode step time of an emulated server, from the kernel measurements in reports/data/.

    step_ms(S, arm) = layers x attention_ms(S, arm) + fixed_ms

attention_ms has its absolute level from the newest `sglang-integration-*.json` (per-layer
time inside SGLang: plugin_us = flash arm, triton_us = triton arm, at the cases' S) and its
shape in S from the newest `bench-*.json` (sweep "S", T=8, H=8, scattered, page 1: impl
"flash" for the flash arm, "sglang_extend" for the triton arm), linearly interpolated.
The ratio integration/bench at the measured S is the calibration, interpolated in S too.
Both are measured at T = 8 tokens verified per request (EAGLE's default). Another T (DFLASH's
block of 16, DDTree's D = budget + 1) scales that by the arm's bench time at T over its time at
T = 8, both at S = 185,000, 8 heads, batch 1 (the bench's "T" and "production" sweeps), linear in
T between measured points (beyond them, the end segment's line).
"""
from __future__ import annotations

import json
from pathlib import Path

LAYERS = 61
BASE_T = 8          # the T of the S curve and of the integration's level
T_AT_S = 185000     # where the bench measures T
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
    def __init__(self, data_dir: str | Path = "reports/data", *, fixed_ms: float = 15.0, H: int = 8, T: int = BASE_T):
        if not isinstance(T, int) or T < 1:
            raise ValueError(f"T: tokens verified per request must be an int >= 1, got {T!r}")
        self.fixed_ms, self.T = fixed_ms, T
        self.bench_path, bench = newest(data_dir, "bench", "bench")
        self.integ_path, integ = newest(data_dir, "sglang-integration", "sglang-integration")
        self.layers = int(integ.get("layers", LAYERS))
        self.gpu = integ.get("gpu") or bench.get("gpu")
        self.curve, self.scale = {}, {}
        cases = [c for c in integ.get("cases", []) if c.get("H") == H and c.get("T") == BASE_T]
        if not cases:
            raise MissingMeasurements(f"{self.integ_path}: no case with H={H}, T={BASE_T}")
        self.t_factor = {}
        for arm, impl in BENCH_IMPL.items():
            self.t_factor[arm] = 1.0 if T == BASE_T else self._t_factor(bench, impl, arm, H, T)
            rows = [r for r in bench.get("rows", []) if r.get("sweep") == "S" and r.get("T") == BASE_T and r.get("H") == H
                    and r.get("layout") == "scattered" and r.get("page_size") == 1 and r.get("batch", 1) == 1
                    and r.get("impl") == impl]
            if not rows:
                raise MissingMeasurements(f"{self.bench_path}: no sweep 'S' row with impl {impl!r}, T={BASE_T}, H={H}, "
                                          f"layout 'scattered', page_size 1 (needed for the {arm} arm)")
            self.curve[arm] = _average_by_s((r["S"], r["time_us"]) for r in rows)
            key = INTEGRATION_KEY[arm]
            self.scale[arm] = _average_by_s(
                (c["S"], c[key] / interp(self.curve[arm], c["S"], extrapolate=True)) for c in cases)

    def _t_factor(self, bench: dict, impl: str, arm: str, H: int, T: int) -> float:
        """The arm's bench time at T over its time at BASE_T (S = T_AT_S, H, batch 1, bf16 pool)."""
        pts = _average_by_s((r["T"], r["time_us"]) for r in bench.get("rows", [])
                            if r.get("S") == T_AT_S and r.get("H") == H and r.get("batch", 1) == 1
                            and r.get("layout") == "scattered" and r.get("page_size") == 1 and r.get("impl") == impl
                            and r.get("kv_dtype", "bfloat16") == "bfloat16" and r.get("T"))
        if not any(t == BASE_T for t, _ in pts) or len(pts) < 2:
            raise MissingMeasurements(f"{self.bench_path}: no rows with impl {impl!r} at S={T_AT_S}, H={H}, batch 1 "
                                      f"for T={BASE_T} and another T (needed to model T={T} for the {arm} arm: the "
                                      "bench's 'T' and 'production' sweeps)")
        return interp(pts, T, extrapolate=True) / interp(pts, BASE_T, extrapolate=True)

    def attention_ms(self, S: float, arm: str) -> float:
        """Per-layer verify attention time (ms) at S prefix tokens for arm 'flash' or 'triton',
        at this model's T tokens verified per request."""
        if arm not in self.curve:
            raise ValueError(f"arm must be 'flash' or 'triton', got {arm!r}")
        us = interp(self.curve[arm], S, extrapolate=True) * interp(self.scale[arm], S, extrapolate=False)
        return us * self.t_factor[arm] / 1000.0

    def step_ms(self, S: float, arm: str) -> float:
        """One TARGET_VERIFY decode step (ms): all layers of attention plus the rest of the step."""
        return self.layers * self.attention_ms(S, arm) + self.fixed_ms

    def describe(self) -> dict:
        return {"layers": self.layers, "fixed_ms": self.fixed_ms, "gpu": self.gpu, "T": self.T,
                "t_factor": {a: round(f, 4) for a, f in self.t_factor.items()},
                "bench_file": str(self.bench_path), "integration_file": str(self.integ_path),
                "formula": "step_ms = layers * attention_ms(S, arm) + fixed_ms",
                "step_ms_at_185000": {a: round(self.step_ms(185000, a), 3) for a in self.curve}}
