# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Phase 2: paged bf16 MLA tree-verify attention, correct and fast
#
# Our kernel on SGLang's own layout: the paged MLA pool (`kv_indices` of token slots, any page
# size), SGLang's tree mask, bf16 in and out. This report answers, from one measurement run:
# is it correct (against a float64 oracle and SGLang's own kernels), how close it is to the
# hardware's roofline, how much faster it is than what SGLang runs today, whether the cache
# layout matters, which of the kernel's tile sizes serves which shape and where its time goes,
# what it does inside SGLang over all 61 layers (timed, and through SGLang's own backend in
# CUDA graphs), what a model estimates for the production GPU it has not run on, and how it
# does at the production algorithm's shapes (DFLASH blocks, DDTree's padded trees), and how it
# serves EXTEND: new tokens over a cached prefix (follow-up turns, chunked prefill).

# %% tags=["parameters"]
smoke = False  # True: CI run on generated fixture data, small figures
data_dir = "reports/data"  # where the measurement JSON lives
measured_since = ""  # runner only: when kernel.gpu_run started in this invocation (ISO time)
record_path = ""  # runner only: where this notebook writes its index record
defrag_threshold = 0.10  # layout slow-downs below this fraction count as "does not matter"

# %%
import warnings
from pathlib import Path

import pandas as pd
from IPython.display import HTML, Markdown, display

from notebooks import data, extend_data, figures, findings, glossary, provenance

warnings.filterwarnings("ignore", category=FutureWarning)
figures.setup(dpi=60 if smoke else 110)
val = data.newest(data_dir, "validation", allow_fixture=smoke)
bench = data.newest(data_dir, "bench", allow_fixture=smoke)
integ = data.newest(data_dir, "sglang-integration", allow_fixture=smoke)
# shown when present (a gpu_run with fewer --stages does not write them)
micro = data.newest_or_none(data_dir, "microbench", allow_fixture=smoke)
backend = data.newest_or_none(data_dir, "sglang-backend", allow_fixture=smoke)
dcp = data.newest_or_none(data_dir, "dcp-sim", allow_fixture=smoke)
fixed = data.newest_or_none(data_dir, "fixed_cost", allow_fixture=smoke)
trace = data.newest_or_none(data_dir, "trace", allow_fixture=smoke)
sm120 = data.newest_or_none(data_dir, "sm120_model", allow_fixture=smoke)   # a model, section 11
sm120sim = data.newest_or_none(data_dir, "sm120_sim", allow_fixture=smoke)   # a second model, section 11
sink = data.newest_or_none(data_dir, "sink_check", allow_fixture=smoke)    # section 12
ext = extend_data.load(data_dir, allow_fixture=smoke)   # EXTEND over a cached prefix, section 14
docs = [d for d in (val, bench, integ, micro, backend, dcp, fixed, trace, sm120, sm120sim, sink, *ext.values())
        if d is not None]
df = data.bench_frame(bench)  # the comparisons: ours is `flash` alone, never its variants
df_all = data.bench_frame(bench, variants=True)  # + forced rows64 and L2 flushed (section 7)
tiers = data.tier_frame(df_all)
est = data.sm120_frame(sm120) if sm120 is not None else pd.DataFrame()
centre_est = data.estimate_at(est, data.centre_tier(tiers))
read_gbps, mma_tflops = data.ceilings(bench)
found = [f for f in (findings.correctness(val), findings.centre_speed(df), findings.tiers(tiers),
                     findings.sglang_step(integ), findings.backend(backend),
                     findings.fp8(val, bench, backend), findings.dcp(dcp),
                     findings.extend_kernel(ext),
                     findings.production(docs, centre_est, data.gpu_short(sm120))) if f is not None]
display(HTML(findings.box(found, "<b>Findings of this report</b> (computed from the data below)")))
display(Markdown('<a id="evidence"></a>' + provenance.evidence_box(docs)))
display(Markdown(provenance.banner(docs, measured_since)))
other = data.not_shown(data_dir, docs)
if other:
    display(Markdown("Other measurement files in the data directory, not analysed on this page: "
                     + "; ".join(f"`{o['file']}` ({o['kind']}: {o['what']}, {o['date']})"
                                 for o in other) + "."))
display(Markdown("**The implementations compared on this page.**\n\n"
                 + glossary.impl_glossary(df["impl"].unique())))
backend_cases = data.backend_frame(backend) if backend is not None else pd.DataFrame()


def backend_table(cases: pd.DataFrame, caption: str):
    """SGLang's real backend, one row per case (sections 10 and 12: bf16 and fp8 pools)."""
    return figures.table(
        cases[["case", "covers", "pass", "oracle_err", "control_err", "graph_vs_eager", "bitwise",
               "flash_replay_ms", "control_replay_ms", "replay_speedup"]],
        {"oracle_err": "{:.2e}", "control_err": "{:.2e}", "graph_vs_eager": "{:.2e}",
         "flash_replay_ms": "{:,.2f}", "control_replay_ms": "{:,.2f}", "replay_speedup": "{:,.1f}x"},
        caption, text=("covers",))


def estimate_table(est: pd.DataFrame, caption: str):
    """The sm_120 model's rows per shape and tier (sections 11 and 12: bf16 and fp8 pools)."""
    return figures.table(
        est[["S", "T", "H", "tile", "h200_us", "h200_overlap", "sm120_estimate_us",
             "sm120_overlapped_us", "sm120_memory_us", "sm120_math_us", "sm120_floor_us", "bound",
             "lowest_estimate"]],
        {"S": "{:,}", "h200_us": "{:,.1f}", "h200_overlap": "{:.2f}", "sm120_estimate_us": "{:,.1f}",
         "sm120_overlapped_us": "{:,.1f}", "sm120_memory_us": "{:,.1f}", "sm120_math_us": "{:,.1f}",
         "sm120_floor_us": "{:,.1f}"},
        caption)

# %% [markdown]
# <a id="correctness"></a>
# ## 1. Correctness
# Every case runs on fresh random inputs against a float64 oracle. Pool slots that the prefix
# does not own hold NaN and the output is pre-filled with NaN ("poisoned"), so a stray read or
# an unwritten output row shows up as NaN instead of passing as zeros. This section is the bf16
# KV pool; SGLang's fp8_e4m3 pool has its own section, [12](#fp8).

# %%
v = data.validation_summary(val)
w = v["worst"]
verdict = "**all pass**" if v["all_pass"] else f"**{v['n_cases'] - v['n_pass']} FAIL**"
nan_text = ("no NaN in any output and no unwritten output row"
            if v["nan_cases"] == 0 and v["unwritten_total"] == 0 else
            f"**{v['nan_cases']} cases with NaN output, {v['unwritten_total']} unwritten rows**")
display(Markdown(
    f"- **{v['n_cases']} cases**, {verdict} at relative tolerance {v['tolerance']:g}.\n"
    f"- Worst output error **{v['max_rel_err']:.3g}** (relative, case `{w['id']}`: prefix "
    f"lengths {w['prefix_lens']}, draft lengths {w['draft_lens']}, {w['heads']} heads, "
    f"{w['tree']} tree, {w['layout']} layout, page size {w['page_size']}); worst LSE error "
    f"{v['max_lse_rel_err']:.3g}.\n"
    f"- NaN poison: {nan_text}."))
display(figures.table(data.validation_groups(val),
                      {"worst_rel_err": "{:.2e}", "worst_lse_rel_err": "{:.2e}"},
                      "Validation cases by draft-tree shape and cache layout"))
by_tier = data.validation_tiers(val)
if not by_tier.empty:
    display(figures.table(by_tier.rename(columns={"failing": "failing checks"}),
                          {"worst_rel_err": "{:.2e}"},
                          "The same cases per kernel tier: each case runs at the tier its shape "
                          "picks by default and again at the other tiers that shape allows"))

# %%
sg = pd.DataFrame(val.get("sglang", {}).get("cases", []))
if not sg.empty:
    # our error for the same case comes from the main table (same id)
    ours = pd.DataFrame(val["cases"])
    ours = ours[["id"] + [c for c in ("rel_err", "tree", "layout", "page_size") if c in ours and c not in sg]]
    sg = sg.merge(ours, on="id", how="left")
    pairs = {"ours vs oracle": "rel_err", "SGLang vs oracle": "sglang_rel_err",
             "ours vs SGLang": "rel_err_vs_sglang"}
    summ = pd.DataFrame([{"comparison": k, "cases": int(sg[c].notna().sum()),
                          "median relative error": sg[c].median(),
                          "largest relative error": sg[c].max()} for k, c in pairs.items()])
    display(figures.table(summ, {"median relative error": "{:.2e}",
                                 "largest relative error": "{:.2e}"},
                          "Against SGLang's own extend_attention_fwd on the same inputs (bf16, on the "
                          "GPU): relative errors against the float64 oracle, and ours against SGLang's"))
    cols = [c for c in ("id", "tree", "layout", "page_size", "prefix_lens", "rel_err", "sglang_rel_err",
                        "rel_err_vs_sglang") if c in sg]
    display(figures.table(sg.nlargest(5, "rel_err_vs_sglang")[cols],
                          {"rel_err": "{:.2e}", "sglang_rel_err": "{:.2e}", "rel_err_vs_sglang": "{:.2e}"},
                          "The five cases where our output and SGLang's differ most"))
else:   # a run without SGLang on the GPU machine's path: say so, and where the comparison last ran
    with_sg = [d for d in data.load_all(data_dir, "validation") if d.get("sglang", {}).get("cases")]
    last = max(with_sg, key=lambda d: d["_date"]) if with_sg else None
    note = (f"**Against SGLang's own extend_attention_fwd: not in `{Path(val['_path']).name}`** (SGLang was "
            "not importable on the GPU machine in that run; SGLang's real backend did run beside it, "
            "[section 10](#backend)).")
    if last is not None:
        cmp = pd.DataFrame(last["sglang"]["cases"])["rel_err_vs_sglang"]
        note += (f" The newest file with the comparison, `{Path(last['_path']).name}` (commit "
                 f"{last.get('commit', '?')}, an older kernel): ours against SGLang at most {cmp.max():.2e} "
                 f"relative over {int(cmp.notna().sum())} cases.")
    display(Markdown(note))
