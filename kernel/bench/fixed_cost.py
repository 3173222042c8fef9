"""Rung L6 of the kernel memo: what a call costs beyond its KV bytes (`--stages fixed`).

For the default tier of T = 1 and T = 8 (H = 8, one request, page 1 scattered), on the bf16
and the fp8_e4m3 pool, the call is timed (CUDA-graph replays, as SGLang runs verify) whole
and without the merge at prefix lengths from 128 tokens (one split, one CTA) to 262k. Below
~34k tokens every CTA gets the shortest split (128 tokens), so the time there is the fixed
cost plus one split; above, the time grows with the KV: a least-squares line through the
points from 65k on gives the fixed cost (intercept, us) and the marginal rate (GB/s of KV).
At 185k, CUPTI (torch.profiler) times the verify kernel and the merge on the device, one by
one, and the start of the merge after the end of the verify kernel (negative: its CTAs were
resident before; the merge launches as a programmatic dependent).
"""
from __future__ import annotations

import torch

from ..ops import get_workspace, launch, pick_tier
from .micro import MODE_NO_MERGE, shape_case
from .sweeps import FP8_KV, KV_DTYPE_NAMES, traffic
from .timing import log, time_calls

S_POINTS = (128, 1024, 4096, 16384, 65536, 131072, 185000, 262144)
FIT_FROM = 65536                     # every CTA's split is longer than the shortest from here on
CASES = ((1, 8, "auto"), (8, 8, "auto"), (1, 8, FP8_KV), (8, 8, FP8_KV))   # (T, H, pool)
PROFILED_S = 185000


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


def run() -> dict:
    ws = get_workspace("cuda")
    rows, fits = [], []
    for T, H, kv in CASES:
        pool = KV_DTYPE_NAMES[kv]
        tier = pick_tier(H, T, 1, T, kv_fp8=kv == FP8_KV)
        pts = []
        for S in S_POINTS:
            case, o, lse = shape_case(S, T, H, kv)
            call = lambda mode: launch(*case.args(), o, lse, ws.buffer, ws.target_ctas, ws.max_bs, mode=mode,
                                       tier=tier, **case.kwargs())
            full = time_calls([lambda: call(0)]) * 1e3
            nomerge = time_calls([lambda: call(MODE_NO_MERGE)]) * 1e3
            row = {"S": S, "T": T, "H": H, "tier": tier, "kv_dtype": pool, "time_us": full, "no_merge_us": nomerge,
                   "kv_bytes": traffic([S], T, H, kv)["kv_bytes"]}
            if S == PROFILED_S:
                try:
                    row["cupti"] = _profiled(lambda: call(0))
                except Exception as e:   # a profiler that cannot attach must not lose the timings
                    row["cupti"] = {"error": f"{type(e).__name__}: {e}"[:500]}
            rows.append(row)
            pts.append(row)
            log(f"fixed {pool:9s} T={T} tier {tier} S={S:>6}: {full:8.1f} us, without the merge {nomerge:8.1f} us"
                + (f", cupti {row['cupti']}" if "cupti" in row else ""))
            del case, o, lse
        torch.cuda.empty_cache()
        big = [p for p in pts if p["S"] >= FIT_FROM]
        for key in ("time_us", "no_merge_us"):
            a, b = line_fit([p["kv_bytes"] for p in big], [p[key] for p in big])
            fits.append({"T": T, "H": H, "tier": tier, "kv_dtype": pool, "of": key, "fit_from_S": FIT_FROM,
                         "intercept_us": a, "marginal_GBps": 1e-3 / b if b > 0 else None})
            log(f"fixed {pool:9s} T={T} {key}: intercept {a:.1f} us, marginal {1e-3 / b if b > 0 else float('nan'):.0f} GB/s")
    return {"kind": "fixed_cost", "rows": rows, "fits": fits}
