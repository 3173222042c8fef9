"""The SM clock and board power while a call runs (issue 25: a check of the overlap measure's method).

overlap.py and micro.py turn times into clocks at the GPU's maximum SM clock, and time the math
alone on resident tiles of zeros. Both are assumptions: a tensor pipe fed zeros toggles few bits
and draws less power than one fed real KV, and a board near its power limit lowers its clock. If
the full call ran at a lower clock than the math alone, part of what overlap.py calls the loads'
exposed time would be the clock, not the loads. This replays each mode's call back to back in a
CUDA graph for DUR seconds while nvidia-smi samples the SM clock, power and the active
clock-event reasons, and times the same call the usual way (time_calls, a few milliseconds) beside
it. Modes: full (no merge), no_loads (zeros), no_loads_noise (MODE_NOISE_RING: finite
pseudo-random resident tiles), no_math.

    python -m kernel.bench.clocks --out DIR      # JSON clocks-<gpu>-<stamp>.json, a table last
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from datetime import datetime

import torch

from ..ops import TIERS, get_workspace, launch
from .env import add_commit_arg, no_gpu, record
from .micro import MODE_NO_LOADS, MODE_NO_MATH, MODE_NO_MERGE, MODE_NOISE_RING, shape_case, sm_clock_mhz
from .sm120_estimate import tail_e_of, tiles_per_cta
from .sweeps import FP8_KV, KV_DTYPE_NAMES
from .timing import capture_graph, log, time_calls

MODES = {"full": MODE_NO_MERGE, "no_loads": MODE_NO_LOADS | MODE_NO_MERGE,
         "no_loads_noise": MODE_NO_LOADS | MODE_NO_MERGE | MODE_NOISE_RING, "no_math": MODE_NO_MATH | MODE_NO_MERGE}
# (pool, T, tier): the centre and T = 32 on bf16 at rows64d, T = 16 on fp8 at rows64d's copy
CASES = (("auto", 8, 8), ("auto", 32, 8), (FP8_KV, 16, 8))
S, H = 185000, 8
DUR_S = 1.5          # sustained replay per mode; the first RAMP_S of samples are dropped
RAMP_S = 0.3
SAMPLE_MS = 20
FIELDS = ("timestamp", "clocks.sm", "power.draw")
REASONS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")   # new name, old name


def parse_samples(lines: list[str], t0: float, t1: float) -> list[dict]:
    """nvidia-smi CSV lines (timestamp, MHz, W[, reasons]) taken between host times t0 and t1 (s)."""
    out = []
    for line in lines:
        f = [x.strip() for x in line.split(",")]
        if len(f) < 3:
            continue
        try:
            t = datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            row = {"t": t, "mhz": float(f[1]), "w": float(f[2])}
        except ValueError:
            continue
        if len(f) > 3:
            row["reasons"] = f[3]
        if t0 <= t <= t1:
            out.append(row)
    return out


def summarise(samples: list[dict]) -> dict:
    """Median, lowest and highest SM clock (MHz), median power (W), the reasons seen."""
    if not samples:
        return {"n_samples": 0, "mhz_median": None, "mhz_min": None, "mhz_max": None, "power_w": None, "reasons": []}
    mhz = [s["mhz"] for s in samples]
    return {"n_samples": len(samples), "mhz_median": statistics.median(mhz), "mhz_min": min(mhz), "mhz_max": max(mhz),
            "power_w": statistics.median(s["w"] for s in samples),
            "reasons": sorted({s["reasons"] for s in samples if "reasons" in s})}


class Sampler:
    """nvidia-smi in the background, one CSV line every SAMPLE_MS (read-only queries)."""

    def __init__(self):
        self.proc = None
        for reasons in (*REASONS, None):
            q = ",".join(FIELDS + ((reasons,) if reasons else ()))
            proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits",
                                     f"--loop-ms={SAMPLE_MS}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            time.sleep(0.4)
            if proc.poll() is None:              # still sampling: the fields were accepted
                self.proc, self.fields = proc, q
                return
            log(f"clocks: nvidia-smi refused --query-gpu={q}: {proc.stdout.read().strip()[:200]}")
        raise RuntimeError("nvidia-smi samples no SM clock here (every --query-gpu form was refused)")

    def stop(self) -> list[str]:
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        return out.splitlines()


def sustained(fn, dur_s: float) -> tuple[list[float], float, float]:
    """Per-call ms of graph replays of fn enqueued back to back for ~dur_s, and the host times
    (s) the replays started and ended."""
    est = time_calls([fn], reps=3)
    k = max(1, round(5.0 / max(est, 1e-3)))                  # ~5 ms a replay
    g = capture_graph(lambda: [fn() for _ in range(k)])
    n = max(4, round(dur_s * 1e3 / (est * k)))
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    torch.cuda.synchronize()
    t0 = time.time()
    for a, b in ev:
        a.record()
        g.replay()
        b.record()
    ev[-1][1].synchronize()
    t1 = time.time()
    return [a.elapsed_time(b) / k for a, b in ev], t0, t1


def run(dur_s: float = DUR_S) -> dict:
    ws = get_workspace("cuda")
    mhz_max = sm_clock_mhz()["sm_max"] or 1980.0
    rows = []
    for kv, T, tier in CASES:
        case, o, lse = shape_case(S, T, H, kv)
        tiles = tiles_per_cta([S], T, H, TIERS[tier], ws.target_ctas, tail_e_of(tier, KV_DTYPE_NAMES[kv]))
        for name, mode in MODES.items():
            fn = lambda: launch(*case.args(), o, lse, ws.buffer, ws.target_ctas, ws.max_bs, mode=mode, tier=tier,
                                **case.kwargs())
            short_us = time_calls([fn]) * 1e3
            sampler = Sampler()
            ms, t0, t1 = sustained(fn, dur_s)
            lines = sampler.stop()
            clk = summarise(parse_samples(lines, t0 + RAMP_S, t1))
            tail = ms[len(ms) // 3:]                         # past the ramp, as the samples
            sus_us = statistics.median(tail) * 1e3
            mhz = clk["mhz_median"]
            rows.append({"S": S, "T": T, "H": H, "tier": tier, "kv_dtype": KV_DTYPE_NAMES[kv], "mode": name,
                         "short_us": short_us, "sustained_us": sus_us, "sustained_first_us": ms[0] * 1e3,
                         "replays": len(ms), "tiles_per_cta": tiles, **clk, "sampled_fields": sampler.fields,
                         "clk_per_tile_at_max": sus_us * mhz_max / tiles,
                         "clk_per_tile_at_sampled": sus_us * mhz / tiles if mhz else None})
            log(f"clocks {KV_DTYPE_NAMES[kv]:9s} T={T:<3} tier {tier} {name:15s} short {short_us:7.1f} us  sustained "
                f"{sus_us:7.1f} us  SM {mhz} MHz ({clk['mhz_min']}-{clk['mhz_max']})  {clk['power_w']} W  {clk['reasons']}")
        del case, o, lse
        torch.cuda.empty_cache()
    return {"kind": "clocks", "clock_max_mhz": mhz_max, "dur_s": dur_s, "ramp_s": RAMP_S, "sample_ms": SAMPLE_MS,
            "rows": rows}


def table(doc: dict) -> list[str]:
    out = [f"{'pool':9s} {'T':>3} {'tier':>4} {'mode':15s} {'short us':>9} {'sust. us':>9} {'MHz':>6} {'W':>6} reasons"]
    for r in doc["rows"]:
        mhz = f"{r['mhz_median']:.0f}" if r["mhz_median"] else "-"
        w = f"{r['power_w']:.0f}" if r["power_w"] else "-"
        out.append(f"{r['kv_dtype']:9s} {r['T']:>3} {r['tier']:>4} {r['mode']:15s} {r['short_us']:9.1f} "
                   f"{r['sustained_us']:9.1f} {mhz:>6} {w:>6} {' '.join(r['reasons'])}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for clocks-<gpu>-<stamp>.json")
    ap.add_argument("--dur", type=float, default=DUR_S, help=f"seconds of sustained replay a mode (default {DUR_S})")
    add_commit_arg(ap)
    a = ap.parse_args(argv)
    if not a.dur > RAMP_S:
        print(f"error: --dur: {a.dur} s leaves nothing past the {RAMP_S} s ramp", file=sys.stderr)
        return 2
    if no_gpu("kernel.bench.clocks"):
        return 2
    doc = record(a.out, "clocks", a.commit, run(a.dur))
    print("\n".join(table(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
