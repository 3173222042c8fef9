"""kernel.bench.mma_kinds on the CPU: the table it prints and the kinds it refuses."""
import pytest

from kernel.bench import ceilings, mma_kinds


def test_table_shows_each_kind_and_a_missing_rate_as_none():
    doc = {"rows": [{"kind": "bf16", "occupancy": "8_warps_per_sm", "TFLOPs": 625.4},
                    {"kind": "bf16", "occupancy": "best", "TFLOPs": 638.0},
                    {"kind": "e4m3", "occupancy": "8_warps_per_sm", "TFLOPs": None},
                    {"kind": "e4m3", "occupancy": "best", "TFLOPs": 1250.5}]}
    lines = mma_kinds.table(doc)
    assert lines[1].split() == ["bf16", "625.4", "638.0"]
    assert lines[2].split() == ["e4m3", "none", "1250.5"]


def test_unknown_kind_is_refused_by_name():
    with pytest.raises(ValueError, match="kind: 'fp4'"):
        ceilings.mma_ceiling(None, 132, kind="fp4")
