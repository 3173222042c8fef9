"""kernel/bench/trace.py's phase arithmetic and the diagnostic build's flags (the GPU part runs
in kernel.gpu_run --stages trace)."""
import json
from pathlib import Path

import pytest

from kernel import build
from kernel.bench import trace
from kernel.bench.trace import pearson, per_cta, phases, second_cta_excess


def _verify_row(entry, planned, loop=0, done=0, stored=0):
    return [entry, planned, loop, done, stored, 0, 0, 0]


def test_phases_of_a_traced_call():
    verify = [_verify_row(1000, 3000, 4000, 54000, 55000),     # ns
              _verify_row(1500, 3500, 4500, 58500, 60000),     # the slowest CTA: the tail
              _verify_row(2000, 4000),                          # no item: returned after planning
              [0] * 8]                                          # never ran (beyond the grid)
    merge = [[59000, 60500, 62000, 63000, 0, 0, 0, 0], [61000, 61500, 62500, 64000, 0, 0, 0, 0]]
    r = phases(verify, merge)
    assert r["ctas"] == 3 and r["working_ctas"] == 2
    assert r["verify_launch_spread_us"] == pytest.approx(1.0)
    assert r["plan_us"] == pytest.approx(2.0) and r["prologue_us"] == pytest.approx(1.0)
    assert (r["loop_min_us"], r["loop_max_us"]) == pytest.approx((50.0, 54.0))
    assert r["last_store_us"] == pytest.approx(59.0) and r["first_store_us"] == pytest.approx(54.0)
    assert r["merge_first_entry_after_verify_us"] == pytest.approx(-1.0)   # resident before the end
    assert r["merge_waited_after_verify_us"] == pytest.approx(1.0)        # median of 0.5 and 1.5
    assert r["merge_last_store_after_verify_us"] == pytest.approx(4.0)
    assert r["span_us"] == pytest.approx(63.0)
    assert r["working_launch_spread_us"] == pytest.approx(0.5)       # the item-less CTA is left out
    assert r["store_tail_us"] == pytest.approx(2.5)                  # 60 after the median 57.5
    with pytest.raises(ValueError, match="verify"):
        phases([[0] * 8], merge)


def test_a_diagnostic_sources_extra_points_count_from_the_plan_over_the_ctas_that_recorded_them():
    a = [1000, 3000, 7000, 54000, 55000, 4000, 6000, 0, 0, 0]   # points 7 and 9 missing here
    b = [1500, 3500, 8500, 58500, 60000, 5500, 7500, 9000, 0, 0]
    idle = [2000, 4000, 0, 0, 0, 0, 0, 0, 0, 9999]               # item-less: left out everywhere
    r = phases([a, b, idle], [])
    assert r["point5_after_plan_us"] == pytest.approx(1.5)      # median of 1.0 and 2.0
    assert (r["point6_after_plan_us"], r["point6_ctas"]) == (pytest.approx(3.5), 2)
    assert (r["point7_after_plan_us"], r["point7_ctas"]) == (pytest.approx(5.5), 1)   # b alone
    assert "point8_after_plan_us" not in r and "point9_after_plan_us" not in r
    assert per_cta([a, b, idle]) == [[0, 0.0, 6.0, 53.0, 54.0, 3.0, 5.0, None],
                                     [1, 0.5, 7.5, 57.5, 59.0, 4.5, 6.5, 8.0]]
    plain = [_verify_row(1000, 3000, 4000, 54000, 55000), _verify_row(1500, 3500, 4500, 58500, 60000)]
    assert not [k for k in phases(plain, []) if k.startswith("point")]   # production's: none


def test_diagnostic_build_has_its_own_hash_and_checked_defines():
    assert build.source_hash(("90",), ("MLAV_TRACE",)) != build.source_hash(("90",))
    assert build.lib_dir(("90",), defines=("MLAV_TRACE",)) != build.lib_dir(("90",))
    with pytest.raises(ValueError, match="defines"):
        build.source_hash(("90",), ("-O0; rm",))


def test_start_store_correlation_and_per_cta_rows():
    verify = [_verify_row(1000, 3000, 4000, 54000, 55000), _verify_row(1500, 3500, 4500, 58500, 60000),
              _verify_row(2000, 4000), [0] * 8]
    r = phases(verify, [])
    assert r["start_store_corr"] == pytest.approx(1.0)          # two points: perfectly correlated
    assert (r["entry_to_store_min_us"], r["entry_to_store_max_us"]) == pytest.approx((54.0, 58.5))
    assert per_cta(verify) == [[0, 0.0, 3.0, 53.0, 54.0], [1, 0.5, 3.5, 57.5, 59.0]]
    assert pearson([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert pearson([1.0, 1.0], [2.0, 3.0]) is None
    with pytest.raises(ValueError, match="xs, ys"):
        pearson([1.0], [1.0])


def test_second_cta_on_an_sm_runs_longer():
    rows = [[0, 0.0, 1.0, 41.0, 42.0], [1, 0.0, 1.0, 43.0, 44.0],     # dispatched first on their SMs
            [2, 0.1, 1.1, 47.1, 48.0], [3, 0.1, 1.1, 45.1, 46.0],     # dispatched second
            [4, 0.1, 1.1, 30.1, 31.0]]                                # the short last split: left out
    assert second_cta_excess(rows, 2) == pytest.approx(4.0)           # 45 against 41 us
    assert second_cta_excess(rows, 8) is None


def test_trace_cases_and_macros_are_checked_before_any_gpu(capsys):
    assert trace.parse_cases("185000:8:8:bf16,16384:1:8:fp8") == ((185000, 8, 8, "auto"), (16384, 1, 8, trace.FP8_KV))
    for bad in ("185000:8:8", "185000:0:8:bf16", "185000:8:8:fp16"):
        try:
            trace.parse_cases(bad)
        except ValueError as e:
            assert repr(bad.split(",")[0]) in str(e)
        else:
            raise AssertionError(bad)
    assert trace.main(["--out", "x", "--cases", "1:2:3:fp4"]) == 2
    assert "'1:2:3:fp4'" in capsys.readouterr().err
    assert trace.main(["--out", "x", "--define", "FOO=1"]) == 2
    assert "['FOO=1']" in capsys.readouterr().err
    assert trace.main(["--out", "x", "--repeat", "0"]) == 2
    assert "--repeat: 0 calls a graph" in capsys.readouterr().err


def test_a_call_behind_another_plans_and_starts_no_faster():
    # trace --repeat (one H100, the shipped code): the second and third of three calls captured in one graph
    # plan and start within 0.2 us of a call alone at every case (bf16 T = 1 / 8, fp8 T = 8 / 16 at 185k, bf16
    # T = 8 at 16k, whose 19 MB of KV leave the code in L2 in every replay): the call before leaves nothing
    # that shortens the once-a-call part (kernel/NOTES.md, thirtieth session)
    rungs = Path(__file__).resolve().parents[1] / "reports" / "data" / "rungs"
    docs = {r: json.loads((rungs / f"trace-h100-20261207T0009-repeat{r}.json").read_text()) for r in (1, 2, 3)}
    assert [docs[r]["calls_per_graph"] for r in (1, 2, 3)] == [1, 2, 3]
    key = lambda row: (row["kv_dtype"], row["S"], row["T"])
    alone = {key(row): row for row in docs[1]["rows"]}
    assert len(alone) == 5
    for r in (2, 3):
        for row in docs[r]["rows"]:
            for k in ("plan_us", "prologue_us"):
                assert abs(row[k] - alone[key(row)][k]) <= 0.2, (r, key(row), k)
