"""The sm_120 model (kernel/bench/sm120_estimate.py): its arithmetic on a fixture made of the
H200's centre-point figures, each of the review's five corrections asserted by a test that the
old formula fails, and the committed model file recomputed from the committed H200 files."""
import json
import re
from pathlib import Path

import pytest

from kernel.bench import sm120_estimate as m
from kernel.bench.sm120_estimate import CLOCKS, SM120, mmas_per_tile, model, tiles_per_cta

DATA = Path(__file__).resolve().parent.parent / "reports" / "data"
R8 = 628.6e12 / (4096 * 132 * 1.98e9)            # MMAs per clock per SM at the H200's 8-warp ceiling
READ = 4249.3                                     # the H200 read ceiling, GB/s
D = READ / 4800.0                                 # its fraction of the H200's 4,800 GB/s spec
KV = 185000 * 1152 + 8 * 1152                     # the centre's KV bytes


def test_mma_counts_match_the_memo():
    assert mmas_per_tile(64, 0) == 544           # memo section 1: one 16-token tile, 64 rows
    assert mmas_per_tile(32, 4) == 272           # design C at 32 rows
    assert mmas_per_tile(8, 1) == 68


def test_tiles_per_cta_is_the_device_schedule():
    # memo: 89 tiles per CTA at the centre with the chunk aimed at target - U items; 88 with the wave
    # fit, production's plan since 2026-12-06's twenty-sixth session
    assert tiles_per_cta([185000], 8, 8, 64, 132) == 88
    assert tiles_per_cta([185000], 8, 8, 64, 132, wave_fit=False) == 89
    assert tiles_per_cta([185000], 8, 8, 32, 132, wave_fit=False) == 178     # two row tiles share the splits
    from kernel.bench.micro import tiles_per_cta as micro_tiles
    assert micro_tiles is tiles_per_cta                        # the microbenchmarks use the same one


def test_wave_fit_fills_the_sms_the_safe_chunk_leaves_idle():
    # aiming at target - U items leaves up to U SMs idle: 130 items at the centre and T = 16 (U = 1, 2),
    # 128 at T = 32 (U = 4); aimed at target, 132 items fit there in one wave
    for (T, safe, fit) in ((8, 89, 88), (16, 178, 176), (32, 362, 351)):
        assert tiles_per_cta([185000], T, 8, 64, 132, wave_fit=False) == safe
        assert tiles_per_cta([185000], T, 8, 64, 132, wave_fit=True) == fit
    # T = 64: the chunk aimed at 132 items gives 8 x 17 = 136, a second wave: the safe chunk stays
    assert tiles_per_cta([185000], 64, 8, 64, 132, wave_fit=True) == tiles_per_cta([185000], 64, 8, 64, 132, wave_fit=False) == 723
    # the tail's weight counts in both: D = 17 at 6 / 8 fits 132 items too
    assert tiles_per_cta([185000], 17, 8, 64, 132, 6, wave_fit=True) < tiles_per_cta([185000], 17, 8, 64, 132, 6, wave_fit=False)


def test_a_micro_file_names_its_librarys_wave_fit():
    assert m.micro_wave_fit({}) is False and m.micro_wave_fit({"wave_fit": True}) is True


def test_wave_fit_mirrors_the_kernel_source():
    src = (Path(__file__).resolve().parent.parent / "kernel" / "csrc" / "verify_common.cuh").read_text()
    # production's plan_item has the wave fit; the variant's macro takes it out
    assert "#ifdef MLAV_WAVE_SAFE" in src and "MLAV_WAVE_FIT" not in src and m.WAVE_FIT is True


def test_tail_row_tiles_take_longer_splits():
    # DDTree's D = 17 at 8 heads: 136 rows, two full 64-row tiles and a tail of 8. With equal splits
    # (tail_e 8) the 3 row tiles take 43 splits each (129 items for 132 CTAs) of 269 tiles; with the
    # tail counted at 6 / 8 (tier_rowsd.cuh's TAIL_E) the full tiles take 47 of 247 tiles and the
    # tail 36 of 8 / 6 the length (130 items); at 7 / 8 the full tiles take 256
    assert tiles_per_cta([185000], 17, 8, 64, 132, 8, wave_fit=False) == 269
    assert tiles_per_cta([185000], 17, 8, 64, 132, 6, wave_fit=False) == 247
    assert 247 < tiles_per_cta([185000], 17, 8, 64, 132, 7, wave_fit=False) < 269
    # no tail where the last row tile is full (T = 16) or holds more than half (T = 13: 64 + 40)
    for T in (8, 16, 13):
        assert tiles_per_cta([185000], T, 8, 64, 132, 6) == tiles_per_cta([185000], T, 8, 64, 132, 8)
    # nor where the request has one row tile (T = 4 forced onto rows64d: every CTA holds 32 rows)
    assert tiles_per_cta([185000], 4, 8, 64, 132, 6) == tiles_per_cta([185000], 4, 8, 64, 132, 8)
    assert m.tail_e_of(8) == m.TAIL_E["bfloat16"] and m.tail_e_of(6) == m.tail_e_of(0) == 8
    assert m.tail_e_of(8, "bfloat16", {}) == 8                  # a micro file of the library before


