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
measured_since = ""  # runner only: when kernel.gpu_run started in this invocation (ISO time)
record_path = ""  # runner only: where this notebook writes its index record
defrag_threshold = 0.10  # layout slow-downs below this fraction count as "does not matter"

# %%
import warnings

import pandas as pd
from IPython.display import HTML, Markdown, display

from notebooks import data, figures, findings, glossary, provenance

warnings.filterwarnings("ignore", category=FutureWarning)
figures.setup(dpi=60 if smoke else 110)
val = data.newest(data_dir, "validation", allow_fixture=smoke)
bench = data.newest(data_dir, "bench", allow_fixture=smoke)
integ = data.newest(data_dir, "sglang-integration", allow_fixture=smoke)
docs = [val, bench, integ]
df = data.bench_frame(bench)
read_gbps, mma_tflops = data.ceilings(bench)
found = [findings.correctness(val), findings.centre_speed(df), findings.sglang_step(integ),
         findings.production(docs)]
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

# %% [markdown]
# <a id="correctness"></a>
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

# %% [markdown]
# <a id="sglang"></a>
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
provenance.write_record(record_path, "Phase 2: paged bf16 MLA tree-verify attention", docs,
                        measured_since=measured_since, findings=found)
