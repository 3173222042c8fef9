"""Where a call's time goes, phase by phase (`gpu_run --stages trace`): the diagnostic build
(-DMLAV_TRACE, sm_90 only, compiled on the GPU machine) has thread 0 of every CTA record
%globaltimer at fixed points of the verify kernel (0 entry, 1 schedule planned, 2 first tile's
loop, 3 loop done, 4 result stored) and of the merge (0 entry, 1 past griddepcontrol.wait,
2 splits summed, 3 stored). One call, replayed alone in a CUDA graph as SGLang runs it; the
medians over REPS replays of: the verify kernel's launch spread, plan, prologue, loop (fastest,
median and slowest CTA: the tail), epilogue; the merge's start, wait, loop and end after the
last verify CTA ended; and the whole span from the first CTA's entry to the merge's last store,
next to the graph-replayed time of the same call; whether the CTAs that start last also store
last (the correlation of their start and store times), the last store after the median one, how
much longer the loops of the CTAs dispatched second on an SM run, and every working CTA's times
of the last replay. Times in us; the timer ticks every ~32 ns. Points 5 and up are free for a
diagnostic source's own trace points (a patched tier_rowsd.cuh, say, which may also raise
TRACE_POINTS); each one's median time after the plan over the working CTAs that recorded it is
reported as point<k>_after_plan_us, their count as point<k>_ctas, and every CTA's times follow
the fixed ones in per_cta_last_replay.

    python -m kernel.bench.trace --out DIR                                # CASES, production's code
    python -m kernel.bench.trace --define MLAV_NO_PDL_TRIGGER --cases 185000:8:8:bf16 --out DIR
                                                    # a diagnostic build's macros beside MLAV_TRACE
    python -m kernel.bench.trace --repeat 2 --out DIR  # the second of two calls in one graph

--repeat N captures the call N times back to back in one graph and reports the last one: the same
inputs and outputs, so what differs from N = 1 is what the calls before it left behind (the kernel's
code in L2 where their KV did not push it out, in the SMs' instruction caches if any survives a launch;
the indptr lines); graph_us stays one call's time.
"""
from __future__ import annotations

import argparse
import ctypes
import re
import statistics
import sys

import torch

from .. import build
from ..ops import launch, pick_tier
from .env import add_commit_arg, no_gpu, record
from .micro import shape_case
from .sweeps import FP8_KV, KV_DTYPE_NAMES
from .timing import capture_graph, log, time_calls

DEFINES = ("MLAV_TRACE",)
REPS = 5
# (S, T, H, pool): the shapes whose fixed cost and merge decide T = 1 and the short context
CASES = ((185000, 1, 8, "auto"), (185000, 4, 8, "auto"), (185000, 8, 8, "auto"), (16384, 8, 8, "auto"),
         (185000, 1, 8, FP8_KV), (185000, 8, 8, FP8_KV))


def _med(v):
    return statistics.median(v) if v else None


def phases(verify: list[list[int]], merge: list[list[int]]) -> dict:
    """Phase times (us) of one call from the traced CTAs' timestamps (ns; rows of points, zero
    rows = CTAs that did not run). `verify` rows: [entry, planned, loop, loop done, stored, ...];
    `merge` rows: [entry, waited, summed, stored, ...]."""
    v = [r for r in verify if r[0]]
    if not v:
        raise ValueError("verify: no traced CTA ran")
    work = [r for r in v if r[2]]
    t0 = min(r[0] for r in v)
    us = lambda ns: ns / 1e3
    out = {"ctas": len(v), "working_ctas": len(work),
           "verify_launch_spread_us": us(max(r[0] for r in v) - t0),
           "plan_us": us(_med([r[1] - r[0] for r in v])),
           "prologue_us": us(_med([r[2] - r[1] for r in work])) if work else None}
    if work:
        loops = [r[3] - r[2] for r in work]
        end = max(r[4] for r in work)
        out.update(loop_min_us=us(min(loops)), loop_median_us=us(_med(loops)), loop_max_us=us(max(loops)),
                   epilogue_us=us(_med([r[4] - r[3] for r in work])),
                   first_store_us=us(min(r[4] for r in work) - t0), last_store_us=us(end - t0))
        m = [r for r in merge if r[0]]
        if m:
            out.update(merge_ctas=len(m), merge_first_entry_after_verify_us=us(min(r[0] for r in m) - end),
                       merge_waited_after_verify_us=us(_med([r[1] - end for r in m])),
                       merge_summed_after_verify_us=us(_med([r[2] - end for r in m if r[2]])) if any(r[2] for r in m)
                       else None,
                       merge_last_store_after_verify_us=us(max(r[3] for r in m) - end))
            end = max(end, max(r[3] for r in m))
        out["span_us"] = us(end - t0)
        # points 5 and up: free for a diagnostic source's own MLAV_TRACE_AT (none in production's),
        # as us after the plan (point 1), the median over the working CTAs that recorded them (a
        # point at tile j of the loop is missed by items of j tiles or fewer), with their count
        for k in range(5, min(len(r) for r in work)):
            got = [r[k] - r[1] for r in work if r[k]]
            if got:
                out[f"point{k}_after_plan_us"] = us(_med(got))
                out[f"point{k}_ctas"] = len(got)
        starts, stores = [r[0] for r in work], [r[4] for r in work]
        # the CTAs with work (item-less ones start late and return at once: no cost)
        out["working_launch_spread_us"] = us(max(starts) - min(starts))
        # the tail the merge waits for: the last store after the median one (the shortest split,
        # the request's last, stores early and is left out of this by the median)
        out["store_tail_us"] = us(max(stores) - _med(stores))
        # is the tail the launch order (late starters end late) or the CTAs' own speed?
        out["start_store_corr"] = pearson(starts, stores)
        out["entry_to_store_min_us"] = us(min(b - a for a, b in zip(starts, stores)))
        out["entry_to_store_max_us"] = us(max(b - a for a, b in zip(starts, stores)))
    return out