def test_micro_files_in_quarters_read_as_eighths():
    # the files before 2026-12-06 recorded the tail weight in quarters (tail_q), newer ones in eighths
    assert m.micro_tail_e({"tail_q": {"bfloat16": 3, "fp8_e4m3": 4}}) == {"bfloat16": 6, "fp8_e4m3": 8}
    assert m.micro_tail_e({"tail_e": {"bfloat16": 6, "fp8_e4m3": 7}}) == {"bfloat16": 6, "fp8_e4m3": 7}
    assert m.micro_tail_e({}) == {}


def test_tail_e_mirrors_the_kernel_source():
    src = (Path(__file__).resolve().parent.parent / "kernel" / "csrc" / "tier_rowsd.cuh").read_text()
    got = re.search(r"#else\nconstexpr int TAIL_E = (\d+);", src)
    assert got and int(got.group(1)) == m.TAIL_E["bfloat16"]
    got = re.search(r"#else\nconstexpr int TAIL_E_FP8 = (\d+);", src)
    assert got and int(got.group(1)) == m.TAIL_E["fp8_e4m3"]


def _micro(stream_frac_8=0.78, stream_us_8=64.3):
    """The H200's centre point (micro-h200-20261201T2000.json, rounded): rows64d (8) and rows32d
    (6) with their parts, stream alone, math alone and full kernel."""
    base = dict(S=185000, T=8, H=8, kv_dtype="bfloat16")
    rows = []
    for tier, rpt, parts in ((8, 64, dict(math=2476.0, no_qk=1883.0, no_pv=1828.0)),
                             (6, 32, dict(math=1247.0, no_qk=756.0, no_pv=932.0))):
        rows += [dict(base, tier=tier, rows_per_tile=rpt, stage="parts", part=k, clk_per_tile=v) for k, v in parts.items()]
    rows += [dict(base, tier=8, rows_per_tile=64, stage="stream", option="evict_first", time_us=stream_us_8,
                  frac_read_ceiling=stream_frac_8),
             dict(base, tier=8, rows_per_tile=64, stage="mma", time_us=111.1, clk_per_tile=2472.0),
             dict(base, tier=8, rows_per_tile=64, stage="full", time_us=153.7, no_merge_us=149.7, merge_us=4.0,
                  clk_per_tile=3330.0),
             dict(base, tier=6, rows_per_tile=32, stage="stream", option="evict_first", time_us=62.3,
                  frac_read_ceiling=0.805),
             dict(base, tier=6, rows_per_tile=32, stage="mma", time_us=112.3, clk_per_tile=1249.0),
             dict(base, tier=6, rows_per_tile=32, stage="full", time_us=153.8, no_merge_us=148.9, merge_us=4.9,
                  clk_per_tile=1657.0)]
    return {"kind": "microbench", "sms": 132, "clock_assumed_mhz": 1980.0, "rows": rows,
            "ceilings": {"read_GBps": READ, "mma_TFLOPs_8_warps_per_sm": 628.6}}


def _row(rows, tier, clock="boost"):
    (r,) = [r for r in rows if r["tier"] == tier and r["clock"] == clock]
    return r


def test_the_arithmetic_on_the_centre_fixture():
    r = _row(model(_micro(), READ), 8)
    e = 544 / R8 / ((2476 - 1883) + (2476 - 1828))                  # 0.747: the MMAs' share of the 8-warp pipe
    nonmma = 2472 - 544 / (R8 * e)                                   # 1,231 clocks of softmax, barriers, skeleton
    clk = nonmma + 544 / (0.25 * e)
    tiles = tiles_per_cta([185000], 8, 8, 64, 188)
    assert r["mma_efficiency"] == pytest.approx(e) and 0.74 < e < 0.75
    assert r["h200_nonmma_clk_per_tile"] == pytest.approx(nonmma) and 1225 < nonmma < 1240
    assert r["sm120_clk_per_tile"] == pytest.approx(clk) and r["sm120_tiles_per_cta"] == tiles
    assert r["sm120_math_us"] == pytest.approx(tiles * clk / 2617)
    assert r["sm120_memory_us"] == pytest.approx(KV / (1792e3 * D))
    assert r["sm120_floor_us"] == pytest.approx(KV / 1792e3)
    assert r["sm120_estimate_us"] == pytest.approx(r["sm120_memory_us"] + r["sm120_math_us"] + 4.0)
    assert r["bound"] == "memory"


