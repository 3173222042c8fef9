"""Names a reviewer reads: what each implementation in the figures is, and readable column
names for every table (figures.table refuses a snake_case header that is not listed here).
"""
from __future__ import annotations

# impl key in the bench JSON -> (label in figures and tables, what it is, said once per page)
IMPLS = {
    "flash": ("ours (split-KV verify kernel)",
              "this repository's kernel (`kernel/csrc/`): the prefix is split across thread "
              "blocks, each KV row is read once for all H x T query rows of a request, and the "
              "partial results are merged by their log-sum-exp."),
    "sglang_extend": ("SGLang extend_attention_fwd (CUDA today)",
                      "SGLang 0.5.23's Triton `extend_attention_fwd`: what its Triton attention "
                      "backend runs for TARGET_VERIFY on CUDA servers today, so the path a live "
                      "service would replace (the control arm of the canary)."),
    "sglang_verify_mla": ("SGLang verify_shared_kv_fwd (split-KV, AMD only)",
                          "SGLang's split-KV grouped-head verify kernel `verify_shared_kv_fwd` "
                          "(module `verify_mla`). SGLang's server calls it only on AMD GPUs and "
                          "only for chain-shaped draft trees, so **CUDA servers never run it**: "
                          "it shows what split-KV alone achieves, not what a CUDA service runs."),
    "torch_naive": ("naive PyTorch",
                    "scores materialised in PyTorch, softmax, matmul; skipped where its score "
                    "matrix would not fit in about 4 GB."),
}
IMPL_LABELS = {k: v[0] for k, v in IMPLS.items()}
# Our kernel again under a forced tier or a flushed L2: variants of `flash` that only the tier
# section shows, next to the default; never a series of their own in the comparisons
# (notebooks.data.bench_frame leaves them out unless asked).
VARIANTS = {
    "flash_rows64": ("ours, rows64 tier forced",
                     "our kernel with its first 64-row tier (rows64) forced (`tier=0`), measured "
                     "beside the default pick up to T = 64: what the newer tiers gained."),
    "flash_l2flushed": ("ours, L2 flushed before each call",
                        "our kernel with the GPU's L2 cache flushed before every call, at the "
                        "short prefixes whose KV fits in L2: whether the warm timings flatter it."),
}
VARIANT_LABELS = {k: v[0] for k, v in VARIANTS.items()}