def pearson(xs: list[float], ys: list[float]) -> float | None:
    """Correlation coefficient of two equal-length lists; None when either is constant."""
    n = len(xs)
    if n < 2 or len(ys) != n:
        raise ValueError(f"xs, ys: need two equal-length lists of >= 2, got {len(xs)} and {len(ys)}")
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return sxy / (sxx * syy) ** 0.5 if sxx > 0 and syy > 0 else None


def second_cta_excess(rows: list[list[float]], sms: int) -> float | None:
    """Mean loop (us) of the CTAs past the first `sms` (a second CTA on an SM, by dispatch order)
    minus that of the first `sms`, from per_cta rows; the request's last split (shorter) is left
    out. None with one CTA per SM."""
    body = rows[:-1]
    first = [r[3] - r[2] for r in body if r[0] < sms]
    second = [r[3] - r[2] for r in body if r[0] >= sms]
    if not first or not second:
        return None
    return sum(second) / len(second) - sum(first) / len(first)


def per_cta(verify: list[list[int]]) -> list[list[float]]:
    """[block, entry, loop start, loop end, store] per working CTA, us after the first entry; a
    diagnostic source's points 5 and up follow where any working CTA recorded one (None where a
    CTA did not)."""
    v = [(c, r) for c, r in enumerate(verify) if r[0]]
    t0 = min(r[0] for _, r in v)
    extra = [k for k in range(5, min(len(r) for _, r in v)) if any(r[k] for _, r in v if r[2])]
    at = lambda r, k: round((r[k] - t0) / 1e3, 3) if r[k] else None
    return [[c] + [at(r, k) for k in (0, 2, 3, 4, *extra)] for c, r in v if r[2]]


