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
# layout matters, and what it does inside SGLang over all 61 layers.

# %% tags=["parameters"]
smoke = False  # True: CI run on generated fixture data, small figures
data_dir = "reports/data"  # where the measurement JSON lives
measured_now = False  # set by the runner when kernel.gpu_run ran just before this report
record_path = ""  # set by the runner: where this notebook writes its index record
defrag_threshold = 0.10  # layout slow-downs below this fraction count as "does not matter"

# %%
#papermill_description=load_measurements
import warnings

import pandas as pd
from IPython.display import Markdown, display

from notebooks import data, figures

warnings.filterwarnings("ignore", category=FutureWarning)
figures.setup(dpi=60 if smoke else 110)
val = data.newest(data_dir, "validation", allow_fixture=smoke)
bench = data.newest(data_dir, "bench", allow_fixture=smoke)
integ = data.newest(data_dir, "sglang-integration", allow_fixture=smoke)
df = data.bench_frame(bench)
read_gbps, mma_tflops = data.ceilings(bench)
display(Markdown(data.banner([val, bench, integ], measured_now)))

# %% [markdown]
# ## 1. Correctness
# Every case runs on fresh random inputs against a float64 oracle. Pool slots that the prefix
# does not own hold NaN and the output is pre-filled with NaN ("poisoned"), so a stray read or
# an unwritten output row shows up as NaN instead of passing as zeros.

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
figures.table(data.validation_groups(val),
              {"worst_rel_err": "{:.2e}", "worst_lse_rel_err": "{:.2e}"},
              "Validation cases by draft-tree shape and cache layout")

# %%
sg = pd.DataFrame(val.get("sglang", {}).get("cases", []))
if not sg.empty:
    # our error for the same case comes from the main table (same id)
    ours = pd.DataFrame(val["cases"])
    ours = ours[["id"] + [c for c in ("rel_err", "tree", "layout", "page_size") if c in ours and c not in sg]]
    sg = sg.merge(ours, on="id", how="left")
    pairs = {"ours vs oracle": "rel_err", "SGLang vs oracle": "sglang_rel_err",
             "ours vs SGLang": "rel_err_vs_sglang"}
    summ = pd.DataFrame([{"comparison": k, "cases": int(sg[c].notna().sum()), "median": sg[c].median(),
                          "max": sg[c].max()} for k, c in pairs.items()])
    display(figures.table(summ, {"median": "{:.2e}", "max": "{:.2e}"},
                          "Against SGLang's own extend_attention_fwd on the same inputs (bf16, on the "
                          "GPU): relative errors against the float64 oracle, and ours against SGLang's"))
    cols = [c for c in ("id", "tree", "layout", "page_size", "prefix_lens", "rel_err", "sglang_rel_err",
                        "rel_err_vs_sglang") if c in sg]
    display(figures.table(sg.nlargest(5, "rel_err_vs_sglang")[cols],
                          {"rel_err": "{:.2e}", "sglang_rel_err": "{:.2e}", "rel_err_vs_sglang": "{:.2e}"},
                          "The five cases where our output and SGLang's differ most"))
gr = pd.DataFrame(val.get("graph", {}).get("cases", []))
if not gr.empty:
    display(Markdown(f"CUDA-graph replay with new sequence lengths: {int(gr['pass'].sum())} of "
                     f"{len(gr)} cases match eager execution; largest difference "
                     f"{gr['max_abs_diff_vs_eager'].max():.3g} (absolute)."))

# %% [markdown]
# ## 2. Speed at the centre point
# S = 185,000 prefix tokens, T = 8 draft tokens, H = 8 heads (one GPU at tensor parallelism 8),
# page size 1 with scattered slots (SGLang's default), batch 1.

# %%
c = data.centre(df)
ours_us = float(c.loc[c["impl"] == data.OURS, "time_us"].iloc[0])
c["speed-up of ours"] = c["time_us"] / ours_us
c["% of read ceiling"] = 100 * c["GBps"] / read_gbps
figures.table(c[["label", "time_us", "GBps", "% of read ceiling", "frac_roofline",
                 "speed-up of ours"]].rename(columns={"label": "implementation",
                                                      "time_us": "time per layer, us",
                                                      "GBps": "effective GB/s",
                                                      "frac_roofline": "fraction of roofline"}),
              {"time per layer, us": "{:,.1f}", "effective GB/s": "{:,.0f}",
               "% of read ceiling": "{:.1f}", "fraction of roofline": "{:.2f}",
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
fig = figures.speedup_vs(sp, "S", "prefix tokens S (log scale)",
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
# ## 5. Does the cache layout matter? Scattered and fragmented against contiguous
# SGLang hands out KV slots one token at a time, so a long-lived request's slots end up
# scattered over the pool. If our kernel were much slower on scattered slots, a
# defragmenting allocator would be worth building.

# %%
lay = data.select(df, sweep="layout", impl=data.OURS)
pv = lay.pivot_table(index=["S", "page_size"], columns="layout", values="time_us").reset_index()
if "contiguous" not in pv:
    raise data.MeasurementError(f"{bench['_path']}: layout sweep has no contiguous rows of ours")
others = [x for x in ("scattered", "fragmented") if x in pv]
for x in others:
    pv[f"{x} / contiguous"] = pv[x] / pv["contiguous"]
figures.table(pv, {"S": "{:,}", "contiguous": "{:,.1f}", "scattered": "{:,.1f}",
                   "fragmented": "{:,.1f}", "scattered / contiguous": "{:.3f}",
                   "fragmented / contiguous": "{:.3f}"},
              "Our time per layer (us) by cache layout and page size, and the slow-down "
              "relative to a contiguous cache")

# %%
worst_slow = max(float(pv[f"{x} / contiguous"].max()) for x in others) - 1 if others else 0.0
answer = ("**No.**" if worst_slow <= defrag_threshold else "**Yes.**")
display(Markdown(
    f"{answer} The largest slow-down of a scattered or fragmented cache against a contiguous one "
    f"is **{100 * worst_slow:+.1f} %** over every S and page size measured (threshold for "
    f"'matters': {100 * defrag_threshold:.0f} %)."))
smax = int(lay["S"].max())
figures.show(figures.time_vs(lay[lay["S"] == smax], "page_size", "page size, tokens per page",
                             f"Our time per layer against page size, by cache layout "
                             f"(S = {smax:,})", hue="layout"))

# %% [markdown]
# ## 6. Draft-tree size T, heads H and batch

# %%
for sweep, xlabel, what in (("T", "draft tokens per request, T", "tree size"),
                            ("H", "query heads per GPU, H", "head count"),
                            ("batch", "requests in the batch (S is their total)", "batch size")):
    rows = data.select(df, sweep=sweep)
    if rows.empty:
        display(Markdown(f"_No {sweep} sweep in the bench file._"))
        continue
    figures.show(figures.time_vs(rows, sweep, xlabel, f"Time per layer against {what} "
                                 f"(S = {int(rows['S'].max()):,} total prefix tokens)"))
    display(figures.speedup_table(data.speedups(rows).sort_values(sweep), sweep,
                                  f"{what}: time per layer and speed-ups (their time / ours)"))

# %% [markdown]
# ## 7. Inside SGLang: 61 layers of attention per verify step
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

# %%
data.write_record(record_path, "Phase 2: paged bf16 MLA tree-verify attention",
                  [val, bench, integ], measured_now=measured_now)