def test_a_math_is_non_mma_clocks_plus_mmas_at_sm120s_rate_not_the_larger_of_the_two():
    r = _row(model(_micro(), READ), 8)
    old = max(2472.0, 544 / 0.25)                                    # the old model: 2,472 clocks a tile
    assert r["sm120_clk_per_tile"] > 1.6 * old
    assert r["sm120_clk_per_tile"] == pytest.approx(r["h200_nonmma_clk_per_tile"] + 544 / (0.25 * r["sm120_mma_efficiency"]))


def test_a_sm120s_mmas_never_run_above_its_full_rate():
    """rows64d's parts since 2026-12-04 save less leaving QK or PV out than their MMAs take at the
    H200's 8-warp ceiling (e = 1.09 in micro-h200-20261205T0244.json): the H200's split keeps e,
    sm_120's MMAs take at least MMAs / 0.25 clocks."""
    mic = _micro()
    for r in mic["rows"]:
        if r["stage"] == "parts" and r["tier"] == 8:
            r["clk_per_tile"] = {"math": 1959.0, "no_qk": 1667.0, "no_pv": 1400.0}[r["part"]]
    r = _row(model(mic, READ), 8)
    e = 544 / R8 / ((1959 - 1667) + (1959 - 1400))
    assert e > 1.05 and r["mma_efficiency"] == pytest.approx(e) and r["sm120_mma_efficiency"] == 1.0
    assert r["h200_nonmma_clk_per_tile"] == pytest.approx(2472 - 544 / (R8 * e))
    assert r["sm120_clk_per_tile"] == pytest.approx(r["h200_nonmma_clk_per_tile"] + 544 / 0.25)
    below = _row(model(_micro(), READ), 8)                           # e = 0.75: unchanged
    assert below["sm120_mma_efficiency"] == below["mma_efficiency"] < 1


def test_b_memory_does_not_follow_the_tiers_h200_stream_efficiency():
    a = _row(model(_micro(stream_frac_8=0.78), READ), 8)
    b = _row(model(_micro(stream_frac_8=0.50), READ), 8)
    six = _row(model(_micro(), READ), 6)                             # 0.805 on the H200
    assert a["sm120_memory_us"] == b["sm120_memory_us"] == six["sm120_memory_us"]
    assert a["sm120_memory_us"] == pytest.approx(KV / (1792e3 * D))  # the old model: KV / (1792 x 0.78)
    assert a["sm120_in_flight_bytes"] == 2 * 16 * 1152 >= a["sm120_in_flight_need_bytes"]


def test_b_too_few_bytes_in_flight_slow_the_memory_term():
    r = _row(model(_micro(), READ, latency_ns=10000.0), 8)          # 10 us of latency: 95 KB needed per SM
    assert r["sm120_in_flight_need_bytes"] > r["sm120_in_flight_bytes"]
    assert r["sm120_memory_us"] == pytest.approx(KV / (1792e3 * D) * r["sm120_in_flight_need_bytes"]
                                                 / r["sm120_in_flight_bytes"])


def test_c_rows32d_runs_one_cta_per_sm_on_sm120():
    r = _row(model(_micro(), READ), 6)
    e = 272 / R8 / ((1247 - 756) + (1247 - 932))
    nonmma = 1249 - 272 / (R8 * e)
    assert r["lone_cta_factor"] == 2                                 # two CTAs per SM on the H200, one here
    assert r["sm120_clk_per_tile"] == pytest.approx(2 * nonmma + 272 / (0.25 * e))
    # 188 CTAs, not 376; the schedule of that file's library (no wave fit)
    assert r["sm120_tiles_per_cta"] == tiles_per_cta([185000], 8, 8, 32, 188, wave_fit=False)
    eight = _row(model(_micro(), READ), 8)
    assert r["sm120_math_us"] > eight["sm120_math_us"]               # the old model ranked rows32d first


