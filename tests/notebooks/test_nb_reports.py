"""Every phase notebook executes in smoke mode on fixture JSON and renders a code-free report
whose numbers come from that data; the index links every report with its data's provenance."""
from __future__ import annotations

import json
import re
import statistics

import pytest

from notebooks import index

PHASES = ("00_baseline", "01_flash_decode", "02_paged_bf16")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory, fixture_dir, cli):
    """Run phase0..phase2 once (smoke) into one tmp reports dir; returns that dir."""
    tmp = tmp_path_factory.mktemp("render")
    for phase in ("phase0", "phase1", "phase2"):
        rc = cli(tmp, phase, "-p", "smoke", "true", "-p", "data_dir", str(fixture_dir))
        assert rc == 0, f"{phase} failed"
    return tmp / "reports"


def _text(page: str) -> str:
    return re.sub(r"<[^>]+>", " ", page)


@pytest.mark.parametrize("name", PHASES)
def test_report_has_no_code_and_says_where_data_came_from(rendered, name):
    page = (rendered / f"{name}.html").read_text()
    assert "from notebooks import" not in page and "record_path" not in page
    assert "data_dir =" not in page and "Traceback" not in page
    assert "Rendered from recorded measurements" in page
    assert "test fixture, not a measurement" in page
    assert page.count("data:image/png;base64,") >= 2  # figures are inlined


def _bench(fixture_dir):
    return json.loads(next(fixture_dir.glob("bench-*.json")).read_text())


def test_baseline_step_time_matches_the_data(rendered, fixture_dir):
    rows = [r for r in _bench(fixture_dir)["rows"] if r["impl"] == "sglang_extend"
            and (r["S"], r["T"], r["H"], r["layout"], r["page_size"], r["batch"])
            == (185000, 8, 8, "scattered", 1, 1)]
    step_ms = statistics.median(r["time_us"] for r in rows) * 61 / 1e3
    assert f"{step_ms:,.0f} ms per verify step" in _text(
        (rendered / "00_baseline.html").read_text())


def test_paged_report_names_case_count_worst_case_and_speedups(rendered, fixture_dir):
    page = _text((rendered / "02_paged_bf16.html").read_text())
    val = json.loads(next(fixture_dir.glob("validation-*.json")).read_text())
    worst = max(val["cases"], key=lambda c: c["rel_err"])
    assert f"{val['n_cases']} cases" in page and "all pass" in page
    assert worst["id"] in page and f"{worst['rel_err']:.3g}" in page
    assert "no NaN in any output and no unwritten output row" in page
    centre = {}
    for r in _bench(fixture_dir)["rows"]:
        if (r["S"], r["T"], r["H"], r["layout"], r["page_size"], r["batch"]) == \
                (185000, 8, 8, "scattered", 1, 1):
            centre.setdefault(r["impl"], []).append(r["time_us"])
    med = {k: statistics.median(v) for k, v in centre.items()}
    for impl in ("sglang_extend", "sglang_verify_mla"):
        assert f"{med[impl] / med['flash']:,.1f}x" in page
    assert "Does the cache layout matter?" in page
    assert re.search(r"(No|Yes)\.\s+The largest slow-down", page)


def test_index_links_every_report_with_date_commit_gpu(rendered, fixture_dir):
    page = (rendered / "index.html").read_text()
    for name in PHASES:
        assert f'href="{name}.html"' in page
    bench = _bench(fixture_dir)
    assert bench["date"] in page and bench["commit"][:12] in page and bench["gpu"] in page
    assert page.count("test fixture, not a measurement") >= 5  # 1 + 1 + 3 sources
    rec = index.read_record(rendered / "02_paged_bf16.html")
    assert [s["kind"] for s in rec["sources"]] == ["validation", "bench", "sglang-integration"]


def test_index_skips_pages_without_a_record(tmp_path):
    (tmp_path / "notes.html").write_text("<html><head></head><body>x</body></html>")
    page = index.write_index(tmp_path).read_text()
    assert "notes.html" not in page and "No reports rendered yet" in page
