"""kernel/bench/overlap.py on the CPU: its table from the committed overlap rung files, and its
argument errors before any GPU is looked for."""
import functools
import json
import statistics
from pathlib import Path

from kernel.bench import overlap

RUNGS = Path(__file__).resolve().parents[1] / "reports" / "data" / "rungs"


def _line(lines, T, tier, build, placement):
    hits = [ln.split() for ln in lines[1:] if ln.split()[:4] == [str(T), str(tier), build, placement]]
    assert len(hits) == 1, (T, tier, build, placement)
    return hits[0]


def test_exposed_clocks_are_full_minus_the_longer_part_per_tile():
    doc = json.loads((RUNGS / "overlap-h200-20261202T1705.json").read_text())
    lines = overlap.table(doc)
    row = {r["mode"]: r for r in doc["rows"] if (r["T"], r["tier"], r["build"], r["placement"]) == (8, 9, "production", "dram")}
    full, nl, nm = (row[m]["time_us"] for m in ("full", "no_loads", "no_math"))
    want = (full - max(nl, nm)) * doc["clock_assumed_mhz"] / row["full"]["tiles_per_cta"]
    got = _line(lines, 8, 9, "production", "dram")
    assert float(got[4]) == round(full, 1) and int(got[-1]) == round(want)
    # the rung's finding, read back from its file: L2-resident rows leave the exposed clocks within 5 %
    l2 = _line(lines, 8, 9, "production", "l2")
    assert abs(int(l2[-1]) / int(got[-1]) - 1) < 0.05


def test_lean_loader_file_halves_tier_9s_exposed_clocks():
    doc = json.loads((RUNGS / "overlap-h200-20261202T1731.json").read_text())
    lines = overlap.table(doc)
    before = json.loads((RUNGS / "overlap-h200-20261202T1705.json").read_text())
    old = int(_line(overlap.table(before), 8, 9, "production", "dram")[-1])
    new = int(_line(lines, 8, 9, "production", "dram")[-1])
    assert new < 0.6 * old


def test_bad_arguments_are_named_before_any_gpu(capsys):
    assert overlap.main(["--once", "99"]) == 2
    assert "--once: tier 99" in capsys.readouterr().err
    assert overlap.main([]) == 2
    assert "--out" in capsys.readouterr().err


def test_every_variant_sets_a_macro_the_kernel_reads_at_tiers_the_tool_times():
    src = "".join(f.read_text() for f in (RUNGS.parents[2] / "kernel" / "csrc").glob("*.cuh"))
    timed = {t for shapes in overlap.SHAPES.values() for _, ts in shapes for t in ts}
    for name, (defines, tiers) in overlap.VARIANTS.items():
        for d in defines:
            macro = d.split("=")[0]
            assert f"#ifdef {macro}" in src or f"#ifndef {macro}" in src, (name, d)
        assert tiers and set(tiers) <= timed, (name, tiers)


def test_an_unknown_variant_is_named_before_any_gpu(capsys):
    assert overlap.main(["--out", "x", "--variants", "copy_in_qk,nope"]) == 2
    err = capsys.readouterr().err
    assert "--variants: ['nope']" in err and "copy_in_qk" in err


def _time(doc, T, build, mode, tier=None):
    return next(r["time_us"] for r in doc["rows"]
                if (r["T"], r["build"], r["mode"], r["placement"]) == (T, build, mode, "dram")
                and tier in (None, r["tier"]))


def _full(doc, T, build):
    return _time(doc, T, build, "full")


def test_fp8_unrolled_production_beat_its_rolled_before_in_every_run():
    # the confirm behind UNROLL_FP8 = 3 (kernel/NOTES.md, 2026-12-05 thirteenth session): three runs on
    # one H100, bit-equal outputs, a tie at T = 8 and at least 2.5 % faster at T = 32 in each run
    runs = [json.loads(p.read_text()) for p in sorted(RUNGS.glob("overlap-fp8-h100-20261205T1207-fp8-unrolled-run*.json"))]
    assert len(runs) == 3
    for doc in runs:
        assert all(c["equal"] for c in doc["same_output"] if c["build"] == "fp8_rolled")
        assert _full(doc, 32, "production") < 0.975 * _full(doc, 32, "fp8_rolled")
        assert abs(_full(doc, 8, "production") / _full(doc, 8, "fp8_rolled") - 1) < 0.01


def test_t_times_the_given_draft_lengths_at_the_given_tiers():
    assert overlap.shapes_of("auto") == overlap.SHAPES["auto"]
    assert overlap.shapes_of("auto", [8, 17, 33]) == ((8, (8,)), (17, (8,)), (33, (8,)))
    assert overlap.shapes_of("fp8_e4m3", [17], [8, 4]) == ((17, (8, 4)),)


def test_a_bad_t_is_named_before_any_gpu(capsys):
    assert overlap.main(["--out", "x", "--t", "8,x"]) == 2
    assert "--t: expected comma-separated integers, got '8,x'" in capsys.readouterr().err
    assert overlap.main(["--out", "x", "--t", "0,8"]) == 2
    assert "--t: 0 draft tokens" in capsys.readouterr().err


def test_tail_ctas_with_half_1_idle_gained_nothing_where_tails_exist():
    # the rung behind overlap's deleted tail builds (kernel/NOTES.md, 2026-12-05 fourteenth session):
    # three H100 runs at commit 98f7366, where production ran half 1 idle in tail CTAs; outputs equal
    # to the build that computes the padding rows (tail_off), and no faster than it at T = 17 or 33
    runs = [json.loads(p.read_text()) for p in sorted(RUNGS.glob("overlap-h100-20261205T14*-tail-run*.json"))]
    assert len(runs) == 3
    for doc in runs:
        assert doc["commit"] == "98f7366" and all(c["equal"] for c in doc["same_output"])
        for T in (17, 33):
            assert _full(doc, T, "production") > 0.99 * _full(doc, T, "tail_off")


def test_a_bad_rounds_is_named_before_any_gpu(capsys):
    assert overlap.main(["--out", "x", "--rounds", "0"]) == 2
    assert "--rounds: 0" in capsys.readouterr().err


