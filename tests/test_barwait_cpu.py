"""kernel/bench/barwait.py on the CPU: the counters' layout against the kernel's, the per-tile
arithmetic, the table, and the GPU check's error."""
import json
import re
from pathlib import Path

from kernel.bench import barwait

CSRC = Path(__file__).resolve().parents[1] / "kernel" / "csrc"


def test_counter_columns_are_the_kernels():
    src = (CSRC / "verify_common.cuh").read_text()
    names = re.search(r"constexpr int (BW_DATA = 0.*?);", src).group(1)
    cols = {m.group(1).lower(): int(m.group(2)) for m in re.finditer(r"BW_(\w+) = (\d+)", names)}
    n = cols.pop("n")
    assert n == len(barwait.KINDS) and [k for k, _ in sorted(cols.items(), key=lambda kv: kv[1])] == list(barwait.KINDS)


def test_per_tile_divides_by_the_tiles_and_busy_is_the_rest():
    # 8 warps over 100 tiles each: 800 warp-tiles
    pt = barwait.per_tile([8000, 16000, 24000, 160000, 800, 8])
    assert pt["data_clk"] == 10 and pt["cta_clk"] == 20 and pt["half_clk"] == 30 and pt["loop_clk"] == 200
    assert pt["busy_clk"] == 140 and pt["tiles_per_warp"] == 100


def test_a_half_without_tiles_gives_nones():
    assert set(barwait.per_tile([0] * 6).values()) == {None}


def test_table_has_one_line_per_row():
    row = {"kv_dtype": "bfloat16", "T": 8, "tier": 8, "mode": "full", "half": 1, "time_us": 115.04,
           **barwait.per_tile([8000, 16000, 24000, 160000, 800, 8])}
    lines = barwait.table({"rows": [row, dict(row, half=0)]})
    assert len(lines) == 3 and lines[1].split()[:6] == ["bfloat16", "8", "8", "full", "1", "115.0"]
    assert lines[1].split()[6:11] == ["200", "10", "20", "30", "140"]


def test_an_unknown_variant_is_named_before_any_gpu(capsys):
    assert barwait.main(["--out", "x", "--variant", "nope"]) == 2
    err = capsys.readouterr().err
    assert "--variant: 'nope'" in err and "copy_in_qk" in err


RUNGS = CSRC.parents[1] / "reports" / "data" / "rungs"


def _clk(name, T, mode, half, kind, kv="bfloat16"):
    doc = json.loads((RUNGS / name).read_text())
    return next(r[f"{kind}_clk"] for r in doc["rows"]
                if (r["kv_dtype"], r["T"], r["tier"], r["mode"], r["half"]) == (kv, T, 8, mode, half))


def test_unrolled_math_saved_comes_back_at_the_cta_barrier_not_as_a_data_wait():
    # the barwait pair of 2026-12-06 (H100, the code of 9caa1d3): the hypothesis that bf16's full call
    # is floored by the copies' latency predicted unroll2's loop-top data wait to grow by most of the
    # ~110-160 clocks its math saves a tile; it stayed under 20 in both builds, and half 1 waited the
    # difference at the CTA barrier for half 0, whose busy time the loads lengthened more unrolled
    prod, unr = "barwait-h100-20261206T0552-production.json", "barwait-h100-20261206T0552-unroll2.json"
    for T in (8, 32):
        for half in (0, 1):
            assert _clk(prod, T, "full", half, "data") < 20 and _clk(unr, T, "full", half, "data") < 20
        assert _clk(unr, T, "full", 1, "cta") > _clk(prod, T, "full", 1, "cta") + 150
        loads = {f: _clk(f, T, "full", 0, "busy") - _clk(f, T, "no_loads", 0, "busy") for f in (prod, unr)}
        assert loads[unr] > loads[prod] + 100


