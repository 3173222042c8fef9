"""Estimated sm_120 (RTX PRO 6000 Blackwell) time per tier, from H200 microbenchmarks and the
kernel memo's per-SM budgets: we can compile for sm_120 but not run it, so this is a model,
labelled as such wherever it is shown.

Per (shape, pool, tier), with the busiest CTA's tiles on sm_120's schedule (188 SMs, one CTA per SM:
every tier needs more than half of the 100 KB an SM has):
  memory: KV bytes / (1.79 TB/s x the tier's best stream efficiency at a single-row-tile shape
          in the same H200 run: shapes with several row tiles re-read the KV through L2, not DRAM)
  math:   tiles x max(the H200's measured clocks per tile, the tile's MMAs / 0.25 per clock) / 2.6 GHz
  merge:  as measured on the H200
estimate = max(memory, math) + merge. Units: microseconds.
"""
from __future__ import annotations

from ..checks import FP8_ROW_BYTES, ROW_BYTES

SM120 = {"sms": 188, "clock_ghz": 2.6, "dram_GBps": 1790.0, "mma_per_clk_sm": 0.25}


def mmas_per_tile(rows: int, tier: int) -> int:
    """m16n8k16 MMAs per 16-token tile of one CTA: QK over 36 k-steps, PV over 64 n-tiles."""
    if tier in (0, 6, 8):                 # rows in M (rows64, rows32d, rows64d): m-tiles x (2 n x 36 k + 64 n)
        return rows // 16 * (2 * 36 + 64)
    nt = rows // 8                        # small: K/V^T tiles as A, rows as n-tiles of 8
    return 36 * nt + 32 * nt


def estimate(micro_rows: list[dict], tiles_per_cta) -> list[dict]:
    """Rows {S, T, H, kv_dtype, tier, h200_us, sm120_*_us, bound} for every shape, pool and tier
    with a 'full' row; `tiles_per_cta(prefix_lens, T, H, rows, target)` is the device's schedule.
    A row without kv_dtype is a bf16 pool's; an fp8_e4m3 pool's prefix rows are 576 bytes."""
    def pool(r):
        return r.get("kv_dtype", "bfloat16")

    single = [(r["tier"], pool(r), r["frac_read_ceiling"]) for r in micro_rows
              if r["stage"] == "stream" and r["T"] * r["H"] <= r["rows_per_tile"]]
    best = max((f for _, _, f in single), default=0.9)
    by = {}
    for r in micro_rows:   # the first row of a stage: its default options
        by.setdefault((r["S"], r["T"], r["H"], pool(r), r["tier"]), {}).setdefault(r["stage"], r)
    out = []
    for (S, T, H, kv, tier), st in sorted(by.items()):
        full = st.get("full")
        if full is None:
            continue
        rows = full["rows_per_tile"]
        kv_bytes = S * (FP8_ROW_BYTES if kv == "fp8_e4m3" else ROW_BYTES) + T * ROW_BYTES
        eff = max((f for t, k, f in single if t == tier and k == kv), default=best)
        memory_us = kv_bytes / (SM120["dram_GBps"] * 1e3 * eff)
        tiles = tiles_per_cta([S], T, H, rows, SM120["sms"])
        clk = max(st["mma"]["clk_per_tile"] if "mma" in st else full["clk_per_tile"],
                  mmas_per_tile(rows, tier) / SM120["mma_per_clk_sm"])
        math_us = tiles * clk / (SM120["clock_ghz"] * 1e3)
        est = max(memory_us, math_us) + max(full.get("merge_us", 0.0), 0.0)
        out.append({"S": S, "T": T, "H": H, "kv_dtype": kv, "tier": tier, "h200_us": full["time_us"],
                    "stream_efficiency": eff,
                    "sm120_memory_us": memory_us, "sm120_math_us": math_us, "sm120_estimate_us": est,
                    "sm120_floor_us": kv_bytes / (SM120["dram_GBps"] * 1e3),
                    "bound": "memory" if memory_us >= math_us else "math"})
    return out