def test_builds_whose_splits_differ_are_held_to_a_tolerance_and_the_rest_to_the_bit():
    row = {"equal": False, "rel_err": 2e-3, "nan": 0, "nan_production": 0}
    assert "tail_off" in overlap.SPLITS_DIFFER and "unroll2" not in overlap.SPLITS_DIFFER
    assert overlap.same_enough("tail_off", row)
    assert not overlap.same_enough("unroll2", row)                          # bit for bit, or not timed
    assert not overlap.same_enough("tail_off", dict(row, rel_err=2e-2))     # past REL_TOL
    assert not overlap.same_enough("tail_off", dict(row, nan=3))            # unwritten outputs
    assert overlap.same_enough("unroll2", dict(row, equal=True))


def _runs(pattern):
    return [json.loads(p.read_text()) for p in sorted(RUNGS.glob(pattern))]


def test_tail_kernels_beat_the_production_before_at_ddtrees_tails_and_equal_it_elsewhere():
    # the rung behind rows64d's tail kernels (kernel/NOTES.md, 2026-12-05 fifteenth session), one
    # H100: three runs with overlap's alternating rounds (two with the tail code in every launch,
    # cadaf17, whose tail kernels' machine code is the final one's; then the final launcher, 0b08aaf),
    # bf16, against tail_off, the production before
    runs = (_runs("overlap-h100-20261205T1631-tail-splits-rounds-run*.json")
            + _runs("overlap-h100-20261205T1640-tail-kernels.json"))
    assert len(runs) == 3
    for doc in runs:
        # D = 17, 33, 65: the tail row tile's own splits; D = 17 loses a third of a row tile's work
        assert _full(doc, 17, "production") < 0.94 * _full(doc, 17, "tail_off")
        assert _full(doc, 33, "production") < 0.985 * _full(doc, 33, "tail_off")
        assert _full(doc, 65, "production") < 0.96 * _full(doc, 65, "tail_off")
        # splits differ by design at the tails, so outputs agree to a tolerance there
        assert all(overlap.same_enough(c["build"], c) for c in doc["same_output"])
    # the final launcher takes the tail kernels only where the shape has a tail: elsewhere production
    # runs the code of before (machine code identical), so it times the same to run-to-run noise
    final = runs[-1]
    for T in (8, 16, 32):
        assert abs(_full(final, T, "production") / _full(final, T, "tail_off") - 1) < 0.01


def test_fp8_tail_kernels_keep_equal_splits_where_longer_ones_lost():
    # fp8's tail CTAs cost ~0.85 of a full one: the tail's 4/3-long splits (production in the two
    # files) lost at D = 65, while half 1 idle on equal splits (tail_equal, fp8's production since)
    # was never slower than the production before (tail_off) at a tail
    runs = (_runs("overlap-fp8-h100-20261205T1631-tail-splits-rounds-run1.json")
            + _runs("overlap-fp8-h100-20261205T1641-tail-kernels.json"))
    assert len(runs) == 2
    for doc in runs:
        for T in (17, 33):
            assert _full(doc, T, "tail_equal") < _full(doc, T, "tail_off")
    assert _full(runs[1], 65, "production") > 1.02 * _full(runs[1], 65, "tail_off")
    assert _full(runs[1], 65, "tail_equal") < 0.98 * _full(runs[1], 65, "tail_off")


def test_fp8_tail_splits_at_seven_eighths_beat_equal_ones_where_the_schedule_said():
    # the rung behind TAIL_E_FP8 = 7 (kernel/NOTES.md, 2026-12-06 twentieth session), H200, five rounds:
    # 7 / 8 gives the busiest full CTA fewer tiles at D = 17 and 33 on 132 SMs, none at 65
    doc = json.loads((RUNGS / "overlap-fp8-h200-20261206T0308-tail-e7.json").read_text())
    for T in (17, 33):
        assert _full(doc, T, "tail_e7_fp8") < 0.98 * _full(doc, T, "production")
    assert abs(_full(doc, 65, "tail_e7_fp8") / _full(doc, 65, "production") - 1) < 0.01
    # its splits end elsewhere at the tails, so its merge rounds differently there
    assert all(c["equal"] or (c["nan"] == 0 and c["rel_err"] <= overlap.REL_TOL) for c in doc["same_output"])
    # the same pair as production (7 / 8) against tail_e8_fp8 on an H100 (2026-12-06 twenty-second
    # session, five rounds, with the merge too): the same gains at 17 and 33, a tie at 65
    h100 = json.loads((RUNGS / "overlap-fp8-h100-20261206T0630-tail-e7-confirm.json").read_text())
    for T in (17, 33):
        assert _full(h100, T, "production") < 0.98 * _full(h100, T, "tail_e8_fp8")
    assert abs(_full(h100, 65, "production") / _full(h100, 65, "tail_e8_fp8") - 1) < 0.01
    assert all(overlap.same_enough(c["build"], c) for c in h100["same_output"])


def _rounds(doc, T, tier, build, mode):
    return next(r["rounds_us"] for r in doc["rows"]
                if (r["T"], r["tier"], r["build"], r["mode"], r["placement"]) == (T, tier, build, mode, "dram"))


def test_the_merge_launched_after_the_loops_beat_its_launch_at_the_grids_exit():
    # the rung behind pdl_trigger's production (kernel/NOTES.md, 2026-12-05 sixteenth session): one
    # H100, five rounds, the loops' machine code identical. Round by round, the call with its merge
    # was faster with the trigger at T = 1 on both pools, and the call without it did not move
    runs = [json.loads(p.read_text()) for p in sorted(RUNGS.glob("overlap*-h100-20261205T1830-pdl-trigger.json"))]
    assert len(runs) == 2
    for doc in runs:
        assert all(c["equal"] for c in doc["same_output"] if c["build"] == "pdl_trigger")
        before, after = _rounds(doc, 1, 1, "production", "merged"), _rounds(doc, 1, 1, "pdl_trigger", "merged")
        assert all(b - a > 0.4 for a, b in zip(after, before)), (before, after)
        before, after = _rounds(doc, 1, 1, "production", "full"), _rounds(doc, 1, 1, "pdl_trigger", "full")
        assert abs(statistics.median(after) / statistics.median(before) - 1) < 0.005