gr = pd.DataFrame(val.get("graph", {}).get("cases", []))
if not gr.empty:
    display(Markdown(f"CUDA-graph replay with new sequence lengths: {int(gr['pass'].sum())} of "
                     f"{len(gr)} cases match eager execution; largest difference "
                     f"{gr['max_abs_diff_vs_eager'].max():.3g} (absolute)."))

# %% [markdown]
# <a id="centre"></a>
# ## 2. Speed at the centre point
# S = 185,000 prefix tokens, T = 8 draft tokens, H = 8 heads (one GPU at tensor parallelism 8),
# page size 1 with scattered slots (SGLang's default), batch 1.

# %%
c = data.centre(df)
ours_us = float(c.loc[c["impl"] == data.OURS, "time_us"].iloc[0])
c["speed-up of ours"] = c["time_us"] / ours_us
# One efficiency column: the roofline floor over the time (the read ceiling alone would say
# nearly the same at this memory-bound point, and two near-equal columns read as a contradiction).
c["% of roofline"] = 100 * c["frac_roofline"]
n_rep, spread = data.repeat_spread(df)
display(Markdown(
    f"The roofline floor here is **{float(c['roofline_us'].iloc[0]):,.1f} us** per layer (the "
    f"bytes at the {read_gbps:,.0f} GB/s read ceiling, or the matrix work at {mma_tflops:,.0f} "
    f"TFLOP/s, whichever is longer). Every sweep measures the centre again: our {n_rep} "
    f"repeats differ by {spread:.1%} (largest minus smallest, over the median), the noise of "
    "this run."))
figures.table(c[["label", "time_us", "GBps", "% of roofline", "speed-up of ours"]].rename(
                  columns={"label": "implementation", "time_us": "time per layer, us",
                           "GBps": "effective GB/s"}),
              {"time per layer, us": "{:,.1f}", "effective GB/s": "{:,.0f}",
               "% of roofline": lambda v: f"{v:.2g}" if v < 10 else f"{v:.0f}",
               "speed-up of ours": "{:,.1f}x"},
              "Centre point: one layer's verify attention (median of repeats across sweeps)")

# %% [markdown]
# ## 3. Roofline: every configuration measured
# Each point is one (configuration, implementation). The solid line is the roofline: reading
# the KV cache at the measured read ceiling, or the tensor cores at their measured ceiling.
# A point on the line runs as fast as the hardware allows for that work.

# %%
frac = c.set_index("impl")["frac_roofline"]
fig = figures.roofline(df, read_gbps, mma_tflops,
                       f"Roofline on {bench['gpu']}: at the centre point ours reaches "
                       f"{frac[data.OURS]:.0%} of the roof, SGLang's extend path "
                       f"{frac.get(data.BASELINE, float('nan')):.2%}")

# %% [markdown]
# ## 4. Speed-ups over SGLang, and scaling in S

# %%
sp = data.speedups(data.select(df, sweep="S")).sort_values("S")
fig = figures.speedup_vs(sp, "S", "prefix tokens S",
                         "Speed-up of ours over SGLang's extend path (used on CUDA today) and "
                         "over its split-KV verify")
figures.show(fig)
figures.speedup_table(sp, "S", "Time per layer and speed-ups (their time / ours), T = 8, H = 8, "
                      "scattered slots, page size 1")

# %%
s_rows = data.select(df, sweep="S")
fig = figures.time_vs_s(s_rows, "Scaling in S: time per layer of every implementation; the "
                        "dashed roofline is the floor")
fig = figures.bandwidth_vs_s(s_rows, read_gbps, "Scaling in S: effective bandwidth against "
                             "the read ceiling")

# %% [markdown]
# <a id="layout"></a>
# ## 5. Does the cache layout matter? Scattered and fragmented against contiguous
# SGLang hands out KV slots one token at a time, so a long-lived request's slots end up
# scattered over the pool. If our kernel were much slower on scattered slots, a
# defragmenting allocator would be worth building.

# %%
lay = data.select(df, sweep="layout", impl=data.OURS)
contiguous_1 = (lay["layout"] == "contiguous") & (lay["page_size"] == 1)
ref = lay[contiguous_1].groupby("S")["time_us"].median()
if ref.empty:
    raise data.MeasurementError(f"{bench['_path']}: layout sweep has no contiguous page-1 rows "
                                "of ours")
tab = (lay.groupby(["S", "layout", "page_size"], as_index=False)["time_us"].median()
       .query("S in @ref.index").sort_values(["S", "page_size", "layout"]))
tab["time / contiguous page 1"] = tab["time_us"] / tab["S"].map(ref)
figures.table(tab.rename(columns={"time_us": "ours, us per layer"}),
              {"S": "{:,}", "ours, us per layer": "{:,.1f}", "time / contiguous page 1": "{:.3f}"},
              "Our time per layer by cache layout and page size, against a contiguous cache "
              "with page size 1 at the same S (every combination measured)")

# %%
worst = tab[~((tab["layout"] == "contiguous") & (tab["page_size"] == 1))]
worst_slow = float(worst["time / contiguous page 1"].max()) - 1 if not worst.empty else 0.0
answer = "**No.**" if worst_slow <= defrag_threshold else "**Yes.**"
s_text = ", ".join(f"{int(x):,}" for x in sorted(tab["S"].unique()))
display(Markdown(
    f"{answer} The largest slow-down of another layout or page size against a contiguous cache "
    f"is **{100 * worst_slow:+.1f} %** over the {len(worst)} combinations measured at S = "
    f"{s_text} (threshold for 'matters': {100 * defrag_threshold:.0f} %). For scale: our "
    f"{n_rep} repeats of one configuration in this run differ by {spread:.1%}, so a difference "
    "inside that band is noise, not a layout effect."))
smax = int(tab["S"].max())
figures.show(figures.layout_bars(lay[lay["S"] == smax], f"Our time per layer by cache layout "
                                 f"and page size (S = {smax:,}): bars from zero"))

# %% [markdown]
# ## 6. Draft-tree size T, heads H and batch

# %%
display(Markdown("Below, \"ours\" is the kernel at its default tier (section 7 says which); "
                 "the runs with a tier forced or the L2 flushed are not part of these series."))
for sweep, xlabel, what in (("T", "draft tokens per request, T", "tree size"),
                            ("H", "query heads per GPU, H", "head count"),
                            ("batch", "requests in the batch (S is their total)", "batch size")):
    rows = data.select(df, sweep=sweep)
    if rows.empty:
        display(Markdown(f"_No {sweep} sweep in the bench file._"))
        continue
    figures.show(figures.time_vs(rows, sweep, xlabel, f"Time per layer against {what} "
                                 f"(S = {int(rows['S'].max()):,} total prefix tokens)"))
    sp_rows = data.speedups(rows).sort_values(sweep)
    display(figures.speedup_table(sp_rows, sweep,
                                  f"{what}: time per layer and speed-ups (their time / ours)"))
    if sp_rows.isna().any().any():
        display(Markdown(glossary.NA_NOTE))

# %%
b32 = data.select(df, sweep="batch32")
if not b32.empty:
    o = b32[b32["impl"] == data.OURS].iloc[0]
    lens = o["prefix_lens"]
    tab32 = pd.DataFrame([{"implementation": r["label"], "time per layer, us": r["time_us"],
                           "effective GB/s": r["GBps"], "% of roofline": 100 * r["frac_roofline"],
                           "their time / ours": r["time_us"] / o["time_us"]}
                          for _, r in b32.sort_values("time_us").iterrows()])
    missing = [glossary.IMPL_LABELS[i] for i in (data.BASELINE, data.SPLIT_KV)
               if i not in set(b32["impl"])]
    display(Markdown(
        f"**A mixed batch of {len(lens)} requests** (prefixes from {min(lens):,} to "
        f"{max(lens):,} tokens, {int(o['S']):,} in all, T = {int(o['T'])}, H = {int(o['H'])}): "
        f"ours takes **{o['time_us']:,.1f} us** per layer, {100 * o['frac_roofline']:.0f} % of "
        "the roofline"
        + (f"; {', '.join(missing)} did not run on this batch in the benchmark." if missing
           else ".")))
    display(figures.table(tab32, {"time per layer, us": "{:,.1f}", "effective GB/s": "{:,.0f}",
                                  "% of roofline": "{:.1f}", "their time / ours": "{:,.2f}x"},
                          f"A batch of {len(lens)} requests of mixed length: time per layer"))

# %% [markdown]
# <a id="tiers"></a>
# ## 7. Kernel tiers: which tile size served each shape
# The kernel has three tile families, picked from static shapes only (CUDA-graph safe). The
# **small tier** swaps the matrix operands (the KV tile becomes the wide operand) and tiles a
# request's H x T query rows by 8 or 16, so a request with few query rows does not pay for a
# tile of mostly padding (by default bf16 requests of up to 8 rows, fp8 ones of up to 32). **rows32d** and **rows64d** (design D of the kernel memo) keep the
# query rows in the matrix operand's rows, in 32-row pipelines of four warps: rows32d runs one
# per CTA and two CTAs per SM (up to 32 query rows), rows64d two per CTA, offset by half a tile
# so that one pipeline's softmax overlaps the other's matrix work (more rows). **rows64**, the
# first 64-row tier, is no longer picked; the benchmark times it forced beside every default
# pick up to T = 64, which is the comparison below.

# %%
if tiers.empty:
    display(Markdown("_This bench file records no tier per row._"))