def test_d_memory_and_math_are_not_assumed_to_overlap():
    r = _row(model(_micro(), READ), 8)
    lo, hi = sorted((r["sm120_memory_us"], r["sm120_math_us"]))
    assert r["sm120_serial_us"] == pytest.approx(lo + hi + 4.0) == r["sm120_estimate_us"]
    assert r["sm120_overlapped_us"] == pytest.approx(hi + 4.0)
    # the H200 at the centre: full 149.7 us without merge, math alone 111.1, stream alone 64.3
    assert r["h200_overlap"] == pytest.approx((111.1 + 64.3 - 149.7) / 64.3) and 0.39 < r["h200_overlap"] < 0.41


def test_e_the_clock_is_a_parameter_math_follows_it_memory_does_not():
    rows = model(_micro(), READ)
    assert {r["clock"] for r in rows} == set(CLOCKS) and CLOCKS["boost"] == 2.617 and CLOCKS["max_q"] == 2.288
    boost, maxq = _row(rows, 8, "boost"), _row(rows, 8, "max_q")
    assert maxq["sm120_math_us"] == pytest.approx(boost["sm120_math_us"] * 2.617 / 2.288)
    assert maxq["sm120_memory_us"] == boost["sm120_memory_us"]
    slow = model(_micro(), READ, clocks={"slow": 1.0})
    assert _row(slow, 8, "slow")["bound"] == "math"


def test_published_figures_are_the_constants():
    assert SM120["sms"] == 188 and SM120["dram_GBps"] == 1792.0 and SM120["l2_MB"] == 128
    assert SM120["sms"] * 1024 * CLOCKS["boost"] * 1e9 / 1e12 == pytest.approx(504, abs=1)   # TFLOP/s dense
    assert SM120["mma_per_clk_sm"] * 4096 == 1024


def test_a_tier_without_parts_borrows_rows64d_efficiency_and_says_so():
    mic = _micro()
    mic["rows"] += [dict(r, tier=4, rows_per_tile=32) for r in mic["rows"]
                    if r["tier"] == 6 and r["stage"] in ("mma", "full")]
    r = _row(model(mic, READ), 4)
    assert r["mma_efficiency"] == _row(model(mic, READ), 8)["mma_efficiency"]
    assert r["mma_efficiency_source"].startswith("assumed")


def _newest_model() -> dict:
    return json.loads(sorted(DATA.glob("sm120-model-from-h200-*.json"))[-1].read_text())


def test_the_committed_model_file_is_the_model_on_the_committed_h200_files():
    doc = _newest_model()
    micro = json.loads((DATA / doc["inputs"]["micro"]).read_text())
    bench = json.loads((DATA / doc["inputs"]["bench"]).read_text()) if doc["inputs"]["bench"] else None
    again = m.document(micro, bench, doc["inputs"]["micro"], doc["inputs"]["bench"])
    assert again["rows"] == doc["rows"] and again["lowest_tier"] == doc["lowest_tier"]
    assert doc["kind"] == "sm120_model" and "not a measurement" in doc["model"]


def test_the_default_tier_follows_the_model_at_every_185k_shape_on_both_pools():
    """pick_tier (static, the H200's choice) is what the corrected model ranks lowest at every
    185k shape measured in the newest model file, bf16 and fp8 (the old model put rows32d first at
    the centre), or a tier within the model's TIE of it that the H200 measured faster."""
    from kernel.ops import pick_tier
    from kernel.bench.micro import FP8_SHAPES, SHAPES
    doc = _newest_model()
    at185 = [x for x in doc["lowest_tier"] if x["S"] == 185000]
    shapes = {("bfloat16", T) for S, T, _, _ in SHAPES if S == 185000} | \
        {("fp8_e4m3", T) for S, T, _, _ in FP8_SHAPES if S == 185000}
    assert {(x["kv_dtype"], x["T"]) for x in at185} == shapes   # the newest model has every micro shape
    ties = m.within_tie(doc["rows"])
    h200 = {(r["kv_dtype"], r["T"], r["tier"]): r["h200_us"] for r in doc["rows"] if r["S"] == 185000}
    for x in at185:
        pick = pick_tier(x["H"], x["T"], 1, kv_fp8=x["kv_dtype"] == "fp8_e4m3")
        if pick != x["tier"]:
            assert pick in ties[(x["kv_dtype"], x["S"], x["T"], x["H"])], (x, pick)
            assert h200[(x["kv_dtype"], x["T"], pick)] < h200[(x["kv_dtype"], x["T"], x["tier"])], (x, pick)


def test_a_tie_is_within_tie_of_the_lowest_and_no_further():
    rows = [{"kv_dtype": "bfloat16", "S": 1, "T": 2, "H": 8, "clock": m.DEFAULT_CLOCK, "tier": t, "sm120_estimate_us": v}
            for t, v in ((2, 100.0), (6, 100.0 * (1 + m.TIE) - 1e-9), (8, 100.0 * (1 + m.TIE) + 1e-6))]
    assert m.within_tie(rows) == {("bfloat16", 1, 2, 8): [2, 6]}
    assert m.lowest(rows) == {("bfloat16", 1, 2, 8): 2}