# Every snake_case column a report table shows, renamed.
COLUMNS = {
    "worst_rel_err": "worst relative error", "worst_lse_rel_err": "worst LSE relative error",
    "nan_outputs": "outputs with NaN", "unwritten_rows": "unwritten output rows",
    "all_pass": "all pass", "tree": "draft tree", "layout": "cache layout", "cases": "cases",
    "page_size": "page size", "prefix_lens": "prefix lengths", "id": "case",
    "rel_err": "ours vs oracle (relative error)",
    "sglang_rel_err": "SGLang vs oracle (relative error)",
    "rel_err_vs_sglang": "ours vs SGLang (relative error)",
    "triton_us": "control, us per layer", "plugin_us": "candidate, us per layer",
    "triton_ms_per_step": "control, ms per step", "plugin_ms_per_step": "candidate, ms per step",
    "speedup": "speed-up", "rel_err_plugin_vs_triton": "candidate vs control (relative error)",
    "graph_replay_matches_eager": "CUDA-graph replay matches eager",
    # kernel tiers (bench rows' "tier", the micro file, the build record)
    "tile": "tile (query rows)", "query_rows": "query rows per request (H x T)",
    "requests": "requests", "ours_us": "ours, us", "pct_roofline": "% of roofline",
    "rows64_us": "rows64 forced, us", "small_gain": "rows64 time / default time",
    "warm_us": "L2 warm, us", "flushed_us": "L2 flushed, us",
    "flushed_over_warm": "flushed / warm", "kv_mb": "bytes per call, MB",
    "rows_per_tile": "query rows per tile", "tiles_per_cta": "16-token tiles (busiest CTA)",
    "stream_plain_gbps": "stream, plain, GB/s", "stream_evict_gbps": "stream, evict-first, GB/s",
    "stream_frac": "stream, best % of read ceiling", "clk_per_tile": "mma, SM clocks per tile",
    "full_us": "full kernel, us", "merge_us": "of which merge, us", "default_tier": "default here",
    "fastest": "fastest full time",
    "no_softmax": "without softmax, clk/tile", "no_qk": "without QK, clk/tile", "no_pv": "without PV, clk/tile",
    "softmax_only": "softmax alone, clk/tile", "adds_softmax": "softmax adds, clk",
    "adds_qk": "QK adds, clk", "adds_pv": "PV adds, clk",
    "h200_us": "full kernel, us (measured on the GPU named above)",
    "h200_overlap": "share of its shorter part hidden (measured)",
    "sm120_estimate_us": "sm_120 ESTIMATE, us (model: memory + math + merge)",
    "sm120_overlapped_us": "if fully overlapped, us (model: best case)",
    "sm120_memory_us": "memory part, us (model)", "sm120_math_us": "math part, us (model)",
    "sm120_floor_us": "floor: KV at DRAM speed, us (model)", "bound": "bound (model)",
    "lowest_estimate": "lowest estimate at this shape (model)",
    "registers": "registers per thread (sm_120)",
    "registers_sm90": "registers per thread (sm_90, measured arch)",
    "spill_stores": "spill stores, bytes", "spill_loads": "spill loads, bytes",
    "stack": "stack, bytes", "smem_static": "static shared memory, bytes",
    # SGLang's real backend
    "covers": "what it covers", "oracle_err": "vs float64 oracle (relative)",
    "graph_vs_eager": "graph replay vs eager (relative)", "bitwise": "bit-identical to eager",
    "control_err": "vs control arm (relative)", "flash_replay_ms": "replay, candidate, ms",
    "control_replay_ms": "replay, control, ms", "replay_speedup": "control / candidate",
    "kv": "KV pool",
    # SGLang's fp8_e4m3 KV pool (bench rows with "kv_dtype": "fp8_e4m3")
    "fp8_us": "ours on fp8, us", "pct_fp8_roofline": "% of fp8 roofline",
    "fp8_roofline_us": "fp8 roofline, us", "bf16_us": "ours on bf16, us",
    "fp8_speedup": "bf16 time / fp8 time", "roofline_ratio": "bf16 roofline / fp8 roofline",
    # decode context parallelism, simulated on one GPU
    "ranks": "DCP ranks (N)", "heads_gathered": "heads per rank's prefix call",
    "shard_tokens": "prefix tokens per rank", "err_vs_unsharded": "vs unsharded call (relative)",
    "unsharded_us": "unsharded, us per layer", "rank_us": "slowest rank, us per layer",
    "epilogue_us": "merge epilogue, us per layer", "collective_kb": "collectives, KB per layer",
    "kv_share": "KV memory per GPU (share of unsharded)",
    # a call's fixed cost and phases (kernel/bench/fixed_cost.py, kernel/bench/trace.py)
    "pool": "KV pool", "part": "what is timed", "intercept_us": "fixed cost (intercept), us",
    "marginal_gbps": "marginal KV rate, GB/s", "tile_intercept_us": "once a call (line against tiles), us",
    "marginal_clk_per_tile": "a 16-token tile more, SM clocks", "graph_us": "call, graph-replayed, us",
    "span_us": "traced span, us", "launch_spread_us": "last working block starts after the first, us",
    "plan_us": "schedule, us", "prologue_us": "until the first tile is in, us",
    "loop_min_us": "shortest loop, us", "loop_median_us": "median loop, us", "loop_max_us": "longest loop, us",
    "second_cta_us": "second block on an SM loops longer by, us",
    "store_tail_us": "last store after the median one, us", "merge_after_us": "merge ends after the last store, us",
    # the production algorithm's shapes (DFLASH blocks, DDTree's padded trees; phase 2 section 13)
    "n_checks": "checks (every tier)", "n_failing": "failing checks", "vs_sglang_max": "ours vs SGLang, largest",
    "roofline_us": "roofline, us", "roofline_bound": "roofline bound by",
    "vs_centre": "ours / ours at T = 8", "sglang_us": "SGLang extend, us", "step_ms": "ours, ms per 61 layers",
}
# The sm_120 model's published figures (sm120-model JSON "sm120") as the unit after the value; a
# key not listed is shown as key = value.
SM120_ASSUMPTIONS = {"sms": "SMs", "dram_GBps": "GB/s DRAM", "l2_MB": "MB L2",
                     "mma_per_clk_sm": "mma.sync per clock per SM", "ctas_per_sm": "CTA per SM"}
NA_NOTE = ("n/a: that implementation did not run at this shape in the benchmark (SGLang's "
           "split-KV verify refuses some shapes and handles chain trees only; naive PyTorch is "
           "skipped where its scores would not fit in memory).")


def impl_glossary(impls) -> str:
    """Markdown list explaining each implementation that a page shows, in IMPLS order."""
    shown = [k for k in IMPLS if k in set(impls)]
    return "\n".join(f"- **{IMPLS[k][0]}**: {IMPLS[k][1]}" for k in shown)