def test_the_loads_cost_the_half_that_copies_whatever_its_share():
    # h1_pieces3 (3 of each thread's 9 pieces in half 1): half 0 busy as without loads, half 1 paying
    prod, h1 = "barwait-h100-20261206T0605-production.json", "barwait-h100-20261206T0605-h1-pieces3.json"
    for T in (8, 32):
        assert _clk(prod, T, "full", 0, "busy") - _clk(prod, T, "no_loads", 0, "busy") > 190
        assert _clk(prod, T, "full", 1, "busy") - _clk(prod, T, "no_loads", 1, "busy") < 80
        assert abs(_clk(h1, T, "full", 0, "busy") / _clk(h1, T, "no_loads", 0, "busy") - 1) < 0.01
        assert _clk(h1, T, "full", 1, "busy") - _clk(h1, T, "no_loads", 1, "busy") > 150


def test_a_shorter_copying_half_hands_the_loads_cost_to_the_other():
    # item_order (2026-12-06, H100): half 0's loop-top load-use wait gone, its busy time with loads
    # ~100 clocks a tile shorter at T = 32, and half 1's as much longer: a shared cost, not half 0's own
    prod, io = "barwait-h100-20261206T0627-production.json", "barwait-h100-20261206T0627-item-order.json"
    assert _clk(io, 32, "full", 0, "busy") < _clk(prod, 32, "full", 0, "busy") - 80
    assert _clk(io, 32, "full", 1, "busy") > _clk(prod, 32, "full", 1, "busy") + 50
    assert _clk(io, 32, "full", 1, "busy") > _clk(io, 32, "full", 0, "busy")   # half 1 now the longer


def test_bulk_copies_lengthened_the_half_that_issues_them_and_landed_late():
    # bulk8 (2026-12-06, H100, fp8 T = 16): without its LDGSTS half 1's busy time fell, but issuing the
    # 16 bulk copies cost half 0 more than the ten LDGSTS pieces they replaced, and the rows landed late
    # (the loop-top wait from ~6 to over 100 clocks a tile)
    def clk(name, mode, half, kind):
        return _clk(name, 16, mode, half, kind, kv="fp8_e4m3")

    prod, bulk = "barwait-h100-20261206T0746-production.json", "barwait-h100-20261206T0746-bulk8.json"
    assert clk(bulk, "full", 0, "busy") > clk(prod, "full", 0, "busy") + 150
    assert clk(bulk, "full", 1, "busy") < clk(prod, "full", 1, "busy") - 50
    for half in (0, 1):
        assert clk(prod, "full", half, "data") < 20 and clk(bulk, "full", half, "data") > 100
        assert abs(clk(bulk, "no_loads", half, "busy") / clk(prod, "no_loads", half, "busy") - 1) < 0.02


def test_zero_byte_copies_cost_the_copying_half_most_of_the_copies_clocks():
    # zero_copies (2026-12-06, H100, bf16 T = 32): half 0's busy time with copies that read nothing kept
    # 181 of the 249 clocks a tile the copies add to it
    prod, zero = "barwait-h100-20261206T0809-production.json", "barwait-h100-20261206T0810-zero-copies.json"
    added = _clk(prod, 32, "full", 0, "busy") - _clk(prod, 32, "no_loads", 0, "busy")
    kept = _clk(zero, 32, "full", 0, "busy") - _clk(zero, 32, "no_loads", 0, "busy")
    assert added > 200 and 0.6 < kept / added < 0.9


def test_addresses_formed_in_one_warp_shortened_half_0_and_lengthened_half_1():
    # addr_ids (2026-12-06, H100, bf16 T = 32): half 0 lost most of its copy path, half 1, whose warp 4
    # formed the addresses, got ~140 clocks a tile longer wherever the chain ran
    prod = "barwait-h100-20261206T0838-production.json"
    for variant in ("barwait-h100-20261206T0838-addr-ids-top.json", "barwait-h100-20261206T0848-addr-ids-in-qk.json"):
        assert _clk(variant, 32, "full", 0, "busy") < _clk(prod, 32, "full", 0, "busy") - 200
        assert _clk(variant, 32, "full", 1, "busy") > _clk(prod, 32, "full", 1, "busy") + 100
