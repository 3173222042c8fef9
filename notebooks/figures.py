"""Seaborn figures and tables for the phase reports.

Rules every figure here keeps, because a reviewer reads a deploy decision off them:
- fewer than three x values are bars, never a line (a line over one or two points draws a trend
  that was not measured);
- a linear y-axis starts at zero, so a 0.2 % difference looks like one;
- a log axis says "(log scale)" in its label and carries plain-number ticks inside the range;
- units on every axis, measured ceilings drawn as lines, titles that say what to read off.
Each function takes tidy frames from notebooks.data and returns the matplotlib Figure.
"""
from __future__ import annotations

import hashlib
import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from .glossary import COLUMNS, IMPL_LABELS

_CB = sns.color_palette("colorblind")
# Fixed colours per impl across every figure: ours blue, baseline orange, split-KV green, naive
# purple; an impl the glossary does not know yet gets one of the remaining colours.
_FIXED = dict(zip(IMPL_LABELS.values(), (_CB[0], _CB[1], _CB[2], _CB[4])))
_SPARE = [_CB[i] for i in (3, 5, 6, 7, 8, 9)]
SNAKE = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)+$")


def palette(labels) -> dict:
    """{label: colour} for every label shown: fixed colours for known impls, spares after."""
    out, spare = {}, iter(_SPARE * 4)
    for lab in dict.fromkeys(labels):
        out[lab] = _FIXED.get(lab) or next(spare)
    return out


def setup(dpi: int = 110) -> None:
    """One look for every report; smoke runs pass a low dpi to render faster."""
    sns.set_theme(style="whitegrid", context="notebook")
    plt.rcParams.update({"figure.dpi": dpi, "figure.figsize": (10.5, 4.8),
                         "axes.titlesize": 11, "axes.titleweight": "bold",
                         "svg.hashsalt": "mla-verify"})


def spans_decades(values, decades: float = 1.5) -> bool:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    return v.size > 1 and np.log10(v.max() / v.min()) >= decades


def _plain(v: float, _pos=None) -> str:
    """Tick text as a number, not 10^k: 0.5, 20, 1,000, 20,000."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def log_axis(ax, which: str, values, label: str) -> None:
    """Log scale on `which` ('x' or 'y') with ticks a reader can read over the plotted range:
    1-2-5 ticks over a few decades, every integer multiple inside one decade."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    span = np.log10(v.max() / v.min()) if v.size > 1 else 0.0
    # tick labels sit side by side on x, so x gets fewer of them than y for the same span
    many = 2.0 if which == "x" else 4.0
    subs = (1.0,) if span > many else (1.0, 2.0, 5.0) if span > 1.2 else tuple(np.arange(1, 10.0))
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(_plain))
    axis.set_minor_formatter(NullFormatter())
    (ax.set_xlabel if which == "x" else ax.set_ylabel)(f"{label} (log scale)")


def linear_y(ax, label: str) -> None:
    """Linear y from zero: the honest default for times and rates; a little headroom above the
    highest point so it does not sit on the frame."""
    top = ax.get_ylim()[1]
    ax.set_ylim(0, top * 1.05)
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax.set_ylabel(label)


def _y_axis(ax, values, label: str, decades: float = 1.5) -> None:
    if spans_decades(values, decades):
        log_axis(ax, "y", values, label)
    else:
        linear_y(ax, label)


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


def _label_bars(ax, fmt: str) -> None:
    """Value on top of each bar; fmt is a str.format spec such as '{:,.1f}'."""
    for cont in ax.containers:
        ax.bar_label(cont, fmt=fmt, fontsize=9)


def _bars_per_impl(ax, df: pd.DataFrame, y: str, fmt: str) -> None:
    """One bar per implementation (median over repeats of the same configuration), labelled."""
    med = df.groupby("label", as_index=False, sort=False)[y].median()
    sns.barplot(med, x="label", y=y, hue="label", palette=palette(med["label"]), ax=ax,
                errorbar=None, legend=False)
    _label_bars(ax, fmt)
    ax.tick_params(axis="x", labelsize=9)


