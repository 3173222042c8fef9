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
# # Phase 1: flash-decoding on a contiguous cache
#
# The first step of the fix: split the prefix across many thread blocks (flash-decoding), let
# one block serve all H x T query rows of a request so that each KV row is read once, and merge
# the partial results by their log-sum-exp. Here the cache is contiguous (no page table), which
# isolates the parallelisation from the paging. Compared: our kernel, a naive PyTorch
# implementation (materialised scores, softmax, matmul), and SGLang's `extend_attention_fwd`.

# %% tags=["parameters"]
smoke = False  # True: CI run on generated fixture data, small figures
data_dir = "reports/data"  # where the measurement JSON lives
measured_since = ""  # runner only: when kernel.gpu_run started in this invocation (ISO time)
record_path = ""  # runner only: where this notebook writes its index record

# %%
import warnings

from IPython.display import HTML, Markdown, display

from notebooks import data, figures, findings, glossary, provenance

warnings.filterwarnings("ignore", category=FutureWarning)
figures.setup(dpi=60 if smoke else 110)
bench = data.newest(data_dir, "bench", allow_fixture=smoke)
df = data.bench_frame(bench)
read_gbps, mma_tflops = data.ceilings(bench)
shape = {k: data.CENTRE[k] for k in ("T", "H", "batch")}
contig = data.select(df, layout="contiguous", page_size=1, **shape)
contig = contig[contig["impl"].isin([data.OURS, data.NAIVE, data.BASELINE])]
if contig.empty or data.OURS not in set(contig["impl"]):
    raise data.MeasurementError(f"{bench['_path']}: no contiguous page-1 rows of {data.OURS!r} "
                                f"at T={shape['T']}, H={shape['H']}, batch 1")
contig = (contig.groupby(["impl", "label", "S"], as_index=False)
          .agg(time_us=("time_us", "median"), GBps=("GBps", "median"),
               roofline_us=("roofline_us", "median"), bytes=("bytes", "first")))
wide = contig.pivot_table(index="S", columns="impl", values="time_us").reset_index()
tab = wide[["S", data.OURS]].rename(columns={data.OURS: "ours, us"})
fmt = {"S": "{:,}", "ours, us": "{:,.1f}"}
for impl in (data.NAIVE, data.BASELINE):
    if impl in wide:
        tab[f"{data.IMPL_LABELS[impl]}, us"] = wide[impl]
        tab[f"speed-up over {data.IMPL_LABELS[impl]}"] = wide[impl] / wide[data.OURS]
        fmt[f"{data.IMPL_LABELS[impl]}, us"] = "{:,.1f}"
        fmt[f"speed-up over {data.IMPL_LABELS[impl]}"] = "{:,.1f}x"
ours = contig[contig["impl"] == data.OURS].set_index("S")
tab["ours, % of read ceiling"] = 100 * ours.loc[tab["S"], "GBps"].to_numpy() / read_gbps
fmt["ours, % of read ceiling"] = "{:.0f}"
found = findings.contiguous(tab) + [findings.production([bench])]
display(HTML(findings.box(found, "<b>Findings of this report</b> (computed from the data below)")))
display(Markdown('<a id="evidence"></a>' + provenance.evidence_box([bench])))
display(Markdown(provenance.banner([bench], measured_since)))
display(Markdown("**The implementations on this page.**\n\n"
                 + glossary.impl_glossary(contig["impl"].unique())))

# %% [markdown]
# <a id="contiguous"></a>
# ## Time per layer on a contiguous cache
# Lower is better. The dashed line is the roofline floor: the time to read the KV bytes once at
# the device's read ceiling (or to do the matrix work at the tensor-core ceiling, if larger).

# %%
s_list = ", ".join(f"{int(x):,}" for x in sorted(contig["S"].unique()))
display(Markdown(f"Measured on a contiguous cache at S = {s_list} prefix tokens"
                 + (" only, so this page compares the implementations at that length; phase 2 "
                    "shows the scaling in S on SGLang's paged cache." if contig["S"].nunique() < 3
                    else ".")))
fig = figures.time_vs_s(contig, f"Contiguous cache, T = {shape['T']}, H = {shape['H']}: our "
                        "split-KV kernel against naive PyTorch and SGLang's extend path")

# %%
fig = figures.bandwidth_vs_s(contig, read_gbps, "Effective bandwidth on a contiguous cache: "
                             "how close each implementation gets to the read ceiling")

# %%
figures.table(tab, fmt, "Contiguous cache, time per layer and speed-ups (their time / ours)")

# %%
display(Markdown("Phase 2 measures the same kernel on SGLang's paged, scattered cache, against "
                 "SGLang's paged paths."))
provenance.write_record(record_path, "Phase 1: flash-decoding on a contiguous cache", [bench],
                        measured_since=measured_since, findings=found)
