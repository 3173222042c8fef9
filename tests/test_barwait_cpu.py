"""kernel/bench/barwait.py on the CPU: the counters' layout against the kernel's, the per-tile
arithmetic, the table, and the GPU check's error."""
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
