"""03_canary_ab in smoke mode: against the real rollout tool once it has landed, and until then
against a test double of its agreed API (so the notebook's own code is exercised today)."""
from __future__ import annotations

import importlib.util
import json
import re

import pytest

from notebooks import index


def _rollout_importable() -> bool:
    try:
        return importlib.util.find_spec("rollout.emulator") is not None
    except ModuleNotFoundError:
        return False


SMOKE = ("-p", "smoke", "true", "-p", "context_tokens", "16384", "-p", "rounds", "2",
         "-p", "max_new_tokens", "4", "-p", "time_scale", "0.01")


@pytest.mark.skipif(not _rollout_importable(), reason="rollout.emulator not merged yet")
def test_canary_ab_smoke_on_emulators(tmp_path, fixture_dir, cli):
    rc = cli(tmp_path, "phase3", *SMOKE, "-p", "data_dir", str(fixture_dir))
    assert rc == 0
    page = (tmp_path / "reports" / "03_canary_ab.html").read_text()
    assert "EMULATED A/B: not a live service" in page and "Gate decision:" in page
    rec = index.read_record(tmp_path / "reports" / "03_canary_ab.html")
    assert rec["emulated"] is True and len(rec["endpoints"]) == 2


# A stand-in with the agreed signatures: records every call, returns fixed A/B numbers.
FAKE = {
    "__init__.py": "",
    "emulator.py": '''import json, os
def _log(*a):
    with open(os.environ["FAKE_ROLLOUT_LOG"], "a") as f:
        f.write(json.dumps(a) + "\\n")
class _H:
    def __init__(self, arm, port):
        self.arm, self.url = arm, f"http://127.0.0.1:{port}"
    def stop(self):
        _log("stop", self.arm)
def start_emulator(arm, *, port=0, data_dir="reports/data", time_scale=1.0, fault=None):
    _log("start", arm, data_dir, time_scale)
    return _H(arm, {"flash": 1001, "triton": 1002}[arm])
''',
    "ab.py": '''from .emulator import _log
def run_ab(candidate_url, control_url, *, context_tokens=185000, rounds=5, max_new_tokens=32,
           threshold=0.02, seed=0, progress=None):
    _log("run_ab", candidate_url, control_url, context_tokens, rounds)
    progress("round", 1, of=rounds)
    arm = lambda v: {"tokens_per_s": v, "median": sorted(v)[len(v) // 2], "accept_length": [3, 4]}
    return {"arms": {"candidate": arm([41.5, 42.5, 43.5]), "control": arm([0.61, 0.7, 0.72])},
            "ratio": 60.714, "ci": [55.125, 66.25], "pass": True,
            "reason": "candidate not slower than control"}
''',
    "numerics.py": '''from .emulator import _log
def compare(candidate_url, control_url):
    _log("compare", candidate_url, control_url)
    return {"pass": False, "top1_agreement": 0.875, "max_abs_logprob_diff": 0.4321}
''',
}


@pytest.mark.skipif(_rollout_importable(), reason="the real rollout tool is here; see above")
def test_canary_notebook_against_api_double(tmp_path, fixture_dir, cli, monkeypatch):
    pkg = tmp_path / "fake" / "rollout"
    pkg.mkdir(parents=True)
    for name, src in FAKE.items():
        (pkg / name).write_text(src)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    monkeypatch.setenv("FAKE_ROLLOUT_LOG", str(log))
    rc = cli(tmp_path, "phase3", *SMOKE, "-p", "data_dir", str(fixture_dir))
    assert rc == 0
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls[0] == ["start", "flash", str(fixture_dir), 0.01]
    assert calls[1] == ["start", "triton", str(fixture_dir), 0.01]
    assert calls[2] == ["run_ab", "http://127.0.0.1:1001", "http://127.0.0.1:1002", 16384, 2]
    assert calls[3] == ["compare", "http://127.0.0.1:1001", "http://127.0.0.1:1002"]
    assert sorted(c[1] for c in calls[4:]) == ["flash", "triton"]  # both emulators stopped
    page = (tmp_path / "reports" / "03_canary_ab.html").read_text()
    text = re.sub(r"<[^>]+>", " ", page)
    assert "EMULATED A/B: not a live service" in text
    assert "60.714" in text and "[55.125, 66.250]" in text and "87.5%" in text
    # speed passed but numerics failed: the gate must roll back
    assert "Gate decision: FAIL, roll back (emulated endpoints)" in text
    rec = index.read_record(tmp_path / "reports" / "03_canary_ab.html")
    assert rec["emulated"] is True and rec["gate_pass"] is False
    assert rec["endpoints"] == ["http://127.0.0.1:1001", "http://127.0.0.1:1002"]
    assert "emulated endpoints (local emulator, not a live service)" in \
        (tmp_path / "reports" / "index.html").read_text()


def test_canary_needs_both_endpoints_or_neither(tmp_path, fixture_dir, cli, capsys):
    rc = cli(tmp_path, "phase3", "-p", "smoke", "true", "-p", "data_dir", str(fixture_dir),
             "-p", "candidate_url", "http://127.0.0.1:9")
    assert rc == 1
    assert "candidate_url='http://127.0.0.1:9', control_url='': give both" in \
        capsys.readouterr().err
