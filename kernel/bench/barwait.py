"""Where rowsd's warps wait, half by half (issue 25): the diagnostic build -DMLAV_BARWAIT (sm_90,
compiled on the GPU machine) has every warp sum the SM clocks (`clock()`, so no clock rate is
assumed) it spends in the loop-top cp.async wait, at the loop-top CTA barrier, at its half's
named barriers and in the whole loop, and count its tiles. Per half, per tile: what the loop
costs, and how much of it is waiting, with the KV loads (full), without (zeros or noise
resident), so that the loads' cost shows as the half that waits for the other. The counters add
about 10 instructions a tile to each half's loop; the table's clocks are that build's.

    python -m kernel.bench.barwait --out DIR     # JSON barwait-<gpu>-<stamp>.json, a table last
    python -m kernel.bench.barwait --variant NAME --out DIR   # a diagnostic build of overlap.VARIANTS
"""
from __future__ import annotations

import argparse
import ctypes
import sys

import torch

from .. import build
from ..ops import TIERS, get_workspace, launch
from .env import add_commit_arg, no_gpu, record
from .micro import MODE_NO_LOADS, MODE_NO_MERGE, MODE_NOISE_RING, shape_case
from .overlap import VARIANTS
from .sweeps import FP8_KV, KV_DTYPE_NAMES
from .timing import log, time_calls

DEFINES = ("MLAV_BARWAIT",)
KINDS = ("data", "cta", "half", "loop", "tiles", "warps")    # g_barwait's columns (verify_common.cuh)
MODES = {"full": MODE_NO_MERGE, "no_loads": MODE_NO_LOADS | MODE_NO_MERGE,
         "no_loads_noise": MODE_NO_LOADS | MODE_NO_MERGE | MODE_NOISE_RING}
# (pool, T, tier): rows64d at the centre and T = 32 on bf16, its fp8 copy at T = 16; rows32d
CASES = (("auto", 8, 8), ("auto", 32, 8), (FP8_KV, 16, 8), ("auto", 8, 6))
S, H = 185000, 8
CALLS = 10


def per_tile(raw: list[int]) -> dict:
    """One half's counters [data, cta, half, loop, tiles, warps] -> SM clocks a warp spends per
    tile in each (None for a half that did not run)."""
    c = dict(zip(KINDS, raw))
    if not c["tiles"]:
        return {f"{k}_clk": None for k in ("data", "cta", "half", "loop", "busy")}
    out = {f"{k}_clk": c[k] / c["tiles"] for k in ("data", "cta", "half", "loop")}
    # issuing, or stalled on anything but these waits
    out["busy_clk"] = out["loop_clk"] - out["data_clk"] - out["cta_clk"] - out["half_clk"]
    out["tiles_per_warp"] = c["tiles"] / c["warps"]
    return out


def run(extra=()) -> dict:
    """`extra`: -D macros of a diagnostic variant (overlap.VARIANTS) built with the counters."""
    lib = build.load(("90",), DEFINES + tuple(extra))
    host = (ctypes.c_ulonglong * (2 * len(KINDS)))()

    def counters(fn) -> list[list[int]]:
        if lib.mla_verify_barwait(None, 1):
            raise RuntimeError("mla_verify_barwait reset failed")
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
        err = lib.mla_verify_barwait(host, 0)
        if err:
            raise RuntimeError(f"mla_verify_barwait copy failed: cudaError {err}")
        flat = list(host)
        return [flat[:len(KINDS)], flat[len(KINDS):]]

    ws = get_workspace("cuda")
    rows = []
    for kv, T, tier in CASES:
        case, o, lse = shape_case(S, T, H, kv)
        for name, mode in MODES.items():
            fn = lambda: launch(*case.args(), o, lse, ws.buffer, ws.target_ctas, ws.max_bs, mode=mode, tier=tier,
                                lib=lib, **case.kwargs())
            us = time_calls([fn]) * 1e3
            raw = counters(fn)
            for half in (0, 1):
                if not raw[half][KINDS.index("tiles")]:
                    continue
                pt = per_tile(raw[half])
                rows.append({"S": S, "T": T, "H": H, "tier": tier, "rows_per_tile": TIERS[tier],
                             "kv_dtype": KV_DTYPE_NAMES[kv], "mode": name, "half": half, "time_us": us,
                             "raw": dict(zip(KINDS, raw[half])), **pt})
                log(f"barwait {KV_DTYPE_NAMES[kv]:9s} T={T:<3} tier {tier} {name:15s} half {half}: {us:7.1f} us, "
                    f"clk/tile loop {pt['loop_clk']:6.0f} = data {pt['data_clk']:5.0f} + cta {pt['cta_clk']:5.0f} + "
                    f"half {pt['half_clk']:5.0f} + busy {pt['busy_clk']:6.0f}")
        del case, o, lse
        torch.cuda.empty_cache()
    return {"kind": "barwait", "defines": list(DEFINES), "calls": CALLS, "rows": rows}


def table(doc: dict) -> list[str]:
    out = [f"{'pool':9s} {'T':>3} {'tier':>4} {'mode':15s} {'half':>4} {'us':>7} {'loop':>6} {'data':>5} {'cta':>5} "
           f"{'bar':>5} {'busy':>6}   (SM clocks a warp spends per tile: cp.async wait, CTA barrier, half barriers)"]
    for r in doc["rows"]:
        out.append(f"{r['kv_dtype']:9s} {r['T']:>3} {r['tier']:>4} {r['mode']:15s} {r['half']:>4} {r['time_us']:7.1f} "
                   f"{r['loop_clk']:6.0f} {r['data_clk']:5.0f} {r['cta_clk']:5.0f} {r['half_clk']:5.0f} {r['busy_clk']:6.0f}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for barwait-<gpu>-<stamp>.json")
    ap.add_argument("--variant", default="", help="a diagnostic build of overlap.VARIANTS, counted instead of production")
    add_commit_arg(ap)
    a = ap.parse_args(argv)
    if a.variant and a.variant not in VARIANTS:
        print(f"error: --variant: {a.variant!r} not among {sorted(VARIANTS)}", file=sys.stderr)
        return 2
    if no_gpu("kernel.bench.barwait"):
        return 2
    if torch.cuda.get_device_capability() != (9, 0):
        print(f"error: the barwait build is sm_90's; this GPU is sm_{''.join(map(str, torch.cuda.get_device_capability()))}",
              file=sys.stderr)
        return 2
    extra = VARIANTS[a.variant][0] if a.variant else ()
    doc = record(a.out, "barwait", a.commit, dict(run(extra), variant=a.variant or "production",
                                                   variant_defines=list(extra)))
    print("\n".join(table(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
