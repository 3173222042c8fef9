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
