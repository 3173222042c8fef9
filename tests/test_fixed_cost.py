"""kernel/bench/fixed_cost.py's arithmetic (the GPU part runs in kernel.gpu_run --stages fixed)."""
import pytest

from kernel.bench.fixed_cost import S_POINTS, FIT_FROM, kernel_times, line_fit


def test_line_fit_recovers_intercept_and_slope():
    xs = [1.0e8, 2.0e8, 4.0e8]
    a, b = line_fit(xs, [12.0 + x * 2.5e-7 for x in xs])
    assert a == pytest.approx(12.0) and b == pytest.approx(2.5e-7)
    with pytest.raises(ValueError, match="xs"):
        line_fit([5.0, 5.0], [1.0, 2.0])


def test_fit_uses_at_least_three_long_points():
    assert len([s for s in S_POINTS if s >= FIT_FROM]) >= 3 and min(S_POINTS) == 128


def test_kernel_times_pairs_each_merge_with_the_verify_kernel_before_it():
    ev = []
    for i in range(5):
        t = 1000.0 * i
        ev.append(("void mlav::small::mla_verify_kernel_small<1>(mlav::Params)", t, t + 60.0))
        ev.append(("void mlav::mla_verify_combine<8>(mlav::Params)", t + 58.0, t + 63.0 + i))
    ev.append(("void at::native::vectorized_elementwise_kernel<...>", 9000.0, 9001.0))   # not ours
    r = kernel_times(list(reversed(ev)))
    assert r["calls"] == 5 and r["verify_us"] == pytest.approx(60.0)
    assert r["merge_us"] == pytest.approx(7.0)                 # 5, 6, 7, 8, 9: the median
    assert r["merge_start_after_verify_end_us"] == pytest.approx(-2.0)
    alone = kernel_times([("mla_verify_kernel_rowsd<2>", 0.0, 5.0)])   # without its merge (mode 4)
    assert alone["calls"] == 1 and alone["merge_us"] is None


def test_tile_fit_splits_a_call_into_once_and_per_tile_clocks():
    from kernel.bench.fixed_cost import tile_fit
    rows = [{"tiles_per_cta": n, "math_alone_us": 9.5 + n * 0.85} for n in (32, 63, 88, 126)]
    f = tile_fit(rows, "math_alone_us", 2000.0)
    assert f["tile_intercept_us"] == pytest.approx(9.5)
    assert f["marginal_us_per_tile"] == pytest.approx(0.85)
    assert f["marginal_clk_per_tile"] == pytest.approx(1700.0)


def test_every_point_times_the_whole_call_the_kernel_alone_and_its_math_alone():
    from kernel.bench.fixed_cost import CASES, MODES
    from kernel.bench.micro import MODE_NO_LOADS, MODE_NO_MERGE
    assert MODES == {"time_us": 0, "no_merge_us": MODE_NO_MERGE, "math_alone_us": MODE_NO_LOADS | MODE_NO_MERGE}
    assert (16, 8, "fp8_e4m3") in CASES


def test_the_frame_names_the_math_alone_and_reads_files_without_tile_lines():
    import math

    from notebooks import data
    fit = {"T": 8, "H": 8, "tier": 8, "kv_dtype": "bfloat16", "fit_from_S": 65536, "intercept_us": 14.0,
           "marginal_GBps": 2400.0}
    new = {"fits": [dict(fit, of="math_alone_us", tile_intercept_us=9.5, marginal_clk_per_tile=1700.0)]}
    old = {"fits": [dict(fit, of="no_merge_us")]}
    r = data.fixed_cost_frame(new).iloc[0]
    assert r["part"] == "math alone, without the merge" and (r["tile_intercept_us"], r["marginal_clk_per_tile"]) == (9.5, 1700.0)
    r = data.fixed_cost_frame(old).iloc[0]
    assert r["part"] == "without the merge" and math.isnan(r["marginal_clk_per_tile"])
