"""The phase-2 DCP section: the dcp-sim file's frame and its finding, on the recorded H200 file
and on edited copies (a failing rank, a faster DCP, no rows)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from notebooks import data, findings

DATA = Path(__file__).resolve().parents[2] / "reports" / "data"


@pytest.fixture
def doc():
    d = data.newest(DATA, "dcp-sim")
    return copy.deepcopy(d)


def test_frame_reads_every_group_size(doc):
    df = data.dcp_frame(doc)
    assert df["ranks"].tolist() == sorted(r["N"] for r in doc["rows"])
    # KV memory per GPU is 1/N of the unsharded cache (61 layers x 1152 B per token)
    assert df["kv_share"].tolist() == pytest.approx([1 / n for n in df["ranks"]])
    assert all(c.startswith("net_ms:") for c in df.columns if "ms:" in c)


def test_finding_says_when_nothing_is_saved(doc):
    f = findings.dcp(doc)
    slow = min(r["rank_us_max"] + r["epilogue_us"] for r in doc["rows"])
    unsharded = sorted(r["unsharded_us"] for r in doc["rows"])[len(doc["rows"]) // 2]
    assert f["status"] == "pass"
    assert ("no attention time is saved" in f["text"]) == (slow >= unsharded)


def test_a_faster_dcp_is_reported_as_faster(doc):
    for r in doc["rows"]:
        r["rank_us_max"], r["epilogue_us"] = r["unsharded_us"] / (2 * r["N"]), 1.0
    f = findings.dcp(doc)
    assert "faster at best" in f["text"] and "no attention time" not in f["text"]


def test_a_failing_rank_fails_the_finding(doc):
    doc["rows"][0]["pass"] = False
    assert findings.dcp(doc)["status"] == "fail"
    assert findings.dcp(None) is None


def test_no_rows_is_an_error_naming_the_file(doc):
    doc["rows"] = []
    with pytest.raises(data.MeasurementError, match="dcp-sim has no 'rows'"):
        data.dcp_frame(doc)


def test_phase2_page_shows_the_section():
    html = (DATA.parent / "02_paged_bf16.html").read_text()
    assert 'id="dcp"' in html and "DCP simulated on one GPU" in html
    d = json.loads((sorted(DATA.glob("dcp-sim-*.json"))[-1]).read_text())
    assert f"N = {'/'.join(str(r['N']) for r in sorted(d['rows'], key=lambda r: r['N']))}" in html
