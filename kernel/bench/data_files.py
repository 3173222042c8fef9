"""How measurement files sit in a data folder such as reports/data: `<kind>-....json` as
env.write_json writes them, or `....json.gz` once superseded (the same JSON, gzip-compressed: the
validation files are ~0.9 MB each, and the tree a device call carries beside the real-server
bundle must stay under its 64 MiB). Read by notebooks.data and rollout.kernel_spread; no torch."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

# what read_json raises for a file that is not readable JSON
UNREADABLE = (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError, json.JSONDecodeError)


def files(data_dir: str | Path, prefix: str = "") -> list[Path]:
    """data_dir's measurement files whose names start with `prefix`, plain and compressed, in
    name order."""
    d = Path(data_dir)
    return sorted(list(d.glob(f"{prefix}*.json")) + list(d.glob(f"{prefix}*.json.gz")), key=lambda p: p.name)


def read_json(path: str | Path):
    """The JSON of a plain or gzip-compressed file; raises one of UNREADABLE."""
    path = Path(path)
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)