def run(cases=CASES, defines=(), repeat: int = 1) -> dict:
    """Trace `cases` ((S, T, H, pool) at pick_tier's tier) on the MLAV_TRACE build, with `defines`
    of a diagnostic variant beside MLAV_TRACE; the last of `repeat` calls captured in one graph."""
    if repeat < 1:
        raise ValueError(f"repeat: {repeat} calls a graph (at least 1)")
    lib = build.load(("90",), DEFINES + tuple(defines))
    dims = (ctypes.c_int * 2)()
    err = lib.mla_verify_trace(None, 1, dims)
    if err:
        raise RuntimeError(f"mla_verify_trace reset failed: cudaError {err}")
    n_ctas, n_pts = dims[0], dims[1]
    host = (ctypes.c_ulonglong * (2 * n_ctas * n_pts))()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ws = torch.empty(lib.mla_verify_workspace_bytes(sms, 64), dtype=torch.uint8, device="cuda")
    rows = []
    for S, T, H, kv in cases:
        pool = KV_DTYPE_NAMES[kv]
        tier = pick_tier(H, T, 1, T, kv_fp8=kv == FP8_KV)
        case, o, lse = shape_case(S, T, H, kv)
        call = lambda: launch(*case.args(), o, lse, ws, sms, 64, tier=tier, lib=lib, **case.kwargs())
        graph_us = time_calls([call]) * 1e3
        g = capture_graph(lambda: [call() for _ in range(repeat)])
        reps = []
        for _ in range(REPS + 1):
            g.replay()
            torch.cuda.synchronize()
            lib.mla_verify_trace(None, 1, None)
            g.replay()
            torch.cuda.synchronize()
            err = lib.mla_verify_trace(host, 0, None)
            if err:
                raise RuntimeError(f"mla_verify_trace copy failed: cudaError {err}")
            flat = list(host)
            block = lambda k: [flat[(k * n_ctas + c) * n_pts:(k * n_ctas + c + 1) * n_pts] for c in range(n_ctas)]
            reps.append(phases(block(0), block(1)))
        reps = reps[1:]
        row = {"S": S, "T": T, "H": H, "tier": tier, "kv_dtype": pool, "graph_us": graph_us, "reps": REPS,
               "per_cta_last_replay": per_cta(block(0))}
        row["second_cta_loop_excess_us"] = second_cta_excess(row["per_cta_last_replay"], sms)
        for k in reps[0]:
            vals = [r[k] for r in reps if r.get(k) is not None]   # medians over the replays
            row[k] = _med(vals) if vals else None
        rows.append(row)
        log(f"trace {pool:9s} S={S} T={T} tier {tier}: graph {graph_us:.1f} us; " +
            ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()
                      if (k.endswith("_us") and k != "graph_us") or k == "start_store_corr"))
        del case, o, lse, g
        torch.cuda.empty_cache()
    return {"kind": "trace", "defines": list(DEFINES + tuple(defines)), "calls_per_graph": repeat, "rows": rows}


POOLS = {"bf16": "auto", "fp8": FP8_KV}
MACRO = re.compile(r"MLAV_[A-Z0-9_]+(=-?[0-9]+)?")


def parse_cases(text: str) -> tuple:
    """'S:T:H:POOL,...' (POOL bf16 or fp8) -> CASES-style tuples; ValueError naming the bad one."""
    out = []
    for item in (t for t in text.split(",") if t):
        parts = item.split(":")
        if len(parts) != 4 or parts[3] not in POOLS or not all(p.isdigit() and int(p) > 0 for p in parts[:3]):
            raise ValueError(f"--cases: {item!r} is not S:T:H:POOL with positive S, T, H and POOL bf16 or fp8")
        out.append((int(parts[0]), int(parts[1]), int(parts[2]), POOLS[parts[3]]))
    return tuple(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="per-CTA phase times of one call (the MLAV_TRACE build)")
    ap.add_argument("--out", required=True, help="folder for trace-<gpu>-<stamp>.json")
    ap.add_argument("--define", action="append", default=[], metavar="MLAV_NAME[=N]",
                    help="a diagnostic build's macro beside MLAV_TRACE (repeatable)")
    ap.add_argument("--cases", default="", metavar="S:T:H:POOL,...",
                    help="the calls to trace, POOL bf16 or fp8, each at pick_tier's tier (default: CASES)")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="capture N calls back to back in one graph and trace the last (default 1)")
    add_commit_arg(ap)
    a = ap.parse_args(argv)
    if a.repeat < 1:
        print(f"error: --repeat: {a.repeat} calls a graph (at least 1)", file=sys.stderr)
        return 2
    try:
        cases = parse_cases(a.cases) or CASES
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    bad = [d for d in a.define if not MACRO.fullmatch(d)]
    if bad:
        print(f"error: --define: {bad} (expected MLAV_NAME or MLAV_NAME=integer)", file=sys.stderr)
        return 2
    if no_gpu("kernel.bench.trace"):
        return 2
    doc = record(a.out, "trace", a.commit, run(cases, tuple(a.define), a.repeat))
    keys = ("graph_us", "span_us", "last_store_us", "epilogue_us", "merge_first_entry_after_verify_us",
            "merge_waited_after_verify_us", "merge_summed_after_verify_us", "merge_last_store_after_verify_us")
    print(f"{'pool':9s} {'T':>3} {'tier':>4} " + " ".join(f"{k.replace('_after_verify', '').replace('_us', ''):>12s}"
                                                       for k in keys))
    for r in doc["rows"]:
        print(f"{r['kv_dtype']:9s} {r['T']:>3} {r['tier']:>4} " + " ".join(
            f"{r[k]:12.2f}" if isinstance(r.get(k), float) else f"{'-':>12s}" for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