def test_each_build_whose_splits_differ_names_the_schedule_its_tiles_are_counted_at():
    # clk_per_tile divides by the tiles of the build's own schedule, not production's: its tail
    # weight or its wave fit
    assert set(overlap.TAIL_E_OF_BUILD) | set(overlap.WAVE_FIT_OF_BUILD) == overlap.SPLITS_DIFFER
    from kernel.bench.sm120_estimate import tail_e_of
    assert tail_e_of(8, "fp8_e4m3", overlap.TAIL_E_OF_BUILD["tail_e8_fp8"]) == 8
    assert tail_e_of(8, "fp8_e4m3") == 7                      # production's
    assert tail_e_of(8, "bfloat16", overlap.TAIL_E_OF_BUILD["tail_equal"]) == 8
    assert overlap.VARIANTS["tail_e8_fp8"][0] == ("MLAV_TAIL_E_FP8=8",)


def test_half1_taking_part_of_bf16s_copy_block_lost_at_every_shape():
    # the h1_pieces rung (kernel/NOTES.md, 2026-12-06 twenty-second session), one H100, three rounds,
    # bit-equal: 2 or 3 of each thread's nine pieces in half 1, rolled or unrolled, never faster
    doc = json.loads((RUNGS / "overlap-h100-20261206T0605-h1-pieces.json").read_text())
    assert all(c["equal"] for c in doc["same_output"]) and not doc["not_timed_differs"]
    for T in (8, 32):
        base = _full(doc, T, "production")
        for build in ("h1_pieces2", "h1_pieces3", "unroll2_h1p3", "unroll2_h1p4"):
            assert _full(doc, T, build) > 1.02 * base, (T, build)
    # unrolled, the math alone is still 8-9 % shorter at T = 32, and the full call still longer
    assert _time(doc, 32, "unroll2", "no_loads") < 0.93 * _time(doc, 32, "production", "no_loads")
    assert _full(doc, 32, "unroll2") > _full(doc, 32, "production")


def test_the_item_order_that_shortened_half_0_tied_in_the_full_call():
    # five rounds on one H100, bit-equal: within 1 % of production at T = 8 and 32 (the rounds swing
    # ~1.5 us at T = 8), so the item layout stays
    doc = json.loads((RUNGS / "overlap-h100-20261206T0627-item-order.json").read_text())
    assert all(c["equal"] for c in doc["same_output"])
    for T in (8, 32):
        assert abs(_full(doc, T, "item_order") / _full(doc, T, "production") - 1) < 0.01


def test_bulk_copies_of_fp8_rows_were_slower_than_the_cp_async_they_replaced():
    # the bulk8 rung (kernel/NOTES.md, 2026-12-06 twenty-third session), one H100, three rounds,
    # bit-equal: one cp.async.bulk a 576-byte row lost the full call at every T by 8 % or more, its
    # stream alone tying from DRAM (T = 8, one row tile) and losing where row tiles share the KV range
    doc = json.loads((RUNGS / "overlap-fp8-h100-20261206T0746-bulk8.json").read_text())
    assert all(r["equal"] for r in doc["same_output"] if r["build"] == "bulk8")
    t = functools.partial(_time, doc)
    for T in (8, 16, 32):
        assert t(T, "bulk8", "full") > 1.08 * t(T, "production", "full")
        assert abs(t(T, "bulk8", "no_loads") / t(T, "production", "no_loads") - 1) < 0.01
    assert abs(t(8, "bulk8", "no_math") / t(8, "production", "no_math") - 1) < 0.02
    for T in (16, 32):
        assert t(T, "bulk8", "no_math") > 1.15 * t(T, "production", "no_math")


def test_copies_without_global_reads_keep_most_of_their_cost():
    # zero_copies (kernel/NOTES.md, 2026-12-06 twenty-third session), one H100, three rounds: the loop's
    # copies with 0 source bytes still cost bf16 over a third of what the copies cost (T = 8; over
    # two thirds at T = 32) and fp8 nearly all of it
    for name, Ts, least in (("overlap-h100-20261206T0809-zero-copies.json", (8, 32), 0.4),
                            ("overlap-fp8-h100-20261206T0809-zero-copies.json", (16, 32), 0.8)):
        doc = json.loads((RUNGS / name).read_text())
        for T in Ts:
            full, zero, alone = (_time(doc, T, b, m) for b, m in
                                 (("production", "full"), ("zero_copies", "full"), ("production", "no_loads")))
            assert alone < zero <= full and (zero - alone) / (full - alone) > least, (name, T)


def test_copy_addresses_formed_by_the_slot_id_warp_lost_wherever_it_formed_them():
    # addr_ids (kernel/NOTES.md, 2026-12-06 twenty-third session), one H100, three rounds, bit-equal:
    # converted right after top(j)'s barrier (T0838) or inside half 1's QK (T0848), slower on both pools
    for stamp, place in (("0838", "top"), ("0848", "in-qk")):
        for name, Ts in ((f"overlap-h100-20261206T{stamp}-addr-ids-{place}.json", (8, 32)),
                         (f"overlap-fp8-h100-20261206T{stamp}-addr-ids-{place}.json", (16, 32))):
            doc = json.loads((RUNGS / name).read_text())
            assert all(r["equal"] for r in doc["same_output"])
            for T in Ts:
                assert _full(doc, T, "addr_ids") > _full(doc, T, "production"), (name, T)
            assert _full(doc, 32, "addr_ids") > 1.025 * _full(doc, 32, "production"), name


