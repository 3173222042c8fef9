"""Microbenchmarks of the kernel memo's ladder, in situ: each tier's own code with stages left
out. The shipped rowsd and fp8 small kernels test no mode bits (constants cost fewer issue
slots), so for those the bits pick a copy of the same body at launch (Kind,
kernel/csrc/verify_common.cuh): the math alone is the shipped code with its loads compiled out;
the other tiers run the shipped kernel itself with the bits tested at run time.

- stream (rung L1): the kernel without its math and merge (mode 1 | 4): the paged KV gather
  alone, per tier and L2 policy (the small tier's evict-first, or plain), as GB/s of the KV
  bytes against the read ceiling of the same run.
- mma (rung L2): the kernel without its KV loads and merge (mode 2 | 4): the per-tile math on
  shared-memory-resident tiles, as SM clocks per 16-token tile on the busiest CTA.
- full: the whole kernel (mode 0), without the merge (mode 4): the merge's share, and with the
  merge launched as an ordinary kernel instead of a programmatic dependent (mode 128). The three
  are timed in FULL_ROUNDS rounds of alternating order, each kept as the median of its rounds and
  the merge as the median of the rounds' differences: timed once each, one after the other, the
  merge's figure differed by up to 4 us between tiers that share one merge at one shape
  (micro-h100-20261205T1810.json), and it is the sm_120 model's merge term.
Every row says its pool's kv_dtype: SHAPES on a bf16 pool, FP8_SHAPES on SGLang's fp8_e4m3 pool
(the fp8 tiers' kernels; KV bytes at 576 per prefix row).
"""
from __future__ import annotations

import statistics
import subprocess

import torch

from ..inputs import make_case
from ..ops import TIERS, get_workspace, launch
from .sm120_estimate import TAIL_E, WAVE_FIT, tail_e_of, tiles_per_cta
from .sweeps import FP8_KV, KV_DTYPE_NAMES, traffic
from .timing import log, time_calls

MODE_NO_MATH, MODE_NO_LOADS, MODE_NO_MERGE, MODE_PLAIN_CACHE = 1, 2, 4, 8
MODE_NO_SOFTMAX, MODE_NO_QK, MODE_NO_PV = 16, 32, 64     # the design D tiers' diagnostic copy only
MODE_NO_PDL = 128                                         # the merge as an ordinary launch
MODE_NOISE_RING = 256                                     # rowsd's math-only tiles: noise, not zeros
# rung L2 for the design D tiers (6, 8, and 9: rows64d_pair), part by part: the math on
# shared-memory-resident tiles with parts left out
PARTS = {"math": 0, "no_softmax": MODE_NO_SOFTMAX, "no_qk": MODE_NO_QK, "no_pv": MODE_NO_PV,
         "softmax_only": MODE_NO_QK | MODE_NO_PV, "skeleton": MODE_NO_SOFTMAX | MODE_NO_QK | MODE_NO_PV}
# the small and design D tiers stream under an L2 evict-first policy; mode 8 measures the plain
# policy beside it (rows64 has only the plain one)
STREAM_OPTIONS = {"evict_first": 0, "plain": MODE_PLAIN_CACHE}
FULL_ROUNDS = 3   # rounds of the full stage's three timings (module docstring)
# (S, T, H, tiers): the centre, the rows of T = 1 and 4, compute-bound T, and a short
# context; each at its candidate tiers (more row tiles of fewer rows read the KV through L2);
# rows64d_pair (9, opt-in) beside rows64d where 64-row tiles serve
SHAPES = ((185000, 8, 8, (8, 9, 6, 0, 4, 2, 1)), (185000, 1, 8, (1, 6, 0)), (185000, 4, 8, (4, 6, 2, 1, 8, 0)),
          (185000, 2, 8, (2, 1, 6, 0)), (185000, 16, 8, (8, 9, 6, 0, 4, 2)), (185000, 32, 8, (8, 9, 6, 0, 4)),
          (16384, 8, 8, (8, 6, 0, 4, 2)))
