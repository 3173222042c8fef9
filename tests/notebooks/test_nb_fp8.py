"""Phase 2's fp8_e4m3 section (12) and finding: rendered in smoke mode from fixture JSON with an
fp8 validation section, fp8 bench rows and fp8 backend cases, every number read back from the
page and recomputed from the fixture; files written before fp8 render and say so by name; an
fp8 failure (a case, a refusal) fails the finding and the index verdict."""
from __future__ import annotations

import json
import math
import re
import statistics

import pytest
from bs4 import BeautifulSoup
from nb_fixtures import bench_doc, write_fixture_data

from notebooks import data, index

PAGE = "02_paged_bf16.html"
CENTRE = (185000, 8, 8, "scattered", 1, 1)


def _render(tmp, cli, data_dir):
    assert cli(tmp, "phase2", "-p", "smoke", "true", "-p", "data_dir", str(data_dir)) == 0
    return tmp / "reports"


@pytest.fixture(scope="module")
def page(tmp_path_factory, fixture_dir, cli):
    return _render(tmp_path_factory.mktemp("p2fp8"), cli, fixture_dir)


def _text(reports, name=PAGE) -> str:
    return re.sub(r"\s+", " ", BeautifulSoup((reports / name).read_text(), "html.parser").get_text(" "))


def _table(reports, caption_start: str) -> list[dict]:
    soup = BeautifulSoup((reports / PAGE).read_text(), "html.parser")
    found = [t for t in soup.find_all("table")
             if t.caption and t.caption.get_text(" ", strip=True).startswith(caption_start)]
    assert len(found) == 1, f"one table captioned {caption_start!r}, found {len(found)}"
    heads = [th.get_text(" ", strip=True) for th in found[0].thead.find_all("th")]
    return [dict(zip(heads, (td.get_text(" ", strip=True) for td in tr.find_all("td"))))
            for tr in found[0].tbody.find_all("tr")]


def _doc(data_dir, prefix):
    return json.loads(next(data_dir.glob(f"{prefix}-*.json")).read_text())


def _finding(reports):
    return next(f for f in index.read_record(reports / PAGE)["findings"] if f["id"] == "fp8")


def _median(rows, kv, impl="flash", shape=CENTRE):
    return statistics.median(r["time_us"] for r in rows if r["impl"] == impl
                             and r.get("kv_dtype", "bfloat16") == kv
                             and (r["S"], r["T"], r["H"], r["layout"], r["page_size"], r["batch"]) == shape)


def test_fp8_bench_table_is_the_fixture_against_its_roofline_and_bf16(page, fixture_dir):
    rows = _doc(fixture_dir, "bench")["rows"]
    fp8, bf16 = _median(rows, "fp8_e4m3"), _median(rows, "bfloat16")
    table = _table(page, "fp8 pool: ours per shape")
    centre = [r for r in table if (r["S"], r["requests"], r["T"], r["H"], r["page size"]) ==
              ("185,000", "1", "8", "8", "1")]
    assert len(centre) == 1   # the centre's three fp8 repeats are one shape
    c = centre[0]
    assert c["ours on fp8, us"] == f"{fp8:,.1f}" and c["ours on bf16, us"] == f"{bf16:,.1f}"
    assert c["bf16 time / fp8 time"] == f"{bf16 / fp8:,.2f}x"
    roof = next(r["roofline_us"] for r in rows if r.get("kv_dtype") == "fp8_e4m3" and r["sweep"] == "fp8_S"
                and r["S"] == 185000)
    frac = statistics.median(r["frac_roofline"] for r in rows if r.get("kv_dtype") == "fp8_e4m3"
                             and r["impl"] == "flash" and r["S"] == 185000 and r["T"] == 8
                             and r["batch"] == 1 and r["page_size"] == 1)
    assert c["fp8 roofline, us"] == f"{roof:,.1f}" and c["% of fp8 roofline"] == f"{100 * frac:.1f}"
    bf16_roof = next(r["roofline_us"] for r in rows if "kv_dtype" not in r and r["sweep"] == "S"
                     and r["S"] == 185000 and r["impl"] == "flash")
    assert c["bf16 roofline / fp8 roofline"] == f"{bf16_roof / roof:,.2f}x"
    sgl = _table(page, "fp8 pool, centre point")
    theirs = next(r for r in sgl if r["implementation"].startswith("SGLang extend_attention_fwd"))
    t = _median(rows, "fp8_e4m3", impl="sglang_extend")
    assert theirs["time per layer, us"] == f"{t:,.1f}" and theirs["speed-up of ours"] == f"{t / fp8:,.1f}x"


def test_bf16_sections_do_not_mix_in_the_fp8_rows(page, fixture_dir):
    rows = _doc(fixture_dir, "bench")["rows"]
    ours = next(r for r in _table(page, "Centre point: one layer's verify attention")
                if r["implementation"].startswith("ours"))
    assert ours["time per layer, us"] == f"{_median(rows, 'bfloat16'):,.1f}"
    assert ours["time per layer, us"] != f"{_median(rows, 'fp8_e4m3'):,.1f}"
    backend = [r["case"] for r in _table(page, "SGLang's real backend: every case")]
    assert backend and not any(c.startswith(("fp8", "memcheck-fp8")) for c in backend)