else:
    small = tiers[tiers["tier"] != 0]
    served = "; ".join(f"{t} for {', '.join(str(q) for q in sorted(g['query_rows'].unique()))} "
                       "query rows"
                       for t, g in tiers.groupby("tile", sort=False))
    display(Markdown(f"Tiers that served ours in this benchmark: {served}."))
    if not small.empty and small["rows64_us"].notna().any():
        f = findings.tiers(tiers)
        display(Markdown(f"The default pick against rows64 forced on the same shape: {f['text']}."))
        at = small[(small["S"] == data.CENTRE["S"]) & (small["batch"] == 1)]
        at = at if not at.empty else small
        figures.show(figures.default_vs_forced(
            at, f"Default pick against rows64 forced, S = {int(at['S'].max()):,}, one request: "
                "bars from zero"))
    display(figures.table(
        tiers[["query_rows", "T", "H", "S", "requests", "layout", "page_size", "tier", "tile",
               "ours_us", "pct_roofline", "rows64_us", "small_gain"]],
        {"S": "{:,}", "ours_us": "{:,.1f}", "pct_roofline": "{:.1f}", "rows64_us": "{:,.1f}",
         "small_gain": "{:,.2f}x"},
        "Which tier served each configuration of ours (median over the sweeps that repeat it)"))
    display(Markdown("n/a under rows64 forced: the bench forces rows64 in the S, T, H and batch "
                     "sweeps up to T = 64 only."))

# %%
l2 = data.l2_flush_frame(df_all)
if not l2.empty:
    l2_mb = bench.get("l2_bytes", 0) / 1e6
    parts = "; ".join(f"S = {int(r['S']):,}: {r['flushed_us']:,.1f} us flushed against "
                      f"{r['warm_us']:,.1f} us warm ({100 * (r['flushed_over_warm'] - 1):+.1f} %)"
                      for _, r in l2.iterrows())
    fits = ", ".join(f"{r['kv_mb']:,.1f} MB" for _, r in l2.iterrows())
    display(Markdown(
        "**Do warm-L2 timings flatter the short prefixes?** Every timing above repeats the call "
        "with the L2 cache warm; at short prefixes the bytes of one call"
        + (f" ({fits}) fit in the GPU's {l2_mb:,.1f} MB L2" if l2_mb else " may fit in L2")
        + f". The bench timed them again with L2 flushed before every call: {parts}. For "
        f"scale, our repeats of one configuration differ by {spread:.1%}."))
    display(figures.table(l2[["S", "kv_mb", "warm_us", "flushed_us", "flushed_over_warm"]],
                          {"S": "{:,}", "kv_mb": "{:,.1f}", "warm_us": "{:,.1f}",
                           "flushed_us": "{:,.1f}", "flushed_over_warm": "{:.3f}"},
                          "Ours with L2 warm (every other table) and with L2 flushed before "
                          "each call (T = 8, H = 8)"))

# %% [markdown]
# <a id="micro"></a>
# ## 8. Inside the kernel: microbenchmarks per tier
# The microbenchmarks run each tier's own kernel with parts switched off, so what is timed is
# the code that ships, at the centre and at neighbouring shapes, for every tier the shape
# allows:
# - **stream**: the kernel without its math and merge, i.e. the paged KV gather alone, as GB/s
#   of KV bytes and as a fraction of the read ceiling measured in the same run, per L2 policy
#   (`plain`, or `evict_first`, which the small and design D tiers use);
# - **mma**: the kernel without its KV loads, i.e. the per-tile matrix work on tiles already
#   in shared memory, as SM clocks per 16-token tile on the busiest thread block;
# - **full**: the whole kernel, with the time of the log-sum-exp merge of the partial results
#   (`merge`) taken out by running it once more without the merge;
# - **parts** (rows32d and rows64d): the mma stage again with the softmax, the QK product or
#   the PV product left out, to see what each adds per tile.

# %%
if micro is None:
    display(Markdown("_No microbenchmark file in the data directory._"))
else:
    mf = data.micro_frame(micro)
    if not tiers.empty:   # the tier the benchmark's default picked at each micro shape
        base = data.select(tiers, layout="scattered", page_size=1, batch=1)
        picked = {(r.S, r.T, r.H): r.tier for r in base.itertuples()}
        mf["default_tier"] = [None if (r.S, r.T, r.H) not in picked else
                              picked[(r.S, r.T, r.H)] == r.tier for r in mf.itertuples()]
    head = mf[(mf["S"] == data.CENTRE["S"]) & (mf["T"] == 1) & mf["fastest"]]
    lines = []
    for _, r in head.iterrows():
        stream = ("its stream alone was not timed in this run (`--stages stream`)" if r["stream_frac"] != r["stream_frac"]
                  else f"it streams the KV at up to **{100 * r['stream_frac']:.0f} %** of the read ceiling")
        lines.append(f"At S = {int(r['S']):,}, T = {int(r['T'])}, H = {int(r['H'])} the fastest "
                     f"tier is {data.tier_phrase(r['tier'])}: {stream}, and it runs whole in "
                     f"**{r['full_us']:,.1f} us** (merge {r['merge_us']:,.1f} us).")
    if "default_tier" in mf:
        judged = mf[mf["default_tier"].notna()][["S", "T", "H"]].drop_duplicates()
        same = mf[mf["default_tier"].map(lambda v: v is True) & mf["fastest"]]
        lines.append(f"At {len(same)} of the {len(judged)} shapes the benchmark also ran, the "
                     "tier the default picks has the fastest full time here.")
    display(Markdown(f"`{Path(micro['_path']).name}`, SM clock "
                     f"{micro.get('clock_assumed_mhz'):,.0f} MHz for the clock counts. "
                     + " ".join(lines)))
    cols = ["S", "T", "H", "tile", "tiles_per_cta", "stream_plain_gbps", "stream_evict_gbps",
            "stream_frac", "clk_per_tile", "full_us", "merge_us", "fastest"]
    cols += ["default_tier"] if "default_tier" in mf else []
    display(figures.table(
        mf[cols].assign(stream_frac=100 * mf["stream_frac"]),
        {"S": "{:,}", "tiles_per_cta": "{:,}", "stream_plain_gbps": "{:,.0f}", "stream_evict_gbps": "{:,.0f}",
         "stream_frac": "{:.0f}", "clk_per_tile": "{:,.0f}", "full_us": "{:,.1f}",
         "merge_us": "{:,.1f}"},
        "Microbenchmarks per shape and tier: stream (no math), mma (no loads), full kernel"))
    display(Markdown("n/a: rows64 streams with the plain L2 policy only; 'default here' is n/a "
                     "where the benchmark did not run that shape. Clocks per tile come from the "
                     "mma stage, with 16 KV tokens per tile."))
    pf = data.parts_frame(micro)
    if not pf.empty:
        c8 = (micro.get("ceilings") or {}).get("mma_TFLOPs_8_warps_per_sm")
        c = pf[(pf["S"] == data.CENTRE["S"]) & (pf["T"] == data.CENTRE["T"])]
        sums = [f"{r.tile}: {100 * (r.skeleton + r.adds_softmax + r.adds_qk + r.adds_pv) / r.math:.0f} %"
                for r in c.itertuples()]
        display(Markdown(
            "**Design D, part by part** (math only, tiles in shared memory): clocks per 16-token "
            "tile of one CTA with each part left out; 'adds' is the whole minus the whole without "
            "that part. At the centre the skeleton (loop, barriers, fixed cost) plus the three "
            "additions come to this share of the whole (100 % would mean the parts never overlap): "
            + "; ".join(sums) + "."
            + (f" The mma.sync ceiling at these tiers' 8 warps per SM, same run: {c8:,.0f} TFLOP/s."
               if c8 else "")))
        display(figures.table(
            pf[["S", "T", "H", "tile", "tiles_per_cta", "math", "no_softmax", "no_qk", "no_pv",
                "softmax_only", "skeleton", "adds_softmax", "adds_qk", "adds_pv"]],
            {"S": "{:,}", "tiles_per_cta": "{:,}", **{c: "{:,.0f}" for c in
             ("math", "no_softmax", "no_qk", "no_pv", "softmax_only", "skeleton", "adds_softmax",
              "adds_qk", "adds_pv")}},
            "Design D tiers, math only: SM clocks per tile with parts left out"))
    at_s = mf[mf["S"] == data.CENTRE["S"]].sort_values(["rows_per_tile", "T"])
    figures.show(figures.time_vs(
        at_s.assign(time_us=at_s["full_us"]), "T", "draft tokens per request, T",
        f"Full kernel time per tier against T (S = {data.CENTRE['S']:,}, H = "
        f"{int(at_s['H'].iloc[0])}): the lowest line is the tier to pick", hue="tile",
        pal=figures.ordered_palette(at_s["tile"])))

# %%
ladder_docs = data.load_all(data_dir, "microbench")
if micro is not None and len(ladder_docs) > 1:
    ladder, files = data.micro_ladder(ladder_docs)
    if not ladder.empty:
        display(Markdown(
            "**The ladder: the same shapes across the microbenchmark files**, oldest first, one "
            "column per file named by the kernel commit it measured (full kernel, us): "
            + "; ".join(f"`{f['file']}` (commit `{f['commit']}`, {f['date']})" for f in files)
            + ". Only shapes and tiers every file measured are listed."))
        display(figures.table(ladder, {"S": "{:,}", **{f["column"]: "{:,.1f}" for f in files}},
                              "Full-kernel time of the same shape and tier at each commit, us"))