def bandwidth_vs_s(df: pd.DataFrame, read_gbps: float, title: str) -> plt.Figure:
    """Effective GB/s (unique KV bytes / time) against prefix length, with the read ceiling."""
    fig, ax = plt.subplots()
    ylabel = "effective bandwidth, GB/s\n(S x 576 x 2 B / time)"
    values = list(df["GBps"]) + [read_gbps]
    if df["S"].nunique() < 3:   # one or two context lengths: bars, the ceiling as a line
        _bars_per_impl(ax, df, "GBps", "{:,.0f}")
        ax.set(xlabel=", ".join(f"S = {int(s):,}" for s in sorted(df["S"].unique()))
               + " prefix tokens")
    else:
        sns.lineplot(df, x="S", y="GBps", hue="label", palette=palette(df["label"]), marker="o",
                     ax=ax)
        log_axis(ax, "x", df["S"], "prefix tokens S")
    _ceiling(ax, read_gbps, f"device read ceiling {read_gbps:,.0f} GB/s")
    log_axis(ax, "y", values, ylabel)
    ax.set_title(title)
    _legend(fig, ax)
    return fig


def time_vs_s(df: pd.DataFrame, title: str) -> plt.Figure:
    """Time per layer against prefix length; the dashed line is the roofline time of each S."""
    fig, ax = plt.subplots()
    values = list(df["time_us"]) + list(df["roofline_us"])
    if df["S"].nunique() < 3:   # one or two context lengths: bars, the roofline as a line
        _bars_per_impl(ax, df, "time_us", "{:,.1f}")
        roof = float(df["roofline_us"].min())
        ax.axhline(roof, color="k", ls="--", lw=1.2, label=f"roofline (floor) {roof:,.1f} us")
        ax.set(xlabel=", ".join(f"S = {int(s):,}" for s in sorted(df["S"].unique()))
               + " prefix tokens")
    else:
        sns.lineplot(df, x="S", y="time_us", hue="label", palette=palette(df["label"]),
                     marker="o", ax=ax)
        roof = df.groupby("S", as_index=False)["roofline_us"].min()
        ax.plot(roof["S"], roof["roofline_us"], "k--", lw=1.2, label="roofline (floor)")
        log_axis(ax, "x", df["S"], "prefix tokens S")
    _y_axis(ax, values, "time per layer, us")
    ax.set_title(title)
    _legend(fig, ax)
    return fig


def roofline(df: pd.DataFrame, read_gbps: float, mma_tflops: float, title: str) -> plt.Figure:
    """Achieved TFLOP/s against arithmetic intensity for every row, under both ceilings."""
    fig, ax = plt.subplots(figsize=(10.5, 5.5))
    lo, hi = df["intensity"].min() / 2, df["intensity"].max() * 2
    x = np.geomspace(lo, hi, 200)
    roof = np.minimum(read_gbps * x / 1e3, mma_tflops)
    ax.plot(x, roof, "k-", lw=1.5,
            label=f"roofline: min({read_gbps:,.0f} GB/s x intensity, {mma_tflops:,.0f} TFLOP/s)")
    pts = df.rename(columns={"label": "implementation", "sweep": "swept variable"})
    sns.scatterplot(pts, x="intensity", y="TFLOPs", hue="implementation", style="swept variable",
                    palette=palette(pts["implementation"]), s=45, ax=ax)
    log_axis(ax, "x", x, "arithmetic intensity, FLOP per byte of KV read")
    log_axis(ax, "y", list(df["TFLOPs"]) + list(roof), "achieved throughput, TFLOP/s")
    ax.set_title(title)
    _legend(fig, ax)
    return fig


def speedup_vs(df: pd.DataFrame, x: str, xlabel: str, title: str) -> plt.Figure:
    """Speed-up of ours over the other impls (columns x_over_*) against a swept variable."""
    cols = [c for c in df.columns if c.startswith("x_over_")]
    long = df.melt(id_vars=[x], value_vars=cols, var_name="over", value_name="speedup").dropna()
    long["over"] = long["over"].str.removeprefix("x_over_").map(lambda i: IMPL_LABELS.get(i, i))
    fig, ax = plt.subplots()
    ylabel = "speed-up of ours, x\n(their time / our time)"
    if long[x].nunique() < 3:
        sns.barplot(long, x=x, y="speedup", hue="over", palette=palette(long["over"]), ax=ax,
                    errorbar=None)
        _label_bars(ax, "{:,.1f}x")
        ax.set_xlabel(xlabel)
    else:
        sns.lineplot(long, x=x, y="speedup", hue="over", palette=palette(long["over"]),
                     marker="o", ax=ax)
        if spans_decades(long[x], 1.0):
            log_axis(ax, "x", long[x], xlabel)
        else:
            ax.set_xlabel(xlabel)
    ax.axhline(1.0, color="black", ls=":", lw=1)
    _y_axis(ax, list(long["speedup"]) + [1.0], ylabel)
    ax.set_title(title)
    _legend(fig, ax, "speed-up over")
    return fig


