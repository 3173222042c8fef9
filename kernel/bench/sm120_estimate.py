"""The sm_120 model: what each tier should take on the RTX PRO 6000 Blackwell, from the H200's
measured microbenchmarks and sm_120's published figures. We compile for sm_120 but cannot run
it, so this is a model, labelled as one wherever it is shown.

    python -m kernel.bench.sm120_estimate [--data reports/data] [--micro FILE] [--bench FILE]
                                          [--out reports/data]

Inputs (never typed by hand): a microbench file (`gpu_run --stages stream,mma,full,parts`:
per shape and tier the stream alone, the math alone and the full kernel; the design D tiers'
parts; the mma.sync ceiling at 8 warps per SM; the SM clock) and the bench file's read ceiling.
Output: sm120-model-*.json (kind "sm120_model"), one row per (shape, pool, tier, clock).

Per (shape, pool, tier), all per SM, one CTA per SM on sm_120 (every tier needs more than half of
its 100 KB of shared memory):
  math    tiles x (non-MMA clocks x k + MMAs / (0.25 x e)) / clock, where
          e        the tier's MMA efficiency on the H200: its MMAs at the 8-warp ceiling over what
                   its QK and PV cost there (math alone minus math without QK, minus math without
                   PV: the parts stage); tiers without parts rows take rows64d's (flagged);
          non-MMA  the H200's math-alone clocks per tile minus its MMA clocks (MMAs / (r8 x e)):
                   softmax, barriers, loop skeleton, which sm_120 runs at the same clocks;
          (e above 1, where leaving QK or PV out saves less than their MMAs take at the 8-warp
          ceiling because the rest of the tile then waits where it hid under them (rows64d since
          2026-12-04: 1.09), is the H200's split of the tile and stays in the non-MMA term; sm_120's
          MMAs take min(e, 1): its 0.25 is the tensor pipe's full rate, measured, and nothing runs
          them faster)
          k        H200 CTAs per SM / sm_120 CTAs per SM: rows32d and the 8/16-row small tiers
                   run two CTAs per SM on the H200 and one on sm_120, where the lone CTA's 4 or 8
                   warps no longer hide each other's latency (the non-MMA part is latency-bound:
                   kernel/NOTES.md), so its non-MMA clocks per tile double;
          tiles    the device's schedule at 188 CTAs.
          (The old model took max(H200 clocks per tile, MMAs / 0.25): as if the non-MMA half of
          a tile hid under sm_120's slower MMAs, and rows32d's per-SM clocks with two CTAs.)
  memory  KV bytes / (1,792 GB/s x d x min(1, in flight / needed)): d = the H200's measured read
          ceiling over its 4,800 GB/s spec (a memory system's sustained fraction, carried over);
          in flight = the tier's KV bytes outstanding per SM while it computes (its stages ahead),
          needed = sm_120's per-SM share x an assumed loaded latency. (The old model scaled by
          each tier's H200 stream efficiency, which measures the H200's ~25 KB need per SM, not
          sm_120's ~9 KB: it alone ranked rows32d ahead of rows64d.)
  merge   as measured on the H200.
  overlap not assumed: nothing has measured it on sm_120. The estimate is the serial bound (memory
          + math + merge); the overlapped bound (the larger + merge) is the best case beside it.
          The H200 data lies between the two: each row carries the fraction of the shorter term
          the H200 hid at the same shape and tier, (math alone + stream alone - full without
          merge) / the shorter of the two: 0.40 at the centre in micro-h200-20261201T2000.json
          (149.7 us full without merge against 111.1 math alone and 64.3 stream alone), 0.78 in
          micro-h200-20261203T1701.json (111.1 against 97.1 and 65.1), after the loader's and the
          copies' rungs, 0.86 in micro-h200-20261203T2300.json (107.3 against 98.4 and 64.0). It is evidence, not a factor: on the H200 the stream is the shorter term,
          on sm_120 the math.
  clock   every row at each of CLOCKS: memory does not move with it, math does.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from ..checks import FP8_ROW_BYTES, ROW_BYTES

BN, MIN_CHUNK = 16, 128   # = verify_common.cuh's BN and MIN_CHUNK: tiles_per_cta mirrors its schedule
TAIL_E = {"bfloat16": 6, "fp8_e4m3": 7}   # = tier_rowsd.cuh's TAIL_E and TAIL_E_FP8, in eighths
                                             # (tests/test_sm120_estimate.py reads them there)
WAVE_FIT = True    # production's plan_item fits the chunk to one wave; -DMLAV_WAVE_SAFE: the safe chunk alone
FP8 = "fp8_e4m3"

# Published sm_120 figures (RTX PRO 6000 Blackwell, GB202), with their sources
SM120 = {
    "sms": 188,             # NVIDIA's RTX Blackwell spec table quoted in NVIDIA/cudnn-frontend PR 1164
    "dram_GBps": 1792.0,    # 512-bit GDDR7 at 28 Gbps: gpu.name/posts/nvidia-unveils-rtx-pro-6000-blackwell-...
    "l2_MB": 128,           # GTC-2025 coverage; technical.city's RTX PRO 6000 Blackwell Max-Q page
    "mma_per_clk_sm": 0.25,  # m16n8k16 bf16, fp32 accumulate, full rate: 1,024 FLOP/clk/SM measured by
                             # waynehacking8/blackwell-tensorcore-kernels results/mma_rate_probe.csv;
                             # 188 x 1,024 x 2.617 GHz = 504 TFLOP/s dense
    "ctas_per_sm": 1,       # 100 KB of shared memory per SM; every tier asks for more than 50 KB
}
# SM clocks (GHz) the model is shown at
CLOCKS = {
    "boost": 2.617,        # Workstation Edition (600 W) listed boost; NVIDIA's 125 TFLOPS FP32 =
                           # 24,064 x 2 x 2.6 GHz (GTC-2025 coverage)
    "max_q": 2.288,        # Max-Q Workstation Edition (300 W) listed boost, technical.city/en/video/
                           # RTX-4000-SFF-Ada-Generation-vs-RTX-PRO-6000-Blackwell-Max-Q (110.1 TFLOPS
                           # FP32 = 24,064 x 2 x 2.288 GHz); a register-only mma probe held ~2.26 GHz at
                           # 300 W (waynehacking8/blackwell-tensorcore-kernels clock_state_rate_probe.txt)
    "max_q_base": 1.590,   # the same page's Max-Q base clock: the floor of its listed range
}
DEFAULT_CLOCK = "boost"
H200_SPEC_GBPS = 4800.0    # NVIDIA H200 datasheet, HBM3e
# datasheet memory bandwidth of each GPU whose microbenchmarks the model may read: the read ceiling
# measured there over this is the sustained fraction carried over to sm_120. Only the GH100 parts,
# whose SM (and so H200_CTAS below) is the H200's
SPEC_GBPS = {"NVIDIA H200": H200_SPEC_GBPS,
             "NVIDIA H100 80GB HBM3": 3350.0}   # NVIDIA H100 datasheet, H100 SXM: HBM3, 3.35 TB/s


def spec_gbps(gpu: str) -> float:
    """The datasheet bandwidth (GB/s) of `gpu` (a micro file's "gpu", torch's device name)."""
    if gpu not in SPEC_GBPS:
        raise ValueError(f"gpu: {gpu!r} has no datasheet bandwidth in sm120_estimate.SPEC_GBPS "
                         f"(known: {sorted(SPEC_GBPS)}); the sm_120 model reads GH100 microbenchmarks only")
    return SPEC_GBPS[gpu]

DRAM_LATENCY_NS = 1000.0   # assumed loaded DRAM latency on sm_120 (no published figure found): a
                           # generous one; every bf16 tier keeps >= 36 KB in flight, enough up to ~4 us
# CTAs per SM on the H200 (verify_common / tier Layouts' MIN_BLOCKS and the occupancy query):
# two for the small tier's 8- and 16-row tiles and rows32d, on both pools
H200_CTAS = {0: 1, 1: 2, 2: 2, 4: 1, 6: 2, 8: 1, 9: 1}
TILE_BYTES = {"bfloat16": BN * ROW_BYTES, FP8: BN * FP8_ROW_BYTES}
# 16-token tiles of KV in flight per SM while a tile is computed (stages issued ahead): rows64 3
# (STAGES - 1), the small tiers 2 (4 stages, 2 in use), rows32d 3 and rows64d 2 (AHEAD), rows64d_pair
# 2 (the next pair, at its barrier); fp8: small8 2 stages of 32 tokens (4 tiles), rows32d_fp8 7 and
# rows64d_fp8 6 (AHEAD: e4m3 tiles, read by the MMAs where they land)
IN_FLIGHT_TILES = {"bfloat16": {0: 3, 1: 2, 2: 2, 4: 2, 6: 3, 8: 2, 9: 2}, FP8: {1: 4, 2: 4, 4: 4, 6: 7, 8: 6}}


def tiles_per_cta(prefix_lens: list[int], T: int, H: int, rows: int, target: int, tail_e: int = 8,
                  wave_fit: bool | None = None) -> int:
    """16-token tiles of the busiest full row tile's CTA, by the device's own schedule
    (verify_common.cuh's plan_item). tail_e < 8 (rows64d: tail_e_of): a last row tile of at most
    rows / 2 rows counts tail_e / 8 of a full one's work and takes splits 8 / tail_e times as long,
    which its CTAs, that much cheaper a tile, take in the same time. wave_fit (default: WAVE_FIT, the
    library's; off under MLAV_WAVE_SAFE): the chunk aimed at `target` items where they fit in one
    wave, else the one aimed at target - U (U: the row tiles)."""
    def cdiv(a, b):
        return -(-a // b)
    nrt = [cdiv(T * H, rows) for _ in prefix_lens]
    tail = 1 if tail_e < 8 and nrt[0] >= 2 and T * H - (nrt[0] - 1) * rows <= rows // 2 else 0
    U = sum(nrt)
    total = sum((8 * n - (8 - tail_e) * tail) * (s + T) for n, s in zip(nrt, prefix_lens))

    def chunk_for(k: int) -> int:
        chunk = cdiv(total, 8 * (target - k)) if U < target else 1 << 40
        return cdiv(max(MIN_CHUNK, chunk), BN) * BN

    def items(chunk: int) -> int:
        chunk_t = cdiv(cdiv(chunk * 8, tail_e), BN) * BN
        return sum((n - tail) * cdiv(s + T, chunk) + (cdiv(s + T, chunk_t) if tail else 0)
                   for n, s in zip(nrt, prefix_lens))
    chunk, fit = chunk_for(U), chunk_for(0)
    if (WAVE_FIT if wave_fit is None else wave_fit) and items(fit) <= target:
        chunk = fit
    return max(cdiv(cdiv(s + T, cdiv(s + T, chunk)), BN) for s in prefix_lens)


def tail_e_of(tier: int, kv_dtype: str = "bfloat16", tail_e: dict | None = None) -> int:
    """rows64d's (tier 8) tail_e on the pool `kv_dtype`: TAIL_E of tier_rowsd.cuh, or a measured
    library's (`tail_e`, as a micro file records it: micro_tail_e); 8 (equal splits) for every other tier."""
    return (TAIL_E if tail_e is None else tail_e).get(kv_dtype, 8) if tier == 8 else 8


def micro_wave_fit(micro: dict) -> bool:
    """Whether a micro file's library fitted its plan to one wave of target items (WAVE_FIT): its
    `wave_fit`; absent (the files before 2026-12-06's twenty-fifth session), the safe chunk alone."""
    return bool(micro.get("wave_fit", False))


def micro_tail_e(micro: dict) -> dict:
    """The tail schedule a micro file's library ran, in eighths: its `tail_e`, or twice the quarters
    of `tail_q` (the files before 2026-12-06); absent, equal splits."""
    if "tail_e" in micro:
        return dict(micro["tail_e"])
    return {k: 2 * v for k, v in micro.get("tail_q", {}).items()}


def mmas_per_tile(rows: int, tier: int) -> int:
    """m16n8k16 MMAs per 16-token tile of one CTA: QK over 36 k-steps, PV over 64 n-tiles."""
    if tier in (0, 6, 8, 9):              # rows in M (rows64, rows32d, rows64d, rows64d_pair): m-tiles x (2 n x 36 k + 64 n)
        return rows // 16 * (2 * 36 + 64)
    nt = rows // 8                        # small: K/V^T tiles as A, rows as n-tiles of 8
    return 36 * nt + 32 * nt


def _pool(r: dict) -> str:
    return r.get("kv_dtype", "bfloat16")


def mma_efficiency(micro_rows: list[dict], r8: float) -> dict:
    """{(tier, T): e} from the parts rows: MMAs at r8 (MMAs per clock per SM at the 8-warp
    ceiling) over the clocks QK and PV add (math - no_qk + math - no_pv)."""
    parts: dict = {}
    for r in micro_rows:
        if r["stage"] == "parts":
            parts.setdefault((r["tier"], r["T"], r["S"], r["H"], r["rows_per_tile"]), {})[r["part"]] = r["clk_per_tile"]
    out = {}
    for (tier, T, S, H, rows), p in parts.items():
        if {"math", "no_qk", "no_pv"} <= set(p):
            mma_clk = (p["math"] - p["no_qk"]) + (p["math"] - p["no_pv"])
            if mma_clk > 0:
                out[(tier, T)] = mmas_per_tile(rows, tier) / r8 / mma_clk
    return out


def _efficiency(eff: dict, tier: int, T: int) -> tuple[float, str]:
    """The tier's measured e at T, else at the nearest T, else rows64d's at the centre (T = 8)."""
    own = sorted((abs(t - T), t) for (k, t) in eff if k == tier)
    if own:
        return eff[(tier, own[0][1])], f"parts of bf16 tier {tier} at T = {own[0][1]}"
    ref = sorted((abs(t - 8), t) for (k, t) in eff if k == 8)
    if ref:
        return eff[(8, ref[0][1])], f"assumed: rows64d's parts at T = {ref[0][1]}"
    raise ValueError("micro: no parts rows with math, no_qk and no_pv (gpu_run --stages parts)")


def model(micro: dict, read_gbps: float, clocks: dict = CLOCKS, latency_ns: float = DRAM_LATENCY_NS) -> list[dict]:
    """Rows {S, T, H, kv_dtype, tier, clock, ...} (module docstring) for every shape, pool and tier
    the microbench file measured in full and math alone. micro: a microbench doc (rows, ceilings
    with mma_TFLOPs_8_warps_per_sm, sms, clock_assumed_mhz, gpu: an H200 where absent); read_gbps:
    that GPU's read ceiling, over its datasheet bandwidth (spec_gbps) the fraction sm_120 keeps."""
    # a tier measured once and deleted since has no constants here (micro-h200-20261202T1531.json
    # holds tier 10's rows): its rows are left out
    rows_in = [r for r in micro["rows"] if r["tier"] in H200_CTAS]
    # the schedule of the library the file measured (rows64d's tail splits per pool, absent: equal; its wave fit)
    tail_e, wave_fit = micro_tail_e(micro), micro_wave_fit(micro)
    sms_h200, mhz = micro["sms"], micro["clock_assumed_mhz"]
    ceil = micro.get("ceilings", {})
    tfl8 = ceil.get("mma_TFLOPs_8_warps_per_sm") or ceil.get("mma_TFLOPs")
    if not tfl8:
        raise ValueError("micro: ceilings lack mma_TFLOPs_8_warps_per_sm and mma_TFLOPs")
    r8 = tfl8 * 1e12 / (4096 * sms_h200 * mhz * 1e6)
    eff = mma_efficiency(rows_in, r8)
    d = read_gbps / spec_gbps(micro.get("gpu", "NVIDIA H200"))
    by: dict = {}
    for r in rows_in:   # the first row of a stage: its default options (evict-first for stream)
        if r["stage"] != "parts":
            by.setdefault((r["S"], r["T"], r["H"], _pool(r), r["tier"]), {}).setdefault(r["stage"], r)
    out = []
    for (S, T, H, kv, tier), st in sorted(by.items()):
        full, mma = st.get("full"), st.get("mma")
        if full is None or mma is None:
            continue
        rows = full["rows_per_tile"]
        kv_bytes = S * (FP8_ROW_BYTES if kv == FP8 else ROW_BYTES) + T * ROW_BYTES
        mmas = mmas_per_tile(rows, tier)
        e, e_src = _efficiency(eff, tier, T)
        nonmma = max(mma["clk_per_tile"] - mmas / (r8 * e), 0.0)
        k = H200_CTAS[tier] / SM120["ctas_per_sm"]
        e120 = min(e, 1.0)
        clk = nonmma * k + mmas / (SM120["mma_per_clk_sm"] * e120)
        tiles = tiles_per_cta([S], T, H, rows, SM120["sms"] * SM120["ctas_per_sm"], tail_e_of(tier, kv, tail_e), wave_fit)
        in_flight = IN_FLIGHT_TILES[kv][tier] * TILE_BYTES[kv]
        need = SM120["dram_GBps"] * d / SM120["sms"] * latency_ns   # bytes: GB/s x ns
        memory = kv_bytes / (SM120["dram_GBps"] * 1e3 * d * min(1.0, in_flight / need))
        merge = max(full.get("merge_us", 0.0), 0.0)
        stream = st.get("stream")
        f = None
        if stream is not None and "no_merge_us" in full:
            shorter = min(mma["time_us"], stream["time_us"])
            f = min(max((mma["time_us"] + stream["time_us"] - full["no_merge_us"]) / shorter, 0.0), 1.0)
        for name, ghz in clocks.items():
            math = tiles * clk / (ghz * 1e3)
            lo, hi = min(memory, math), max(memory, math)
            out.append({"S": S, "T": T, "H": H, "kv_dtype": kv, "tier": tier, "rows_per_tile": rows,
                        "clock": name, "clock_ghz": ghz, "h200_us": full["time_us"],
                        "h200_math_alone_us": mma["time_us"],
                        "h200_stream_alone_us": stream["time_us"] if stream else None,
                        "h200_overlap": f, "mmas_per_tile": mmas, "mma_efficiency": e,
                        "sm120_mma_efficiency": e120, "mma_efficiency_source": e_src, "h200_nonmma_clk_per_tile": nonmma,
                        "lone_cta_factor": k, "sm120_tiles_per_cta": tiles, "sm120_clk_per_tile": clk,
                        "sm120_in_flight_bytes": in_flight, "sm120_in_flight_need_bytes": need,
                        "sm120_memory_us": memory, "sm120_math_us": math, "sm120_merge_us": merge,
                        "sm120_overlapped_us": hi + merge, "sm120_serial_us": hi + lo + merge,
                        "sm120_estimate_us": hi + lo + merge,
                        "sm120_floor_us": kv_bytes / (SM120["dram_GBps"] * 1e3),
                        "bound": "memory" if memory >= math else "math"})
    return out


# Estimates within TIE of a shape's lowest are a tie: the model's inputs move by more than that
# between runs of the same code (at T = 2 rows32d and the small tier's 16-row tiles, 0.5 % apart,
# came out lowest in turn in sm120-model-from-h200-20261203T1311.json and ...T1701.json; small8's
# fp8 estimate at DDTree's D = 65, the same machine code, 903.9, 879.4 and 893.0 us in ...20261204T0357,
# ...T1238 and ...T1310: 2.8 % apart), so there the default keeps the tier the H200 measured faster
# (tests/test_sm120_estimate.py holds this)
TIE = 0.03


def within_tie(rows: list[dict], clock: str = DEFAULT_CLOCK) -> dict:
    """{(kv_dtype, S, T, H): the tiers whose estimate at `clock` is within TIE of the lowest}."""
    est: dict = {}
    for r in rows:
        if r["clock"] == clock:
            est.setdefault((r["kv_dtype"], r["S"], r["T"], r["H"]), {})[r["tier"]] = r["sm120_estimate_us"]
    return {k: sorted(t for t, v in e.items() if v <= (1 + TIE) * min(e.values())) for k, e in est.items()}


def lowest(rows: list[dict], clock: str = DEFAULT_CLOCK) -> dict:
    """{(kv_dtype, S, T, H): the tier with the lowest estimate (the serial bound) at `clock`}."""
    best: dict = {}
    for r in rows:
        if r["clock"] == clock:
            key = (r["kv_dtype"], r["S"], r["T"], r["H"])
            if key not in best or r["sm120_estimate_us"] < best[key]["sm120_estimate_us"]:
                best[key] = r
    return {k: v["tier"] for k, v in best.items()}


def document(micro: dict, bench: dict | None, micro_name: str, bench_name: str | None) -> dict:
    """The sm120_model file: provenance of the GH100 data it reads (gpu, date, commit: the
    microbench file's), what it assumed, and its rows."""
    if bench and bench.get("gpu", micro.get("gpu")) != micro.get("gpu", bench.get("gpu")):
        raise ValueError(f"bench: {bench_name} was measured on {bench.get('gpu')!r}, {micro_name} on "
                         f"{micro.get('gpu')!r}: the read ceiling must be the micro file's GPU's")
    read = (bench or {}).get("ceilings", {}).get("read_GBps") or micro.get("ceilings", {}).get("read_GBps")
    if not read:
        raise ValueError("no read ceiling: neither the bench nor the microbench file has ceilings.read_GBps")
    rows = model(micro, read)
    gpu = micro.get("gpu", "NVIDIA H200")
    spec = spec_gbps(gpu)
    prov = {k: micro[k] for k in ("gpu", "sms", "driver", "cuda", "torch", "commit", "date") if k in micro}
    return {**prov, "kind": "sm120_model",
            "model": f"a model, not a measurement: kernel/bench/sm120_estimate.py on {gpu.removeprefix('NVIDIA ')} microbenchmarks",
            "inputs": {"micro": micro_name, "bench": bench_name, "read_GBps": read},
            "generated": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "sm120": SM120, "clocks": CLOCKS, "default_clock": DEFAULT_CLOCK,
            "assumptions": {"spec_GBps": spec, "dram_latency_ns": DRAM_LATENCY_NS,
                            "dram_fraction": read / spec, "h200_ctas_per_sm": H200_CTAS,
                            "in_flight_tiles": IN_FLIGHT_TILES},
            "lowest_tier": [{"kv_dtype": k[0], "S": k[1], "T": k[2], "H": k[3], "tier": t}
                            for k, t in sorted(lowest(rows).items())],
            "rows": rows}


def summary(doc: dict) -> list[str]:
    """Short lines: per pool and shape at 185k, the model's lowest tier at the boost clock, its
    estimate (serial) and overlapped bound, and which term is larger."""
    low = lowest(doc["rows"])
    out = [f"sm_120 MODEL (not a measurement), {DEFAULT_CLOCK} {CLOCKS[DEFAULT_CLOCK]} GHz, from {doc['inputs']['micro']}:"]
    for r in doc["rows"]:
        key = (r["kv_dtype"], r["S"], r["T"], r["H"])
        if r["clock"] == DEFAULT_CLOCK and low.get(key) == r["tier"]:
            out.append(f"  {r['kv_dtype']:9s} S={r['S']:>6} T={r['T']:>2} H={r['H']} tier {r['tier']}: "
                       f"{r['sm120_estimate_us']:6.1f} us serial, {r['sm120_overlapped_us']:6.1f} overlapped "
                       f"(memory {r['sm120_memory_us']:6.1f}, math {r['sm120_math_us']:6.1f}: {r['bound']}-bound)")
    return out


TIER_NAMES = {0: "rows64", 1: "small 8-row", 2: "small 16-row", 4: "small 32-row", 6: "rows32d", 8: "rows64d",
              9: "rows64d_pair"}


def notes_lines(doc: dict, S: int = 185000) -> list[str]:
    """kernel/NOTES.md's table of the model at S tokens (a test holds NOTES to these lines): per
    pool and T, the lowest tier's memory and math parts, its estimate (serial) at the boost and
    Max-Q clocks, its overlapped bound at boost, and which part is larger."""
    low = lowest(doc["rows"])
    at = {(r["kv_dtype"], r["T"], r["tier"], r["clock"]): r for r in doc["rows"] if r["S"] == S}
    out = ["| pool | T | lowest tier (= the default) | memory, us | math, us (boost / Max-Q) | estimate, us "
           "(boost / Max-Q) | overlapped, us (boost) | larger part (boost) |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (kv, s, T, H), tier in sorted(low.items(), key=lambda x: (x[0][0], x[0][2])):
        if s != S:
            continue
        b, q = at[(kv, T, tier, "boost")], at[(kv, T, tier, "max_q")]
        out.append(f"| {kv} | {T} | {TIER_NAMES[tier]} | {b['sm120_memory_us']:.1f} | {b['sm120_math_us']:.1f} / "
                   f"{q['sm120_math_us']:.1f} | {b['sm120_estimate_us']:.1f} / {q['sm120_estimate_us']:.1f} | "
                   f"{b['sm120_overlapped_us']:.1f} | {b['bound']} |")
    return out


def _newest(data: Path, prefix: str) -> Path | None:
    files = sorted(data.glob(f"{prefix}-*.json"))
    docs = [(json.loads(p.read_text()).get("date", ""), p) for p in files]
    return max(docs)[1] if docs else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("reports/data"), help="where the GH100 (H200 or H100) JSON lives")
    ap.add_argument("--micro", type=Path, default=None, help="a microbench file (default: the newest in --data)")
    ap.add_argument("--bench", type=Path, default=None, help="a bench file (default: the newest in --data)")
    ap.add_argument("--out", type=Path, default=None, help="folder for sm120-model-*.json (default: --data)")
    a = ap.parse_args(argv)
    micro_p = a.micro or _newest(a.data, "micro")
    bench_p = a.bench or _newest(a.data, "bench")
    if micro_p is None:
        print(f"error: --micro: no micro-*.json in {a.data}", file=sys.stderr)
        return 2
    micro = json.loads(micro_p.read_text())
    bench = json.loads(bench_p.read_text()) if bench_p else None
    doc = document(micro, bench, micro_p.name, bench_p.name if bench_p else None)
    out = (a.out or a.data) / f"sm120-model-from-{micro_p.stem.removeprefix('micro-')}.json"
    out.write_text(json.dumps(doc, indent=1))
    print(out)
    print("\n".join(summary(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