def test_micro_measures_the_default_tier_at_every_shape_on_both_pools():
    """The model can only rank the default tier if the microbenchmarks time the tier the default
    picks at each of their shapes (bf16 and fp8 pools), and only fp8 tiers on fp8."""
    from kernel.bench.micro import FP8_SHAPES, SHAPES
    from kernel.ops import FP8_TIERS, pick_tier
    for shapes, fp8 in ((SHAPES, False), (FP8_SHAPES, True)):
        for S, T, H, tiers in shapes:
            assert pick_tier(H, T, 1, kv_fp8=fp8) in tiers, (S, T, H, fp8)
            assert not fp8 or set(tiers) <= set(FP8_TIERS), (S, T, H)


def test_notes_quote_the_committed_model():
    """kernel/NOTES.md's sm_120 table and its centre sentence are the model file's numbers."""
    doc = json.loads((DATA / "sm120-model-from-h200-20261201T2000.json").read_text())
    notes = re.sub(r"\s+", " ", (DATA.parent.parent / "kernel" / "NOTES.md").read_text())
    for line in m.notes_lines(doc):
        assert line in notes, line
    c = next(r for r in doc["rows"] if (r["kv_dtype"], r["S"], r["T"], r["tier"], r["clock"])
             == ("bfloat16", 185000, 8, 8, "boost"))
    assert (f"it takes {c['sm120_estimate_us']:.1f} us, {c['sm120_estimate_us'] / c['sm120_floor_us']:.1f}x its "
            f"{c['sm120_floor_us']:.1f} us floor, fully overlapped {c['sm120_overlapped_us']:.1f} "
            f"({c['sm120_overlapped_us'] / c['sm120_floor_us']:.2f}x)") in notes
    assert f"rows64d {c['sm120_clk_per_tile']:,.0f} clocks per 64-row tile" in notes


def test_a_deleted_tiers_rows_are_left_out_and_the_rest_is_the_committed_model():
    """micro-h200-20261202T1531.json timed tier 10, deleted since: the model skips its rows and
    gives every other row as the GPU run wrote it (same micro file, same read ceiling), but for the
    fp8 design D copies, whose in-flight tiles changed with their code on 2026-12-03."""
    doc = json.loads((DATA / "sm120-model-from-h200-20261202T1531.json").read_text())
    micro = json.loads((DATA / doc["inputs"]["micro"]).read_text())
    assert any(r["tier"] == 10 for r in micro["rows"])
    # (sm_120's capped MMA efficiency came later: that file's e is below 1 everywhere)
    rows = [{k: v for k, v in r.items() if k != "sm120_mma_efficiency"} for r in m.model(micro, doc["inputs"]["read_GBps"])]
    assert {r["tier"] for r in rows} == {r["tier"] for r in doc["rows"]} - {10}
    moved = lambda r: r["kv_dtype"] == "fp8_e4m3" and r["tier"] in (6, 8)   # noqa: E731
    assert [r for r in rows if not moved(r)] == [r for r in doc["rows"] if r["tier"] != 10 and not moved(r)]


def test_the_read_ceiling_is_taken_over_the_measured_gpus_own_spec():
    # an H100's measured read ceiling over the H200's 4,800 GB/s would carry 0.64 of the spec to
    # sm_120 where the H100 sustains 0.92 of its own 3,350 (the first H100 model file, 2026-12-05)
    micro = json.loads((DATA / "rungs" / "micro-h100-20261205T1213.json").read_text())
    doc = m.document(micro, None, "micro-h100-20261205T1213.json", None)
    assert doc["assumptions"]["spec_GBps"] == 3350.0
    assert doc["assumptions"]["dram_fraction"] == pytest.approx(micro["ceilings"]["read_GBps"] / 3350.0)
    assert doc["assumptions"]["dram_fraction"] > 0.85
    with pytest.raises(ValueError, match="gpu: 'NVIDIA A100-SXM4-80GB'"):
        m.document(dict(micro, gpu="NVIDIA A100-SXM4-80GB"), None, "x.json", None)
    # nor another GPU's read ceiling: the bench beside an H100 micro file must be the H100's
    bench = json.loads((DATA / "bench-h200-20261205T0244.json").read_text())
    with pytest.raises(ValueError, match="bench: b.json was measured on 'NVIDIA H200'"):
        m.document(micro, bench, "m.json", "b.json")
