"""Rung L6 of the kernel memo: what a call costs beyond its KV bytes (`--stages fixed`).

For the default tier of T = 1, 8 and 16 (H = 8, one request, page 1 scattered; T = 16 on the
fp8_e4m3 pool only), on the bf16 and the fp8_e4m3 pool, the call is timed (CUDA-graph replays, as
SGLang runs verify) whole, without the merge, and as its math alone without the merge (no KV load
issued: micro's MODE_NO_LOADS) at prefix lengths from 128 tokens (one split, one CTA) to 262k.
Below ~34k tokens every CTA gets the shortest split (128 tokens), so the time there is the fixed
cost plus one split; above, the time grows with the KV: a least-squares line through the
points from 65k on gives the fixed cost (intercept, us) and the marginal rate (GB/s of KV).
A second line through the same points, against the busiest CTA's 16-token tiles (the plan's own
count, sm120_estimate.tiles_per_cta), splits each time into what a call costs once (intercept,
us) and what one more tile costs (SM clocks at the clock nvidia-smi reports as the maximum): for
the math alone, the tile's own clocks apart from the plan, prologue, epilogue and launch that
micro's `parts` (clocks a tile = the call's time over its tiles) spreads over the tiles.
At 185k, CUPTI (torch.profiler) times the verify kernel and the merge on the device, one by
one, and the start of the merge after the end of the verify kernel (negative: its CTAs were
resident before; the merge launches as a programmatic dependent).
"""
from __future__ import annotations

import torch

from ..ops import TIERS, get_workspace, launch, pick_tier
from .micro import MODE_NO_LOADS, MODE_NO_MERGE, shape_case, sm_clock_mhz
from .sm120_estimate import tail_e_of, tiles_per_cta
from .sweeps import FP8_KV, KV_DTYPE_NAMES, traffic
from .timing import log, time_calls

S_POINTS = (128, 1024, 4096, 16384, 65536, 131072, 185000, 262144)
FIT_FROM = 65536                     # every CTA's split is longer than the shortest from here on
# (T, H, pool); fp8's T = 16 is issue 25's fp8 target shape
CASES = ((1, 8, "auto"), (8, 8, "auto"), (1, 8, FP8_KV), (8, 8, FP8_KV), (16, 8, FP8_KV))
PROFILED_S = 185000
# the timings of a point: mode bits (micro.py) by row key
MODES = {"time_us": 0, "no_merge_us": MODE_NO_MERGE, "math_alone_us": MODE_NO_LOADS | MODE_NO_MERGE}


def line_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys against xs; needs two distinct xs."""
    n = len(xs)
    if n < 2 or len(set(xs)) < 2:
        raise ValueError(f"xs: need two distinct points, got {xs}")
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def kernel_times(events: list[tuple[str, float, float]]) -> dict:
    """Medians over calls from (name, start_us, end_us) device events in launch order: the
    verify kernel's and the merge's durations, and the merge's start after the verify end."""
    main, merge, gap = [], [], []
    last = None
    for name, t0, t1 in sorted(events, key=lambda e: e[1]):
        if "mla_verify_combine" in name:
            if last is not None:
                merge.append(t1 - t0)
                gap.append(t0 - last[1])
                last = None
        elif "mla_verify_kernel" in name:
            last = (t0, t1)
            main.append(t1 - t0)
    med = lambda v: sorted(v)[len(v) // 2] if v else None
    return {"calls": len(main), "verify_us": med(main), "merge_us": med(merge), "merge_start_after_verify_end_us": med(gap)}


def _profiled(fn, n: int = 20) -> dict:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    ev = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events() if e.device_type == DeviceType.CUDA]
    return kernel_times(ev)


def tile_fit(rows: list[dict], key: str, mhz: float) -> dict:
    """The line of rows' `key` (us) against their `tiles_per_cta`: the call's cost once (intercept,
    us) and a tile's (marginal, us and SM clocks at `mhz`)."""
    a, b = line_fit([float(r["tiles_per_cta"]) for r in rows], [r[key] for r in rows])
    return {"tile_intercept_us": a, "marginal_us_per_tile": b, "marginal_clk_per_tile": b * mhz}


def run() -> dict:
    ws = get_workspace("cuda")
    mhz = sm_clock_mhz()["sm_max"] or 1980.0
    rows, fits = [], []
    for T, H, kv in CASES:
        pool = KV_DTYPE_NAMES[kv]
        tier = pick_tier(H, T, 1, T, kv_fp8=kv == FP8_KV)
        pts = []
        for S in S_POINTS:
            case, o, lse = shape_case(S, T, H, kv)
            call = lambda mode: launch(*case.args(), o, lse, ws.buffer, ws.target_ctas, ws.max_bs, mode=mode,
                                       tier=tier, **case.kwargs())
            row = {"S": S, "T": T, "H": H, "tier": tier, "kv_dtype": pool,
                   **{key: time_calls([lambda: call(mode)]) * 1e3 for key, mode in MODES.items()},
                   "kv_bytes": traffic([S], T, H, kv)["kv_bytes"],
                   "tiles_per_cta": tiles_per_cta([S], T, H, TIERS[tier], ws.target_ctas, tail_e_of(tier, pool))}
            full, nomerge = row["time_us"], row["no_merge_us"]
            if S == PROFILED_S:
                try:
                    row["cupti"] = _profiled(lambda: call(0))
                except Exception as e:   # a profiler that cannot attach must not lose the timings
                    row["cupti"] = {"error": f"{type(e).__name__}: {e}"[:500]}
            rows.append(row)
            pts.append(row)
            log(f"fixed {pool:9s} T={T} tier {tier} S={S:>6}: {full:8.1f} us, without the merge {nomerge:8.1f} us, "
                f"math alone {row['math_alone_us']:8.1f} us, {row['tiles_per_cta']} tiles a CTA"
                + (f", cupti {row['cupti']}" if "cupti" in row else ""))
            del case, o, lse
        torch.cuda.empty_cache()
        big = [p for p in pts if p["S"] >= FIT_FROM]
        for key in MODES:
            a, b = line_fit([p["kv_bytes"] for p in big], [p[key] for p in big])
            per_tile = tile_fit(big, key, mhz)
            fits.append({"T": T, "H": H, "tier": tier, "kv_dtype": pool, "of": key, "fit_from_S": FIT_FROM,
                         "intercept_us": a, "marginal_GBps": 1e-3 / b if b > 0 else None, **per_tile})
            log(f"fixed {pool:9s} T={T} {key}: intercept {a:.1f} us, marginal {1e-3 / b if b > 0 else float('nan'):.0f} GB/s;"
                f" a tile {per_tile['marginal_clk_per_tile']:.0f} clk beside {per_tile['tile_intercept_us']:.1f} us a call")
    return {"kind": "fixed_cost", "clock_mhz": mhz, "rows": rows, "fits": fits}
