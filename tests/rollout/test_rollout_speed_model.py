"""Speed model: integration level at its S, bench shape in S, newest file wins, clear errors."""
import json

import pytest

from rollout_fixtures import write_measurements
from rollout.emulator import start_emulator
from rollout.speed_model import MissingMeasurements, SpeedModel, interp


def rows_time(path, impl, S):
    rows = json.loads(path.read_text())["rows"]
    return next(r["time_us"] for r in rows if r["sweep"] == "S" and r["impl"] == impl and r["S"] == S)


def test_interp():
    pts = [(0.0, 0.0), (10.0, 10.0), (20.0, 40.0)]
    assert interp(pts, 5, extrapolate=True) == 5.0
    assert interp(pts, 15, extrapolate=True) == 25.0
    assert interp(pts, 30, extrapolate=True) == 70.0  # end segment's line
    assert interp(pts, 30, extrapolate=False) == 40.0
    assert interp([(2.0, 4.0)], 4, extrapolate=True) == 8.0


def test_integration_level_and_bench_shape(data_dir):
    m = SpeedModel(data_dir, fixed_ms=10.0)
    integ = json.loads((data_dir / "sglang-integration-fixture.json").read_text())["cases"][0]
    # at the integration case's S the model returns the in-server per-layer time exactly
    assert m.attention_ms(185000, "flash") == pytest.approx(integ["plugin_us"] / 1000)
    assert m.attention_ms(185000, "triton") == pytest.approx(integ["triton_us"] / 1000)
    # elsewhere: the bench curve times the same calibration (1.1 in the fixture)
    bench = data_dir / "bench-fixture.json"
    assert m.attention_ms(16384, "triton") == pytest.approx(rows_time(bench, "sglang_extend", 16384) * 1.1 / 1000)
    mid = (rows_time(bench, "flash", 16384) + rows_time(bench, "flash", 65536)) / 2
    assert m.attention_ms((16384 + 65536) / 2, "flash") == pytest.approx(mid * 1.1 / 1000)
    assert m.step_ms(185000, "triton") == pytest.approx(61 * integ["triton_us"] / 1000 + 10.0)
    assert m.step_ms(185000, "flash") < m.step_ms(185000, "triton") / 50
    with pytest.raises(ValueError, match="arm"):
        m.attention_ms(1000, "fast")


def test_newest_file_by_date_wins(data_dir):
    old = json.loads((data_dir / "sglang-integration-fixture.json").read_text())
    old["date"] = "2020-01-01T00:00:00Z"
    old["cases"][0]["triton_us"] *= 100
    (data_dir / "sglang-integration-zzz-old.json").write_text(json.dumps(old))
    m = SpeedModel(data_dir)
    assert m.integ_path.name == "sglang-integration-fixture.json"


def test_missing_measurements_name_the_file(tmp_path):
    with pytest.raises(MissingMeasurements, match=r"no bench-\*\.json of kind 'bench'"):
        SpeedModel(tmp_path)
    write_measurements(tmp_path)
    (tmp_path / "sglang-integration-fixture.json").unlink()
    with pytest.raises(MissingMeasurements, match=r"sglang-integration-\*\.json"):
        SpeedModel(tmp_path)


def test_bench_without_the_needed_rows(tmp_path):
    write_measurements(tmp_path)
    p = tmp_path / "bench-fixture.json"
    d = json.loads(p.read_text())
    d["rows"] = [r for r in d["rows"] if r["impl"] != "sglang_extend"]
    p.write_text(json.dumps(d))
    with pytest.raises(MissingMeasurements, match="sglang_extend"):
        SpeedModel(tmp_path)


def test_emulator_refuses_to_start_without_measurements(tmp_path):
    with pytest.raises(RuntimeError, match=r"exit 2: emulator: no bench-\*\.json"):
        start_emulator("flash", data_dir=tmp_path)


def test_other_tokens_per_request_scale_by_the_bench_at_185k(data_dir):
    """DFLASH's block of 16 and DDTree's D = 33: the T = 8 model times each arm's bench ratio at
    S = 185k (fixture: extend x T / 8, ours x (1 + 0.1 (T - 8) / 8)), linear between measured T."""
    base = SpeedModel(data_dir, fixed_ms=10.0)
    b16, d33 = SpeedModel(data_dir, fixed_ms=10.0, T=16), SpeedModel(data_dir, fixed_ms=10.0, T=33)
    for S in (16384, 185000):
        assert b16.attention_ms(S, "triton") == pytest.approx(2 * base.attention_ms(S, "triton"))
        assert b16.attention_ms(S, "flash") == pytest.approx(1.1 * base.attention_ms(S, "flash"))
        # 33 lies between the measured 32 and 64
        want = 4 + (33 - 32) * (8 - 4) / 32
        assert d33.attention_ms(S, "triton") == pytest.approx(want * base.attention_ms(S, "triton"))
    assert b16.describe()["T"] == 16 and b16.describe()["t_factor"]["triton"] == pytest.approx(2.0)


def test_a_t_without_bench_rows_is_named(tmp_path):
    write_measurements(tmp_path)
    p = tmp_path / "bench-fixture.json"
    d = json.loads(p.read_text())
    d["rows"] = [r for r in d["rows"] if r["sweep"] != "T"]
    p.write_text(json.dumps(d))
    assert SpeedModel(tmp_path, T=8).t_factor == {"flash": 1.0, "triton": 1.0}
    with pytest.raises(MissingMeasurements, match=r"at S=185000, H=8, batch 1 for T=8 and another T \(needed to "
                                                  r"model T=16"):
        SpeedModel(tmp_path, T=16)
