"""pytest fixtures of the rollout tests; the helpers they use are in rollout_helpers.py."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from rollout_fixtures import write_measurements  # noqa: E402
from rollout_helpers import Fleet  # noqa: E402


@pytest.fixture
def data_dir(tmp_path):
    return write_measurements(tmp_path / "data")


@pytest.fixture
def make_fleet(tmp_path, data_dir):
    """make_fleet(n=3, extra={"g0": [emulator args]}, gates={...}, settings={...}) -> Fleet;
    every process a fleet started is killed at teardown."""
    fleets = []

    def make(**kw):
        d = tmp_path / f"fleet{len(fleets)}"
        d.mkdir()
        f = Fleet(d, data_dir, **kw)
        fleets.append(f)
        return f
    yield make
    for f in fleets:
        f.kill_all()
