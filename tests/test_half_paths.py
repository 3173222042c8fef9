"""kernel/bench/half_paths: the instructions each half of rows64d issues along its loop's steady
path, on this build's machine code (sm_90, the H200's, and sm_120, the production GPU's)."""
import pytest

from kernel.bench import half_paths
from kernel.bench.probe_sass import Instr


@pytest.mark.parametrize("arch", ["90", "120"])
def test_each_half_runs_its_mmas_and_softmax_and_half_0_the_copies(lib_dir, arch):
    h0, h1 = half_paths.check(lib_dir, arch)
    for h in (h0, h1):   # 36 QK + 32 PV MMAs a warp and tile, one tile a pass; the softmax's exp2 and reciprocal
        assert h["tiles"] == 1 and h["hmma"] == 68 and h["mufu"] >= 4, h
    # bf16 half 0 issues the tile's nine copy pieces (SPLIT_COPIES); half 1's LDGSTS are warp 4's slot
    # ids, which half 0's path leaves out (no warp of half 0 copies them)
    assert h0["ldgsts"] >= 9 and h1["ldgsts"] <= 2, (h0, h1)
    assert h0["id_copies"] == 0 and h1["id_copies"] == h1["ldgsts"] > 0, (h0, h1)
    assert h0["instructions"] > h1["instructions"] and h0["dummy_lds"] <= h0["lds"]


@pytest.mark.parametrize("arch", ["90", "120"])
def test_fp8_half_0_issues_the_h0pv_pieces_in_its_pv(lib_dir, arch):
    h0, h1 = half_paths.check(lib_dir, arch, pool="fp8")
    # fp8 converts the tile to f16 and runs the same 68 MMAs a warp and tile, two tiles a pass: both
    # halves' loops are unrolled by two (UNROLL_FP8 = 3)
    for h in (h0, h1):
        assert h["tiles"] == 2 and h["hmma"] == 2 * 68 and h["mufu"] >= 2 * 4, h
    # half 0's PV issues each tile's five H0PV pieces, as pairs (H0PV_PAIRS_FP8); half 1 only the slot ids
    assert h0["ldgsts"] >= 2 * 5 and h1["ldgsts"] <= 2 * 2, (h0, h1)


def test_an_unknown_pool_is_refused_by_name():
    with pytest.raises(ValueError, match="pool: 'fp16'"):
        half_paths.check(".", "90", pool="fp16")


def test_the_steady_path_takes_the_mmas_and_leaves_the_rare_branch_out():
    def ins(addr, op, target=None, pred=False, regs=(1,)):
        return Instr(addr, op, list(regs), target, pred)
    fn = [ins(0x00, "IADD3"),
          ins(0x10, "BRA", 0x40, pred=True),      # skips the MMA block when taken
          ins(0x20, "HMMA.16816.F32.BF16"),
          ins(0x30, "BRA", 0x60),                 # over the block without MMAs
          ins(0x40, "FMUL"), ins(0x50, "FMUL"),
          ins(0x60, "BRA", 0x80, pred=True),      # around a rare block
          ins(0x70, "FMUL"),
          ins(0x80, "LDS", pred=True, regs=()),   # never executed, still issued
          ins(0x90, "BRA", 0x00, pred=True)]      # the back edge
    path = half_paths.steady_path(fn, 0, len(fn) - 1)
    assert [x.addr for x in path] == [0x00, 0x10, 0x20, 0x30, 0x60, 0x80, 0x90]
    assert half_paths.half_loops(fn) == []   # one HMMA: below MIN_HMMA, so no half's loop


def test_the_steady_path_takes_the_exponentials_not_the_edge_masks_division():
    def ins(addr, op, target=None, pred=False):
        return Instr(addr, op, [1], target, pred)
    fn = [ins(0x00, "MUFU.EX2"),
          ins(0x10, "BRA", 0x50, pred=True),      # around the rare edge mask
          ins(0x20, "I2F.RP"), ins(0x30, "MUFU.RCP"), ins(0x40, "F2I.FTZ.U32.TRUNC"),
          ins(0x50, "MUFU.EX2"),
          ins(0x60, "BRA", 0x00, pred=True)]
    path = half_paths.steady_path(fn, 0, len(fn) - 1)
    assert [x.addr for x in path] == [0x00, 0x10, 0x50, 0x60]


def test_half_0s_path_leaves_out_warp_4s_slot_id_copies():
    def ins(addr, op, target=None, pred=False):
        return Instr(addr, op, [1], target, pred)
    fn = [ins(0x00, "HMMA.16816.F32.BF16"),
          ins(0x10, "BRA", 0x40, pred=True),      # around warp 4's slot-id copy
          ins(0x20, "LDGSTS.E.64"), ins(0x30, "IADD3"),
          ins(0x40, "LDGSTS.E.BYPASS.128"),       # a copy piece
          ins(0x50, "BRA", 0x00, pred=True)]
    assert [x.addr for x in half_paths.steady_path(fn, 0, 5)] == [0x00, 0x10, 0x20, 0x30, 0x40, 0x50]
    assert [x.addr for x in half_paths.steady_path(fn, 0, 5, ids=False)] == [0x00, 0x10, 0x40, 0x50]
    assert half_paths.is_id_copy(fn[2]) and not half_paths.is_id_copy(fn[4])
