"""Every phase notebook executes in smoke mode on fixture JSON and renders a code-free report
that opens with findings computed from that data, says where its evidence stops, and links from
the index's verdict to its evidence; a second render of the same data is byte-identical."""
from __future__ import annotations

import html
import json
import re
import statistics
from pathlib import Path

import pytest

from notebooks import index

PHASES = ("00_baseline", "01_flash_decode", "02_paged_bf16")
CENTRE = (185000, 8, 8, "scattered", 1, 1)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory, fixture_dir, cli):
    """Run phase0..phase2 once (smoke) into one tmp reports dir; returns that dir."""
    tmp = tmp_path_factory.mktemp("render")
    for phase in ("phase0", "phase1", "phase2"):
        rc = cli(tmp, phase, "-p", "smoke", "true", "-p", "data_dir", str(fixture_dir))
        assert rc == 0, f"{phase} failed"
    return tmp / "reports"


def _text(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def _bench(fixture_dir):
    return json.loads(next(fixture_dir.glob("bench-*.json")).read_text())


def _centre_medians(fixture_dir) -> dict:
    centre = {}
    for r in _bench(fixture_dir)["rows"]:   # the bf16 pool's (the fp8 rows have their own section)
        if (r["S"], r["T"], r["H"], r["layout"], r["page_size"], r["batch"]) == CENTRE \
                and r.get("kv_dtype", "bfloat16") == "bfloat16":
            centre.setdefault(r["impl"], []).append(r)
    return {k: {"time_us": statistics.median(x["time_us"] for x in v),
                "roofline_us": statistics.median(x["roofline_us"] for x in v), "repeats": len(v)}
            for k, v in centre.items()}


@pytest.mark.parametrize("name", PHASES)
def test_report_has_no_code_and_says_where_data_came_from(rendered, name):
    page = (rendered / f"{name}.html").read_text()
    assert "from notebooks import" not in page and "record_path" not in page
    assert "data_dir =" not in page and "Traceback" not in page
    assert "Rendered from recorded measurements" in page
    assert "test fixture, not a measurement" in page
    assert page.count("data:image/png;base64,") >= 2  # figures are inlined


@pytest.mark.parametrize("name", PHASES)
def test_report_opens_with_findings_and_where_the_evidence_stops(rendered, name):
    page = (rendered / f"{name}.html").read_text()
    body = page[page.index("<body"):]
    first_box, first_fig = body.index('class="mla-findings"'), body.index('src="data:image/png')
    first_section = body.index("<h2")
    assert first_box < first_section and first_box < first_fig
    text = _text(page)
    assert re.search(r"Where this evidence stops\. Every number on this page was measured on "
                     r"FIXTURE GPU \(not measured\) \(132 SMs\) ?\. The production GPU, sm_120 "
                     r"\(RTX PRO 6000 Blackwell\), is compiled for \( ?bench-[0-9T-]+\.json ?"
                     r"records its build: mla_verify_combine, mla_verify_kernel, up to 240 "
                     r"registers, 0 bytes spilled\) but was never run", text)


@pytest.mark.parametrize("name", ("00_baseline", "02_paged_bf16"))
def test_split_kv_baseline_is_explained_before_its_first_figure(rendered, name):
    page = (rendered / f"{name}.html").read_text()
    explained = page.index("CUDA servers never run it")
    assert explained < page.index('src="data:image/png')


def test_baseline_step_time_matches_the_data(rendered, fixture_dir):
    step_ms = _centre_medians(fixture_dir)["sglang_extend"]["time_us"] * 61 / 1e3
    assert f"{step_ms:,.0f} ms per verify step" in _text(
        (rendered / "00_baseline.html").read_text())


def test_paged_report_names_case_count_worst_case_and_speedups(rendered, fixture_dir):
    page = _text((rendered / "02_paged_bf16.html").read_text())
    val = json.loads(next(fixture_dir.glob("validation-*.json")).read_text())
    worst = max(val["cases"], key=lambda c: c["rel_err"])
    assert f"{val['n_cases']} cases" in page and "all pass" in page
    assert worst["id"] in page and f"{worst['rel_err']:.3g}" in page
    assert "no NaN in any output and no unwritten output row" in page
    med = {k: v["time_us"] for k, v in _centre_medians(fixture_dir).items()}
    for impl in ("sglang_extend", "sglang_verify_mla"):
        assert f"{med[impl] / med['flash']:,.1f}x" in page
    assert "Does the cache layout matter?" in page
    assert re.search(r"(No|Yes)\.\s+The largest slow-down", page)


def test_paged_findings_are_the_data_s_numbers(rendered, fixture_dir):
    """The box a reviewer reads first: validation count, centre time against the floor and
    against SGLang, the 61-layer step before and after, all recomputed here from the JSON."""
    rec = index.read_record(rendered / "02_paged_bf16.html")
    got = {f["id"]: f for f in rec["findings"]}
    val = json.loads(next(fixture_dir.glob("validation-*.json")).read_text())
    n_pass = sum(c["pass"] for c in val["cases"])
    assert got["correctness"]["text"].startswith(f"{n_pass} of {val['n_cases']} cases pass")
    assert got["correctness"]["status"] == "pass"
    c = _centre_medians(fixture_dir)
    ours, roof, n = c["flash"]["time_us"], c["flash"]["roofline_us"], c["flash"]["repeats"]
    assert got["centre"]["text"].startswith(
        f"{ours:,.1f} us per layer at S = 185,000, T = 8, H = 8 (median of {n} repeats): "
        f"{ours / roof:.1f}x the roofline floor of {roof:,.1f} us")
    assert f"{c['sglang_extend']['time_us'] / ours:,.1f}x faster than SGLang extend" in \
        got["centre"]["text"]
    integ = json.loads(next(fixture_dir.glob("sglang-integration-*.json")).read_text())
    case = next(x for x in integ["cases"] if x["S"] == 185000 and x["T"] == 8)
    assert got["step"]["text"].startswith(f"{case['triton_ms_per_step']:,.1f} ms -> "
                                          f"{case['plugin_ms_per_step']:,.1f} ms")
    assert got["production"]["status"] == "open"
    box = _text((rendered / "02_paged_bf16.html").read_text())
    assert got["centre"]["text"] in box and got["step"]["text"] in box


def test_index_first_screen_is_the_verdict_with_links_to_evidence(rendered):
    page = (rendered / "index.html").read_text()
    body = page[page.index("<body"):]
    verdict = body[:body.index("<h2>Reports</h2>")]
    assert "Verdict." in verdict
    for fid in ("correctness", "centre", "step", "production"):
        f = next(f for f in index.read_record(rendered / "02_paged_bf16.html")["findings"]
                 if f["id"] == fid)
        assert f["text"] in _text(verdict)
    links = re.findall(r'href="([0-9a-z_]+\.html)#([a-z-]+)"', verdict)
    assert len(links) >= 4
    for page_name, anchor in links:
        assert f'id="{anchor}"' in (rendered / page_name).read_text(), (page_name, anchor)
    assert "Not shown yet: run on the production GPU" in _text(verdict)


def test_index_links_every_report_with_date_commit_gpu(rendered, fixture_dir):
    page = (rendered / "index.html").read_text()
    for name in PHASES:
        assert f'href="{name}.html"' in page
    bench = _bench(fixture_dir)
    assert bench["date"] in page and bench["commit"][:12] in page and bench["gpu"] in page
    assert page.count("test fixture, not a measurement") >= 5  # 1 + 1 + 3 sources
    rec = index.read_record(rendered / "02_paged_bf16.html")
    assert [s["kind"] for s in rec["sources"]] == ["validation", "bench", "sglang-integration",
                                                    "microbench", "sglang-backend", "sm120_model",
                                                    "sm120_sim"]


@pytest.mark.parametrize("name", PHASES)
def test_no_table_header_is_snake_case(rendered, name):
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", (rendered / f"{name}.html").read_text())
    assert heads and not [h for h in heads if re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)+", h.strip())]


def test_other_measurement_kinds_are_listed_not_analysed(tmp_path, fixture_dir, cli):
    data = tmp_path / "data"
    data.mkdir()
    for f in fixture_dir.glob("*.json"):
        (data / f.name).write_text(f.read_text())
    (data / "new-h200-x.json").write_text(json.dumps(
        {"kind": "something-new", "date": "2026-12-01T00:00:00Z", "rows": [{"x": 1}]}))
    assert cli(tmp_path, "phase2", "-p", "smoke", "true", "-p", "data_dir", str(data)) == 0
    page = _text((tmp_path / "reports" / "02_paged_bf16.html").read_text())
    assert "not analysed on this page: new-h200-x.json (something-new: unknown kind" in page


def test_a_second_render_of_the_same_data_is_byte_identical(tmp_path, fixture_dir, cli):
    out = tmp_path / "reports"
    assert cli(tmp_path, "phase0", "-p", "smoke", "true", "-p", "data_dir", str(fixture_dir)) == 0
    first = {p.name: p.read_bytes() for p in out.glob("*.html")}
    assert cli(tmp_path, "phase0", "-p", "smoke", "true", "-p", "data_dir", str(fixture_dir)) == 0
    assert {p.name: p.read_bytes() for p in out.glob("*.html")} == first


def test_index_skips_pages_without_a_record(tmp_path):
    (tmp_path / "notes.html").write_text("<html><head></head><body>x</body></html>")
    page = index.write_index(tmp_path).read_text()
    assert "notes.html" not in page and "No reports rendered yet" in page


def test_committed_reports_are_not_smoke_renders():
    """What is tracked under reports/ is rendered from real measurements, never fixtures."""
    reports = Path(__file__).resolve().parents[2] / "reports"
    for page in sorted(reports.glob("0*.html")):
        rec = index.read_record(page)
        assert rec is not None and not any(s["fixture"] for s in rec["sources"]), page.name
