"""notebooks.run: refused parameters, a failing cell, missing or fixture data, the GPU branch."""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import pytest
from nb_fixtures import write_fixture_data

from notebooks import run

BAD_NOTEBOOK = '''# %% tags=["parameters"]
x = 1

# %%
y = x + 1

# %%
raise ValueError(f"boom {x}")
'''


def test_unknown_parameter_is_refused_before_any_kernel_starts(tmp_path, fixture_dir, cli,
                                                               capsys):
    rc = cli(tmp_path, "00_baseline", "-p", "smoke", "true", "-p", "data_dir", str(fixture_dir),
             "-p", "smok", "true")
    err = capsys.readouterr().err
    assert rc == 1
    assert "unknown parameter(s) 'smok'" in err and "declares: " in err and "smoke" in err
    assert not (tmp_path / "build" / "00_baseline.executed.ipynb").exists()
    assert not (tmp_path / "reports" / "00_baseline.html").exists()


def test_failed_cell_is_surfaced_and_exits_nonzero(tmp_path):
    src = tmp_path / "bad.py"
    src.write_text(BAD_NOTEBOOK)
    p = subprocess.run([sys.executable, "-m", "notebooks.run", str(src), "-p", "x", "7",
                        "--reports-dir", str(tmp_path / "reports"),
                        "--build-dir", str(tmp_path / "build"), "--timeout", "60"],
                       cwd=run.ROOT, capture_output=True, text=True, timeout=180)
    assert p.returncode == 1
    # cells: parameters, injected-parameters, y = ..., raise -> the raise is cell 3
    assert "error: bad: cell 3 (execution count" in p.stderr
    assert "raised ValueError: boom 7" in p.stderr
    assert "partially executed notebook" in p.stderr
    assert (tmp_path / "build" / "bad.executed.ipynb").is_file()
    assert not (tmp_path / "reports" / "bad.html").exists()


def test_parameters_cell_must_be_plain_literals(tmp_path, cli, capsys):
    src = tmp_path / "derived.py"
    src.write_text('# %% tags=["parameters"]\na = 1\nb = a * 2\n\n# %%\nprint(b)\n')
    assert cli(tmp_path, str(src)) == 1
    assert "parameters cell line 2 is not `name = literal`: 'b = a * 2'" in capsys.readouterr().err


def test_missing_kind_fails_with_its_name(tmp_path, cli, capsys):
    data_dir = write_fixture_data(tmp_path / "data", kinds=("bench",))
    rc = cli(tmp_path, "phase2", "-p", "smoke", "true", "-p", "data_dir", str(data_dir))
    err = capsys.readouterr().err
    assert rc == 1 and "no measurement of kind 'validation'" in err
    assert not (tmp_path / "reports" / "02_paged_bf16.html").exists()


def test_fixture_data_is_refused_without_smoke(tmp_path, fixture_dir, cli, capsys):
    assert cli(tmp_path, "phase0", "-p", "data_dir", str(fixture_dir)) == 1
    assert "test fixture data" in capsys.readouterr().err


def test_unknown_target_is_named(tmp_path, cli, capsys):
    assert cli(tmp_path, "phase9") == 1
    assert "target: unknown 'phase9'" in capsys.readouterr().err


