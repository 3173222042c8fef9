"""Parameters are type-checked against the notebook's literal, and the ones that make a page
claim a measurement are the runner's alone: no -p can make a page say what did not happen."""
from __future__ import annotations

import pytest

from notebooks import params, run


@pytest.mark.parametrize("raw,default,want", [
    ("true", False, True), ("false", True, False), ("8", 5, 8), ("1", 0.02, 1.0),
    ("0.5", 0.02, 0.5), ("8080", "", "8080"), ("true", "", "true"), ("[1, 2]", [1], [1, 2]),
])
def test_values_take_the_type_of_the_default(raw, default, want):
    got = params.coerce("nb", "x", raw, default)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("raw,default,kind", [
    ("notabool", False, r"a bool \(true or false\)"), ("1", False, r"a bool \(true or false\)"),
    ("2.5", 5, "an integer"),
    ("true", 5, "an integer"), ("fast", 0.02, "a number"), ("3", [1], "a list"),
])
def test_a_value_of_another_type_is_an_error_naming_it(raw, default, kind):
    with pytest.raises(params.ParameterError,
                       match=rf"nb: -p x '{raw}': expected {kind}, like the notebook's default"):
        params.coerce("nb", "x", raw, default)


def test_smoke_notabool_is_refused_and_leaves_the_report_alone(tmp_path, fixture_dir, cli,
                                                               capsys):
    report = tmp_path / "reports" / "00_baseline.html"
    report.parent.mkdir(parents=True)
    report.write_text("tracked report")
    rc = cli(tmp_path, "phase0", "-p", "smoke", "notabool", "-p", "data_dir", str(fixture_dir))
    assert rc == 1
    assert "-p smoke 'notabool': expected a bool (true or false)" in capsys.readouterr().err
    assert report.read_text() == "tracked report"
    assert not (tmp_path / "reports" / "index.html").exists()


@pytest.mark.parametrize("name,value,says", [
    ("measured_since", "2020-01-01T00:00:00+00:00", "set by the runner only, after kernel.gpu_run"),
    ("record_path", "/tmp/x.json", "set by the runner only"),
    ("measured_now", "true", "unknown parameter(s) 'measured_now'"),
])
def test_no_parameter_can_claim_a_fresh_measurement(tmp_path, fixture_dir, cli, capsys, name,
                                                    value, says):
    rc = cli(tmp_path, "phase2", "-p", "smoke", "true", "-p", "data_dir", str(fixture_dir),
             "-p", name, value)
    err = capsys.readouterr().err
    assert rc == 1 and says in err
    assert not (tmp_path / "reports" / "02_paged_bf16.html").exists()


def test_runner_only_names_are_not_offered_as_settable(tmp_path, cli, capsys):
    assert cli(tmp_path, "phase2", "-p", "bogus", "1") == 1
    err = capsys.readouterr().err
    declared = err.split("the notebook declares: ")[1]
    assert "smoke" in declared
    assert "measured_since" not in declared and "record_path" not in declared


def test_a_smoke_render_may_not_replace_the_tracked_reports(tmp_path, fixture_dir, monkeypatch,
                                                           capsys):
    tracked = tmp_path / "tracked"
    monkeypatch.setattr(run, "TRACKED_REPORTS", tracked)
    rc = run.main(["phase0", "-p", "smoke", "true", "-p", "data_dir", str(fixture_dir),
                   "--reports-dir", str(tracked), "--build-dir", str(tmp_path / "build"),
                   "--no-progress"])
    assert rc == 1 and "may not overwrite the tracked report" in capsys.readouterr().err
    assert not tracked.exists()