# %% [markdown]
# <a id="fixed"></a>
# ## 8b. Where a call's time goes beyond its bytes: fixed cost and phases
# - **Fixed cost** (`python -m kernel.gpu_run --stages fixed`): the default tier's call timed at
#   prefix lengths from 128 tokens to 262k; a straight line through the long ones gives what a
#   call costs on top of its KV bytes (the intercept) and the rate at which it reads them. A
#   second line, against the 16-token tiles of the busiest thread block, splits the same times
#   into what a call costs once and what one more tile costs in SM clocks; for the math alone
#   (no KV load issued) that is the tile's own cost, which the per-tile figures of section 8
#   (a call's time over its tiles) mix with the once-a-call part.
# - **Phases** (`--stages trace`): a diagnostic build of the same kernels in which one thread
#   of every thread block records the GPU's global timer at fixed points: its start, the
#   schedule planned, the first tile in, the loop done, the result stored; and for the merge,
#   its start, the end of its wait for the verify kernel, and its store. One call, replayed
#   alone in a CUDA graph, median of 5 replays. The request's last split is shorter than the
#   others, so the loops' minimum is that split's; the tail the merge waits for is the last
#   store after the median one.

# %%
if fixed is None and trace is None:
    display(Markdown("_No fixed-cost or trace file in the data directory._"))
if fixed is not None:
    ff = data.fixed_cost_frame(fixed)
    display(Markdown(f"`{Path(fixed['_path']).name}`: the line runs through S >= "
                     f"{int(ff['fit_from_S'].iloc[0]):,}."))
    display(figures.table(ff.drop(columns=["fit_from_S"]), {"intercept_us": "{:,.1f}", "marginal_gbps": "{:,.0f}",
                                                           "tile_intercept_us": "{:,.1f}", "marginal_clk_per_tile": "{:,.0f}"},
                          "Fixed cost (intercept) and marginal KV rate of a call, per pool and T; the same times "
                          "against the busiest thread block's tiles: once a call and a tile's SM clocks"))
if trace is not None:
    tf = data.trace_frame(trace)
    t1 = data.select(tf, pool=data.BF16_KV, T=1, S=data.CENTRE["S"])
    if not t1.empty:
        r = t1.iloc[0]
        second = ("" if pd.isna(r["second_cta_us"]) else
                  f" (the blocks dispatched second on an SM loop {r['second_cta_us']:.1f} us longer on average)")
        display(Markdown(
            f"`{Path(trace['_path']).name}`: at S = {int(r['S']):,}, T = 1 the thread blocks with work all "
            f"start within {r['launch_spread_us']:.1f} us, planning takes {r['plan_us']:.1f} us and the "
            f"first tile arrives {r['prologue_us']:.1f} us later; the loops take {r['loop_median_us']:.1f} us "
            f"at the median and up to {r['loop_max_us']:.1f}{second}, so the last result lands "
            f"**{r['store_tail_us']:.1f} us** after the median one, and the merge ends "
            f"{r['merge_after_us']:.1f} us after that ({r['span_us']:.1f} us traced, "
            f"{r['graph_us']:.1f} us graph-replayed)."))
    display(figures.table(tf, {"S": "{:,}", **{c: "{:,.1f}" for c in tf.columns if c.endswith("_us")}},
                          "Phases of one call, us (diagnostic build, sm_90)"))

# %% [markdown]
# <a id="sglang"></a>
# ## 9. Inside SGLang: 61 layers of attention per verify step
# The same kernel behind SGLang's attention backend (the plugin, `MLA_VERIFY_BACKEND=flash`,
# the candidate) against SGLang's Triton backend (the control), as timed by `kernel.gpu_run`
# through SGLang's attention backend.

# %%
it = data.integration_frame(integ)
figures.show(figures.step_time_by_case(it, f"Attention time per verify step over "
                                    f"{integ['layers']} layers: candidate against control"))
big = it[it["S"] == it["S"].max()]
per_tree = "; ".join(   # one sentence per measured draft tree: T changes the work several-fold
    f"T = {int(r['T'])} ({r['tree']}): **{r['triton_ms_per_step']:,.1f} ms** per verify step on the "
    f"control and **{r['plugin_ms_per_step']:,.2f} ms** on the candidate (**{r['speedup']:,.0f}x**)"
    for _, r in big.sort_values("T").iterrows())
display(Markdown(
    f"At S = {int(big['S'].iloc[0]):,}, {integ['layers']} layers of attention: {per_tree}. "
    f"Largest output difference between the two: {it['rel_err_plugin_vs_triton'].max():.3g} "
    f"(relative); CUDA-graph replay matches eager in {int(it['graph_replay_matches_eager'].sum())} "
    f"of {len(it)} cases."))
figures.table(it[["S", "H", "T", "tree", "triton_us", "plugin_us", "triton_ms_per_step",
                  "plugin_ms_per_step", "speedup", "rel_err_plugin_vs_triton",
                  "graph_replay_matches_eager"]],
              {"S": "{:,}", "triton_us": "{:,.1f}", "plugin_us": "{:,.1f}",
               "triton_ms_per_step": "{:,.2f}", "plugin_ms_per_step": "{:,.3f}",
               "speedup": "{:,.1f}x", "rel_err_plugin_vs_triton": "{:.2e}"},
              "SGLang integration: per-layer times (us) and per-step times (ms, all layers)")

# %% [markdown]
# <a id="backend"></a>
# ## 10. Through SGLang's real backend, in CUDA graphs
# SGLang's own `TritonAttnBackend` on CUDA with the plugin installed through its real hook
# (`load_plugins()`, then the backend class SGLang builds), SGLang's CUDA-graph state around
# a graph of every layer's `forward_extend`, captured once and replayed with new sequence
# lengths and a new draft tree, as a scheduler process runs it. Each replay is checked against
# the float64 oracle and, where SGLang's own path is affordable, against the control arm's
# graph; plus the adaptive-draft-length sequence and one replay under compute-sanitizer's
# memcheck.

# %%
if backend is None:
    display(Markdown("_No sglang-backend file in the data directory: "
                     "`python -m kernel.gpu_run` writes one with its sglang-backend stage._"))
else:
    bs = data.backend_summary(backend)
    bf = backend_cases[backend_cases["kv"] == data.BF16_KV]   # the fp8 pool's cases: section 12
    fb = next(f for f in found if f["id"] == "backend")
    not_bitwise = bf[bf["bitwise"].map(lambda v: v is False)]  # None: no graph in the case
    eager = (f"The graph replay is bit-identical to eager execution in {bs['bitwise']} of "
             f"{bs['graph_cases']} graph cases"
             + ("" if not_bitwise.empty else
                "; " + ", ".join(f"`{r['case']}` differs by {r['graph_vs_eager']:.2g}"
                                 for _, r in not_bitwise.iterrows())
                + f" (relative, inside the tolerance {bs['tol']:g})") + ".")
    display(Markdown(
        f"**{fb['text'][0].upper() + fb['text'][1:]}.** SGLang {bs['sglang']}, Triton "
        f"{bs['triton']}; a case passes when every error is below {bs['tol']:g} and every "
        f"output is finite. {eager}"))
    display(backend_table(
        bf, f"SGLang's real backend: every case, its largest errors, and the {bs['layers']}-layer "
        "graph's replay time per arm (candidate = the plugin, control = SGLang's Triton path)"))
    display(Markdown("n/a: the case has no such comparison (the control arm runs only where "
                     "SGLang's path is affordable; the adaptive and memcheck cases are not "
                     "timed)."
                     + (f" The file's {int((backend_cases['kv'] == data.FP8_KV).sum())} cases on the "
                        "fp8_e4m3 pool are in [section 12](#fp8)."
                        if (backend_cases["kv"] == data.FP8_KV).any() else "")))

# %% [markdown]
# <a id="dcp"></a>
# ## 10b. Decode context parallelism with tree verify, simulated on one GPU
# With `--dcp-size N` every GPU of a TP group keeps 1/N of each request's prefix. The plugin
# then runs, per rank: the draft block with the tree mask on the rank's own heads, the rank's
# prefix shard for the heads of the whole group (queries all-gathered), and a merge by LSE
# through SGLang's own collectives. Here the N ranks' kernel calls run one after another on one
# GPU with the prefix sharded as SGLang shards it, and their merge is compared with the
# unsharded call. The link speeds behind the per-step estimate are assumptions, stated in the
# file; a real multi-GPU run is a separate measurement.

# %%
if dcp is None:
    display(Markdown("_No dcp-sim file in the data directory: `python -m kernel.gpu_run "
                     "--stages dcp-sim` writes one._"))
else:
    dd = data.dcp_frame(dcp)
    fd = next(f for f in found if f["id"] == "dcp")
    links = dcp.get("assumed_links") or {}
    net_cols = [c for c in dd.columns if c.startswith("net_ms:")]
    shown = dd.rename(columns={c: f"net saving per step, ms ({c.split(':', 1)[1]}, assumed link)"
                               for c in net_cols})
    display(Markdown(f"**{fd['text'][0].upper() + fd['text'][1:]}.** Shape: "
                     + ", ".join(f"{k} = {v}" for k, v in (dcp.get("shape") or {}).items())
                     + f"; {dcp.get('layers')} layers per step. Assumed links: "
                     + "; ".join(f"{k}: {v['GBps']:g} GB/s, {v['latency_us']:g} us per collective "
                                 f"({v['what']})" for k, v in links.items()) + "."))
    display(figures.table(
        shown, {"err_vs_unsharded": "{:.2e}", "unsharded_us": "{:,.1f}", "rank_us": "{:,.1f}",
                "epilogue_us": "{:,.1f}", "collective_kb": "{:,.0f}", "kv_share": "{:.3f}",
                **{c: "{:+,.2f}" for c in shown.columns if c.startswith("net saving")}},
        "DCP simulated on one GPU: correctness, per-layer attention time per rank, what the "
        "collectives move, KV memory per GPU, and the per-step estimate on the assumed links "
        "(negative: slower than unsharded)"))

