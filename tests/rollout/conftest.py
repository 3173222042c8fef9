import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fixtures import write_measurements  # noqa: E402


@pytest.fixture
def data_dir(tmp_path):
    return write_measurements(tmp_path / "data")
