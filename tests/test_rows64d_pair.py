"""rows64d_pair (tier 9, issue 25's opt-in rung): selectable by tier=9 only, bf16 pools only, in
the validation's tier rotation and the parts microbenchmark, within sm_120's shared memory with
no spills on any target, NOTES quoting its build's shared memory, and its machine code's K loads
(kernel/bench/pair_sass.py)."""
import ctypes
from pathlib import Path

import pytest

from kernel import build
from kernel.checks import VerifyInputError
from kernel.inputs import make_case
from kernel.ops import FP8_TIERS, TIERS, pick_tier, verify_attention

ROOT = Path(__file__).resolve().parent.parent


def test_never_picked_by_default():
    assert TIERS[9] == 64 and 9 not in FP8_TIERS
    assert all(pick_tier(H, T, 1, kv_fp8=f) != 9 for H in (1, 8, 64) for T in (1, 4, 8, 16, 65)
               for f in (False, True))


def test_refuses_an_fp8_pool_by_name():
    c = make_case([10, 3], [4, 2], 2, seed=0, kv_dtype="fp8_e4m3", k_scale=0.5, v_scale=0.25)
    with pytest.raises(VerifyInputError, match=r"^tier: 9 \(rows64d_pair\) reads a bf16 pool only"):
        verify_attention(*c.args(), **c.kwargs(), tier=9)


def test_a_bf16_call_at_tier_9_passes_every_check_before_the_device():
    c = make_case([10, 3], [4, 2], 2, seed=0)
    with pytest.raises(VerifyInputError, match=r"^q: is on cpu; the kernel runs on CUDA"):
        verify_attention(*c.args(), tier=9)


def test_the_validation_and_the_parts_stage_cover_it():
    from kernel.bench import micro
    src = (ROOT / "kernel" / "bench" / "validate.py").read_text()
    assert "tiers = list(TIERS)" in src and "other_tiers=tuple(TIERS)" in src   # random rotation, extremes
    assert "for tier in (8, 9, 6):" in Path(micro.__file__).read_text()          # parts beside rows64d
    for S, T, H, tiers in micro.SHAPES:
        if S == 185000 and T in (8, 16, 32):
            assert 9 in tiers and 8 in tiers


def test_fits_sm120_without_spills_and_notes_say_its_size(lib_dir):
    lib = ctypes.CDLL(str(lib_dir / build.LIB))
    smem = lib.mla_verify_tier_smem_bytes(9)
    assert 0 < smem <= build.SMEM_LIMIT and lib.mla_verify_tier_smem_bytes_fp8(9) == -1
    rows = [r for r in build.resources(lib_dir) if r["variant"] in ("rows64d_pair", "rows64d_pair_diag")]
    assert {(r["variant"], r["arch"]) for r in rows} == {(v, f"sm_{a}") for v in ("rows64d_pair", "rows64d_pair_diag")
                                                        for a in build.ARCHS}
    assert all(r["spill_stores"] == r["spill_loads"] == r["stack"] == 0 for r in rows), rows
    notes = (ROOT / "kernel" / "NOTES.md").read_text()
    assert f"{smem:,} B of dynamic shared memory" in notes


def test_the_graph_check_replays_tier_9_on_bf16_only():
    """Tier 9 must pass graph replay = eager before it can be a default (NOTES, issue 25); it
    reads bf16 pools only, so the fp8 graph check leaves it out."""
    from kernel.bench.validate import FP8_GRAPH_CONFIGS, GRAPH_CONFIGS
    assert any(tier == 9 for _, _, tier in GRAPH_CONFIGS)
    assert all(tier not in (0, 9) for _, _, tier in FP8_GRAPH_CONFIGS)


def test_its_machine_code_reads_k_by_ldmatrix_x2_with_no_local_memory(lib_dir):
    """kernel/bench/pair_sass on this build, sm_90 and sm_120: tier 9's loop (one 32-token pass)
    holds 136 HMMAs (2 sub-tiles x (36 QK + 32 PV)), 36 ldmatrix.x2 for K and 16 loads for V, and
    no function of tiers 8 and 9 touches local memory; rows64d (tier 8) reads K by ldmatrix.x4."""
    from kernel.bench import pair_sass
    rows = {(r["arch"], r["tier"]): r for r in pair_sass.check(lib_dir)}
    assert set(rows) == {(f"sm_{a}", t) for a in pair_sass.ARCHS for t in (8, 9)}
    for a in pair_sass.ARCHS:
        x2, x4 = rows[(f"sm_{a}", 9)], rows[(f"sm_{a}", 8)]
        assert x2["hmma"] == 136 and x2["k_loads"] == 36 and x2["k_load_op"] == ["LDSM.16.M88.2"], x2
        assert x2["v_loads"] == 16 and x2["local_in_function"] == 0, x2
        assert x4["k_load_op"] == ["LDSM.16.M88.4"] and x4["local_in_function"] == 0, x4
