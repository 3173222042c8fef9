"""Phase 2's section 14 (EXTEND over a cached prefix), rendered in smoke mode on the generated
fixtures plus copies of the recorded H200 EXTEND files: every number in its tables read back from
the page and checked against the raw JSON, the failing sglang-extend case shown as failing (in the
table, in its own paragraph, in the findings box and the index verdict), the files named."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from nb_fixtures import write_fixture_data

from notebooks import data, extend_data, index

PAGE = "02_paged_bf16.html"
DATA = Path(__file__).resolve().parents[2] / "reports" / "data"
KINDS = ("extend-bench", "extend-validation", "sglang-extend")


@pytest.fixture(scope="module")
def setup(tmp_path_factory, cli):
    tmp = tmp_path_factory.mktemp("p2ext")
    d = write_fixture_data(tmp / "data")
    raw = {}
    for k in KINDS:   # the newest recorded file of each kind, as the page picks it
        src = sorted(DATA.glob(f"{k}-*.json"))[-1]
        shutil.copy(src, d / src.name)
        raw[k] = (src.name, json.loads(src.read_text()))
    assert cli(tmp, "phase2", "-p", "smoke", "true", "-p", "data_dir", str(d)) == 0
    return tmp / "reports", raw


def _section(reports) -> BeautifulSoup:
    soup = BeautifulSoup((reports / PAGE).read_text(), "html.parser")
    assert soup.find(id="extend") is not None
    return soup


def _table(soup, caption_start: str) -> list[dict]:
    found = [t for t in soup.find_all("table")
             if t.caption and t.caption.get_text(" ", strip=True).startswith(caption_start)]
    assert len(found) == 1, f"one table captioned {caption_start!r}, found {len(found)}"
    t = found[0]
    heads = [th.get_text(" ", strip=True) for th in t.thead.find_all("th")]
    return [dict(zip(heads, (td.get_text(" ", strip=True) for td in tr.find_all("td"))))
            for tr in t.tbody.find_all("tr")]


def _text(soup) -> str:
    return re.sub(r"\s+", " ", soup.get_text(" "))


@pytest.mark.parametrize("pool", [data.BF16_KV, data.FP8_KV])
def test_timing_table_numbers_are_the_json(setup, pool):
    reports, raw = setup
    name, doc = raw["extend-bench"]
    mma = doc["ceilings"]["mma_TFLOPs"]
    rows = {r["T"]: r for r in _table(_section(reports), f"EXTEND on the {pool} pool")}
    ext = [r for r in doc["rows"] if r["sweep"].endswith("extend_T") and data.row_kv(r) == pool]
    assert set(rows) == {f"{T:,}" for T in {r["T"] for r in ext}}
    for r in ext:
        shown = rows[f"{r['T']:,}"]
        if r["impl"] == "flash":
            assert shown["ours, us"] == f"{r['time_us']:,.1f}"
            assert shown["ours, TFLOP/s"] == f"{r['TFLOPs']:,.1f}"
            assert shown["ours, % of mma.sync ceiling"] == f"{100 * r['TFLOPs'] / mma:.1f}"
            assert shown["ours, % of roofline"] == f"{100 * r['frac_roofline']:.1f}"
            sgl = next(x for x in ext if x["T"] == r["T"] and x["impl"] == "sglang_extend")
            assert shown["SGLang, us"] == f"{sgl['time_us']:,.1f}"
            assert shown["SGLang time / ours"] == f"{sgl['time_us'] / r['time_us']:,.1f}x"
        elif r["impl"].startswith("flash_t"):
            assert shown["other tile, us"] == f"{r['time_us']:,.1f}"
    assert f"{name}" in _text(_section(reports)).split(f"EXTEND on the {pool} pool")[1][:200]


def test_prefill_and_validation_tables_are_the_json(setup):
    reports, raw = setup
    soup = _section(reports)
    _, b = raw["extend-bench"]
    pre = _table(soup, "Prefill of a")
    assert [r["ms per layer"] for r in pre] == [f"{p['time_ms_per_layer']:,.1f}" for p in b["prefill_185k"].values()]
    vname, v = raw["extend-validation"]
    pools = {r["KV pool"]: r for r in _table(soup, "EXTEND validation per pool")}
    for pool, rows in ((p, [c for c in v["cases"] if data.row_kv(c) == p]) for p in (data.BF16_KV, data.FP8_KV)):
        assert pools[pool]["cases"] == str(len(rows))
        assert pools[pool]["cases passing"] == str(sum(c["pass"] for c in rows))
        assert pools[pool]["worst error"] == f"{max(t['rel_err_all'] for c in rows for t in c['tiers']):.2e}"
    text = _text(soup)
    assert f"Validation ( {vname} ): {v['n_cases']} cases , {v['n_checks']} checks" in text
    assert ("all pass" in text.split(f"Validation ( {vname} )")[1][:300]) == v["all_pass"]


def test_failing_backend_case_is_shown_failing(setup):
    reports, raw = setup
    sname, s = raw["sglang-extend"]
    soup = _section(reports)
    rows = {r["case"]: r for r in _table(soup, "EXTEND and EAGLE's draft extend through SGLang's real backend")}
    cases = s["cases"] + s["draft_cases"]
    assert set(rows) == {c["name"] for c in cases}
    for c in cases:
        assert rows[c["name"]]["pass"] == ("yes" if c["pass"] else "no")
        flash = c.get("flash_ms_per_layer", c.get("flash_ms_per_replay"))
        assert rows[c["name"]]["flash, ms"] == f"{flash:,.3f}"
    failing = [c for c in cases if not c["pass"]]
    text = _text(soup)
    n_pass = sum(c["pass"] for c in cases)
    assert f"{n_pass} of {len(cases)} cases pass" in text
    for c in failing:
        assert rows[c["name"]]["why it failed"]
        para = text.split(f"{c['name']} (")[-1][:1500]
        assert para.startswith(f"EXTEND, {data.row_kv(c)} pool) FAILS:")
        if c.get("finite") is False:
            assert rows[c["name"]]["finite"] == "no" and "not finite" in para
        fix = extend_data.HARNESS_FIXES.get(("sglang-extend", c["name"]))
        if fix:
            assert fix["commit"] in para and s["commit"] in para
            state = extend_data.fix_measured(s, fix["commit"])
            assert {False: "the fix is not yet measured", True: "the failure stands after the fix",
                    None: "treat the fix as not measured"}[state] in para
        else:
            assert "unexplained" in para
    rec = index.read_record(reports / PAGE)
    f = next(f for f in rec["findings"] if f["id"] == "extend-kernel")
    assert (f["status"] == "fail") == bool(failing)
    verdict = re.sub(r"\s+", " ", BeautifulSoup((reports / "index.html").read_text(), "html.parser")
                     .get_text(" ")).split("Reports")[0]
    assert f["text"] in verdict
    assert all(f"FAIL {c['name']}" in f["text"] for c in failing)
    assert sname in {src["file"] for src in rec["sources"]}   # named in the page's provenance