def ordered_palette(labels, name: str = "viridis") -> dict:
    """{label: colour} from a sequential palette in the order given (e.g. tiers by tile size),
    so no series borrows the colour an implementation has in the other figures."""
    labels = list(dict.fromkeys(labels))
    return dict(zip(labels, sns.color_palette(name, len(labels))))


def time_vs(df: pd.DataFrame, x: str, xlabel: str, title: str, hue: str = "label",
            pal: dict | None = None) -> plt.Figure:
    """Time per layer against a swept variable (T, H, batch, page size), one series per hue:
    lines over three or more measured values, grouped bars over fewer. pal: {hue value:
    colour}; default the implementations' fixed colours (hue 'label') or colorblind."""
    fig, ax = plt.subplots()
    pal = pal or (palette(df[hue]) if hue == "label" else "colorblind")
    ticks = sorted(df[x].unique())
    if len(ticks) < 3:
        med = df.groupby([x, hue], as_index=False, sort=False)["time_us"].median()
        med[x] = med[x].map(lambda v: f"{v:g}")
        sns.barplot(med, x=x, y="time_us", hue=hue, palette=pal, ax=ax, errorbar=None,
                    order=[f"{t:g}" for t in ticks])
        _label_bars(ax, "{:,.1f}")
        ax.set_xlabel(xlabel)
    else:
        # a series measured at fewer than three x values is drawn as points, never a line
        n_x = df.groupby(hue)[x].transform("nunique")
        lines, points = df[n_x >= 3], df[n_x < 3]
        if isinstance(pal, str):
            pal = dict(zip(dict.fromkeys(df[hue]), sns.color_palette(pal)))
        sns.lineplot(lines, x=x, y="time_us", hue=hue, palette=pal, marker="o", ax=ax)
        if not points.empty:
            sns.scatterplot(points, x=x, y="time_us", hue=hue, palette=pal, s=45, ax=ax,
                            legend=lines.empty)
        if spans_decades(df[x], 1.0):
            log_axis(ax, "x", df[x], xlabel)
        else:
            ax.set_xlabel(xlabel)
        if len(ticks) <= 8:  # label the measured values themselves (T, H, batch)
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
            ax.xaxis.set_minor_formatter(NullFormatter())
    _y_axis(ax, df["time_us"], "time per layer, us")
    ax.set_title(title)
    _legend(fig, ax)
    return fig


def default_vs_forced(tab: pd.DataFrame, title: str) -> plt.Figure:
    """Kernel tiers: for each shape where the bench timed both, our default pick against the
    64-row tier forced (data.tier_frame rows); bars from zero, one group per shape, the
    default's tile named under its group."""
    rows = tab[tab["rows64_us"].notna()]
    # one group per shape, its label on three short lines so that eight groups stay readable
    case = [f"T = {int(r.T)}, H = {int(r.H)}\n{int(r.query_rows)} query rows\n{r.tile.replace(' (', chr(10) + '(')}"
            for r in rows.itertuples()]
    arms = ("default pick", "rows64 forced (64-row tiles)")
    long = pd.concat([pd.DataFrame({"case": case, "us": rows[col].to_numpy(), "arm": arm})
                      for arm, col in zip(arms, ("ours_us", "rows64_us"))])
    pal = dict(zip(arms, (_FIXED[IMPL_LABELS["flash"]], "0.6")))
    fig, ax = plt.subplots(figsize=(max(9.0, 1.6 * len(case)), 5.0))
    sns.barplot(long, x="case", y="us", hue="arm", palette=pal, ax=ax, errorbar=None)
    ax.tick_params(axis="x", labelsize=8)
    _label_bars(ax, "{:,.1f}")
    ax.set(xlabel="", title=title)
    linear_y(ax, "time per layer, us")
    _legend(fig, ax)
    return fig