def test_fp8_validation_and_backend_rows_render_from_the_fixture(page, fixture_dir):
    f8 = _doc(fixture_dir, "validation")["fp8"]
    text = _text(page)
    worst = max(c["rel_err"] for c in f8["cases"])
    assert f"{len(f8['cases'])} cases on the fp8 pool, all pass at relative tolerance 0.01" in text
    assert f"Worst output error {worst:.3g}" in text
    split = sum(c["k_scale"] != c["v_scale"] for c in f8["cases"])
    assert f"{split} cases with v_scale != k_scale" in text and "NaN bytes 0x7f, 0xff" in text
    tiers = {r["tier"]: r for r in _table(page, "fp8 pool: the checks per kernel tier")}
    assert set(tiers) == {"1", "2", "4", "6", "8"}   # no rows64: it reads bf16 only
    assert tiers["8"]["checks"] == str(f8["by_tier"]["8"]["checks"])
    sg = {r["comparison"]: r for r in _table(page, "fp8 pool: ours and SGLang's extend_attention_fwd")}
    assert sg["SGLang vs oracle"]["largest relative error"] == \
        f"{max(c['sglang_rel_err'] for c in f8['sglang']['cases']):.2e}"
    cases = [c for c in _doc(fixture_dir, "sglang-backend")["cases"] if c.get("kv_dtype") == "fp8_e4m3"]
    rows = _table(page, "SGLang's real backend on the fp8_e4m3 pool")
    assert [r["case"] for r in rows] == [c["name"] for c in cases]
    ctl = next(r for r, c in zip(rows, cases) if c["control"])
    assert ctl["vs control arm (relative)"] == "6.00e-02" and "tolerance 0.2" in ctl["what it covers"]
    f = _finding(page)
    assert f["status"] == "pass" and f"{len(f8['cases'])} of {len(f8['cases'])} fp8 cases pass" in f["text"]
    assert f["text"] in _text(page, "index.html").split("Reports")[0]


def test_files_without_fp8_render_and_name_themselves(tmp_path, cli):
    data_dir = write_fixture_data(tmp_path / "data", fp8=False)
    reports = _render(tmp_path, cli, data_dir)
    text = _text(reports)
    for kind in ("validation", "bench", "sglang-backend"):
        name = next(data_dir.glob(f"{kind}-*.json")).name
        assert f"no fp8 measurement in {name}" in text, kind
    f = _finding(reports)
    assert f["status"] == "open" and f["text"].startswith("no fp8 measurement in validation-")
    assert "Not shown yet: correct on SGLang's fp8_e4m3 KV cache" in _text(reports, "index.html")


@pytest.mark.parametrize("break_it, words", [
    (lambda v, b: v["fp8"]["cases"][3].update(rel_err=0.3, pass_all_tiers=False, **{"pass": False}),
     "11 of 12 fp8 cases pass"),
    (lambda v, b: v.update(fp8={"kv_dtype": "fp8_e4m3", "all_pass": False,
                                "error": "VerifyInputError: kv_cache: dtype float8_e4m3fn refused"}),
     "the fp8 validation did not run (VerifyInputError"),
    (lambda v, b: b["cases"][-2].update(
        refused="mla-verify: MLA_VERIFY_BACKEND=flash, but --kv-cache-dtype fp8_e4m3: no",
        rel_err_oracle_capture=None, rel_err_oracle_replay=None, **{"pass": False}),
     "fp8-bs4-page64: refused (mla-verify: MLA_VERIFY_BACKEND=flash, but --kv-cache-dtype fp8_e4m3"),
    (lambda v, b: b["cases"][-2].update(fallbacks={"kv_dtype": 122}, rel_err_oracle_capture=None,
                                        rel_err_oracle_replay=None, **{"pass": False}),
     "fp8-bs4-page64: every layer fell back (kv_dtype x122)"),
])
def test_an_fp8_failure_fails_the_finding_and_the_verdict(tmp_path, cli, break_it, words):
    data_dir = write_fixture_data(tmp_path / "data")
    vp, bp = next(data_dir.glob("validation-*.json")), next(data_dir.glob("sglang-backend-*.json"))
    v, b = json.loads(vp.read_text()), json.loads(bp.read_text())
    break_it(v, b)
    b["all_pass"] = all(c["pass"] for c in b["cases"])
    vp.write_text(json.dumps(v))
    bp.write_text(json.dumps(b))
    reports = _render(tmp_path, cli, data_dir)
    f = _finding(reports)
    assert f["status"] == "fail" and words in f["text"], f["text"]
    assert "Not ready" in _text(reports, "index.html")
    # the bf16 backend verdict is its own cases': still passing
    bf16 = next(f for f in index.read_record(reports / PAGE)["findings"] if f["id"] == "backend")
    assert bf16["status"] == "pass"