def test_a_helper_warpgroup_for_the_copies_costs_the_math_more_than_the_copies_cost():
    # helper (kernel/NOTES.md, 2026-12-06 twenty-fourth session), one H100, three rounds a run, bit-equal
    # on bf16: a fourth warpgroup issued every copy, the math warps none, at the 240 registers setmaxnreg
    # leaves them. Its math alone lost 7 % or more, as much as production capped at 240 registers
    # (maxnreg240) lost, and its full call lost in both runs
    for name in ("overlap-h100-20261206T0957-helper.json", "overlap-h100-20261206T1003-helper-maxnreg240.json"):
        doc = json.loads((RUNGS / name).read_text())
        assert all(r["equal"] for r in doc["same_output"])
        t = functools.partial(_time, doc)
        for T, full, alone in ((8, 1.04, 1.07), (32, 1.1, 1.09)):
            assert t(T, "helper", "full") > full * t(T, "production", "full"), (name, T)
            assert t(T, "helper", "no_loads") > alone * t(T, "production", "no_loads"), (name, T)
        # nor did a warpgroup of its own hide the copies better where the math is longest
        assert t(32, "helper", "full") - t(32, "helper", "no_loads") > t(32, "production", "full") - t(32, "production", "no_loads")
    t = functools.partial(_time, json.loads((RUNGS / "overlap-h100-20261206T1003-helper-maxnreg240.json").read_text()))
    for T in (8, 32):
        assert abs(t(T, "helper", "no_loads") / t(T, "maxnreg240", "no_loads") - 1) < 0.02
    doc = json.loads((RUNGS / "overlap-fp8-h100-20261206T1004-maxnreg240.json").read_text())
    assert all(r["equal"] for r in doc["same_output"])
    t = functools.partial(_time, doc)
    for T in (16, 32):
        assert t(T, "maxnreg240", "no_loads") > 1.1 * t(T, "production", "no_loads")
        assert t(T, "maxnreg240", "full") > 1.15 * t(T, "production", "full")


def test_fp8_tiles_converted_once_into_f16_stages_made_the_math_slower():
    # stage16 (kernel/NOTES.md, 2026-12-06 twenty-fourth session), one H100, three rounds: fp8's math
    # alone read from f16 stages converted once a tile (only the math-alone kernel changed, so the
    # full calls are production's, bit-equal) lost 12 % with the conversion split between the halves
    # and over 20 % with half 1 converting alone, where bf16's loop alone is 8-9 % below fp8's
    doc = json.loads((RUNGS / "overlap-fp8-h100-20261206T1023-stage16.json").read_text())
    assert all(r["equal"] for r in doc["same_output"])
    bf16 = json.loads((RUNGS / "overlap-h100-20261206T1024-bf16-t16-t32.json").read_text())
    t = functools.partial(_time, doc)
    for T in (16, 32):
        alone = t(T, "production", "no_loads")
        assert t(T, "stage16_split_math", "no_loads") > 1.1 * alone
        assert t(T, "stage16_math", "no_loads") > 1.2 * alone
        assert _time(bf16, T, "production", "no_loads") < 0.93 * alone


def test_the_wave_fit_took_its_predicted_share_off_the_math():
    # the wave_fit rung (kernel/NOTES.md, 2026-12-06 twenty-fifth session), its first form on one H100,
    # three rounds: the tiles a CTA fall 1.1 % at T = 8 and 16, 3.0 % at T = 32 (132 items, not 130 or
    # 128), and the math alone follows; the full call is never slower, and 2 % faster or more at T = 32
    for name, shapes in (("overlap-h100-20261206T1225-wave-fit.json", (8, 32)),
                         ("overlap-fp8-h100-20261206T1225-wave-fit.json", (16, 32))):
        doc = json.loads((RUNGS / name).read_text())
        assert not doc["not_timed_differs"]
        for T in shapes:
            tiles = {r["build"]: r["tiles_per_cta"] for r in doc["rows"] if r["T"] == T and r["mode"] == "full"}
            assert tiles["wave_fit"] < tiles["production"]
            assert _full(doc, T, "wave_fit") < _full(doc, T, "production"), (name, T)
            math = _time(doc, T, "wave_fit", "no_loads") / _time(doc, T, "production", "no_loads")
            assert math < 1 - 0.5 * (1 - tiles["wave_fit"] / tiles["production"]), (name, T)
        assert _full(doc, 32, "wave_fit") < 0.98 * _full(doc, 32, "production"), name


def test_the_wave_fit_in_production_beat_the_old_schedule_on_one_machine():
    # the second form, promoted (kernel source 5e66d98f678f759f), against the old schedule as the
    # variant wave_safe (-DMLAV_WAVE_SAFE): one H100, three rounds; the rung's kill line held
    for name, shapes in (("overlap-h100-20261206T1430-wave-safe.json", (8, 32)),
                         ("overlap-fp8-h100-20261206T1430-wave-safe.json", (16, 32))):
        doc = json.loads((RUNGS / name).read_text())
        assert not doc["not_timed_differs"] and doc["kernel_source"] == "5e66d98f678f759f"
        for T in shapes:
            tiles = {r["build"]: r["tiles_per_cta"] for r in doc["rows"] if r["T"] == T and r["mode"] == "full"}
            assert tiles["production"] < tiles["wave_safe"]
            assert _full(doc, T, "production") < _full(doc, T, "wave_safe"), (name, T)
        assert _full(doc, 32, "production") < 0.98 * _full(doc, 32, "wave_safe"), name


def test_bf16_at_128_rows_misses_half_the_ceiling_with_its_copies_free():
    # issue 25's >= 50 % at T = 16 (and H = 16: the same 128 rows), on the final code: the bench's
    # FLOPs and the mma.sync ceiling of the same call as overlap's accounting (one H100). The math
    # alone (no KV load issued) plus the merge's share of the call is already past 50 %; at T = 32
    # and 64 the copies would have to cost a quarter of what they cost now, or less
    bench = json.loads((RUNGS / "bench-h100-20261206T1440-timed-out.json").read_text())
    doc = json.loads((RUNGS / "overlap-h100-20261206T1443-final-merged.json").read_text())
    assert bench["kernel_source"] == doc["kernel_source"] == "5e66d98f678f759f"
    ceiling = bench["ceilings"]["mma_TFLOPs"] * 1e12
    flops = {r["T"]: r["flops"] for r in bench["rows"]
             if r.get("impl") == "flash" and (r["S"], r["H"], r["kv_dtype"]) == (185000, 8, "bfloat16")}
    for T in (16, 32, 64):
        half = flops[T] / (0.5 * ceiling) * 1e6
        math, full = _time(doc, T, "production", "no_loads"), _full(doc, T, "production")
        merge = _time(doc, T, "production", "merged") - full
        if T == 16:
            assert math + merge > half, T
        else:
            assert 4 * (half - math - merge) < full - math, T


