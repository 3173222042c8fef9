"""notebooks.data on the tier, microbenchmark, sm_120-estimate and sglang-backend JSON: on
fixtures, and on the recorded H200 files in reports/data/ where the brief's numbers come from."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from nb_fixtures import bench_doc

from notebooks import data

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "reports" / "data"


def _frame(doc, **kw):
    return data.bench_frame({**doc, "_path": "b.json"}, **kw)


def test_bench_frame_leaves_our_variants_out_unless_asked():
    doc = bench_doc("2026-12-01T00:00:00Z")
    df = _frame(doc)
    assert not set(df["impl"]) & {data.ROWS64, data.L2FLUSHED}
    both = _frame(doc, variants=True)
    assert {data.ROWS64, data.L2FLUSHED} <= set(both["impl"])
    # medians and ratios of ours use the default kernel alone, on the bf16 pool (the fixture
    # also has an fp8 row of ours at T = 1: a different pool, never in these series)
    t1 = data.select(df, impl=data.OURS, T=1)["time_us"]
    flash = [r["time_us"] for r in doc["rows"] if r["impl"] == "flash" and r["T"] == 1
             and r.get("kv_dtype", "bfloat16") == "bfloat16"]
    assert any(r.get("kv_dtype") == "fp8_e4m3" and r["T"] == 1 for r in doc["rows"])
    assert t1.tolist() == flash
    sp = data.speedups(data.select(df, sweep="T")).set_index("T")
    assert sp.loc[1, "ours_us"] == pytest.approx(flash[0])


def test_tier_rows_match_the_kernel_and_the_recorded_files():
    src = (ROOT / "kernel" / "ops.py").read_text()
    m = re.search(r"^TIERS = (\{[^}]*\})", src, re.M)
    kernel_tiers = {t: r for t, r in data.TIER_ROWS.items() if t not in data.RETIRED_TIERS}
    assert m and eval(m.group(1)) == kernel_tiers   # noqa: S307 (a dict literal)
    for doc in data.load_all(DATA, "microbench"):
        for r in doc["rows"]:
            assert data.TIER_ROWS[r["tier"]] == r["rows_per_tile"], doc["_path"]
    for doc in data.load_all(DATA, "validation"):
        for t, v in (doc.get("by_tier") or {}).items():
            assert data.TIER_ROWS[int(t)] == v["rows_per_tile"], doc["_path"]


def test_recorded_t1_is_the_small_tier_and_its_gain_over_rows64():
    """The newest bench (bench-h100-20261207T2330.json, kernel source 604d81ee5f5d2a5c, the shipped code: a
    one-request launch's schedule in closed form, an H100): T = 1 ran at 8-row tiles, 81.4 us against 153.5 us
    with rows64 forced (82.8 against 155.7 in bench-h100-20261207T1749.json, 1de3bcbb, the kernel before; 83.1
    against 151.3 in bench-h100-20261207T1505.json, 8d737971 on the same H100 model; the H200's
    bench-h200-20261206T2051.json, an older kernel: 61.5 against 154.8; T = 1 streams the KV, and the H100 reads
    it at 3,128 GB/s against the H200's 4,313); T = 4 ran rows32d; the centre ran rows64d, 97.5 us (median of the
    sweeps that repeat it, bf16 rows only; 98.4 with 1de3bcbb, 100.2 with 8d737971, 98.8 on the H100 of
    bench-h100-20261207T0837.json with aa1ff7cc, 100.0 on that H200) against 165.5 us with rows64 forced."""
    bench = data.newest(DATA, "bench")
    tab = data.tier_frame(data.bench_frame(bench, variants=True))
    t1 = data.select(tab, T=1, H=8, S=185000)
    assert len(t1) == 1
    r = t1.iloc[0]
    assert (r["tier"], r["tile"]) == (1, "small (8-row tiles)")
    assert f"{r['ours_us']:.1f} vs {r['rows64_us']:.1f}" == "81.4 vs 153.5"
    assert data.centre_tier(tab) == 8
    t4 = data.select(tab, T=4, H=8, S=185000).iloc[0]
    assert (t4["tier"], t4["tile"]) == (6, "rows32d (32-row tiles)")
    c = data.select(tab, T=8, H=8, S=185000, batch=1, layout="scattered", page_size=1).iloc[0]
    assert f"{c['ours_us']:.1f} vs {c['rows64_us']:.1f}" == "97.5 vs 165.5"
    flash_t1 = data.select(data.bench_frame(bench), impl=data.OURS, T=1)
    assert [round(t, 1) for t in flash_t1["time_us"]] == [81.4]
    prev = data.tier_frame(data.bench_frame(data.load_file(DATA / "bench-h100-20261207T1749.json"), variants=True))
    p1 = data.select(prev, T=1, H=8, S=185000).iloc[0]
    pc = data.select(prev, T=8, H=8, S=185000, batch=1, layout="scattered", page_size=1).iloc[0]
    assert (round(p1["ours_us"], 1), round(pc["ours_us"], 1)) == (82.8, 98.4)
    before = data.tier_frame(data.bench_frame(data.load_file(DATA / "bench-h200-20261206T2051.json"), variants=True))
    b1 = data.select(before, T=1, H=8, S=185000).iloc[0]
    assert f"{b1['ours_us']:.1f} vs {b1['rows64_us']:.1f}" == "61.5 vs 154.8"


def test_recorded_backend_and_estimate_headlines():
    s = data.backend_summary(data.newest(DATA, "sglang-backend"))
    assert (s["n_pass"], s["n_cases"], s["memcheck_clean"]) == (11, 11, True)
    model = data.newest(DATA, "sm120_model")
    est = data.sm120_frame(model)
    e = data.estimate_at(est, 8)
    assert e is not None and e["sm120_overlapped_us"] < e["sm120_estimate_us"]
    assert e["sm120_floor_us"] < e["sm120_overlapped_us"] and e["bound"] == "memory"
    assert "not a measurement" in model["model"]
    assert bool(est.set_index("tier").loc[8].query("S == 185000 and T == 8")["lowest_estimate"].iloc[0])


def test_micro_frame_keeps_stage_gaps_as_gaps():
    doc = {"_path": "m.json", "rows": [
        {"S": 10, "T": 1, "H": 8, "tier": 1, "rows_per_tile": 8, "tiles_per_cta": 1,
         "stage": "full", "time_us": 5.0, "merge_us": 1.0},
        {"S": 10, "T": 1, "H": 8, "tier": 0, "rows_per_tile": 64, "tiles_per_cta": 1,
         "stage": "full", "time_us": 9.0, "merge_us": 1.0}]}
    mf = data.micro_frame(doc).set_index("tier")
    assert mf["stream_frac"].isna().all() and mf["clk_per_tile"].isna().all()
    assert bool(mf.loc[1, "fastest"]) and not bool(mf.loc[0, "fastest"])


def test_backend_counts_memcheck_errors_from_the_summary():
    case = {"name": "memcheck", "kind": "sanitizer", "returncode": 0, "pass": True,
            "summary": "========= ERROR SUMMARY: 0 errors"}
    doc = {"_path": "s.json", "all_pass": True, "cases": [case]}
    assert data.backend_summary(doc)["memcheck_clean"]
    case["summary"] = "========= ERROR SUMMARY: 1 error"
    assert not data.backend_summary(doc)["memcheck_clean"]
    case["summary"] = None
    assert not data.backend_summary(doc)["memcheck_clean"]


def test_recorded_fixed_cost_and_phases():
    """The fixed-cost and trace files of 2026-12-05 02:39 (kernel source e67aec8f9a92c7d0, the bf16
    small tier's machine code as at 03:57): T = 1 on the bf16 pool costs 12.2 us beyond its bytes
    (8.4 without the merge; 12.6 and 8.8 at 2026-12-04 19:44, 11.8 and 8.6 at 19:27 with the same
    machine code: the fit's intercept moves by that much between runs); at T = 1 the last store lands
    1.6 us after the median one (1.2 at 19:44, 1.7 at 19:21), the blocks dispatched second on an SM
    loop 0.9 us longer (0.6, 0.7), and the merge ends 3.5 us after the last store (3.4, 3.5)."""
    ff = data.fixed_cost_frame(data.load_file(DATA / "fixed-cost-h200-20261205T0239.json"))
    t1 = data.select(ff, pool=data.BF16_KV, T=1)
    assert [round(v, 1) for v in t1["intercept_us"]] == [12.2, 8.4]
    assert list(t1["part"]) == ["whole call", "without the merge"]
    tf = data.trace_frame(data.load_file(DATA / "trace-h200-20261205T0239.json"))
    r = data.select(tf, pool=data.BF16_KV, T=1, S=185000).iloc[0]
    assert (round(r["store_tail_us"], 1), round(r["merge_after_us"], 1)) == (1.6, 3.5)
    assert round(r["second_cta_us"], 1) == 0.9 and r["launch_spread_us"] < 0.5
    assert r["tile"] == "small (8-row tiles)"


def test_phase_2s_trace_is_the_shipped_machine_code():
    """The newest trace (phase 2's table): 604d81ee (2d26e37, the shipped code: a one-request launch's schedule in
    closed form) on the H100 of the bench's files. Its plan is 0.9 us at the centre on both pools and 1.0-1.1 at
    T = 1, where 1de3bcbb's (trace-h100-20261207T1755.json, the kernel before) took 2.2-2.5; at T = 4 rows32d
    keeps the general plan, 2.0 us in both. At T = 1 the last store lands 5.0 us after the median one (4.8 with
    1de3bcbb, 4.3 with 8d737971 on another H100, trace-h100-20261207T1504.json; 1.2 on the H200 of
    trace-h200-20261207T0539.json, an older kernel), the merge ends 2.9 us after it; at the centre (rows64d,
    T = 8) the prologue is 1.4 us on bf16 and 3.0 on fp8 (1de3bcbb: 1.3 and 2.4; the shorter plan no longer
    covers as much of the wait for Q, loaded before it; 8d737971: 1.3 and 2.3), where aa1ff7cc (Q through the
    ring before the plan) took 1.6 and 4.3 (trace-h100-20261207T0841.json), the kernel before it 3.8 and 5.2
    (that H200), 3.8 and 5.4 (trace-h100-20261207T0000.json) and 5e66d98f 3.7 and 5.3 (another H100,
    trace-h100-20261206T1911.json): Q's delivery was the bf16 prologue, and fp8's the slot ids' chained loads and
    its six tiles ahead."""
    doc = data.newest(DATA, "trace")
    assert doc["_path"].endswith("trace-h100-20261207T2330.json") and doc["kernel_source"] == "604d81ee5f5d2a5c"
    assert doc["gpu"] == "NVIDIA H100 80GB HBM3"
    before = data.load_file(DATA / "trace-h100-20261207T1755.json")
    plan = lambda d: {(row["kv_dtype"], row["T"]): round(row["plan_us"], 1)
                      for row in d["rows"] if row["S"] == 185000}
    assert plan(doc) == {("bfloat16", 1): 1.0, ("bfloat16", 4): 2.0, ("bfloat16", 8): 0.9,
                         ("fp8_e4m3", 1): 1.1, ("fp8_e4m3", 8): 0.9}
    assert plan(before) == {("bfloat16", 1): 2.2, ("bfloat16", 4): 2.0, ("bfloat16", 8): 2.2,
                            ("fp8_e4m3", 1): 2.5, ("fp8_e4m3", 8): 2.2}
    tf = data.trace_frame(doc)
    r = data.select(tf, pool=data.BF16_KV, T=1, S=185000).iloc[0]
    assert (round(r["store_tail_us"], 1), round(r["merge_after_us"], 1)) == (5.0, 2.9)
    for d, want in ((doc, (1.4, 3.0)), (before, (1.3, 2.4)),
                    (data.load_file(DATA / "trace-h100-20261207T1504.json"), (1.3, 2.3)),
                    (data.load_file(DATA / "trace-h100-20261207T0841.json"), (1.6, 4.3)),
                    (data.load_file(DATA / "trace-h200-20261207T0539.json"), (3.8, 5.2)),
                    (data.load_file(DATA / "trace-h100-20261207T0000.json"), (3.8, 5.4)),
                    (data.load_file(DATA / "trace-h100-20261206T1911.json"), (3.7, 5.3))):
        pro = {row["kv_dtype"]: row["prologue_us"] for row in d["rows"] if (row["S"], row["T"]) == (185000, 8)}
        assert (round(pro["bfloat16"], 1), round(pro["fp8_e4m3"], 1)) == want


def test_the_rows64d_tiles_own_math_apart_from_what_a_call_costs_once():
    """fixed-cost-h100-20261206T1607.json (5e66d98f678f759f, one H100 at 1,980 MHz) fits each time against
    the busiest CTA's tiles over S = 65k..262k: bf16 rows64d's math alone at T = 8 costs 1,689 clocks a tile
    more and 12.6 us a call once (plan, prologue, epilogue, launch), which micro's parts figure (the call over
    its 88 tiles: 1,936 on T1424's machine) spreads over the tiles; on the fp8 pool 1,888 clocks a tile at
    T = 8 and 16 alike, and the whole fp8 T = 16 call 2,077 clocks a tile beside 18.4 us a call. The newest
    (fixed-cost-h100-20261207T0000.json, the shipped c3de57bc on another H100): bf16's unchanged code 1,726
    clocks a tile, so the tile's own math sits at 1,700 +- 2 % by machine; fp8 T = 16's whole call 2,038
    clocks a tile (q_fast: its loads overlap better) beside 18.6 us once. The newest
    (fixed-cost-h200-20261207T0539.json, c3de57bc on the H200 of the bench's files): 1,709 clocks a tile,
    inside that band and 9 over issue 25's 1,700; fp8 T = 16's whole call 2,094 beside 18.9 us once. The
    newest (fixed-cost-h100-20261207T0841.json, aa1ff7cc: Q through the ring before the plan, an H100): bf16's
    math alone 1,744 clocks a tile beside 8.1 us once (the kernel before: 10.4-12.6 us once on H100s); fp8
    T = 16's whole call 2,016 clocks a tile beside 18.0 us once. The newest (fixed-cost-h100-20261207T1504.json,
    8d737971: the prologue's ids and item in registers, fp8 rows64d 4 tiles ahead, an H100): bf16's math alone
    1,752 clocks a tile beside 7.7 us once; fp8 T = 16's whole call 2,039 clocks a tile beside 15.6 us once,
    2.4 us less than aa1ff7cc's: its prologue, 2.0 us shorter as traced. The newest
    (fixed-cost-h100-20261207T1755.json, the shipped 1de3bcbb, whose machine code at these shapes is
    8d737971's, another H100): 1,729 clocks a tile beside 8.0 us once; fp8 T = 16's whole call 2,029 beside
    16.7 us once: the same code's tile within 23 clocks and its once-cost within 1.1 us across two machines. The
    newest (fixed-cost-h100-20261207T2330.json, 604d81ee: the schedule in closed form, 1.3 us shorter as traced,
    the same H100 as 1de3bcbb's): 1,700 clocks a tile beside 8.9 us once; fp8 T = 16's whole call 2,048 beside
    16.4 us once. The fit moves clocks between its slope and its intercept by more than the plan's 1.3 us (about
    30 clocks of the centre's 88 tiles), so it cannot show that change; overlap's paired runs do
    (rungs/overlap*-h100-20261207T2324-plan-general.json)."""
    ff = data.fixed_cost_frame(data.load_file(DATA / "fixed-cost-h100-20261206T1607.json"))
    assert ff["marginal_clk_per_tile"].notna().all()
    alone = data.select(ff, part="math alone, without the merge").set_index(["pool", "T"])
    assert round(alone.loc[(data.BF16_KV, 8), "marginal_clk_per_tile"]) == 1689
    assert round(alone.loc[(data.BF16_KV, 8), "tile_intercept_us"], 1) == 12.6
    assert [round(alone.loc[(data.FP8_KV, t), "marginal_clk_per_tile"]) for t in (8, 16)] == [1888, 1888]
    whole = data.select(ff, part="whole call", pool=data.FP8_KV, T=16).iloc[0]
    assert (round(whole["marginal_clk_per_tile"]), round(whole["tile_intercept_us"], 1)) == (2077, 18.4)
    # micro's per-tile figure is this line at 88 tiles plus the call's once-cost spread over them
    micro = data.load_file(DATA / "micro-h100-20261206T1424.json")
    centre = [r for r in micro["rows"] if (r["S"], r["T"], r["tier"], r.get("part")) == (185000, 8, 8, "math")][0]
    assert round(centre["clk_per_tile"]) == 1936 and centre["tiles_per_cta"] == 88
    for name, bf16_tile, fp8_whole in (("fixed-cost-h100-20261207T0000.json", 1726, (2038, 18.6)),
                                       ("fixed-cost-h200-20261207T0539.json", 1709, (2094, 18.9)),
                                       ("fixed-cost-h100-20261207T0841.json", 1744, (2016, 18.0)),
                                       ("fixed-cost-h100-20261207T1504.json", 1752, (2039, 15.6)),
                                       ("fixed-cost-h100-20261207T1755.json", 1729, (2029, 16.7)),
                                       ("fixed-cost-h100-20261207T2330.json", 1700, (2048, 16.4))):
        nf = data.fixed_cost_frame(data.load_file(DATA / name))
        a = data.select(nf, part="math alone, without the merge", pool=data.BF16_KV, T=8).iloc[0]
        w = data.select(nf, part="whole call", pool=data.FP8_KV, T=16).iloc[0]
        assert round(a["marginal_clk_per_tile"]) == bf16_tile
        assert (round(w["marginal_clk_per_tile"]), round(w["tile_intercept_us"], 1)) == fp8_whole
    new = data.newest(DATA, "fixed_cost")
    assert new["_path"].endswith("fixed-cost-h100-20261207T2330.json") and new["kernel_source"] == "604d81ee5f5d2a5c"
    once = data.select(data.fixed_cost_frame(new), part="math alone, without the merge", pool=data.BF16_KV, T=8)
    assert once.iloc[0]["tile_intercept_us"] < 10.4


def test_fp8_large_tiers_pairs_both_tiers_and_the_model_at_ddtree_rows():
    """micro-h200-20261203T1003.json times the fp8 pool at DDTree's row counts at both tiers
    pick_tier chooses between above 32 rows; its model file ranks them. The frame pads, pairs and
    names them as the files say (D = 17: small8 in both; D = 65: rows64d's copy in both), and leaves
    out the shapes at 32 rows or fewer and those timed at one of the two tiers only."""
    micro = data.load_file(DATA / "micro-h200-20261203T1003.json")
    model = data.load_file(DATA / "sm120-model-from-h200-20261203T1003.json")
    race = data.fp8_large_tiers(micro, model).set_index("T")
    assert sorted(race.index) == [8, 16, 17, 32, 33, 65]
    d17, d65 = race.loc[17], race.loc[65]
    assert (d17["query_rows"], d17["rows_small8"], d17["rows_copy"]) == (136, 160, 192)
    assert f"{d17['h200_small8_us']:.1f} {d17['h200_copy_us']:.1f}" == "368.6 376.3"
    assert d17["h200_faster"] == d17["model_lower"] == data.tier_name(4)
    assert f"{d65['h200_small8_us']:.1f} {d65['h200_copy_us']:.1f}" == "1343.2 1115.9"
    assert d65["h200_faster"] == d65["model_lower"] == data.tier_name(8)
    assert data.fp8_large_tiers(micro).set_index("T").loc[65, "model_lower"] == "n/a"   # no model file
    bf16_only = {"_path": "m.json", "rows": [r for r in micro["rows"] if r.get("kv_dtype") != "fp8_e4m3"]}
    assert data.fp8_large_tiers(bf16_only, model).empty


def test_budget_steps_pair_the_shapes_either_side_of_a_tile_edge():
    """micro-h200-20261205T0244.json times the fp8 pool at D = 16, 17, 32 and 33: the two pairs whose
    second shape opens a 64-row tile at 8 heads (2 -> 3 and 4 -> 5 tiles), each at its fastest tier;
    T = 1 -> 2 (one tile either way) is no budget's step, and a file without such pairs gives nothing."""
    micro = data.load_file(DATA / "micro-h200-20261205T0244.json")
    steps = data.budget_steps(micro)
    assert [(r.kv_dtype, r.T, r.T_next, r.tiles, r.tiles_next) for r in steps.itertuples()] == [
        ("fp8_e4m3", 16, 17, 2, 3), ("fp8_e4m3", 32, 33, 4, 5)]
    fastest = data.micro_frame(micro, data.FP8_KV).query("fastest").set_index("T")["full_us"]
    assert list(steps["us"]) == [fastest[16], fastest[32]] and list(steps["us_next"]) == [fastest[17], fastest[33]]
    assert (steps["ratio"] > 1).all()
    no_pairs = {"_path": "m.json", "rows": [r for r in micro["rows"] if r["T"] not in (17, 33)]}
    assert data.budget_steps(no_pairs).empty