# the fp8_e4m3 pool: T = 1, 2 and 4 (8 to 32 rows), the centre, and T = 16, 32 (128, 256 rows), at
# the fp8 tiers that serve them; and DDTree's row counts (D = 17, 33, 65: 136, 264, 520 rows), where
# small8's 32-row tiles pad fewer rows than rows64d's copy (pick_tier's padding rule), so that the
# sm_120 model ranks the two at those shapes, not from T = 16 and 32
FP8_SHAPES = ((185000, 1, 8, (1, 6)), (185000, 2, 8, (2, 6)), (185000, 4, 8, (6, 4)), (185000, 8, 8, (8, 6, 4)),
              (185000, 16, 8, (4, 8)), (185000, 32, 8, (4, 8)),
              (185000, 17, 8, (4, 8)), (185000, 33, 8, (4, 8)), (185000, 65, 8, (4, 8)))


def rounds_of(fns: dict, rounds: int) -> dict:
    """{name: [one timing a round]} of the timing closures `fns` (name -> us), each called once a
    round, in order on even rounds and reversed on odd ones: the first timing after a case is made
    runs 1-4 % slow (kernel/bench/overlap.py), so no name is always first."""
    if rounds < 1:
        raise ValueError(f"rounds: {rounds} (at least 1)")
    names = list(fns)
    out = {n: [] for n in names}
    for k in range(rounds):
        for n in (names if k % 2 == 0 else names[::-1]):
            out[n].append(fns[n]())
    return out