def test_measure_fails_when_the_gpu_script_fails_or_writes_nothing(tmp_path):
    data_dir = write_fixture_data(tmp_path / "data", kinds=("bench",),
                                  date="2020-01-01T00:00:00+00:00")
    with pytest.raises(run.RunError, match="failed; no report rendered from stale data"):
        run.measure(data_dir, cmd=[sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(run.RunError, match="wrote no new bench file"):
        run.measure(data_dir, cmd=[sys.executable, "-c", "pass"])


FAKE_GPU_RUN = '''import json, sys
from datetime import datetime, timezone
sys.path.insert(0, {tests!r})
from nb_fixtures import bench_doc
doc = bench_doc(datetime.now(timezone.utc).isoformat())
doc["commit"] = "freshly-measured"
open(sys.argv[sys.argv.index("--out") + 1] + "/bench-now.json", "w").write(json.dumps(doc))
'''


def test_gpu_machine_measures_first_and_says_so(tmp_path, monkeypatch, capsys):
    """The GPU branch of `make phase2`, with a stand-in for kernel.gpu_run."""
    data_dir = write_fixture_data(tmp_path / "data", kinds=("bench",),
                                  date="2020-01-01T00:00:00+00:00")
    script = tmp_path / "gpu_run.py"
    script.write_text(FAKE_GPU_RUN.format(tests=str(Path(__file__).parent)))
    real_measure = run.measure
    monkeypatch.setattr(run, "has_cuda_gpu", lambda: True)
    monkeypatch.setattr(run, "measure", lambda d: real_measure(
        d, cmd=[sys.executable, str(script), "--out", str(d)]))
    rc = run.main(["phase0", "--measure", "auto", "-p", "smoke", "true", "-p", "data_dir",
                   str(data_dir), "--reports-dir", str(tmp_path / "reports"),
                   "--build-dir", str(tmp_path / "build"), "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    page = (tmp_path / "reports" / "00_baseline.html").read_text()
    assert "Measured anew" in page and "freshly-measured" in page
    assert "Rendered from recorded measurements" not in page
    rec = json.loads((tmp_path / "build" / "00_baseline.record.json").read_text())
    assert rec["measured_now"] is True and rec["sources"][0]["commit"] == "freshly-measured"
    date = datetime.fromisoformat(rec["sources"][0]["date"])
    assert (datetime.now(timezone.utc) - date).total_seconds() < 600


@pytest.mark.parametrize("name", list(run.NEEDS))
def test_committed_notebooks_declare_smoke_and_data_dir_as_literals(tmp_path, name):
    ipynb = run.to_ipynb(run.NB_DIR / f"{name}.py", tmp_path)
    defaults = run.parameter_defaults(ipynb)
    assert run.check_parameters(ipynb, {}, defaults) == {}
    assert {"smoke", "data_dir", "record_path"} <= set(defaults)
    assert defaults["smoke"] is False
    if name != "03_canary_ab":  # it shows no kernel.gpu_run numbers of its own
        assert defaults["measured_since"] == ""


def test_parameter_papermill_cannot_parse_is_refused(tmp_path, cli, capsys):
    src = tmp_path / "quoted.py"
    src.write_text('# %% tags=["parameters"]\nurl = ""  # none means url=None\n\n# %%\nprint(url)\n')
    assert cli(tmp_path, str(src)) == 1
    assert "papermill cannot parse the parameters line(s) of 'url'" in capsys.readouterr().err


def test_all_checks_every_notebook_before_running_any(tmp_path, cli, capsys):
    data_dir = write_fixture_data(tmp_path / "data", kinds=("bench",))
    rc = cli(tmp_path, "all", "-p", "smoke", "true", "-p", "data_dir", str(data_dir))
    assert rc == 1 and "no measurement of kind 'validation'" in capsys.readouterr().err
    assert not (tmp_path / "reports" / "00_baseline.html").exists()  # 00 alone had its data


TRANSPORT_NOTEBOOK = '''# %% tags=["parameters"]
x = 1

# %%
from ipykernel.kernelapp import IPKernelApp
app = IPKernelApp.instance()
print("transport", app.transport, len(app.ip) + len("-99999"))
'''


def test_the_kernel_talks_over_unix_sockets_not_tcp_ports(tmp_path):
    # TCP ports the client picked could be taken by a server the other test worker starts before the
    # kernel binds them (zmq "Address already in use": a red CI run); IPC sockets are named per kernel
    src = tmp_path / "transport.py"
    src.write_text(TRANSPORT_NOTEBOOK)
    ipynb = run.to_ipynb(src, tmp_path / "build")
    out = tmp_path / "build" / "transport.executed.ipynb"
    run.execute(ipynb, out, {"x": 2}, timeout=60, progress=False)
    text = "".join(o.get("text", "") for c in nbformat.read(out, as_version=4).cells for o in c.get("outputs", []))
    word, transport, path_len = text.split()
    assert (word, transport) == ("transport", "ipc")
    assert int(path_len) <= 107   # a Unix socket's path limit
