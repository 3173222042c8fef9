"""Shared fixtures: generated measurement JSON in a tmp dir, and a runner call into tmp dirs."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # `import notebooks` under bare pytest
from nb_fixtures import write_fixture_data  # noqa: E402

from notebooks import run  # noqa: E402


@pytest.fixture(scope="session")
def fixture_dir(tmp_path_factory) -> Path:
    """One fixture file per measured kind ("fixture": true), shared by the read-only tests."""
    return write_fixture_data(tmp_path_factory.mktemp("data"))


def run_cli(tmp: Path, *args: str) -> int:
    """notebooks.run.main with reports and build dirs under tmp; returns the exit status."""
    return run.main([*args, "--reports-dir", str(tmp / "reports"),
                     "--build-dir", str(tmp / "build"), "--timeout", "120", "--no-progress"])


@pytest.fixture(scope="session")
def cli():
    """The run_cli helper, for tests: cli(tmp_path, "00_baseline", "-p", "smoke", "true")."""
    return run_cli