def test_fp8_speed_arithmetic_on_hand_made_rows():
    def row(kv, impl, t, roof, **shape):
        r = {"sweep": "x", "S": 1000, "prefix_lens": [1000], "T": 8, "H": 8, "layout": "scattered",
             "page_size": 1, "batch": 1, "impl": impl, "tier": 8, "time_us": t, "bytes": 1, "flops": 1,
             "GBps": 1.0, "TFLOPs": 1.0, "roofline_us": roof, "frac_roofline": roof / t, **shape}
        return r if kv is None else {**r, "kv_dtype": kv}
    doc = {"_path": "b.json", "ceilings": {"read_GBps": 1, "mma_TFLOPs": 1}, "rows": [
        row(None, "flash", 100.0, 50.0), row("bfloat16", "flash", 110.0, 50.0),      # old and new bf16 rows
        row("fp8_e4m3", "flash", 60.0, 26.0), row("fp8_e4m3", "flash", 70.0, 26.0),   # two fp8 repeats
        row("fp8_e4m3", "flash", 40.0, 20.0, T=4)]}                                    # no bf16 at T = 4
    assert data.bench_frame(doc)["time_us"].tolist() == [100.0, 110.0]
    sp = data.fp8_speed(doc).set_index("T")
    assert sp.loc[8, "fp8_us"] == 65.0 and sp.loc[8, "bf16_us"] == 105.0
    assert sp.loc[8, "fp8_speedup"] == pytest.approx(105.0 / 65.0)
    assert sp.loc[8, "roofline_ratio"] == pytest.approx(50.0 / 26.0)
    assert sp.loc[8, "pct_fp8_roofline"] == pytest.approx(100 * statistics.median([26 / 60, 26 / 70]))
    assert sp.loc[4, "bf16_us"] != sp.loc[4, "bf16_us"]   # NaN: shown as n/a
    old = bench_doc("2026-12-01T00:00:00Z", fp8=False)
    assert data.fp8_speed({**old, "_path": "old.json"}).empty


def test_fp8_slower_than_bf16_is_said_so_and_does_not_fail_correctness(tmp_path, cli):
    """The first fp8 kernels are slower than bf16 (kernel/NOTES.md): the finding says it plainly;
    its pass/fail is correctness and the comparison with SGLang's own kernel on the same pool."""
    data_dir = write_fixture_data(tmp_path / "data")
    path = next(data_dir.glob("bench-*.json"))
    doc = json.loads(path.read_text())
    for r in doc["rows"]:
        if r.get("kv_dtype") == "fp8_e4m3" and r["impl"] == "flash":
            r["time_us"] *= 3
            r["frac_roofline"] /= 3
    path.write_text(json.dumps(doc))
    reports = _render(tmp_path, cli, data_dir)
    fp8, bf16 = _median(doc["rows"], "fp8_e4m3"), _median(doc["rows"], "bfloat16")
    f = _finding(reports)
    assert f["status"] == "pass"
    assert f"{fp8 / bf16:,.2f}x SLOWER than ours on bf16 ({bf16 / fp8:,.2f}x its speed)" in f["text"]
    centre = next(r for r in _table(reports, "fp8 pool: ours per shape") if r["S"] == "185,000"
                  and r["T"] == "8" and r["requests"] == "1" and r["page size"] == "1")
    assert centre["bf16 time / fp8 time"] == f"{bf16 / fp8:,.2f}x"


def test_sink_rows_where_sglangs_e4m3_p_must_lose_the_tail():
    doc = {"rows": [
        {"kv_dtype": "auto", "S": 185000, "gap_nats": 11.0, "tail_mass": 0.78, "rel_err": 1.7e-3, "sglang_rel_err": 1.6e-3},
        {"kv_dtype": "fp8_e4m3", "S": 185000, "gap_nats": 4.0, "tail_mass": 1.0, "rel_err": 1.6e-3, "sglang_rel_err": 1.8e-3},
        {"kv_dtype": "fp8_e4m3", "S": 185000, "gap_nats": 11.0, "tail_mass": 0.78, "rel_err": 1.7e-3, "sglang_rel_err": 0.96},
        {"kv_dtype": "fp8_e4m3", "S": 4096, "gap_nats": 14.0, "tail_mass": 0.01, "rel_err": 2.5e-3, "sglang_rel_err": 3.7e-3},
        {"kv_dtype": "fp8_e4m3", "S": 4096, "gap_nats": 8.0, "tail_mass": 0.61, "rel_err": 1.8e-3}]}
    frame = data.sink_frame(doc)
    assert list(frame["pool"]) == [data.BF16_KV] + [data.FP8_KV] * 4
    assert math.isnan(frame["SGLang"].iloc[4])              # its kernel did not run: shown as such
    lost = data.sink_lost(frame)
    assert list(lost.index) == [2, 4]                       # fp8, 8 nats or more up, tail over half
