"""The CPU-testable parts of the fp8 bench rows (kernel/bench/sweeps.py): the roofline
arithmetic of an fp8 row (576-byte prefix rows, bf16 draft rows, q and o) and the fp8
benchmark configurations beside the bf16 ones."""
from __future__ import annotations

import pytest

from kernel.bench import sweeps
from kernel.checks import FP8_ROW_BYTES, ROW_BYTES

CENTRE = [185_000]


def test_bf16_traffic_is_the_formula_the_bench_always_used():
    for pre, T, H in ((CENTRE, 8, 8), ([185000, 120000, 65000], 16, 64), ([0, 7], 1, 1)):
        t = sweeps.traffic(pre, T, H)
        old_kv = sum(s + T for s in pre) * ROW_BYTES
        assert t["kv_bytes"] == old_kv
        assert t["bytes"] == old_kv + len(pre) * T * H * (576 + 512) * 2
        assert t["flops"] == sum(T * H * (s + T) * 2 * (576 + 512) for s in pre)


def test_fp8_traffic_counts_576_byte_prefix_rows_and_bf16_draft_rows():
    t8, t16 = sweeps.traffic(CENTRE, 8, 8, "fp8_e4m3"), sweeps.traffic(CENTRE, 8, 8)
    assert FP8_ROW_BYTES == 576 and ROW_BYTES == 1152
    assert t8["kv_bytes"] == 185_000 * 576 + 8 * 1152          # k_extend stays bf16
    assert t8["bytes"] == t8["kv_bytes"] + 8 * 8 * (576 + 512) * 2
    assert t16["bytes"] - t8["bytes"] == 185_000 * 576          # only the prefix rows shrink
    assert t8["flops"] == t16["flops"]                          # the same math
    with pytest.raises(ValueError, match="kv_dtype: 'fp8_e5m2' is not one of"):
        sweeps.traffic(CENTRE, 8, 8, "fp8_e5m2")


# the H200's ceilings as bench-h200-20261201T1152.json measured them (GB/s, TFLOP/s)
H200 = (4258.6, 637.5)


def _roof(t, ceilings=H200):
    return sweeps.roofline_us(t["bytes"], t["flops"], *ceilings)


def test_fp8_roofline_takes_the_longer_of_bytes_and_math():
    gbps, tflops = H200
    # T = 1: memory-bound on both pools, so the fp8 floor is the bytes ratio lower
    t8, t16 = sweeps.traffic(CENTRE, 1, 8, "fp8_e4m3"), sweeps.traffic(CENTRE, 1, 8)
    assert _roof(t8) == pytest.approx(t8["bytes"] / (gbps * 1e9) * 1e6)
    assert _roof(t16) / _roof(t8) == pytest.approx(t16["bytes"] / t8["bytes"])
    # the centre, T = 8 x H = 8: halving the prefix bytes makes the math the floor on fp8
    # (25.8 GFLOP at 637 TFLOP/s = 40 us against 107 MB at 4.26 TB/s = 25 us), bytes on bf16
    c8, c16 = sweeps.traffic(CENTRE, 8, 8, "fp8_e4m3"), sweeps.traffic(CENTRE, 8, 8)
    assert _roof(c8) == pytest.approx(c8["flops"] / (tflops * 1e12) * 1e6)
    assert _roof(c16) == pytest.approx(c16["bytes"] / (gbps * 1e9) * 1e6)
    assert 1.2 < _roof(c16) / _roof(c8) < 1.3
    # 1024 draft tokens x 64 heads: the matrix work bounds both pools alike
    big8, big16 = sweeps.traffic(CENTRE, 1024, 64, "fp8_e4m3"), sweeps.traffic(CENTRE, 1024, 64)
    assert _roof(big8) == pytest.approx(big8["flops"] / (tflops * 1e12) * 1e6) == _roof(big16)


def _shape(c):
    return c["S"], c["T"], c["H"], c["layout"], c["page"], c["batch"]


@pytest.mark.parametrize("quick", [False, True])
def test_every_fp8_config_has_a_bf16_twin_and_bf16_configs_are_unchanged(quick):
    cfgs = sweeps.bench_configs(quick)
    fp8 = [c for c in cfgs if c.get("kv_dtype") == "fp8_e4m3"]
    bf16 = [c for c in cfgs if "kv_dtype" not in c]   # no key: the seeds of the bf16 rows stay the same
    assert fp8 and len(fp8) + len(bf16) == len(cfgs)
    assert all(c["sweep"].startswith("fp8_") for c in fp8) and not any(c["sweep"].startswith("fp8_") for c in bf16)
    assert {_shape(c) for c in fp8} <= {_shape(c) for c in bf16}   # the speed-up over bf16 per shape
    assert (185000, 8, 8, "scattered", 1, 1) in {_shape(c) for c in fp8}
    if not quick:
        assert {c["S"] for c in fp8 if c["sweep"] == "fp8_S"} == {16384, 65536, 131072, 185000, 262144}
        assert {c["T"] for c in fp8 if c["sweep"] == "fp8_T"} >= {1, 4, 16, 32}
        assert {c["page"] for c in fp8} == {1, 64} and {c["batch"] for c in fp8} == {1, 8}
    assert all(cfgs.index(c) < cfgs.index(d) for c in cfgs for d in cfgs if c["T"] < 256 <= d["T"])