# %% [markdown]
# <a id="sm120"></a>
# ## 11. The production GPU, sm_120: an ESTIMATE from a model, not a measurement
# The kernel is compiled for sm_120 (RTX PRO 6000 Blackwell) in every run, but **it has never
# run on one**: every measurement on this page is from the GPU named at the top. What follows
# is a model (`kernel/bench/sm120_estimate.py`, its own file in the data directory): it takes
# each tier's microbenchmarks on a GH100 GPU (an H200 or an H100; the model file and the
# table's caption name it) and sm_120's published figures and gives a time per layer per
# tier. Per 16-token tile, the math is that GPU's non-matrix clocks (softmax, barriers, loop:
# the same clocks on sm_120) plus the tile's MMAs at sm_120's rate (a quarter of an MMA per clock
# per SM) divided by the tier's MMA efficiency measured there, at most 1 (sm_120's MMAs never
# run faster than its full rate, even where the measured parts credit a tier with more); tiers that run two blocks
# per SM on GH100 and one on sm_120 (rows32d, the 8- and 16-row tiles) pay their non-matrix
# clocks twice. The memory part is the KV bytes at sm_120's DRAM bandwidth times the fraction of
# its spec the measured GPU's memory sustains, slowed only if a tier keeps too few bytes in flight for
# sm_120. Memory and math are not assumed to overlap, since nothing has measured that on sm_120:
# the estimate is their sum (plus the merge), and the fully overlapped time is shown beside it as
# the best case. It says which tier a canary on sm_120 should try first; it proves nothing.

# %%
if est.empty:
    display(Markdown("_No sm_120 model in the data directory (`python -m "
                     "kernel.bench.sm120_estimate` writes it from a microbenchmark and "
                     "bench files)._"))
else:
    a = sm120["sm120"]
    clocks = sm120["clocks"]
    gpu = data.gpu_short(sm120)   # the microbenchmarks' GPU
    names = {"boost": "boost", "max_q": "Max-Q", "max_q_base": "Max-Q base"}
    published = ", ".join(f"{v:,g} {glossary.SM120_ASSUMPTIONS[k]}"
                          if k in glossary.SM120_ASSUMPTIONS else f"{k} = {v}" for k, v in a.items())
    bench_in = sm120["inputs"].get("bench")
    lines = [f"Model: {sm120['model']}; from `{sm120['inputs']['micro']}`"
             + (f" and `{bench_in}`" if bench_in else " (written from the micro file alone, before any bench of its run: the read ceiling is the micro file's)")
             + f". Published sm_120 figures: {published}. SM clocks: "
             + ", ".join(f"{names.get(k, k)} {v:g} GHz" for k, v in clocks.items())
             + f" (sources in the model file; the table: {names.get(sm120['default_clock'])}). Assumed: the {gpu}'s read ceiling over its "
             # spec_GBps: the measured GPU's datasheet figure; files before 2026-12-05 had the H200's alone
             f"{sm120['assumptions'].get('spec_GBps') or sm120['assumptions']['h200_spec_GBps']:,.0f} GB/s spec "
             f"({sm120['assumptions']['dram_fraction']:.3f}) carries over to sm_120's DRAM, and "
             f"{sm120['assumptions']['dram_latency_ns']:,.0f} ns of loaded DRAM latency."]
    if centre_est is not None:
        lines.append(
            f"At the centre (S = {int(centre_est['S']):,}, T = {int(centre_est['T'])}, H = "
            f"{int(centre_est['H'])}, at the tier the default picks: "
            f"{data.tier_phrase(centre_est['tier'])}): **estimate {centre_est['sm120_estimate_us']:,.1f} "
            f"us** per layer on sm_120 (model), {centre_est['sm120_overlapped_us']:,.1f} us if memory "
            f"and math overlapped fully, against **{centre_est['h200_us']:,.1f} us measured** on the "
            f"{gpu}; {centre_est['bound']}-bound on the model (memory {centre_est['sm120_memory_us']:,.1f}, "
            f"math {centre_est['sm120_math_us']:,.1f} us); the model's floor there is "
            f"{centre_est['sm120_floor_us']:,.1f} us."
            + (f" The {gpu} hid {centre_est['h200_overlap']:.0%} of its shorter part (its stream) at "
               "this shape: its measured time lies between the two bounds"
               + (", nearer their sum." if centre_est["h200_overlap"] < 0.5 else ".")
               if pd.notna(centre_est.get("h200_overlap")) else ""))
    if micro is not None:
        h200_best = data.micro_frame(micro).query("fastest")[["S", "T", "H", "tier"]]
        low = est[est["lowest_estimate"]][["S", "T", "H", "tier"]]
        both = h200_best.merge(low, on=["S", "T", "H"], suffixes=("_h200", "_model"))
        differ = both[both["tier_h200"] != both["tier_model"]]
        if not differ.empty:
            lines.append(
                f"At {len(differ)} of {len(both)} shapes the model's lowest estimate is a "
                f"different tier from the {gpu}'s fastest: "
                + "; ".join(f"S = {int(r.S):,}, T = {int(r.T)}: {data.tier_name(r.tier_model)} "
                            f"on the model, {data.tier_name(r.tier_h200)} measured on the {gpu}"
                            for r in differ.itertuples())
                + ". That is a question for a canary on sm_120, not an answer.")
        else:
            lines.append(f"At all {len(both)} shapes the model's lowest estimate is the tier the "
                         f"{gpu} measured fastest.")
    display(Markdown(" ".join(lines)))
    display(estimate_table(est, "sm_120 ESTIMATE per shape and tier (a model, not a measurement), next "
                                f"to the {gpu}'s measured full-kernel time"))
    by_clock = data.sm120_clocks_frame(sm120)
    shown = by_clock.rename(columns={
        f"{k} {w}": f"{names.get(k, k)} {v:g} GHz, {w}, us" for k, v in clocks.items()
        for w in ("estimate", "overlapped")})
    display(figures.table(
        shown.drop(columns=["tier"]),
        {"S": "{:,}", **{c: "{:,.1f}" for c in shown.columns if c.endswith(", us")}},
        "sm_120 ESTIMATE of the lowest tier per shape at each SM clock (a model, not a "
        "measurement): the memory part does not move with the clock, the math does"))

# %%
sim = data.sm120_sim_frame(sm120sim) if sm120sim is not None else pd.DataFrame()
if not sim.empty:
    spacing = {a: max(v["bf16"]["spacing"].items(), key=lambda kv: kv[1])[0] for a, v in sm120sim["sim"].items()}
    pick = sim[(sim["kv_dtype"] == "bfloat16") & (sim["T"] == 16)]
    r = (pick if not pick.empty else sim).iloc[0]
    pipe = sm120sim["params"]["pipe_cycles"]
    sim_gpu = data.gpu_short(sm120sim)   # the GPU whose microbenchmarks the model read
    display(Markdown(
        f"**A second model of the math, from sm_120's own machine code** (`kernel/bench/sm120_sim.py`, "
        f"`{Path(sm120sim['_path']).name}`; a MODEL, not a measurement). The first model adds the {sim_gpu}'s "
        "non-matrix clocks to the MMAs at sm_120's rate, as if none of that work hid under MMAs that take "
        f"{pipe['120'] / pipe['90']:.1f} times the {sim_gpu}'s clocks. The compiler says more: ptxas spaces one warp's MMAs {spacing.get('120')} cycles "
        f"apart on sm_120 ({spacing.get('90')} on sm_90), which is sm_120's quarter of an MMA per clock and SM over its "
        "four schedulers, so a warp in its MMAs keeps its scheduler's tensor pipe busy by itself while the other "
        "half's warp issues its softmax in the gaps. The issue model (control words, stalls, scoreboards, one "
        "tensor pipe a scheduler) runs rows64d's steady tile on both builds; the sm_90 run's shortfall against "
        f"the {sim_gpu}'s measured clocks at each shape is carried over to sm_120 as a ratio and as clocks, the two ends "
        f"of a range. At {r['kv_dtype']}, T = {int(r['T'])}: **{r['clk_low']:,.0f}-{r['clk_high']:,.0f} clocks "
        f"per 64-row tile against the first model's {r['first_model_clk_per_tile']:,.0f}** (the MMAs alone: "
        f"{r['sm120_mma_floor_clk_per_tile']:,.0f}), i.e. {r['mma_share_low']:.0%}-{r['mma_share_high']:.0%} of "
        f"sm_120's MMA rate against {r['first_model_mma_share']:.0%}, and {r['sm120_math_us_low']:,.1f}-"
        f"{r['sm120_math_us_high']:,.1f} us of math per call against {r['first_model_math_us']:,.1f}."
        + (f" On both models most of an sm_120 tile is MMA at every shape shown: the non-matrix work the {sim_gpu} "
           "waits on matters less there." if min(sim["mma_share_low"].min(), sim["first_model_mma_share"].min()) > 0.5
           else "")))
    display(figures.table(
        sim[["kv_dtype", "T", "clk_low", "clk_high", "first_model_clk_per_tile", "sm120_mma_floor_clk_per_tile",
             "sm120_math_us_low", "sm120_math_us_high", "first_model_math_us"]].rename(columns={
            "kv_dtype": "pool", "clk_low": "clk/tile, low", "clk_high": "clk/tile, high",
            "first_model_clk_per_tile": "first model, clk/tile", "sm120_mma_floor_clk_per_tile": "MMAs alone, clk/tile",
            "sm120_math_us_low": "math, us, low", "sm120_math_us_high": "math, us, high",
            "first_model_math_us": "first model, math, us"}),
        {c: "{:,.0f}" for c in ("clk/tile, low", "clk/tile, high", "first model, clk/tile", "MMAs alone, clk/tile")}
        | {c: "{:,.1f}" for c in ("math, us, low", "math, us, high", "first model, math, us")},
        "sm_120 MODEL of rows64d's math at 185k, H = 8, boost clock, from its machine code (a model, not a "
        "measurement), beside the first model's"))

