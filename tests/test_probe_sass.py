"""The ldmatrix/mma.sync probe's machine code (kernel/bench/probe_sass.py) holds what its figures
claim, on sm_90 and sm_120: per variant the loop has 24 HMMAs and 24 / PER LDSMs, every HMMA
reads an accumulator written exactly DEP HMMAs earlier, and every load is covered by at least a
group of MMAs. The analyser itself is held to hand-written SASS, including the first probe's
failure modes (an MMA right behind its producer, a load used right after the loop's back edge)."""
import re
from pathlib import Path

import pytest

from kernel import build
from kernel.bench import probe, probe_sass

CSRC = Path(build.__file__).resolve().parent / "csrc" / "mma_ldsm_probe.cu"


@pytest.fixture(scope="module")
def sass_rows():
    lib = build.build(build.ARCHS)     # the suite's one build (cached by source hash)
    return probe_sass.check(lib)


def test_every_variant_of_the_built_probe_passes_on_sm90_and_sm120(sass_rows):
    assert {(r["arch"], r["per"], r["dep"]) for r in sass_rows} == {
        (f"sm_{a}", p, d) for a in probe_sass.ARCHS for p, d in probe_sass.VARIANTS}
    bad = [r for r in sass_rows if not r["ok"]]
    assert not bad, bad
    for r in sass_rows:
        assert r["hmma"] == 24
        assert r["ldsm"] == (24 // r["per"] if r["per"] else 0)
        assert r["min_dep_distance"] == r["dep"]
        assert r["per"] == 0 or r["min_load_to_use"] >= r["per"]


def test_the_launcher_dispatches_exactly_the_checked_variants():
    src = CSRC.read_text()
    assert set(map(tuple, (map(int, m) for m in re.findall(r"PROBE\((\d+), (\d+)\)", src)))) == set(probe_sass.VARIANTS)
    assert int(re.search(r"constexpr int BODY = (\d+);", src).group(1)) == probe_sass.BODY


def _fn(lines: str) -> list:
    """Hand-written SASS in cuobjdump's layout -> the parsed function."""
    text = "\t\tFunction : f\n" + "\n".join(
        f"        /*{16 * i:04x}*/                   {ins} ;" for i, ins in enumerate(lines.strip().splitlines()))
    return probe_sass.parse(text)["f"]


def test_a_back_to_back_dependency_is_distance_one():
    # the first probe's pattern: chains regrouped so an MMA issues right behind its producer
    fn = _fn("""
HMMA.16816.F32.BF16 R4, R20, R24, R4
HMMA.16816.F32.BF16 R8, R20, R24, R8
HMMA.16816.F32.BF16 R8, R20, R26, R8
HMMA.16816.F32.BF16 R4, R20, R26, R4
@!P0 BRA 0x0""")
    got = probe_sass.analyse(probe_sass.loop_body(fn))
    assert got["hmma"] == 4 and got["min_dep_distance"] == 1


def test_dependency_distance_counts_across_the_back_edge_and_through_renaming():
    fn = _fn("""
HMMA.16816.F32.BF16 R8, R20, R24, R4
HMMA.16816.F32.BF16 R12, R20, R24, R12
HMMA.16816.F32.BF16 R4, R20, R26, R8
HMMA.16816.F32.BF16 R12, R20, R26, R12
@!P0 BRA 0x0""")
    # R4 -> R8 -> R4 is one chain renamed in place: 2 apart; R12 is the other: 2 apart
    assert probe_sass.analyse(probe_sass.loop_body(fn))["min_dep_distance"] == 2


def test_a_load_sunk_to_the_back_edge_has_load_to_use_zero():
    # the load for the next iteration's first MMA issued last: nothing covers its latency
    fn = _fn("""
HMMA.16816.F32.BF16 R4, R20, R24, R4
HMMA.16816.F32.BF16 R8, R20, R26, R8
LDSM.16.M88.4 R24, [R2]
@!P0 BRA 0x0""")
    got = probe_sass.analyse(probe_sass.loop_body(fn))
    assert got["ldsm"] == 1 and got["min_load_to_use"] == 0


def test_the_never_taken_side_blocks_are_not_the_steady_state():
    # the probe's layout: after an MMA a branch skips an inline block that loops and rejoins
    fn = _fn("""
HMMA.16816.F32.BF16 R4, R20, R24, R4
@P1 BRA 0x50
FADD R4, R9, R4
FADD R8, R9, R8
@P2 BRA 0x20
HMMA.16816.F32.BF16 R8, R20, R24, R8
@!P0 BRA 0x0""")
    body = probe_sass.loop_body(fn)
    assert [x.op.split(".")[0] for x in body] == ["HMMA", "BRA", "HMMA", "BRA"]
    assert probe_sass.analyse(body)["min_dep_distance"] == 2


def test_an_accumulator_from_outside_the_mma_chain_is_an_error():
    fn = _fn("""
HMMA.16816.F32.BF16 R4, R20, R24, R4
MOV R4, R9
@!P0 BRA 0x0""")
    with pytest.raises(probe_sass.SassError, match="not an HMMA"):
        probe_sass.analyse(probe_sass.loop_body(fn))


def test_predictions_follow_the_stated_bounds():
    pipe = 1.70   # clocks per MMA per SM of the 8-warp ceiling (629 TFLOP/s at 1.98 GHz, 132 SMs)
    p = probe.predict(8, 8, 8, pipe, 15, 3.5)
    assert p["bound"] == "pipe" and p["clk_per_mma_per_sm"] == pipe          # ldmatrix hides at 1 per 8
    assert probe.predict(4, 8, 8, pipe, 7, 3.5)["bound"] == "pipe"            # and at 1 per 4
    p = probe.predict(2, 8, 8, pipe, 3, 3.5)
    assert p["bound"] == "shared" and p["clk_per_mma_per_sm"] == pytest.approx(2.0)
    p = probe.predict(1, 8, 8, pipe, 1, 4.5)
    assert p["bound"] == "shared" and p["clk_per_mma_per_sm"] == pytest.approx(4.0)
    p = probe.predict(0, 2, 8, pipe, None, 3.2)                               # 2 chains, 2 warps per scheduler
    assert p["bound"] == "latency" and p["clk_per_mma_per_sm"] == pytest.approx(31 / 16)
    p = probe.predict(1, 8, 4, pipe, 1, 4.5)                                  # one warp per scheduler waits
    assert p["bound"] == "load wait" and p["clk_per_mma_per_sm"] == pytest.approx(30 / 4)


def test_the_summary_says_when_figures_are_not_citable():
    row = {"warps_per_sm": 8, "mmas_per_ldsm": 8, "chains": 8, "TFLOPs": 300.0, "predicted_TFLOPs": 620.0,
           "verdict": "refuted"}
    res = {"arch": "sm_90", "sass_ok": False, "ceilings": {"8_warps_per_sm": {"TFLOPs": 629.0}}, "rows": [row]}
    lines = probe.table(res)
    assert "NOT citable" in lines[0] and "P8D8  300 ( 620)!" in lines[1]
    assert "0 of 1 predictions within 10%" in lines[-1]


def test_notes_quote_the_predictions_of_this_machine_code(sass_rows):
    """kernel/NOTES.md's prediction table is probe.prediction_table at the 20:00 run's 8-warp
    ceiling (628.6 TFLOP/s) on the sm_90 machine code checked above."""
    notes = (Path(build.__file__).resolve().parent / "NOTES.md").read_text()
    assert "628.6" in notes
    for line in probe.prediction_table(sass_rows, 628.6):
        assert line in notes, line


def test_a_rowsd_kernel_is_found_by_its_name_before_the_tail_flag():
    # tier_rowsd.cuh's TL template argument (defaulted false) entered the mangled names in 2026-12-05's
    # fifteenth session; the tools name the kernels without it, as libraries of older sources do
    new = "_ZN4mlav5rowsd23mla_verify_kernel_rowsdILi2ELi0ELb0EEEvNS_6ParamsE"
    old = "_ZN4mlav5rowsd23mla_verify_kernel_rowsdILi2ELi0EEEvNS_6ParamsE"
    assert probe_sass.plain_name(new) == old and probe_sass.plain_name(old) == old
    tail = "_ZN4mlav5rowsd23mla_verify_kernel_rowsdILi2ELi0ELb1EEEvNS_6ParamsE"
    assert probe_sass.plain_name(tail) == tail                       # the tail kernel keeps its own
    merge = "_ZN4mlav18mla_verify_combineILi32ELb0EEEvNS_6ParamsE"
    assert probe_sass.plain_name(merge) == merge                     # only rowsd's kernels
    sass = f"\t\tFunction : {new}\n        /*0000*/                   MOV R1, c[0x0][0x28] ;\n"
    fns = probe_sass.parse(sass)
    assert fns[old] is fns[new] and len(fns[old]) == 1
