"""notebooks.figures: the rules that keep a figure from misleading a reviewer."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from notebooks import figures  # noqa: E402
from notebooks.glossary import IMPL_LABELS  # noqa: E402


def _rows(xs, impls=("flash", "sglang_extend"), x="batch", base=100.0):
    return pd.DataFrame([{x: v, "label": IMPL_LABELS.get(i, i), "impl": i,
                          "time_us": base * (k + 1) + v, "S": 185000, "layout": "scattered"}
                         for v in xs for k, i in enumerate(impls)])


def _data_lines(ax):
    """Lines that connect measured points (not reference lines: those are horizontal)."""
    return [ln for ln in ax.get_lines()
            if len(set(ln.get_xdata())) > 1 and len(set(ln.get_ydata())) > 1]


def _visible_ticks(ax, which):
    axis = ax.yaxis if which == "y" else ax.xaxis
    lo, hi = sorted(ax.get_ylim() if which == "y" else ax.get_xlim())
    return [t.get_text() for t in axis.get_ticklabels()
            if lo <= t.get_position()[which == "y"] <= hi and t.get_text()]


@pytest.mark.parametrize("xs", [[8], [1, 64]])
def test_fewer_than_three_x_values_are_bars_not_lines(xs):
    fig = figures.time_vs(_rows(xs), "batch", "batch", "t")
    ax = fig.axes[0]
    assert not _data_lines(ax) and len(ax.patches) >= len(xs) * 2
    plt.close(fig)


def test_three_x_values_are_lines():
    fig = figures.time_vs(_rows([1, 2, 4]), "batch", "batch", "t")
    assert _data_lines(fig.axes[0])
    plt.close(fig)


def test_linear_y_starts_at_zero_so_small_differences_look_small():
    df = _rows([8, 16, 64], impls=("sglang_extend",), x="H", base=34500.0)
    fig = figures.time_vs(df, "H", "heads", "t")
    ax = fig.axes[0]
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0
    assert "log" not in ax.get_ylabel()
    plt.close(fig)


def test_layout_bars_start_at_zero():
    cases = (("contiguous", 1, 176.0), ("scattered", 1, 175.6), ("scattered", 64, 175.9))
    lay = pd.DataFrame([{"layout": lay, "page_size": p, "time_us": t} for lay, p, t in cases])
    fig = figures.layout_bars(lay, "t")
    assert fig.axes[0].get_ylim()[0] == 0 and len(fig.axes[0].patches) == 3
    plt.close(fig)


def test_log_axes_say_so_and_carry_readable_ticks_inside_the_range():
    """The review's case: 165-330 us on a log axis had only 10^3 and 10^4 ticks."""
    df = _rows([1, 4, 8, 16, 32], impls=("flash", "sglang_extend", "torch_naive"), x="T")
    df.loc[df["impl"] == "flash", "time_us"] = [165, 170, 176, 250, 330]
    df.loc[df["impl"] == "sglang_extend", "time_us"] = 36000.0
    fig = figures.time_vs(df, "T", "draft tokens", "t")
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_ylabel().endswith("(log scale)")
    ticks = _visible_ticks(ax, "y")
    assert {"200", "1,000", "10,000"} <= set(ticks), ticks
    assert not any("10^" in t or "$" in t for t in ticks)
    plt.close(fig)


def test_every_log_figure_labels_its_log_axes():
    df = _rows([4096, 65536, 262144], x="S")
    df["GBps"], df["roofline_us"] = df["time_us"] / 10, df["time_us"] / 50
    for fig in (figures.time_vs_s(df, "t"), figures.bandwidth_vs_s(df, 4000.0, "b")):
        for ax in fig.axes:
            for axis, scale, label in (("x", ax.get_xscale(), ax.get_xlabel()),
                                       ("y", ax.get_yscale(), ax.get_ylabel())):
                assert (scale == "log") == label.endswith("(log scale)"), (axis, label)
        plt.close(fig)


def test_a_new_impl_gets_a_colour_instead_of_breaking_the_figure():
    df = _rows([1, 2, 4], impls=("flash", "flash_v9"))
    fig = figures.time_vs(df, "batch", "batch", "t")
    pal = figures.palette(df["label"])
    assert len(set(pal.values())) == 2
    plt.close(fig)


def test_tables_have_readable_stable_headers():
    df = pd.DataFrame({"worst_rel_err": [0.002], "all_pass": [True]})
    a = figures.table(df, {"worst_rel_err": "{:.2e}"}, "cap").to_html()
    assert "worst relative error" in a and "worst_rel_err" not in a and ">yes<" in a
    assert a == figures.table(df, {"worst_rel_err": "{:.2e}"}, "cap").to_html()
    with pytest.raises(ValueError, match=r"columns \['new_thing'\] need a readable name"):
        figures.table(pd.DataFrame({"new_thing": [1]}), caption="c")


def test_a_series_with_fewer_than_three_x_values_is_points_among_lines():
    """The review's case: rows64 forced at T = 1 and 4 only, drawn as a line beside ours."""
    df = pd.concat([_rows([1, 4, 8, 16], impls=("flash",), x="T"),
                    _rows([1, 4], impls=("flash_rows64",), x="T", base=160.0)])
    fig = figures.time_vs(df, "T", "draft tokens", "t")
    ax = fig.axes[0]
    lines = _data_lines(ax)
    assert len(lines) == 1 and len(lines[0].get_xdata()) == 4
    assert any(len(c.get_offsets()) == 2 for c in ax.collections)   # the two points remain
    plt.close(fig)


def test_default_vs_forced_bars_start_at_zero():
    tab = pd.DataFrame([{"T": 1, "H": 8, "query_rows": 8, "tile": "small (8-row tiles)",
                         "ours_us": 68.9, "rows64_us": 162.3}])
    fig = figures.default_vs_forced(tab, "t")
    ax = fig.axes[0]
    assert ax.get_ylim()[0] == 0 and len([p for p in ax.patches if p.get_height()]) == 2
    assert not _data_lines(ax)
    plt.close(fig)


def test_flag_columns_with_gaps_read_yes_no_and_na():
    df = pd.DataFrame({"bitwise": [True, False, None]})
    out = figures.table(df).to_html()
    assert ">yes<" in out and ">no<" in out and ">n/a<" in out and "True" not in out