def shape_case(S: int, T: int, H: int, kv_dtype: str = "auto"):
    """The microbenchmarks' one-request case at (S, T, H) on a CUDA pool ("auto": bf16, or
    "fp8_e4m3"; page 1 scattered, a ddtree, seed 77) and its outputs: (case, o [N, H, 512]
    bf16, lse [N, H] fp32). Also the fixed-cost and trace stages' case."""
    case = make_case([S], [T], H, tree="ddtree", layout="scattered", seed=77, device="cuda", slack=0.25,
                     kv_dtype=kv_dtype)
    o = torch.empty(case.q.shape[0], H, 512, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(case.q.shape[0], H, dtype=torch.float32, device="cuda")
    return case, o, lse


def sm_clock_mhz() -> dict:
    """The SM clock nvidia-smi reports now and its maximum (MHz); None where unreadable."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout.split(",")
        return {"sm_now": float(out[0]), "sm_max": float(out[1])}
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return {"sm_now": None, "sm_max": None}


def parts(mhz: float) -> list[dict]:
    """The design D tiers' per-tile math with each part left out (clocks per tile, busiest
    CTA), at the centre and at T = 32, where the whole is compute-bound."""
    ws = get_workspace("cuda")
    out = []
    for S, T, H in ((185000, 8, 8), (185000, 32, 8)):
        case, o, lse = shape_case(S, T, H)
        for tier in (8, 9, 6):
            tiles = tiles_per_cta([S], T, H, TIERS[tier], ws.target_ctas, tail_e_of(tier))
            for name, bits in PARTS.items():
                mode = MODE_NO_LOADS | MODE_NO_MERGE | bits
                us = time_calls([lambda: launch(*case.args(), o, lse, ws.buffer, ws.target_ctas, ws.max_bs,
                                                mode=mode, tier=tier)]) * 1e3
                out.append({"S": S, "T": T, "H": H, "tier": tier, "rows_per_tile": TIERS[tier], "stage": "parts",
                            "part": name, "time_us": us, "tiles_per_cta": tiles, "clk_per_tile": us * mhz / tiles})
                log(f"micro parts  S={S} T={T} tier {tier} {name:14s} {us:8.1f} us {us * mhz / tiles:7.0f} clk/tile")
        del case, o, lse
    return out


def run(ceil_gbps: float, stages: set[str]) -> dict:
    """Rows for the `stages` among {"stream", "mma", "full"}, with the clock they assume."""
    clock = sm_clock_mhz()
    mhz = clock["sm_max"] or 1980.0
    ws = get_workspace("cuda")
    rows = parts(mhz) if "parts" in stages else []
    shapes = [(sh, "auto") for sh in SHAPES] + [(sh, FP8_KV) for sh in FP8_SHAPES]
    for (S, T, H, tiers), kv in (shapes if stages & {"stream", "mma", "full"} else ()):
        case, o, lse = shape_case(S, T, H, kv)
        kv_bytes = traffic([S], T, H, kv)["kv_bytes"]
        pool = KV_DTYPE_NAMES[kv]

        def timed(tier, mode):
            fn = lambda: launch(*case.args(), o, lse, ws.buffer, ws.target_ctas, ws.max_bs, mode=mode, tier=tier,
                                **case.kwargs())
            return time_calls([fn]) * 1e3

        for tier in tiers:
            tiles = tiles_per_cta([S], T, H, TIERS[tier], ws.target_ctas, tail_e_of(tier, pool))
            base = {"S": S, "T": T, "H": H, "tier": tier, "kv_dtype": pool, "rows_per_tile": TIERS[tier],
                    "tiles_per_cta": tiles}
            if "stream" in stages:
                for name, opt in (STREAM_OPTIONS.items() if tier != 0 else (("plain", 0),)):
                    us = timed(tier, MODE_NO_MATH | MODE_NO_MERGE | opt)
                    # every row tile streams the same KV: tiers with several tiles read it through L2
                    rows.append(dict(base, stage="stream", option=name, time_us=us, GBps=kv_bytes / us / 1e3,
                                     frac_read_ceiling=kv_bytes / us / 1e3 / ceil_gbps))
                    log(f"micro stream {pool:9s} S={S} T={T} tier {tier} {name:24s} {us:8.1f} us "
                        f"{kv_bytes / us / 1e3:7.0f} GB/s ({kv_bytes / us / 1e3 / ceil_gbps:.0%} of read)")
            if "mma" in stages:
                us = timed(tier, MODE_NO_LOADS | MODE_NO_MERGE)
                rows.append(dict(base, stage="mma", time_us=us, clk_per_tile=us * mhz / tiles))
                log(f"micro mma    {pool:9s} S={S} T={T} tier {tier} {us:8.1f} us  {us * mhz / tiles:7.0f} clk/tile "
                    f"({tiles} tiles/CTA)")
            if "full" in stages:
                r = rounds_of({"full": lambda: timed(tier, 0), "no_merge": lambda: timed(tier, MODE_NO_MERGE),
                               "no_pdl": lambda: timed(tier, MODE_NO_PDL)}, FULL_ROUNDS)
                full, nomerge, nopdl = (statistics.median(r[k]) for k in ("full", "no_merge", "no_pdl"))
                merge = statistics.median(a - b for a, b in zip(r["full"], r["no_merge"]))
                rows.append(dict(base, stage="full", time_us=full, no_merge_us=nomerge, merge_us=merge,
                                 no_pdl_us=nopdl, clk_per_tile=nomerge * mhz / tiles, rounds_us=r))
                log(f"micro full   {pool:9s} S={S} T={T} tier {tier} {full:8.1f} us, merge {merge:5.1f} us, "
                    f"merge not as a dependent launch {nopdl:8.1f} us")
        del case, o, lse
        torch.cuda.empty_cache()
    # the sm_120 model reads these rows (and the parts' 8-warp ceiling gpu_run adds) into a file
    # of its own: kernel/bench/sm120_estimate.py
    # tail_e: the schedule of rows64d's tail row tiles in the library measured, in eighths (sm120_estimate reads
    # it; files without it measured equal splits); wave_fit: its plan_item's (files without it: none)
    return {"kind": "microbench", "clock_mhz": clock, "clock_assumed_mhz": mhz, "tail_e": dict(TAIL_E),
            "wave_fit": WAVE_FIT, "rows": rows}