# %%
res = data.resources_frame(bench, provenance.PRODUCTION_ARCH)
if not res.empty:
    spills = int(res["spill_stores"].sum() + res["spill_loads"].sum())
    display(Markdown(
        f"**What the sm_120 build uses per tier** (ptxas' resource report in "
        f"`{Path(bench['_path']).name}`; compiled, not run): up to "
        f"{int(res['registers'].max())} registers per thread, "
        + ("no spills" if spills == 0 else f"**{spills} bytes of spills**")
        + ", no stack" * bool((res["stack"] == 0).all())
        + ". The dynamic shared memory each tier asks for at launch is not in the build record, "
        "so it is not shown."))
    display(figures.table(res, {"smem_static": "{:,}"},
                          f"Registers, spills and static shared memory of our two kernels per "
                          f"variant on {provenance.PRODUCTION_ARCH}, with the registers on the "
                          "measured arch beside them"))

# %% [markdown]
# <a id="fp8"></a>
# ## 12. SGLang's fp8_e4m3 KV cache
# With `--kv-cache-dtype fp8_e4m3` SGLang stores each latent row as 576 e4m3 bytes, half the
# bf16 row, with one k_scale and one v_scale per layer: K = e4m3 value x k_scale, V = its first
# 512 columns x v_scale, the draft rows in bf16 unscaled (`kernel/FP8.md`). Our kernel widens
# every e4m3 value exactly (every fp8 tier converts the MMA operands to f16 in registers, with q
# and the probabilities in f16 and the sums in fp32), so it
# is held to the same tolerance as on bf16, against the float64 oracle on the dequantized pool.
# SGLang's own fp8 kernel rounds q and the probabilities to e4m3: its error is shown beside ours,
# not held to that tolerance. The roofline of an fp8 row counts 576 bytes per prefix token.

# %%
f8v = data.fp8_validation(val)
val_file = Path(val["_path"]).name
if f8v is None:
    display(Markdown(f"**Validation:** no fp8 measurement in `{val_file}` (a validation run "
                     "before the fp8 part, or one with `--fp8-cases 0`)."))
elif "error" in f8v:
    display(Markdown(f"**Validation: the fp8 part did not run** (`{val_file}`): "
                     f"`{f8v['error'][:500]}`"))
else:
    w8 = f8v["worst"]
    verdict8 = ("**all pass**" if f8v["all_pass"] else
                f"**{f8v['n_cases'] - f8v['n_pass']} FAIL**")
    nan8 = ("no NaN in any output and no unwritten output row"
            if f8v["nan_cases"] == 0 and f8v["unwritten_total"] == 0 else
            f"**{f8v['nan_cases']} cases with NaN output, {f8v['unwritten_total']} unwritten rows**")
    graph8 = (f"- CUDA-graph replay with new lengths: {f8v['graph_pass']} of {f8v['graph_cases']} "
              f"cases match eager execution; largest difference {f8v['graph_max_diff']:.3g} "
              "(absolute).\n" if f8v["graph_cases"] else "")
    display(Markdown(
        f"**Validation** (`{val_file}`, section `fp8`):\n\n"
        f"- **{f8v['n_cases']} cases** on the fp8 pool, {verdict8} at relative tolerance "
        f"{f8v['tolerance']:g} against the float64 oracle on the dequantized pool.\n"
        f"- Worst output error **{f8v['max_rel_err']:.3g}** (case `{w8['id']}`: prefix lengths "
        f"{w8['prefix_lens']}, draft lengths {w8['draft_lens']}, {w8['heads']} heads, page size "
        f"{w8['page_size']}, k_scale {w8.get('k_scale', float('nan')):.3g}, v_scale "
        f"{w8.get('v_scale', float('nan')):.3g}); worst LSE error {f8v['max_lse_rel_err']:.3g}.\n"
        f"- Scales: {f8v['k_scales']} different k_scale values; {f8v['split_scales']} cases with "
        f"v_scale != k_scale. NaN poison: unowned slots held the e4m3fn NaN byte"
        f"{'s' if len(f8v['nan_bytes']) > 1 else ''} "
        f"{', '.join(f'0x{b:02x}' for b in f8v['nan_bytes'])}; {nan8}.\n" + graph8))
    by8 = data.validation_tiers(val["fp8"])
    if not by8.empty:
        display(figures.table(by8.rename(columns={"failing": "failing checks"}),
                              {"worst_rel_err": "{:.2e}"},
                              "fp8 pool: the checks per kernel tier (each case at its default "
                              "tier and one other, rotating; the extremes at every fp8 tier)"))
    sg8 = data.fp8_sglang_frame(val)
    if not sg8.empty:
        display(figures.table(sg8, {"median relative error": "{:.2e}",
                                    "largest relative error": "{:.2e}"},
                              "fp8 pool: ours and SGLang's extend_attention_fwd on the same "
                              "inputs, against the float64 oracle on the dequantized pool"))

# %%
f8s = data.fp8_speed(bench)
bench_file = Path(bench["_path"]).name
if f8s.empty:
    display(Markdown(f"**Benchmark:** no fp8 measurement in `{bench_file}` (a benchmark run "
                     "before the fp8 rows)."))
else:
    c8 = data.centre(data.fp8_bench_frame(bench))
    if not c8.empty:
        ours8 = float(c8.loc[c8["impl"] == data.OURS, "time_us"].iloc[0])
        c8["speed-up of ours"] = c8["time_us"] / ours8
        c8["% of fp8 roofline"] = 100 * c8["frac_roofline"]
        display(figures.table(
            c8[["label", "time_us", "GBps", "% of fp8 roofline", "speed-up of ours"]].rename(
                columns={"label": "implementation", "time_us": "time per layer, us",
                         "GBps": "effective GB/s"}),
            {"time per layer, us": "{:,.1f}", "effective GB/s": "{:,.0f}",
             "% of fp8 roofline": lambda v: f"{v:.2g}" if v < 10 else f"{v:.0f}",
             "speed-up of ours": "{:,.1f}x"},
            f"fp8 pool, centre point (S = {data.CENTRE['S']:,}, T = {data.CENTRE['T']}, H = "
            f"{data.CENTRE['H']}): one layer's verify attention (median of repeats)"))
    cols = ["S", "requests", "T", "H", "layout", "page_size"] + (["tile"] if "tile" in f8s else []) + \
        ["fp8_us", "pct_fp8_roofline", "fp8_roofline_us", "bf16_us", "fp8_speedup", "roofline_ratio"]
    display(figures.table(
        f8s.assign(requests=f8s["batch"])[cols],
        {"S": "{:,}", "fp8_us": "{:,.1f}", "pct_fp8_roofline": "{:.1f}", "fp8_roofline_us": "{:,.1f}",
         "bf16_us": "{:,.1f}", "fp8_speedup": "{:,.2f}x", "roofline_ratio": "{:,.2f}x"},
        f"fp8 pool: ours per shape (`{bench_file}`, median over the sweeps that repeat it), "
        "against the fp8 roofline and ours on the bf16 pool at the same shape"))
    display(Markdown("The fp8 roofline counts 576 bytes per prefix token (bf16: 1,152) and the "
                     "draft rows, q and the output in bf16; 'bf16 roofline / fp8 roofline' is "
                     "the most the smaller rows can gain at that shape. n/a: the bf16 sweeps did "
                     "not measure that shape."))

# %%
if backend is None:
    display(Markdown("**SGLang's real backend:** no sglang-backend file in the data directory."))
elif (b8 := data.backend_summary(backend, data.FP8_KV)) is None:
    display(Markdown(f"**SGLang's real backend:** no fp8 measurement in "
                     f"`{Path(backend['_path']).name}` (a backend check before its fp8 cases)."))
else:
    display(Markdown(
        f"**SGLang's real backend on the fp8 pool** (`{Path(backend['_path']).name}`): "
        f"{b8['n_pass']} of {b8['n_cases']} cases pass; ours must be within {b8['tol']:g} of "
        f"the float64 oracle on the dequantized pool, and within {b8['control_tol']:g} of "
        "SGLang's own fp8 arm, which rounds q and the probabilities to e4m3."
        + ("" if not b8["not_run"] else " Cases that did not run ours: " + "; ".join(
            f"`{n['case']}`: " + (f"the plugin refused the flash arm ({n['refused']})"
                                  if n["refused"] else "every layer fell back to SGLang's kernel ("
                                  + ", ".join(f"{k} x{m}" for k, m in sorted(n["fallbacks"].items()))
                                  + ")") for n in b8["not_run"]) + ".")))
    display(backend_table(
        backend_cases[backend_cases["kv"] == data.FP8_KV],
        "SGLang's real backend on the fp8_e4m3 pool: every case, its largest errors, and the "
        "graph's replay time per arm"))

# %%
if sink is not None:
    sk = data.sink_frame(sink)
    fp8_sg = data.sink_lost(sk)
    display(Markdown(
        f"**Behind an attention sink** (`{Path(sink['_path']).name}`): one request whose first key "
        "sits `gap` nats above the others (theirs spread by 0.5 nats, their V sharing a direction), "
        "so that at long context the tail behind the sink carries most of the output "
        "(`kernel.inputs.sink_case`). e4m3 has nothing below 2^-9: SGLang's fp8 path, which rounds "
        "the probabilities to e4m3, rounds the tail away"
        + (f" ({fp8_sg.min():.2f} to {fp8_sg.max():.2f} relative error with the sink 8 nats or more "
           "up and the tail holding more than half of the mass)" if len(fp8_sg) else "")
        + f"; ours keeps them in f16 ({'all pass' if sink['all_pass'] else 'FAILS'} at "
        f"{sink['tolerance']:g}, worst {sk['ours'].max():.2e})."))
    display(figures.table(sk, {"S": "{:,}", "gap (nats)": "{:g}", "tail mass": "{:.2f}", "ours": "{:.2e}",
                               "SGLang": "{:.2e}"},
                          "Attention sinks: ours and SGLang's extend_attention_fwd against the float64 "
                          "oracle, both pools (relative error; 'tail mass' the share of the softmax "
                          "off the sink)"))