def test_q_early_shortened_the_math_alone_but_not_the_call():
    # rowsd's Q fragments issued inside the plan (-DMLAV_Q_EARLY), three runs on one H100 (three, five
    # and five rounds), bit-equal: with no KV load issued every shape is 0.9-1.7 us shorter (Q's ~74 KB a
    # CTA cross L2 -> SM under the plan's barriers), but the full call is slower at three of the four
    # shapes in every run, so the rung's kill line (0.5 us faster at T = 8 on both pools, slower
    # nowhere) fired. Its L1-prefetch form (-DMLAV_Q_PREFETCH, third run) shortened nothing
    slower = 0
    for stamp in ("20261206T1911-q-early", "20261206T1916-q-early-run2", "20261206T1944-q-prefetch"):
        for pool in ("", "fp8-"):
            doc = json.loads((RUNGS / f"overlap-{pool}h100-{stamp}.json").read_text())
            assert not doc["not_timed_differs"] and all(c["equal"] for c in doc["same_output"])
            for T in (8, 16):
                assert _time(doc, T, "q_early", "no_loads") < _time(doc, T, "production", "no_loads") - 0.8
                slower += _full(doc, T, "q_early") > _full(doc, T, "production")
    assert slower == 9
    pf = [json.loads((RUNGS / f"overlap-{pool}h100-20261206T1944-q-prefetch.json").read_text()) for pool in ("", "fp8-")]
    assert all(_time(d, T, "q_prefetch", "no_loads") > _time(d, T, "production", "no_loads") - 0.1 for d in pf for T in (8, 16))
    assert max(_full(d, T, "q_prefetch") - _full(d, T, "production") for d in pf for T in (8, 16)) > 0.5
    # the A/A run (production's machine code built twice, five rounds): medians within 0.1 us
    aa = json.loads((RUNGS / "overlap-fp8-h100-20261206T1916-a-a.json").read_text())
    for T in (8, 16):
        assert abs(_full(aa, T, "q_early") - _full(aa, T, "production")) <= 0.1


def test_q_fast_shortened_every_fp8_rowsd_call():
    # fp8's q scale without the CTA max where every |q| < 2^14 (-DMLAV_Q_FAST, production since, the form
    # before now overlap's q_cta_max): three runs on one H200, bit-equal, also with q x 2^14 (Q loaded again
    # and scaled the old way). Every rows64d / rows32d full call shorter in every run, by at least 0.5 us;
    # its math alone slower everywhere, so the gain is not the prologue's alone (it grows with T)
    runs = [json.loads((RUNGS / f"overlap-fp8-h200-{s}-q-fast-run{i}.json").read_text())
            for i, s in ((1, "20261206T2041"), (2, "20261206T2041"), (3, "20261206T2047"))]
    shapes = 0
    for doc in runs:
        assert doc["gpu"].startswith("NVIDIA H200") and not doc["not_timed_differs"]
        assert all(c["equal"] for c in doc["same_output"])
        assert any("q x 16384" in c["case"] for c in doc["same_output"])
        for T, tier in {(r["T"], r["tier"]) for r in doc["rows"]}:
            assert _time(doc, T, "q_fast", "full", tier) < _time(doc, T, "production", "full", tier) - 0.5
            assert _time(doc, T, "q_fast", "no_loads", tier) > _time(doc, T, "production", "no_loads", tier)
            shapes += 1
    assert shapes == 4 + 2 + 6
    gain = {T: _time(runs[2], T, "production", "full", 8) - _time(runs[2], T, "q_fast", "full", 8) for T in (8, 16, 32)}
    assert gain[8] < gain[16] < gain[32]


def _log_times(name):
    """{(T, tier, build, mode): us} from an overlap run's log lines (the runs whose JSON a later run of
    the same minute overwrote kept only their logs)."""
    out = {}
    for ln in (RUNGS / name).read_text().splitlines():
        w = ln.split()
        if len(w) > 9 and w[1] == "overlap" and w[3].startswith("T="):
            out[(int(w[3][2:]), int(w[5]), w[6], w[8])] = float(w[9])
    return out


def _trace_log(name):
    """One dict a traced case from a trace run's log lines ('trace POOL S=.. T=..: graph .. us; key value, ...'):
    pool, T and every float-valued key (the runs whose JSON did not come back kept only their logs)."""
    rows = []
    for ln in (RUNGS / name).read_text().splitlines():
        if " trace " not in ln or "; " not in ln:
            continue
        head, body = ln.split("; ", 1)
        w = head.split()
        row = {"pool": w[2], "T": int(w[4].rstrip(":")[2:])}
        for kv in body.split(", "):
            k, v = kv.rsplit(" ", 1)
            try:
                row[k] = float(v)
            except ValueError:
                pass
        rows.append(row)
    return rows


