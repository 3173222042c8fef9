"""Seaborn figures for the phase reports: units on every axis, ceilings drawn as lines, log
scales where the data spans decades, titles that state what to read off the figure.

Each function takes tidy frames from notebooks.data and returns the matplotlib Figure; the
notebook's inline backend displays it.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from .data import IMPL_LABELS

_CB = sns.color_palette("colorblind")
# Fixed colours per impl across every figure: ours blue, baseline orange, split-KV green, naive purple.
PALETTE = {label: _CB[i] for label, i in zip(IMPL_LABELS.values(), (0, 1, 2, 4))}


def setup(dpi: int = 110) -> None:
    """One look for every report; smoke runs pass a low dpi to render faster."""
    sns.set_theme(style="whitegrid", context="notebook")
    plt.rcParams.update({"figure.dpi": dpi, "figure.figsize": (10.5, 4.8),
                         "axes.titlesize": 11, "axes.titleweight": "bold"})


def _spans_decades(values, decades: float = 1.5) -> bool:
    v = np.asarray(values, dtype=float)
    v = v[v > 0]
    return v.size > 1 and np.log10(v.max() / v.min()) >= decades


def _ceiling(ax, y: float, text: str) -> None:
    ax.axhline(y, color="black", ls="--", lw=1.2)
    ax.annotate(text, xy=(0.01, y), xycoords=("axes fraction", "data"), va="bottom", fontsize=9)


def _legend(fig: plt.Figure, ax, title: str | None = None) -> None:
    """Legend outside the axes, right of the plot, so it never hides a point or a line."""
    if ax.get_legend_handles_labels()[0]:       # bars labelled on the axis need none
        ax.legend(title=title, fontsize=9, bbox_to_anchor=(1.01, 1), loc="upper left")
    elif ax.get_legend() is not None:
        ax.get_legend().remove()
    fig.tight_layout()


def _bars_at_one_s(ax, df: pd.DataFrame, y: str, fmt: str) -> None:
    """One bar per implementation (median over repeats of the same configuration), labelled."""
    med = df.groupby("label", as_index=False)[y].median()
    sns.barplot(med, x="label", y=y, hue="label", palette=PALETTE, ax=ax, legend=False)
    for cont in ax.containers:
        ax.bar_label(cont, fmt=fmt, fontsize=9)


def bandwidth_vs_s(df: pd.DataFrame, read_gbps: float, title: str) -> plt.Figure:
    """Effective GB/s (unique KV bytes / time) against prefix length, with the read ceiling."""
    fig, ax = plt.subplots()
    ylabel = "effective bandwidth, GB/s\n(S x 576 x 2 B / time, log scale)"
    if df["S"].nunique() == 1:   # one context length measured: a line would be a lone point
        _bars_at_one_s(ax, df, "GBps", "%.0f")
        _ceiling(ax, read_gbps, f"device read ceiling {read_gbps:,.0f} GB/s")
        ax.set(yscale="log", title=title, ylabel=ylabel, xlabel=f"S = {int(df['S'].iloc[0]):,} prefix tokens")
        _legend(fig, ax)
        return fig
    sns.lineplot(df, x="S", y="GBps", hue="label", palette=PALETTE, marker="o", ax=ax)
    _ceiling(ax, read_gbps, f"device read ceiling {read_gbps:,.0f} GB/s")
    ax.set(xscale="log", yscale="log", title=title, xlabel="prefix tokens S (log scale)",
           ylabel=ylabel)
    _legend(fig, ax)
    return fig


def time_vs_s(df: pd.DataFrame, title: str) -> plt.Figure:
    """Time per layer against prefix length; the dashed line is the roofline time of each S."""
    fig, ax = plt.subplots()
    if df["S"].nunique() == 1:   # one context length measured: bars, the roofline as a line
        _bars_at_one_s(ax, df, "time_us", "%.1f")
        roof = float(df["roofline_us"].min())
        ax.axhline(roof, color="k", ls="--", lw=1.2, label=f"roofline (floor) {roof:,.1f} us")
        ax.set(yscale="log", title=title, ylabel="time per layer, us (log scale)",
               xlabel=f"S = {int(df['S'].iloc[0]):,} prefix tokens")
        _legend(fig, ax)
        return fig
    sns.lineplot(df, x="S", y="time_us", hue="label", palette=PALETTE, marker="o", ax=ax)
    roof = df.groupby("S", as_index=False)["roofline_us"].min()
    ax.plot(roof["S"], roof["roofline_us"], "k--", lw=1.2, label="roofline (floor)")
    ax.set(xscale="log", yscale="log", title=title, xlabel="prefix tokens S (log scale)",
           ylabel="time per layer, us (log scale)")
    _legend(fig, ax)
    return fig


def roofline(df: pd.DataFrame, read_gbps: float, mma_tflops: float, title: str) -> plt.Figure:
    """Achieved TFLOP/s against arithmetic intensity for every row, under both ceilings."""
    fig, ax = plt.subplots(figsize=(10.5, 5.5))
    lo, hi = df["intensity"].min() / 2, df["intensity"].max() * 2
    x = np.geomspace(lo, hi, 200)
    ax.plot(x, np.minimum(read_gbps * x / 1e3, mma_tflops), "k-", lw=1.5,
            label=f"roofline: min({read_gbps:,.0f} GB/s x intensity, {mma_tflops:,.0f} TFLOP/s)")
    sns.scatterplot(df, x="intensity", y="TFLOPs", hue="label", style="sweep", palette=PALETTE,
                    s=45, ax=ax)
    ax.set(xscale="log", yscale="log", title=title,
           xlabel="arithmetic intensity, FLOP per byte of KV read (log scale)",
           ylabel="achieved throughput, TFLOP/s (log scale)")
    _legend(fig, ax)
    return fig


def speedup_vs(df: pd.DataFrame, x: str, xlabel: str, title: str) -> plt.Figure:
    """Speed-up of ours over the other impls (columns x_over_*) against a swept variable."""
    cols = [c for c in df.columns if c.startswith("x_over_")]
    long = df.melt(id_vars=[x], value_vars=cols, var_name="over", value_name="speedup").dropna()
    long["over"] = long["over"].str.removeprefix("x_over_").map(lambda i: IMPL_LABELS.get(i, i))
    fig, ax = plt.subplots()
    sns.lineplot(long, x=x, y="speedup", hue="over", palette=PALETTE, marker="o", ax=ax)
    ax.axhline(1.0, color="black", ls=":", lw=1)
    ax.set(xscale="log" if _spans_decades(long[x]) else "linear",
           yscale="log" if _spans_decades(long["speedup"]) else "linear", title=title,
           xlabel=xlabel, ylabel="speed-up of ours, x\n(their time / our time)")
    _legend(fig, ax, "speed-up over")
    return fig


def time_vs(df: pd.DataFrame, x: str, xlabel: str, title: str, hue: str = "label") -> plt.Figure:
    """Time per layer against a swept variable (T, H, batch, page size), one line per hue."""
    fig, ax = plt.subplots()
    pal = PALETTE if hue == "label" else "colorblind"
    sns.lineplot(df, x=x, y="time_us", hue=hue, palette=pal, marker="o", ax=ax)
    ax.set(xscale="log" if _spans_decades(df[x], 1.0) else "linear",
           yscale="log" if _spans_decades(df["time_us"]) else "linear", title=title,
           xlabel=xlabel, ylabel="time per layer, us")
    ticks = sorted(df[x].unique())
    if len(ticks) <= 8:  # label the measured values themselves (page sizes, T, H, batch)
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
    _legend(fig, ax)
    return fig


def step_time_by_case(df: pd.DataFrame, title: str) -> plt.Figure:
    """SGLang-integration: attention time of one verify step (all layers) per arm, one group
    of bars per measured case (S, T, tree): the cases differ several-fold, so none is averaged."""
    df = df.assign(case=[f"S = {int(r.S):,}\nT = {int(r.T)}, {r.tree}" for r in df.itertuples()])
    long = df.melt(id_vars=["case"], value_vars=["triton_ms_per_step", "plugin_ms_per_step"],
                   var_name="arm", value_name="ms")
    arms = {"triton_ms_per_step": "control: SGLang triton backend",
            "plugin_ms_per_step": "candidate: our kernel via plugin"}
    long["arm"] = long["arm"].map(arms)
    pal = dict(zip(arms.values(), (_CB[1], _CB[0])))  # baseline orange, ours blue, as elsewhere
    fig, ax = plt.subplots()
    sns.barplot(long, x="case", y="ms", hue="arm", palette=pal, ax=ax)
    for cont in ax.containers:
        ax.bar_label(cont, fmt="%.1f", fontsize=9)
    log = _spans_decades(long["ms"])
    ax.set(yscale="log" if log else "linear", title=title, xlabel="",
           ylabel="attention time per verify step, ms\n(all layers, inside SGLang" + (", log scale)" if log else ")"))
    _legend(fig, ax)
    return fig


def tokens_per_s(per_round: pd.DataFrame, title: str) -> plt.Figure:
    """A/B: tokens/s of every round per arm (points) over the arm's distribution (box)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    sns.boxplot(per_round, x="arm", y="tokens_per_s", color="0.9", width=0.45, ax=ax)
    sns.stripplot(per_round, x="arm", y="tokens_per_s", hue="arm", size=7, ax=ax, legend=False)
    log = _spans_decades(per_round["tokens_per_s"], 1.0)
    ax.set(title=title, xlabel="", yscale="log" if log else "linear",
           ylabel="decode speed, tokens/s" + (" (log scale)" if log else ""))
    return fig


def table(df: pd.DataFrame, fmt: dict | None = None, caption: str = ""):
    """A frame as a report table: no index column, numbers formatted per column."""
    sty = df.style.hide(axis="index").format(fmt or {}, na_rep="n/a")
    return sty.set_caption(caption) if caption else sty


def show(fig: plt.Figure) -> None:
    """Display now and close, so figures appear where the cell puts them, once."""
    from IPython.display import display

    display(fig)
    plt.close(fig)


def speedup_table(sp: pd.DataFrame, key: str, caption: str):
    """data.speedups() output as a report table: times in us and 'their time / ours' ratios."""
    cols = {key: key, "ours_us": "ours, us"}
    fmt = {key: "{:,}", "ours, us": "{:,.1f}"}
    for c in sp.columns:
        if c.startswith("x_over_"):
            name = IMPL_LABELS.get(c.removeprefix("x_over_"), c)
            cols[c.removeprefix("x_over_") + "_us"] = f"{name}, us"
            cols[c] = f"speed-up over {name}"
            fmt[f"{name}, us"], fmt[f"speed-up over {name}"] = "{:,.1f}", "{:,.1f}x"
    return table(sp[list(cols)].rename(columns=cols), fmt, caption)
