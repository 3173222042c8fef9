"""The second sm_120 model (kernel/bench/sm120_sim.py): ptxas' own spacing of a warp's MMAs agrees with
the rate the models assume, the simulation respects its pipes, and the committed file is its rows on its
inputs. A model's tests: nothing here is a measurement."""
import json
from collections import Counter
from pathlib import Path

import pytest

from kernel.bench import issue_model as im, probe_sass, sm120_estimate, sm120_sim

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "reports" / "data"


def _committed() -> dict:
    files = sorted(DATA.glob("sm120-sim-*.json"))
    assert files, "no sm120-sim-*.json in reports/data"
    return json.loads(files[-1].read_text())


def test_spacing_reads_the_cycles_between_a_warps_mmas_round_the_loop():
    def op(name, stall):
        return im.Op(0, name, name, stall, 7, 7, 0)
    path = [op("HMMA.16816.F32.BF16", 15), op("NOP", 1), op("HMMA.16816.F32.BF16", 1), op("LDSM.16.M88.4", 15),
            op("FADD", 3)]
    # 15 + 1 to the second; 1 + 15 + 3 round the loop to the first
    assert sm120_sim.hmma_spacing(path) == Counter({16: 1, 19: 1})


@pytest.mark.parametrize("pool", ["bf16", "fp8"])
def test_ptxas_spaces_a_warps_mmas_at_the_pipe_rate_the_models_assume(lib_dir, pool):
    """sm_120: one HMMA.16816 a warp every 16 cycles, sm_120's published 0.25 MMA a clock and SM over
    4 schedulers (the first model's rate); sm_90: every 6, within the H200's measured 6.85."""
    assert sm120_sim.PIPE_CYCLES["120"] == 16 == sm120_sim.SCHEDULERS / sm120_estimate.SM120["mma_per_clk_sm"]
    for arch, want in (("120", 16), ("90", 6)):
        paths = im.loop_paths(probe_sass.sass_of(lib_dir, arch), im.FUNCTIONS[(pool, True)], True)
        spacing = sum((sm120_sim.hmma_spacing(p) for p in paths), Counter())
        assert spacing.most_common(1)[0][0] == want, (arch, spacing)
    assert 6 <= sm120_sim.PIPE_CYCLES["90"] < 7


def test_sm120s_simulated_tile_is_no_faster_than_its_tensor_pipe(lib_dir):
    paths = im.loop_paths(probe_sass.sass_of(lib_dir, "120"), im.FUNCTIONS[("bf16", False)], False)
    r = im.simulate(paths, {"hmma_cycles": sm120_sim.PIPE_CYCLES["120"], "seeds": 1}, tiles=10, warm=4)
    assert r["cycles_per_tile"] >= 136 * sm120_sim.PIPE_CYCLES["120"]
    assert r["cycles_per_tile"] >= max(sum(max(x.stall, 1) for x in p) for p in paths)


def test_the_range_brackets_a_ratio_and_a_shift_of_the_sm90_shortfall():
    sim = {"90": {p: {"math": 1600.0} for p in sm120_sim.POOLS}, "120": {p: {"math": 2400.0} for p in sm120_sim.POOLS}}
    micro = {"rows": [{"stage": "mma", "tier": 8, "S": 185000, "H": 8, "T": 16, "kv_dtype": "bfloat16",
                       "clk_per_tile": 2000.0}]}
    model = {"clocks": {"boost": 2.0}, "rows": [{"kv_dtype": "bfloat16", "T": 16, "tier": 8, "S": 185000, "H": 8,
                                                 "clock": "boost", "mmas_per_tile": 544, "sm120_clk_per_tile": 3100.0,
                                                 "sm120_tiles_per_cta": 100, "sm120_math_us": 155.0}]}
    (r,) = sm120_sim.rows(sim, micro, model)
    assert r["sm120_clk_per_tile_scaled"] == 3000.0 and r["sm120_clk_per_tile_shifted"] == 2800.0
    assert r["sm120_math_us_low"] == pytest.approx(140.0) and r["sm120_math_us_high"] == pytest.approx(150.0)
    assert r["sm120_mma_floor_clk_per_tile"] == 2176.0
    assert r["mma_share_low"] == pytest.approx(2176 / 3000) and r["first_model_mma_share"] == pytest.approx(2176 / 3100)


def test_the_committed_file_is_its_rows_on_its_inputs():
    doc = _committed()
    assert doc["kind"] == "sm120_sim" and "not a measurement" in doc["model"]
    micro = json.loads((DATA / doc["inputs"]["micro"]).read_text())
    model = json.loads((DATA / doc["inputs"]["model"]).read_text())
    assert doc["rows"] == sm120_sim.rows(doc["sim"], micro, model)
    assert {r["kv_dtype"] for r in doc["rows"]} == {"bfloat16", sm120_estimate.FP8}


def test_notes_quote_the_committed_file():
    notes = (ROOT / "kernel" / "NOTES.md").read_text()
    for line in sm120_sim.notes_lines(_committed()):
        assert line in notes, line


def test_missing_inputs_are_named_before_any_build(tmp_path, capsys):
    assert sm120_sim.main(["--data", str(tmp_path)]) == 2
    assert "--micro: no micro-*.json in" in capsys.readouterr().err
    micro = tmp_path / "micro-h200-20990101T0000.json"
    micro.write_text(json.dumps({"date": "2099-01-01T00:00:00+00:00", "rows": []}))
    assert sm120_sim.main(["--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--model:" in err and "sm120-model-from-h200-20990101T0000.json not found" in err
