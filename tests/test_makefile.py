"""`make help` lists every target of the Makefile, one line each; .ci/run runs the README's command."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_help_lists_every_target_once():
    targets = re.findall(r"^([a-zA-Z0-9_-]+):", (ROOT / "Makefile").read_text(), re.M)
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    listed = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert sorted(listed) == sorted(set(targets)), (listed, targets)
    for line in out.splitlines():
        assert len(line.split(None, 1)) == 2, f"target without a description: {line!r}"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme
    assert re.search(r"^make test$", ci, re.M)