# %%
est8 = data.sm120_frame(sm120, data.FP8_KV) if sm120 is not None else pd.DataFrame()
if est8.empty:
    display(Markdown("**sm_120 ESTIMATE on the fp8 pool:** the sm_120 model file has no fp8 rows "
                     "(none in the data directory, or one built from a file before the fp8 "
                     "microbenchmarks)."))
else:
    display(Markdown(
        "**sm_120 ESTIMATE on the fp8 pool (a model, not a measurement):** the model of "
        f"[section 11](#sm120) on the fp8 tiers' own {data.gpu_short(sm120)} microbenchmarks (clocks per tile, "
        "merge), with 576 bytes per prefix row and the fp8 tiers' own bytes in flight."))
    display(estimate_table(est8, "fp8 pool: sm_120 ESTIMATE per shape and fp8 tier (a model, not a "
                                 f"measurement), next to the {data.gpu_short(sm120)}'s measured full-kernel time"))

# %% [markdown]
# <a id="production-shapes"></a>
# ## 13. The production algorithm's shapes: DFLASH blocks and DDTree trees
# The service this kernel is for runs Kimi-K2 with DDTree speculative decoding (SGLang pull
# request #29907): a DFLASH block-diffusion drafter proposes, DDTree builds a tree under a node budget, and
# the target verifies D = budget + 1 nodes per request in one TARGET_VERIFY, every request padded
# to D with nodes that see only the prefix. SGLang 0.5.23 itself ships DFLASH, which verifies a
# causal block (16 tokens for its drafters). At 8 heads per GPU these are 128 to 520 query rows per
# request, where the rest of this page (T = 8, 64 rows) is memory-bound: here the matrix work
# decides. Below: the validation of those shapes on both pools, their time at S = 185,000 against
# the roofline of the ceilings measured in the same run and against SGLang's own kernel, and
# SGLang's real backend fed their verify inputs.

# %%
pv = data.production_validation(val)
if pv is None:
    display(Markdown(f"**Validation:** no production-shape section in `{val_file}` (a validation "
                     "run before it)."))
elif isinstance(pv, dict):
    display(Markdown(f"**Validation: the production shapes did not run** (`{val_file}`): "
                     f"`{pv['error'][:500]}`"))
else:
    sec = val["production"]
    display(Markdown(
        f"**Validation** (`{val_file}`, section `production`): {sec['n_cases']} cases, "
        f"{sec['n_checks']} checks (each case at every tier of its pool, outputs NaN-poisoned), "
        + ("**all pass**" if sec["all_pass"] else f"**{int(pv['n_failing'].sum())} checks FAIL**")
        + f" at relative tolerance {sec['tolerance']:g}; "
        + ("no NaN and no unwritten row in any output, padding rows included."
           if bool(pv["no_nan"].all()) else "**NaN or unwritten rows in some output.**")))
    display(figures.table(
        pv[["algorithm", "pool", "shapes", "batches", "cases", "n_checks", "n_failing", "worst_rel_err",
            "vs_sglang_max"]].rename(columns={"shapes": "shapes covered", "batches": "requests per batch"}),
        {"worst_rel_err": "{:.2e}", "vs_sglang_max": "{:.2e}"},
        "The production shapes against the float64 oracle, per algorithm and pool (vs_sglang_max: ours "
        "against SGLang's extend_attention_fwd on the same inputs)", text=("shapes covered",)))

# %%
prod = data.production_frame(bench)
if prod.empty:
    display(Markdown(f"**Benchmark:** no production-shape rows in `{bench_file}` (a benchmark run "
                     "before them)."))
else:
    display(figures.table(
        prod[["algorithm", "pool", "shape", "batch", "prefixes", "query_rows", "tile", "ours_us", "pct_roofline",
              "roofline_bound", "roofline_us", "vs_centre", "sglang_us", "speedup", "step_ms"]].rename(
            columns={"shape": "verified per request", "batch": "requests", "prefixes": "prefix tokens per request"}),
        {"ours_us": "{:,.1f}", "pct_roofline": "{:.1f}", "roofline_us": "{:,.1f}", "vs_centre": "{:,.2f}x",
         "sglang_us": "{:,.0f}", "speedup": "{:,.0f}x", "step_ms": "{:,.2f}"},
        f"The production algorithm's shapes, H = {int(prod['H'].iloc[0])} (`{bench_file}`): one layer's "
        "verify attention, ours at its default tier", text=("verified per request",)))
    display(Markdown(
        "`pct_roofline`: the roofline (bytes at the read ceiling or FLOPs at the matrix ceiling, both "
        "measured in this run, whichever is longer; which one is in the next column) over ours. The FLOPs count every "
        "verified row, DDTree's padding rows included: the kernel computes them. `vs_centre`: ours at this "
        "shape over ours at T = 8 on the same pool, batch and prefixes. `step_ms`: 61 layers of ours. SGLang's kernel is "
        "timed on the bf16 pool only (n/a on fp8)."))

# %%
# which fp8 tier serves more than 32 rows: small8's 32-row tiles pad DDTree's trees to fewer rows
# than 64-row tiles do, rows64d's fp8 copy does less per padded row
race = data.fp8_large_tiers(micro, sm120) if micro is not None else pd.DataFrame()
if not race.empty:
    g = data.gpu_short(micro)
    display(figures.table(
        race[["T", "query_rows", "rows_small8", "rows_copy", "h200_small8_us", "h200_copy_us", "h200_faster",
              "model_small8_us", "model_copy_us", "model_lower"]].rename(columns={
                  "query_rows": "query rows", "rows_small8": "padded, small8", "rows_copy": "padded, rows64d's copy",
                  "h200_small8_us": f"{g} small8, us", "h200_copy_us": f"{g} copy, us", "h200_faster": f"faster on the {g}",
                  "model_small8_us": "sm_120 ESTIMATE small8, us", "model_copy_us": "sm_120 ESTIMATE copy, us",
                  "model_lower": "lower in the model"}),
        {f"{g} small8, us": "{:,.1f}", f"{g} copy, us": "{:,.1f}", "sm_120 ESTIMATE small8, us": "{:,.1f}",
         "sm_120 ESTIMATE copy, us": "{:,.1f}"},
        f"The fp8 pool above 32 query rows, H = {int(race['H'].iloc[0])}, S = {int(race['S'].iloc[0]):,}: small8's "
        f"32-row tiles against rows64d's fp8 copy, full kernel (`{Path(micro['_path']).name}`) and the sm_120 "
        f"model (`{Path(sm120['_path']).name if sm120 is not None else 'none'}`, a model, not a measurement). The "
        "default (kernel.ops.pick_tier) follows the model: small8 only where its tiles pad to far fewer rows "
        "than the copy's (kernel.ops.SMALL8_PADDED_PERCENT). A bench row above ran the tier its own commit picked."))

# %%
steps = data.budget_steps(micro) if micro is not None else pd.DataFrame()
if not steps.empty:
    display(Markdown(
        f"**What one more node costs at a tile's edge** (`{Path(micro['_path']).name}`, the fastest tier at each "
        f"shape, measured on the {data.gpu_short(micro)}): DDTree verifies D = budget + 1 nodes per request, and the large tiers "
        "compute whole 64-row tiles of D x H rows, padding included, so the node past a full tile opens one of "
        "mostly padding: "
        + "; ".join(f"{r.kv_dtype}, H = {r.H}: D = {r.T} ({r.tiles} tiles) {r.us:,.1f} us, D = {r.T_next} "
                    f"({r.tiles_next} tiles) {r.us_next:,.1f} us ({r.ratio:.2f}x)" for r in steps.itertuples())
        + ". At these head counts a budget of "
        + " or ".join(str(int(t) - 1) for t in sorted(set(steps["T"])))
        + " fills its tiles; one node more pays for a tile of padding."))

# %%
if backend is None or backend_cases.empty:
    display(Markdown("**SGLang's real backend:** no sglang-backend file in the data directory."))
else:
    algo = [c.get("algorithm") in ("DFLASH", "DDTREE") for c in backend["cases"]]
    if not any(algo):
        display(Markdown(f"**SGLang's real backend:** no production-shape case in "
                         f"`{Path(backend['_path']).name}` (a backend check before them)."))
    else:
        display(backend_table(backend_cases[algo],
                              "SGLang's real backend fed DFLASH's and DDTree's verify inputs: every case, "
                              "its largest errors, and the graph's replay time per arm"))

# %% [markdown]
# <a id="extend"></a>
# ## 14. EXTEND over a cached prefix (issue 26)
# A follow-up turn, a chunk of a long prompt and EAGLE's draft extend reach SGLang's
# `forward_extend` as EXTEND: T new tokens per request over a cached prefix of S tokens, causal
# among themselves, no tree mask. The plugin sends them to our kernel with the causal schedule
# (a row tile stops at its last token's key). Below: one request's EXTEND timed on each pool against
# the roofline of the ceilings measured in the same run and against SGLang's extend_attention_fwd;
# a whole long prompt prefilled in chunks; the validation against float64 and fp32 references; and
# SGLang's real backend with the plugin serving EXTEND, eagerly and in the draft-extend CUDA graph.

# %%
xb, xv, xs = ext["bench"], ext["validation"], ext["sglang"]
if xb is None:
    display(Markdown("**EXTEND timing:** no extend-bench file in the data directory "
                     "(`python -m kernel.gpu_run --stages extend-bench` writes one)."))
