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
# # Phase 0: SGLang's verify attention at MLA shapes (the problem)
#
# With tree speculative decoding, SGLang verifies the T draft tokens of every step in one
# forward pass (TARGET_VERIFY). On CUDA its Triton backend runs that attention through
# `extend_attention_fwd`. This report measures how fast that path reads the KV cache at
# DeepSeek-V3 / Kimi-K2 shapes (MLA: 576 values per token, one shared latent "head", H query
# heads per GPU), why it is slow, and what it costs in tokens/s at long context.

# %% tags=["parameters"]
smoke = False  # True: CI run on generated fixture data, small figures
data_dir = "reports/data"  # where the measurement JSON lives
measured_since = ""  # runner only: when kernel.gpu_run started in this invocation (ISO time)
record_path = ""  # runner only: where this notebook writes its index record
accept_lengths = [1, 2, 3, 4]  # accepted tokens per verify step to translate into tokens/s

# %%
import warnings

import pandas as pd

from IPython.display import HTML, Markdown, display

from notebooks import data, figures, findings, glossary, provenance

warnings.filterwarnings("ignore", category=FutureWarning)
figures.setup(dpi=60 if smoke else 110)
bench = data.newest(data_dir, "bench", allow_fixture=smoke)
df = data.bench_frame(bench)
read_gbps, mma_tflops = data.ceilings(bench)
found = findings.baseline(df, bench) + [findings.production([bench])]
display(HTML(findings.box(found, "<b>Findings of this report</b> (computed from the data below)")))
display(Markdown('<a id="evidence"></a>' + provenance.evidence_box([bench])))
display(Markdown(provenance.banner([bench], measured_since)))
display(Markdown("**The implementations on this page.**\n\n"
                 + glossary.impl_glossary([data.BASELINE, data.SPLIT_KV])))

# %% [markdown]
# <a id="bandwidth"></a>
# ## Effective bandwidth against context length
# Effective bandwidth counts each KV byte once (S tokens x 576 values x 2 bytes, divided by the
# time per layer): it is the rate at which attention gets through the context, whatever the
# kernel actually moves. The dashed line is the device's read ceiling, measured in the same run.

# %%
sgl = data.select(df, sweep="S")
sgl = sgl[sgl["impl"].isin([data.BASELINE, data.SPLIT_KV])]
fig = figures.bandwidth_vs_s(sgl, read_gbps, "SGLang's verify paths stay far below the read ceiling "
                       f"at every context length ({bench['gpu']})")

# %%
base = data.select(df, sweep="S", impl=data.BASELINE).sort_values("S")
tab = base[["S", "time_us", "GBps"]].assign(pct=100 * base["GBps"] / read_gbps)
figures.table(tab.rename(columns={"time_us": "time per layer, us", "GBps": "effective GB/s",
                                  "pct": "% of read ceiling"}),
              {"S": "{:,}", "time per layer, us": "{:,.1f}", "effective GB/s": "{:,.1f}",
               "% of read ceiling": "{:.2f}"},
              f"{data.IMPL_LABELS[data.BASELINE]}, T={data.CENTRE['T']}, H={data.CENTRE['H']}, "
              "scattered slots, page size 1: the S sweep's own measurement at each S (the "
              "findings use the median of the centre point's repeats across all sweeps)")

# %% [markdown]
# <a id="why"></a>
# ## Why: a handful of thread blocks, and every head reads the cache again

# %%
T, H, sms = data.CENTRE["T"], data.CENTRE["H"], int(bench["sms"])
blocks = 1 * H * -(-T // data.EXTEND_BLOCK_M)
big = base.iloc[-1]
display(Markdown(
    f"- **Parallelism.** `extend_attention_fwd` launches a grid of batch x heads x "
    f"ceil(T / {data.EXTEND_BLOCK_M}) = 1 x {H} x {-(-T // data.EXTEND_BLOCK_M)} = **{blocks} "
    f"thread blocks** for batch 1, so at most {blocks} of the GPU's {sms} SMs "
    f"({100 * blocks / sms:.0f} %) work, each walking the whole prefix alone.\n"
    f"- **Re-reads.** Each of the {H} heads is its own thread block, and all of them read the "
    f"same latent row of the cache: {H} reads of every row. At S = {int(big['S']):,} the kernel "
    f"moves about {H} x {big['bytes'] / 1e9:.3f} GB = {H * big['bytes'] / 1e9:.2f} GB per layer, "
    f"an actual traffic of {H * big['GBps']:,.0f} GB/s against a "
    f"{read_gbps:,.0f} GB/s ceiling: the few busy SMs, not the memory, set the speed."))

# %%
hs = data.select(df, sweep="H", impl=data.BASELINE).sort_values("H")
if len(hs) > 1:
    lo, hi = hs.iloc[0], hs.iloc[-1]
    fig = figures.time_vs(hs, "H", "query heads per GPU, H",
                          f"Baseline: {int(hi['H'])} heads take {hi['time_us'] / lo['time_us']:.2f}x "
                          f"the time of {int(lo['H'])}; each head is its own block over all "
                          f"{int(lo['S']):,} rows (T = {int(lo['T'])})")
else:
    display(Markdown("_The bench file has no H sweep for the baseline; figure omitted._"))

# %% [markdown]
# <a id="layers"></a>
# ## What it means at 185k tokens over 61 layers
# A verify step runs the attention of every layer once; attention alone bounds the decode
# speed at (accepted tokens per step) / (step time). Other layers' work only lowers it.

# %%
S0 = data.CENTRE["S"]
step = data.step_ms(df, data.BASELINE, S=S0)
floor = float(data.select(df, impl=data.BASELINE, **data.CENTRE)["roofline_us"].median()) \
    * data.LAYERS / 1e3
rows = [{"accepted tokens per step": a, "baseline attention, tokens/s at most": a / step * 1e3,
         "at the roofline floor, tokens/s at most": a / floor * 1e3} for a in accept_lengths]
display(Markdown(
    f"At S = {S0:,} the baseline spends **{step / data.LAYERS:,.2f} ms per layer** (median of "
    f"the centre point's repeats across sweeps), so "
    f"{data.LAYERS} layers take **{step:,.0f} ms per verify step** in attention alone. "
    f"The roofline floor of the same work is {floor:,.2f} ms per step: "
    f"**{step / floor:,.0f}x** headroom."))
figures.table(pd.DataFrame(rows),
              {"baseline attention, tokens/s at most": "{:,.2f}",
               "at the roofline floor, tokens/s at most": "{:,.0f}"},
              f"Upper bounds on decode speed from attention time alone, S = {S0:,}, "
              f"{data.LAYERS} layers")

# %%
provenance.write_record(record_path, "Phase 0: SGLang's verify attention at MLA shapes "
                        "(baseline)", [bench], measured_since=measured_since, findings=found)
