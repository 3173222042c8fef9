"""The sm_120 model behind the phase-2 estimate column: MMA counts per tile match the kernel
memo's budgets, and the memory/math split follows the inputs."""
import pytest

from kernel.bench.micro import tiles_per_cta
from kernel.bench.sm120_estimate import SM120, estimate, mmas_per_tile


def test_mma_counts_match_the_memo():
    assert mmas_per_tile(64, 0) == 544           # memo section 1: one 16-token tile, 64 rows
    assert mmas_per_tile(32, 4) == 272           # design C at 32 rows
    assert mmas_per_tile(8, 1) == 68


def test_tiles_per_cta_is_the_device_schedule():
    assert tiles_per_cta([185000], 8, 8, 64, 132) == 89      # memo: 89 tiles per CTA at the centre
    assert tiles_per_cta([185000], 8, 8, 32, 132) == 178     # two row tiles share the splits


def _rows(clk, frac):
    base = dict(S=185000, T=1, H=8, tier=1, rows_per_tile=8, tiles_per_cta=89)
    return [dict(base, stage="full", time_us=70.0, merge_us=5.0, clk_per_tile=clk),
            dict(base, stage="mma", time_us=40.0, clk_per_tile=clk),
            dict(base, stage="stream", option="evict_first", time_us=55.0, frac_read_ceiling=frac)]


def test_memory_bound_when_the_math_is_short():
    (r,) = estimate(_rows(900.0, 0.9), tiles_per_cta)
    kv = 185001 * 1152
    assert r["bound"] == "memory"
    assert r["sm120_memory_us"] == pytest.approx(kv / (SM120["dram_GBps"] * 1e3 * 0.9))
    assert r["sm120_estimate_us"] == pytest.approx(r["sm120_memory_us"] + 5.0)


def test_math_bound_when_the_tiles_are_slow():
    (r,) = estimate(_rows(20000.0, 0.9), tiles_per_cta)
    assert r["bound"] == "math" and r["sm120_math_us"] > r["sm120_memory_us"]


def test_an_fp8_pool_is_estimated_apart_at_its_own_bytes():
    """The same shape and tier on both pools gives two rows: the fp8 one at 576 bytes per prefix
    row, with its own stream efficiency (not the bf16 row's)."""
    fp8 = [dict(r, kv_dtype="fp8_e4m3") for r in _rows(900.0, 0.5)]
    rows = {r["kv_dtype"]: r for r in estimate(_rows(900.0, 0.9) + fp8, tiles_per_cta)}
    assert set(rows) == {"bfloat16", "fp8_e4m3"}
    kv8 = 185000 * 576 + 1 * 1152
    assert rows["fp8_e4m3"]["sm120_floor_us"] == pytest.approx(kv8 / (SM120["dram_GBps"] * 1e3))
    assert rows["fp8_e4m3"]["sm120_memory_us"] == pytest.approx(kv8 / (SM120["dram_GBps"] * 1e3 * 0.5))
    assert rows["bfloat16"]["stream_efficiency"] == 0.9


def test_micro_measures_the_default_tier_at_every_shape_on_both_pools():
    """The estimate can only say which tier a canary should try if the microbenchmarks time the
    tier the default picks at each of their shapes (bf16 and fp8 pools), and only fp8 tiers on fp8."""
    from kernel.bench.micro import FP8_SHAPES, SHAPES
    from kernel.ops import FP8_TIERS, pick_tier
    for shapes, fp8 in ((SHAPES, False), (FP8_SHAPES, True)):
        for S, T, H, tiers in shapes:
            assert pick_tier(H, T, 1, kv_fp8=fp8) in tiers, (S, T, H, fp8)
            assert not fp8 or set(tiers) <= set(FP8_TIERS), (S, T, H)