else:
    xb_file = Path(xb["_path"]).name
    x_read, x_mma = extend_data._ceilings(xb)
    display(Markdown(
        f"**Timing** (`{xb_file}`, measured {str(xb['date'])[:16]} on {xb['gpu']}): one layer's attention; "
        f"the roofline is the bytes at the read ceiling ({x_read:,.0f} GB/s) or the FLOPs at the mma.sync ceiling "
        f"({x_mma:,.0f} TFLOP/s), whichever is longer, both measured in that run. FLOPs count the causal block only "
        "(new token t sees the prefix and new tokens 0..t), which is what the kernel computes."))
    for pool in (data.BF16_KV, data.FP8_KV):
        bt = extend_data.bench_table(xb, pool)
        if bt.empty:
            display(Markdown(f"No {pool} rows in `{xb_file}`."))
            continue
        display(figures.table(
            bt[["T", "tile", "ours_us", "ours_tflops", "pct_mma", "pct_roofline", "bound", "alt_tile", "alt_us",
                "sglang_us", "sglang_tflops", "speedup"]].rename(columns={
                    "tile": "ours: tile", "ours_us": "ours, us", "ours_tflops": "ours, TFLOP/s",
                    "pct_mma": "ours, % of mma.sync ceiling", "pct_roofline": "ours, % of roofline",
                    "bound": "roofline bound by", "alt_tile": "other large tile", "alt_us": "other tile, us",
                    "sglang_us": "SGLang, us", "sglang_tflops": "SGLang, TFLOP/s",
                    "speedup": "SGLang time / ours"}),
            {"T": "{:,}", "ours, us": "{:,.1f}", "ours, TFLOP/s": "{:,.1f}", "ours, % of mma.sync ceiling": "{:.1f}",
             "ours, % of roofline": "{:.1f}", "other tile, us": "{:,.1f}", "SGLang, us": "{:,.1f}",
             "SGLang, TFLOP/s": "{:,.1f}", "SGLang time / ours": "{:,.1f}x"},
            f"EXTEND on the {pool} pool: one request of T new tokens over S = {int(bt['S'].iloc[0]):,}, H = "
            f"{int(bt['H'].iloc[0])} (`{xb_file}`): ours at its default tile, the other large tile beside it (n/a: "
            "not timed at that T), SGLang's extend_attention_fwd as forward_extend calls it",
            text=("ours: tile", "other large tile"), nowrap=("ours: tile", "other large tile")))
    pre = extend_data.prefill_table(xb)
    if not pre.empty:
        display(figures.table(
            pre.assign(impl=pre["impl"].map(lambda i: "its default tile" if i == data.OURS else "the other large tile"))[
                ["pool", "impl", "tiles", "chunks", "ms_per_layer", "tflops", "pct_mma", "all_layers_s"]].rename(
                columns={"impl": "ours at", "tiles": "tiles its chunks ran", "ms_per_layer": "ms per layer",
                         "tflops": "TFLOP/s", "pct_mma": "% of mma.sync ceiling",
                         "all_layers_s": f"{data.LAYERS} layers, s"}),
            {"ms per layer": "{:,.1f}", "TFLOP/s": "{:,.1f}", "% of mma.sync ceiling": "{:.1f}",
             f"{data.LAYERS} layers, s": "{:,.1f}"},
            f"Prefill of a {int(pre['prompt_tokens'].iloc[0]):,}-token prompt in "
            f"{int(pre['chunk_tokens'].iloc[0]):,}-token chunks, ours only (`{xb_file}`): every chunk's EXTEND over "
            f"the chunks before it, summed; {data.LAYERS} layers is that time x {data.LAYERS}, attention alone",
            text=("tiles its chunks ran",), nowrap=("tiles its chunks ran",)))

# %%
if xv is None:
    display(Markdown("**EXTEND validation:** no extend-validation file in the data directory "
                     "(`python -m kernel.gpu_run --stages extend` writes one)."))
else:
    xv_file = Path(xv["_path"]).name
    xvs = extend_data.validation_summary(xv)
    display(Markdown(
        f"**Validation** (`{xv_file}`): **{xvs['n_cases']} cases**, {xvs['n_checks']} checks (each case at its "
        "default tier and at other tiers, outputs NaN-poisoned), "
        + ("**all pass**" if xvs["all_pass"] else
           f"**{xvs['n_cases'] - xvs['n_pass']} cases, {xvs['n_failing']} checks FAIL**")
        + f" at relative tolerance {xvs['tolerance']:g}. A request small enough is checked whole against the "
        f"float64 oracle; a bigger one at {xvs['sampled']} of its new tokens against float64 and at every row "
        f"against fp32 matmuls, whose own error must stay below {xvs['fp32_ref_tolerance']:g}. Worst error "
        f"**{xvs['worst']['rel_err']:.3g}** (case `{xvs['worst']['case']}`, {xvs['worst']['pool']} pool). The "
        f"causal mask spelled out as a tree mask gives the same bits: {xvs['mask_pass']} of {xvs['mask_cases']} "
        "cases. SGLang's extend_attention_fwd ran on the same inputs (recorded, not gated: on the fp8 pool it "
        "rounds q and the probabilities to e4m3)."))
    display(figures.table(
        xvs["pools"].rename(columns={
            "passing": "cases passing", "failing": "failing checks", "worst_rel_err": "worst error",
            "fp32_ref_err": "fp32 reference's own error", "sglang_rel_err": "SGLang's worst error",
            "vs_sglang": "ours against SGLang", "mask_identity": "mask spelled out: bits"}),
        {"worst error": "{:.2e}", "fp32 reference's own error": "{:.2e}", "SGLang's worst error": "{:.2e}",
         "ours against SGLang": "{:.2e}"},
        f"EXTEND validation per pool (`{xv_file}`): relative errors, worst over every case and tier"))
    bc = extend_data.validation_by_case(xv)
    display(figures.table(
        bc.rename(columns={"new_tokens": "new tokens", "page_size": "page",
                           **{c: c.replace(" worst", ", worst error") for c in bc.columns if c.endswith(" worst")}}),
        {c.replace(" worst", ", worst error"): "{:.2e}" for c in bc.columns if c.endswith(" worst")},
        f"Every EXTEND validation case on both pools (`{xv_file}`): prefix and new lengths per request, "
        "tiers checked and the worst error over them", text=("case", "prefixes", "new tokens"),
        nowrap=("case", "prefixes")))

# %%
if xs is None:
    display(Markdown("**EXTEND through SGLang's real backend:** no sglang-extend file in the data directory "
                     "(`python -m kernel.gpu_run --stages sglang-extend` writes one)."))
else:
    xs_file = Path(xs["_path"]).name
    xc = extend_data.sglang_cases(xs)
    xf = extend_data.failures(xs)
    display(Markdown(
        f"**Through SGLang's real backend** (`{xs_file}`, SGLang {xs.get('sglang_version', 'version not recorded')}): "
        "its TritonAttnBackend with the plugin installed through its hook (flash arm) and without it (triton arm) "
        "on shared pools. EXTEND cases run every layer's forward_extend eagerly, as SGLang runs prefill attention; "
        "draft-extend cases capture SGLang's draft-extend CUDA graph once per arm and replay it with new batches. "
        f"**{int(xc['pass'].sum())} of {len(xc)} cases pass**"
        + ("." if not xf else f"; **{len(xf)} FAIL**: " + ", ".join(f"`{f['case']}`" for f in xf) + ".")
        + f" A case passes when every call ran the kernel, every output is finite, its error against the float64 "
        f"references is within {xs['tol']:g} and against the triton arm within its tolerance "
        f"({xs['tol']:g} on bf16, {xs.get('fp8_control_tol', float('nan')):g} on fp8, where SGLang rounds q and "
        "the probabilities to e4m3)."))
    display(figures.table(
        xc[["what", "case", "pool", "prefixes", "new_tokens", "page_size", "layers", "pass", "finite",
            "err_float64_rows", "err_all", "vs_control", "graph_vs_eager", "flash_ms", "triton_ms", "per",
            "speedup", "why"]].rename(columns={
                "what": "call", "new_tokens": "new tokens", "page_size": "page", "err_float64_rows": "error, float64 rows",
                "err_all": "error, every row", "vs_control": "against triton", "graph_vs_eager": "graph against eager",
                "flash_ms": "flash, ms", "triton_ms": "triton, ms", "per": "time per", "speedup": "triton / flash",
                "why": "why it failed"}),
        {"error, float64 rows": "{:.2e}", "error, every row": "{:.2e}", "against triton": "{:.2e}",
         "graph against eager": "{:.2e}", "flash, ms": "{:,.3f}", "triton, ms": "{:,.3f}", "triton / flash": "{:,.1f}x"},
        f"EXTEND and EAGLE's draft extend through SGLang's real backend (`{xs_file}`): every case, its largest "
        "errors (a draft case's over its replays), and each arm's time",
        text=("call", "case", "prefixes", "new tokens", "why it failed"), nowrap=("call", "case", "prefixes")))
    for f in xf:
        r = xc[xc["case"] == f["case"]].iloc[0]
        errs = (f"its errors: {r['err_float64_rows']:.2e} on the float64 rows and {r['err_all']:.2e} on every row "
                f"(tolerance {xs['tol']:g}), {r['vs_control']:.2e} against triton (tolerance {r['control_tol']:g})"
                if pd.notna(r["err_all"]) and pd.notna(r["vs_control"]) else "its errors were not measured")
        if f["fix"] is None:
            cause = "**No cause is recorded: the failure is unexplained.**"
        else:
            state = {False: f"which does not contain it: **the fix is not yet measured on a GPU**; the case "
                            "counts as failing until a run at or after the fix passes it",
                     True: "which contains it: **the failure stands after the fix, so the recorded cause does "
                           "not explain it**",
                     None: "and git here cannot tell whether that commit contains the fix: **treat the fix as "
                           "not measured**"}[f["fix_measured"]]
            cause = (f"Cause (recorded in `notebooks/extend_data.py`, not a field of the file): {f['fix']['cause']}. "
                     f"Fixed in commit `{f['fix']['commit']}`; `{xs_file}` was measured at commit `{xs['commit']}`, "
                     f"{state}.")
        display(Markdown(f"**`{f['case']}` ({f['what']}, {r['pool']} pool) FAILS:** {f['why']}; {errs}. {cause}"))

# %%
provenance.write_record(record_path, "Phase 2: paged bf16 MLA tree-verify attention", docs,
                        measured_since=measured_since, findings=found)