def test_plan_fast_shortened_the_plan_but_not_the_call_and_the_merge_gained_nothing_real():
    # plan_fast (mask offset prefetched, 32-bit chunk divisions, no barrier after passes 1 and 2 with one
    # warp's requests) and merge_unr5 (5 splits in flight a merge thread), one H200, five rounds, a patch
    # applied on the device only: the trace put the plan 0.19-0.31 us shorter, yet every fp8 rows64d full
    # call was slower, so the kill fired; the merge's one round at T = 16 took at most 0.9 us off the merged
    # call and cost fp8 T = 32 a microsecond
    fp8 = _log_times("overlap-fp8-h200-20261206T2306-plan-fast-merge-unr5.log")
    bf16 = _log_times("overlap-h200-20261206T2306-plan-fast-merge-unr5.log")
    assert all(fp8[(T, 8, "plan_fast", "full")] > fp8[(T, 8, "production", "full")] + 0.5 for T in (8, 16, 32))
    prod, fast = ([r["plan_us"] for r in _trace_log(name)] for name in
                  ("trace-h200-20261206T2307-plan-points.log", "trace-h200-20261206T2307-plan-points-plan-fast.log"))
    assert len(prod) == len(fast) == 4 and all(0.15 < p - f < 0.35 for p, f in zip(prod, fast))
    for doc, T, most in ((fp8, 16, 0.3), (bf16, 16, 1.0)):
        gain = doc[(T, 8, "production", "merged")] - doc[(T, 8, "merge_unr5", "merged")]
        assert 0 < gain < most
    assert fp8[(32, 8, "merge_unr5", "merged")] > fp8[(32, 8, "production", "merged")] + 0.5
    # the one-round merge's premise: T = 16's two rounds of partials (2 x 66 splits) summed no slower than
    # T = 8's one round of the same bytes (130 splits at nine in flight)
    summed = {r["T"]: r["merge_summed_after_verify_us"] for r in _trace_log("trace-h200-20261206T2307-plan-points.log")
              if r["pool"] == "fp8_e4m3"}
    assert summed[16] <= summed[8]


def _trace_rows(name):
    """{(pool, T): row} of a trace file among the rungs"""
    return {(r["kv_dtype"], r["T"]): r for r in json.loads((RUNGS / name).read_text())["rows"]}


def _epilogue_split(name):
    """{(pool, T): (drain, staging, stores)} in us, medians over the working CTAs of a trace whose source had
    points 5 (past the epilogue's first barrier) and 6 (O staged, past the second) beside 3 (loop done) and 4
    (stored)"""
    out = {}
    for row in json.loads((RUNGS / name).read_text())["rows"]:
        ctas = [c for c in row["per_cta_last_replay"] if c[2] and len(c) > 6 and c[5] and c[6]]
        if ctas:
            med = lambda f: statistics.median(f(c) for c in ctas)
            out[(row["kv_dtype"], row["T"])] = (med(lambda c: c[5] - c[3]), med(lambda c: c[6] - c[5]),
                                                 med(lambda c: c[4] - c[6]))
    return out


def test_the_epilogue_is_its_partials_stores_and_neither_epilogue_rung_shortened_the_call():
    # the epilogue split open (one H100, production's machine code with two trace points): the halves end
    # together (the drain to the first barrier 0.13-0.16 us), bf16 stages O in 0.64 us and fp8 in 1.12-1.15,
    # and the 64 KB of partials a CTA take 1.7-1.9 us to store, all CTAs at once (the cluster-pair probe's
    # 1.76 us for the same bytes)
    for name in ("trace-h100-20261207T0753-epilogue-points.json", "trace-h100-20261207T0806-epilogue-points.json"):
        split = _epilogue_split(name)
        bf = split[("bfloat16", 8)]
        for key in (("fp8_e4m3", 8), ("fp8_e4m3", 16)):
            drain, stage, stores = split[key]
            assert drain < 0.2 and stage > 1.5 * bf[1] and 1.6 < stores < 2.0
        assert bf[0] < 0.2 and 1.6 < bf[2] < 2.0
    # ost8 (fp8's staging rows 32 bytes apart, so a half-warp's 8-byte stores miss each other's banks) took
    # 0.2 us off fp8's staging, as traced, but its full call moved by less than 0.3 us at rows64d T = 16 over
    # three runs (the kill: 0.3 us shorter at T = 8 and 16), bit-equal at 34 calls
    prod, ost8 = (_epilogue_split(f"trace-h100-20261207T0806-epilogue-points{s}.json") for s in ("", "-ost8"))
    for key in (("fp8_e4m3", 8), ("fp8_e4m3", 16)):
        assert 0.15 < prod[key][1] - ost8[key][1] < 0.3
    runs = _runs("overlap-fp8-h100-20261207T080[67]-ost8-run*.json")
    assert len(runs) == 3
    for doc in runs:
        assert all(c["equal"] for c in doc["same_output"]) and len(doc["same_output"]) == 34
    gain = statistics.median(_time(d, 16, "production", "full", 8) - _time(d, 16, "ost8", "full", 8) for d in runs)
    assert gain < 0.3
    # epi_direct (each half storing its 32 rows from registers, no staging, no CTA barrier): 8-row stores a
    # warp instruction cost more than the staging they replace; bf16 rows64d 2-4 us slower in both runs, fp8
    # rows64d's merged call slower at T = 8 and 16, and rows32d slower where it is the default tier (T = 4)
    fp8 = _runs("overlap-fp8-h100-20261207T075[34]-epi-direct-run*.json")
    bf16 = _runs("overlap-h100-20261207T0754-epi-direct-run*.json")
    assert len(fp8) == len(bf16) == 2
    for doc in fp8 + bf16:
        assert all(c["equal"] for c in doc["same_output"])
    for doc in fp8:
        assert all(_time(doc, T, "epi_direct", "merged", 8) > _time(doc, T, "production", "merged", 8) for T in (8, 16))
    for doc in bf16:
        assert all(_time(doc, T, "epi_direct", "full", 8) > _time(doc, T, "production", "full", 8) + 1.5 for T in (8, 16))
        assert _time(doc, 4, "epi_direct", "full", 6) > _time(doc, 4, "production", "full", 6)