def layout_bars(lay: pd.DataFrame, title: str) -> plt.Figure:
    """Our time per layer for each (cache layout, page size) measured: bars from zero, one per
    combination, so differences of a fraction of a percent look as small as they are."""
    med = lay.groupby(["layout", "page_size"], as_index=False)["time_us"].median()
    med["case"] = [f"{r.layout}\npage size {int(r.page_size)}" for r in med.itertuples()]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    sns.barplot(med, x="case", y="time_us", color=_FIXED[IMPL_LABELS["flash"]], ax=ax,
                errorbar=None)
    _label_bars(ax, "{:,.1f}")
    ax.set(xlabel="", title=title)
    linear_y(ax, "time per layer, us")
    fig.tight_layout()
    return fig


def step_time_by_case(df: pd.DataFrame, title: str) -> plt.Figure:
    """SGLang-integration: attention time of one verify step (all layers) per arm, one group
    of bars per measured case (S, T, tree): the cases differ several-fold, so none is averaged."""
    df = df.assign(case=[f"S = {int(r.S):,}\nT = {int(r.T)}, {r.tree}" for r in df.itertuples()])
    long = df.melt(id_vars=["case"], value_vars=["triton_ms_per_step", "plugin_ms_per_step"],
                   var_name="arm", value_name="ms")
    arms = {"triton_ms_per_step": "control: SGLang triton backend (extend_attention_fwd)",
            "plugin_ms_per_step": "candidate: our kernel via the plugin"}
    long["arm"] = long["arm"].map(arms)
    pal = dict(zip(arms.values(), (_CB[1], _CB[0])))  # baseline orange, ours blue, as elsewhere
    fig, ax = plt.subplots()
    sns.barplot(long, x="case", y="ms", hue="arm", palette=pal, ax=ax, errorbar=None)
    _label_bars(ax, "{:,.1f}")
    ax.set(title=title, xlabel="")
    _y_axis(ax, long["ms"], "attention time per verify step, ms\n(all layers, inside SGLang)")
    _legend(fig, ax)
    return fig


def tokens_per_s(per_round: pd.DataFrame, title: str) -> plt.Figure:
    """A/B: tokens/s of every round per arm (points) over the arm's distribution (box)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    sns.boxplot(per_round, x="arm", y="tokens_per_s", color="0.9", width=0.45, ax=ax)
    sns.stripplot(per_round, x="arm", y="tokens_per_s", hue="arm", size=7, ax=ax, legend=False)
    ax.set(title=title, xlabel="")
    _y_axis(ax, per_round["tokens_per_s"], "decode speed, tokens/s", 1.0)
    fig.tight_layout()
    return fig


def _is_flag(col: pd.Series) -> bool:
    """True for a column of booleans, possibly with gaps (None/NaN: not applicable)."""
    vals = col.dropna()
    return col.dtype == bool or (not vals.empty and all(isinstance(v, (bool, np.bool_))
                                                        for v in vals))


def table(df: pd.DataFrame, fmt: dict | None = None, caption: str = "", *,
          text: tuple[str, ...] = (), nowrap: tuple[str, ...] = ("tile",)):
    """A frame as a report table: no index column, readable headers (glossary.COLUMNS),
    numbers formatted per column (fmt keys may use either name); `text` columns (prose)
    left-aligned, `nowrap` columns on one line (either name).

    The Styler's id is a hash of the table, not a random uuid, so an unchanged render is
    byte-identical. A snake_case header left unexplained is an error, not a report.
    """
    df = df.rename(columns=COLUMNS)
    fmt = {COLUMNS.get(k, k): v for k, v in (fmt or {}).items()}
    raw = [c for c in df.columns if SNAKE.match(str(c))]
    if raw:
        raise ValueError(f"table {caption!r}: columns {raw} need a readable name in "
                         "notebooks.glossary.COLUMNS")
    for c in df.columns:   # True/False read as code; a reviewer reads yes/no
        if _is_flag(df[c]):
            df[c] = df[c].map(lambda v: None if v is None or v != v else "yes" if v else "no")
    uid = hashlib.sha1((caption + df.to_csv()).encode()).hexdigest()[:10]
    sty = df.style.hide(axis="index").format(fmt, na_rep="n/a").set_uuid(uid)
    for names, css in ((text, "text-align: left"), (nowrap, "white-space: nowrap")):
        cols = [c for c in df.columns if c in {COLUMNS.get(n, n) for n in names}]
        if cols:
            sty = sty.set_properties(subset=cols, **dict([css.split(": ")]))
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
