"""rows64d_pair_x4 (tier 10, issue 25's rung on tier 9: QK's K fragments by ldmatrix.x4): opt-in
by tier=10 only, bf16 pools only (both held beside tier 9's in test_rows64d_pair.py), validated and timed wherever tier 9 is (validation rotation,
extremes, graph check, parts, mma and full), no spills or stack on any target, and in its machine
code the loads the rung is about: 18 ldmatrix.x4 for K per 32-token pass (tier 9: 36 .x2), no
local memory."""
import ctypes
from pathlib import Path

import pytest

from kernel import build
from kernel.ops import TIERS

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def lib_dir():
    return build.build(build.ARCHS)      # the suite's one build (cached by source hash)


def test_the_validation_rotation_covers_it():
    """The random cases rotate over list(TIERS) (each tier sees 1 / len(TIERS) of them), the
    extremes run at every tier of TIERS: both against the float64 oracle with NaN-poisoned outputs."""
    from kernel.bench import validate
    src = Path(validate.__file__).read_text()
    assert "tiers = list(TIERS)" in src and "r = check_case(case, tol, other_tiers=(tiers[i % len(tiers)],))" in src
    assert src.count("other_tiers=tuple(TIERS)") >= 1 and 10 in TIERS
    assert (8, 8, 10) in validate.GRAPH_CONFIGS
    assert all(tier not in (0, 9, 10) for _, _, tier in validate.FP8_GRAPH_CONFIGS)


def test_parts_mma_and_full_time_it_beside_tiers_8_and_9():
    from kernel.bench import micro
    assert "for tier in (8, 9, 10, 6):" in Path(micro.__file__).read_text()
    for T in (8, 16, 32):
        tiers = next(t for S, TT, H, t in micro.SHAPES if S == 185000 and TT == T and H == 8)
        assert {8, 9, 10} <= set(tiers), (T, tiers)


def test_the_sm120_model_knows_it():
    from kernel.bench import sm120_estimate as m
    assert m.H200_CTAS[10] == 1 and m.IN_FLIGHT_TILES["bfloat16"][10] == 2
    assert m.mmas_per_tile(64, 10) == m.mmas_per_tile(64, 8) == 544 and m.TIER_NAMES[10] == "rows64d_pair_x4"


def test_no_spills_on_any_target_and_tier_9s_shared_memory(lib_dir):
    lib = ctypes.CDLL(str(lib_dir / build.LIB))
    assert lib.mla_verify_tier_smem_bytes(10) == lib.mla_verify_tier_smem_bytes(9) <= build.SMEM_LIMIT
    assert lib.mla_verify_tier_smem_bytes_fp8(10) == -1 and lib.mla_verify_rows_per_cta(10) == 64
    rows = [r for r in build.resources(lib_dir) if r["variant"] in ("rows64d_pair_x4", "rows64d_pair_x4_diag")]
    assert {(r["variant"], r["arch"]) for r in rows} == {(v, f"sm_{a}") for v in ("rows64d_pair_x4", "rows64d_pair_x4_diag")
                                                        for a in build.ARCHS}
    assert all(r["spill_stores"] == r["spill_loads"] == r["stack"] == 0 for r in rows), rows


def test_its_machine_code_has_the_x4_loads_and_no_local_memory(lib_dir):
    from kernel.bench import pair_sass
    rows = {(r["arch"], r["tier"]): r for r in pair_sass.check(lib_dir, tiers=(9, 10))}
    for a in pair_sass.ARCHS:
        x4, x2 = rows[(f"sm_{a}", 10)], rows[(f"sm_{a}", 9)]
        assert x4["hmma"] == x2["hmma"] == 136               # one pass: 2 sub-tiles x (36 QK + 32 PV)
        assert x4["k_loads"] == 18 and x4["k_load_op"] == ["LDSM.16.M88.4"], x4
        assert x2["k_loads"] == 36 and x2["k_load_op"] == ["LDSM.16.M88.2"], x2
        assert x4["v_loads"] == x2["v_loads"] == 16
        assert x4["local_in_function"] == x2["local_in_function"] == 0


def test_notes_table_matches_this_build(lib_dir):
    """kernel/NOTES.md's resources row for tier 10 (registers / spill bytes / stack bytes per arch)
    is this build's, and the section states its kill criterion."""
    notes = (ROOT / "kernel" / "NOTES.md").read_text()
    sec = notes[notes.index("## Issue 25's second rung: rows64d_pair_x4 (tier 10"):]
    sec = sec[:sec.index("\n## ")]
    assert "**Kill criterion:**" in sec and "100,960 B of dynamic shared memory" in sec
    res = {r["arch"]: r for r in build.resources(lib_dir) if r["variant"] == "rows64d_pair_x4"}
    want = " | ".join(f"{res[f'sm_{a}']['registers']} / {res[f'sm_{a}']['spill_stores']} / {res[f'sm_{a}']['stack']}"
                      for a in build.ARCHS)
    assert f"| 10 rows64d_pair_x4 | {want} |" in sec
    lib = ctypes.CDLL(str(lib_dir / build.LIB))
    assert f"{lib.mla_verify_tier_smem_bytes(10):,} B" in sec
