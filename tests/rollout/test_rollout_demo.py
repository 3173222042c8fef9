"""`make rollout-demo` keeps emulated results out of reports/data unless asked."""
import subprocess
import sys

from rollout_helpers import REPO


def test_demo_writes_under_dot_rollout_by_default(tmp_path, data_dir):
    r = subprocess.run([sys.executable, "-m", "rollout.demo", "--data-dir", str(data_dir), "--groups", "2",
                        "--context-tokens", "2048", "--time-scale", "0.05"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    results = list((tmp_path / ".rollout" / "demo").glob("rollout-*.json"))
    assert len(results) == 1 and '"emulated": true' in results[0].read_text()
    assert not list((REPO / "reports" / "data").glob("rollout-*.json"))
