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
measured_now = False  # set by the runner when kernel.gpu_run ran just before this report
record_path = ""  # set by the runner: where this notebook writes its index record

# %%
import warnings

from IPython.display import Markdown, display

from notebooks import data, figures

warnings.filterwarnings("ignore", category=FutureWarning)
figures.setup(dpi=60 if smoke else 110)
bench = data.newest(data_dir, "bench", allow_fixture=smoke)
df = data.bench_frame(bench)
read_gbps, mma_tflops = data.ceilings(bench)
display(Markdown(data.banner([bench], measured_now)))

# %%
shape = {k: data.CENTRE[k] for k in ("T", "H", "batch")}
contig = data.select(df, layout="contiguous", page_size=1, **shape)
contig = contig[contig["impl"].isin([data.OURS, data.NAIVE, data.BASELINE])]
if contig.empty or data.OURS not in set(contig["impl"]):
    raise data.MeasurementError(f"{bench['_path']}: no contiguous page-1 rows of {data.OURS!r} "
                                f"at T={shape['T']}, H={shape['H']}, batch 1")
contig = (contig.groupby(["impl", "label", "S"], as_index=False)
          .agg(time_us=("time_us", "median"), GBps=("GBps", "median"),
               roofline_us=("roofline_us", "median"), bytes=("bytes", "first")))

# %% [markdown]
# ## Time per layer against context length
# Lower is better. The dashed line is the roofline floor: the time to read the KV bytes once at
# the device's read ceiling (or to do the matrix work at the tensor-core ceiling, if larger).

# %%
fig = figures.time_vs_s(contig, f"Contiguous cache, T = {shape['T']}, H = {shape['H']}: our "
                        "split-KV kernel against naive torch and SGLang's extend path")

# %%
fig = figures.bandwidth_vs_s(contig, read_gbps, "Effective bandwidth on a contiguous cache: "
                             "how close each implementation gets to the read ceiling")

# %%
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
figures.table(tab, fmt, "Contiguous cache, time per layer and speed-ups (their time / ours)")

# %%
top = tab.iloc[-1]
lines = [f"At S = {int(top['S']):,} our kernel takes **{data.fmt_us(top['ours, us'])}** per layer, "
         f"{top['ours, % of read ceiling']:.0f} % of the read ceiling"]
for impl in (data.NAIVE, data.BASELINE):
    col = f"speed-up over {data.IMPL_LABELS[impl]}"
    if col in tab:
        lines.append(f"**{top[col]:,.1f}x** faster than {data.IMPL_LABELS[impl]}")
display(Markdown(", ".join(lines) + ". Phase 2 measures the same kernel on SGLang's paged, scattered "
                 "cache, against SGLang's paged paths."))

# %%
data.write_record(record_path, "Phase 1: flash-decoding on a contiguous cache", [bench],
                  measured_now=measured_now)
