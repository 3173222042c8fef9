"""Timing and comparison helpers every GPU check shares: CUDA-event medians over graph
replays, graph capture, relative error against a float64 reference, a timestamped log."""
from __future__ import annotations

import math
import time

import torch


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _events_ms(fn, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return out


def capture_graph(fn) -> torch.cuda.CUDAGraph:
    """Run `fn` once on a side stream (capture wants warmed-up work), then capture it."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def time_calls(fns: list, reps: int = 7, graph: bool = True, graph_limit_ms: float = 20.0) -> float:
    """Median milliseconds per call. fns: closures over rotating input copies.

    graph=False for code that cannot be captured (host syncs): calls are timed one by one.
    """
    fns[0]()                                   # warm-up (Triton compiles here)
    torch.cuda.synchronize()
    est = sorted(_events_ms(fns[0], 1))[0]
    if est > graph_limit_ms or not graph:      # slow or uncapturable: time calls one by one
        n = 2 if est > 1000 else (3 if est > 20.0 else reps)
        ms = []
        for i in range(n):
            ms += _events_ms(fns[(i + 1) % len(fns)], 1)
        return sorted(ms)[n // 2]
    k = max(1, min(64, math.ceil(4.0 / max(est, 1e-3))))
    g = capture_graph(lambda: [fns[i % len(fns)]() for i in range(k)])
    g.replay()
    torch.cuda.synchronize()
    ms = sorted(_events_ms(g.replay, reps))
    return ms[len(ms) // 2] / k


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    a, ref = a.double(), ref.double()
    fin = torch.isfinite(ref)
    return float((a[fin] - ref[fin]).norm() / ref[fin].norm().clamp_min(1e-300))


def time_flushed(fn, reps: int = 7, k: int = 16) -> float:
    """Median milliseconds of `fn` with L2 flushed before every call: k x (flush, fn) replayed
    in one CUDA graph, minus k flushes alone (a 2 x L2 memset evicts every line)."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    buf = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
    flush = buf.zero_
    fn()
    torch.cuda.synchronize()
    both = capture_graph(lambda: [(flush(), fn()) for _ in range(k)])
    alone = capture_graph(lambda: [flush() for _ in range(k)])
    both.replay(); alone.replay()
    torch.cuda.synchronize()
    t_both = sorted(_events_ms(both.replay, reps))[reps // 2]
    t_alone = sorted(_events_ms(alone.replay, reps))[reps // 2]
    return (t_both - t_alone) / k