def test_q_through_the_ring_shortened_every_default_rowsd_shape_with_its_merge():
    # Q copied into the ring before the plan and read into registers after it (q_smem, production since as
    # aa1ff7cc; the form before is overlap's q_global): one H100, three runs, bit-equal at 34 calls a pool.
    # The kill (not 0.5 us shorter with the merge at rows64d T = 8 on both pools, or slower at a default
    # shape, judged on the median of the runs) did not fire; the trace put the bf16 centre's prologue at 1.6 us against 3.7
    fp8 = _runs("overlap-fp8-h100-20261207T082[45]-q-smem-run*.json")
    bf16 = _runs("overlap-h100-20261207T082[45]-q-smem-run*.json")
    assert len(fp8) == len(bf16) == 3
    for doc in fp8 + bf16:
        assert all(c["equal"] for c in doc["same_output"]) and len(doc["same_output"]) == 34
    gain = lambda doc, T, tier: _time(doc, T, "production", "merged", tier) - _time(doc, T, "q_smem", "merged", tier)
    for doc in fp8:
        assert gain(doc, 8, 8) > 0.5 and all(gain(doc, T, 8) > 0 for T in (16, 32))
    for doc in bf16:
        assert gain(doc, 8, 8) > 0.4 and gain(doc, 16, 8) > 0 and gain(doc, 4, 6) > 0
    assert statistics.median(gain(doc, 8, 8) for doc in bf16) > 0.5   # the kill, over the three runs
    before, after = ({k: r["prologue_us"] for k, r in _trace_rows(name).items()}
                     for name in ("trace-h100-20261207T0824-q-smem-production.json", "trace-h100-20261207T0824-q-smem.json"))
    assert before[("bfloat16", 8)] > 3.5 and after[("bfloat16", 8)] < 2.0
    assert all(after[k] < before[k] - 0.9 for k in before)


def test_fp8s_prologue_rungs_ahead5_and_qcvt_lost_everywhere_and_ahead4_lost_t32():
    # fp8's prologue split by trace points, then four rungs beside production (aa1ff7cc), one H100, three runs,
    # bit-equal at 17 calls (kernel/NOTES.md, thirty-fourth session). The kill: not 0.3 us shorter with the
    # merge at T = 16 in every run, or more than 0.3 us slower at T = 8 or 32 in any run
    runs = _runs("overlap-fp8-h100-20261207T110[34]-prologue-run*.json")
    assert len(runs) == 3
    for doc in runs:
        assert all(c["equal"] for c in doc["same_output"]) and len(doc["same_output"]) == 68
    gain = lambda doc, T, b: _time(doc, T, "production", "merged", 8) - _time(doc, T, b, "merged", 8)
    for doc in runs:
        for b in ("ahead5", "qcvt"):
            assert all(gain(doc, T, b) < 0 for T in (8, 16, 32))
        assert gain(doc, 8, "ahead4") > 1.0 and gain(doc, 16, "ahead4") > 0.5 and gain(doc, 32, "ahead4") < 0
    assert min(gain(doc, 32, "ahead4") for doc in runs) < -0.3   # the kill fired, by 0.1 us in one run
    traced = {v: _trace_rows(f"trace-h100-20261207T1103-prologue-{v}.json") for v in ("prod", "ahead4", "qcvt")}
    fp8_16 = lambda v, k: traced[v][("fp8_e4m3", 16)][k]
    # production's loop starts 1.9 us after bf16's; ahead4's 0.7 us sooner; qcvt's barely sooner
    assert fp8_16("prod", "prologue_us") - traced["prod"][("bfloat16", 16)]["prologue_us"] > 1.7
    assert fp8_16("prod", "prologue_us") - fp8_16("ahead4", "prologue_us") > 0.6
    assert fp8_16("prod", "prologue_us") - fp8_16("qcvt", "prologue_us") < 0.2
    # "Q landed" grows with the prologue's slot ids: each waited on the one before
    assert fp8_16("prod", "point5_after_plan_us") > fp8_16("ahead4", "point5_after_plan_us") + 0.15


def test_pro_regs_won_on_bf16_and_with_four_tiles_ahead_on_fp8_but_lost_alone_on_fp8():
    # the prologue's slot ids as 32-bit loads that wait on nothing and its item in registers (pro_regs), alone
    # and with fp8 rows64d at 4 tiles ahead, beside production (aa1ff7cc): one H100, three runs, bit-equal
    # (kernel/NOTES.md, thirty-fourth session). Production since fa4b9a1 (the next test)
    fp8 = _runs("overlap-fp8-h100-20261207T123[78]-pro-regs-run*.json")
    bf16 = _runs("overlap-h100-20261207T123[89]-pro-regs-run*.json")
    assert len(fp8) == len(bf16) == 3
    for doc, n in [(d, 51) for d in fp8] + [(d, 34) for d in bf16]:
        assert all(c["equal"] for c in doc["same_output"]) and len(doc["same_output"]) == n
    gain = lambda doc, T, b, tier=8: _time(doc, T, "production", "merged", tier) - _time(doc, T, b, "merged", tier)
    for doc in fp8:
        assert all(gain(doc, T, "pro_regs") < -0.3 for T in (8, 16, 32))        # alone: slower at every T
        assert gain(doc, 8, "ahead4_pro_regs") > 1.4 and gain(doc, 16, "ahead4_pro_regs") > 1.1
        assert gain(doc, 32, "ahead4_pro_regs") > 0                               # no T = 32 loss, unlike ahead4
    for doc in bf16:
        assert gain(doc, 8, "pro_regs") > 0.2 and gain(doc, 8, "pro_regs", 6) > 0.1
        assert all(gain(doc, T, "pro_regs", tier) > -0.3 for T in (4, 16) for tier in (8, 6))
    traced = {v: {k: r["prologue_us"] for k, r in _trace_rows(f"trace-h100-20261207T1239-pro-regs-{v}.json").items()}
              for v in ("prod", "pro-regs", "ahead4-pro-regs")}
    fp8_16 = ("fp8_e4m3", 16)
    assert traced["prod"][fp8_16] - traced["pro-regs"][fp8_16] > 0.5
    assert traced["prod"][fp8_16] - traced["ahead4-pro-regs"][fp8_16] > 1.0
    assert traced["prod"][("bfloat16", 8)] - traced["pro-regs"][("bfloat16", 8)] > 0.2


def _merged_gain(doc, variant, T, tier):
    """How much longer (us) the variant's merged call took than production's at (T, tier), DRAM placement."""
    return _time(doc, T, variant, "merged", tier) - _time(doc, T, "production", "merged", tier)


def test_production_pro_regs_ahead4_against_the_production_before_on_fp8_lost_only_on_rows32d():
    # pro_regs + ahead4 as production (fa4b9a1, kernel source 8d737971, its guarantees passed on the same H100)
    # beside the production before as the variant pro_smem_ahead6, one run of five rounds, bit-equal at 34 calls
    # (kernel/NOTES.md, thirty-fifth session): rows64d as in the rung's runs; fp8 rows32d, which no fp8 shape
    # takes by default and which the rung never timed, 2.9-12.3 us slower at every T
    doc = json.loads((RUNGS / "overlap-fp8-h100-20261207T1504.json").read_text())
    assert doc["kernel_source"] == "8d737971fc616f5d"
    assert all(c["equal"] for c in doc["same_output"]) and len(doc["same_output"]) == 34
    gain = lambda T, tier: _merged_gain(doc, "pro_smem_ahead6", T, tier)
    assert gain(8, 8) > 1.0 and gain(16, 8) > 0.5 and gain(32, 8) > -0.3
    assert all(gain(T, 6) < -2.5 for T in (8, 16, 32))


def test_the_shipped_fp8_rows32d_is_the_production_befores_again_and_rows64d_keeps_its_gain():
    # 87f6b81 (kernel source 1de3bcbb) put fp8 rows32d back on the shared-memory prologue, whose machine code is
    # aa1ff7cc's and so pro_smem_ahead6's; beside that variant on another H100, one run of five rounds, bit-equal at
    # 34 calls (kernel/NOTES.md, thirty-sixth session): rows32d within 0.6 us of it at every T where the register
    # form had lost 2.9-12.3 us (the test above), rows64d still no slower and ahead at T = 8 and 16
    doc = json.loads((RUNGS / "overlap-fp8-h100-20261207T1749.json").read_text())
    assert doc["kernel_source"] == "1de3bcbb996fd144"
    assert all(c["equal"] for c in doc["same_output"]) and len(doc["same_output"]) == 34
    gain = lambda T, tier: _merged_gain(doc, "pro_smem_ahead6", T, tier)
    assert all(abs(gain(T, 6)) < 0.6 for T in (8, 16, 32))
    assert gain(8, 8) > 0.3 and gain(16, 8) > 0.5 and gain(32, 8) > -0.3


def test_plan_one_took_a_microsecond_off_each_timed_default_shape_and_slowed_two_loops_it_reshaped():
    # plan_one, a one-request launch's plan in closed form (rungs/plan-probes.patch: kernel source 4619b40c, whose
    # production is 1de3bcbb's machine code), beside production on one H100, every call bit-equal (kernel/NOTES.md,
    # thirty-seventh session): bf16's default shapes three rounds, bf16 tiers 8 / 6 and both fp8 files five rounds
    from kernel.ops import pick_tier
    bf16_3, bf16_5, fp8_8, fp8_s = (json.loads((RUNGS / f).read_text()) for f in (
        "overlap-h100-20261207T2117-plan-one.json", "overlap-h100-20261207T2146-plan-one-5-rounds.json",
        "overlap-fp8-h100-20261207T2146-plan-one.json", "overlap-fp8-h100-20261207T2147-plan-one.json"))
    for doc in (bf16_3, bf16_5, fp8_8, fp8_s):
        assert doc["kernel_source"] == "4619b40c6a864fe7" and doc["not_timed_differs"] == []
        assert doc["same_output"] and all(c["equal"] for c in doc["same_output"])
    gain = _merged_gain
    # the call as a server makes it, at the tier production picks for each timed draft length (8 heads)
    timed = [(bf16_3, 1, False), (bf16_5, 4, False), (bf16_5, 8, False), (bf16_5, 16, False), (bf16_3, 32, False),
             (fp8_s, 1, True), (fp8_8, 8, True), (fp8_8, 16, True), (fp8_8, 32, True)]
    for doc, T, fp8 in timed:
        assert -2.5 < gain(doc, "plan_one", T, pick_tier(8, T, 1, T, kv_fp8=fp8)) < -0.5, (T, fp8)
    # the probe that skips the plan entirely (bf16; its fp8 build did not run) is no faster at the centre
    assert abs(_time(bf16_3, 8, "plan_one", "full", 8) - _time(bf16_3, 8, "plan_cached", "full", 8)) < 0.3
    # two loops ptxas reshaped around the second plan path lost more than the plan gave, with the math alone no
    # slower: bf16 rows32d at 64 and 128 rows (only an override gives it those), fp8 small8's 32-row tiles (the
    # default for 17-32 rows) at every T timed
    for doc, T, tier, lost in ((bf16_5, 8, 6, 2.0), (bf16_5, 16, 6, 5.0), (fp8_s, 1, 4, 1.5), (fp8_s, 8, 4, 4.0),
                               (fp8_s, 16, 4, 10.0)):
        assert gain(doc, "plan_one", T, tier) > lost, (T, tier)
        assert _time(doc, T, "plan_one", "no_loads", tier) < _time(doc, T, "production", "no_loads", tier) + 1.0


def test_production_plan_one_against_the_general_plan_gained_at_every_default_shape():
    # plan_one as production (2d26e37, kernel source 604d81ee: the plan_one_sel build's machine code on every
    # function; its guarantees passed on the same H100 first) beside the general plan everywhere, the production
    # before (plan_general, 1de3bcbb's machine code), one run of five rounds a pool, every call bit-equal: the
    # merged call at the tier production picks for each default draft length, fp8's 16-row tiles (T = 2) included
    from kernel.ops import pick_tier
    bf16, fp8 = (json.loads((RUNGS / f).read_text()) for f in (
        "overlap-h100-20261207T2324-plan-general.json", "overlap-fp8-h100-20261207T2324-plan-general.json"))
    for doc, n in ((bf16, 36), (fp8, 57)):
        assert doc["kernel_source"] == "604d81ee5f5d2a5c" and doc["not_timed_differs"] == []
        assert len(doc["same_output"]) == n and all(c["equal"] for c in doc["same_output"])
    for doc, ts, kv_fp8 in ((bf16, (1, 8, 32), False), (fp8, (1, 2, 8, 16, 32), True)):
        for T in ts:
            assert 0.4 < _merged_gain(doc, "plan_general", T, pick_tier(8, T, 1, T, kv_fp8=kv_fp8)) < 2.5, (T, kv_fp8)
