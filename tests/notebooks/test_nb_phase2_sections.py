"""Phase 2's sections for the kernel tiers, the microbenchmarks, SGLang's real backend and the
sm_120 estimate: rendered in smoke mode from fixture JSON, every number read back from the
page's own tables and checked against the fixture, and the estimate labelled as one."""
from __future__ import annotations

import json
import re

import pytest
from bs4 import BeautifulSoup
from nb_fixtures import micro_doc, write_fixture_data

from notebooks import data, index

PAGE = "02_paged_bf16.html"


@pytest.fixture(scope="module")
def page(tmp_path_factory, fixture_dir, cli):
    tmp = tmp_path_factory.mktemp("p2")
    assert cli(tmp, "phase2", "-p", "smoke", "true", "-p", "data_dir", str(fixture_dir)) == 0
    return tmp / "reports"


def _soup(reports):
    return BeautifulSoup((reports / PAGE).read_text(), "html.parser")


def _table(reports, caption_start: str) -> list[dict]:
    """The rows of the table whose caption starts with caption_start, as {header: text}."""
    soup = _soup(reports)
    found = [t for t in soup.find_all("table")
             if t.caption and t.caption.get_text(" ", strip=True).startswith(caption_start)]
    assert len(found) == 1, f"one table captioned {caption_start!r}, found {len(found)}"
    t = found[0]
    heads = [th.get_text(" ", strip=True) for th in t.thead.find_all("th")]
    return [dict(zip(heads, (td.get_text(" ", strip=True) for td in tr.find_all("td"))))
            for tr in t.tbody.find_all("tr")]


def _text(reports, name=PAGE) -> str:
    return re.sub(r"\s+", " ", BeautifulSoup((reports / name).read_text(), "html.parser")
                  .get_text(" "))


def _doc(fixture_dir, prefix):
    return json.loads(next(fixture_dir.glob(f"{prefix}-*.json")).read_text())


def _ours(fixture_dir, impl, kv_dtype="bfloat16", **eq):
    """The one bench row of impl matching eq, on the bf16 pool (rows without kv_dtype are bf16)."""
    rows = [r for r in _doc(fixture_dir, "bench")["rows"]
            if r["impl"] == impl and r.get("kv_dtype", "bfloat16") == kv_dtype
            and all(r[k] == v for k, v in eq.items())]
    assert len(rows) == 1, (impl, eq, len(rows))
    return rows[0]


def test_tier_table_names_the_tier_that_served_t1_and_what_it_gained(page, fixture_dir):
    rows = _table(page, "Which tier served each configuration")
    t1 = [r for r in rows if r["T"] == "1"]
    assert len(t1) == 1
    ours, forced = _ours(fixture_dir, "flash", T=1), _ours(fixture_dir, "flash_rows64", T=1)
    assert t1[0]["tier"] == str(ours["tier"]) == "1"
    assert t1[0]["tile (query rows)"] == "small (8-row tiles)"
    assert t1[0]["ours, us"] == f"{ours['time_us']:,.1f}"
    assert t1[0]["rows64 forced, us"] == f"{forced['time_us']:,.1f}"
    assert t1[0]["rows64 time / default time"] == f"{forced['time_us'] / ours['time_us']:,.2f}x"
    t8 = [r for r in rows if r["T"] == "8" and r["S"] == "185,000"]
    assert t8 and all(r["tier"] == "0" and r["rows64 forced, us"] == "n/a" for r in t8)


def test_tier_finding_is_in_the_box_and_the_index_verdict(page, fixture_dir):
    rec = index.read_record(page / PAGE)
    f = next(f for f in rec["findings"] if f["id"] == "tiers")
    ours, forced = _ours(fixture_dir, "flash", T=1), _ours(fixture_dir, "flash_rows64", T=1)
    assert f"{ours['time_us']:,.1f} us against {forced['time_us']:,.1f} us with rows64 forced" \
        in f["text"]
    assert f["status"] == "pass"
    verdict = _text(page, "index.html").split("Reports")[0]
    assert f["text"] in verdict


def test_flash_series_never_includes_the_variant_rows(page, fixture_dir):
    """The T sweep's 'ours' at T = 1 is the default kernel's time, not rows64 forced; the L2-flushed
    and rows64 rows are nowhere a series of their own."""
    ours = _ours(fixture_dir, "flash", T=1)
    t = {r["T"]: r for r in _table(page, "tree size: time per layer")}
    assert t["1"]["ours, us"] == f"{ours['time_us']:,.1f}"
    s = {r["S"]: r for r in _table(page, "Time per layer and speed-ups (their time / ours), T = 8")}
    warm = _ours(fixture_dir, "flash", sweep="S", S=4096)
    assert s["4,096"]["ours, us"] == f"{warm['time_us']:,.1f}"
    body = _text(page)
    glossary_part = body.split("The implementations compared on this page.")[1].split("1. Corr")[0]
    assert "rows64 tier forced" not in glossary_part and "L2 flushed" not in glossary_part
    flushed = {r["S"]: r for r in _table(page, "Ours with L2 warm")}
    fl = _ours(fixture_dir, "flash_l2flushed", S=4096)
    assert flushed["4,096"]["L2 flushed, us"] == f"{fl['time_us']:,.1f}"
    assert flushed["4,096"]["L2 warm, us"] == f"{warm['time_us']:,.1f}"


def test_microbench_stages_are_explained_and_tabled(page, fixture_dir):
    text = _text(page)
    for stage in ("stream", "mma", "full"):   # each stage said in one sentence, in a list
        assert re.search(rf"{stage} ?: the (kernel|whole kernel)", text), stage
    micro = _doc(fixture_dir, "microbench")
    full = next(r for r in micro["rows"] if (r["T"], r["tier"], r["stage"]) == (1, 1, "full"))
    mma = next(r for r in micro["rows"] if (r["T"], r["tier"], r["stage"]) == (1, 1, "mma"))
    rows = _table(page, "Microbenchmarks per shape and tier")
    r = next(r for r in rows if r["T"] == "1" and r["tile (query rows)"] == "small (8-row tiles)")
    assert r["full kernel, us"] == f"{full['time_us']:,.1f}"
    assert r["of which merge, us"] == f"{full['merge_us']:,.1f}"
    assert r["mma, SM clocks per tile"] == f"{mma['clk_per_tile']:,.0f}"
    assert r["default here"] == "yes" and r["fastest full time"] == "yes"


def test_sm120_estimate_is_labelled_an_estimate_wherever_it_appears(page, fixture_dir):
    soup = _soup(page)
    head = soup.find(id="sm120").find_next("h2").get_text(" ", strip=True)
    assert "ESTIMATE" in head and "not a measurement" in head
    rows = _table(page, "sm_120 ESTIMATE per shape and tier (a model, not a measurement)")
    est = _doc(fixture_dir, "sm120_model")["rows"]
    e = next(x for x in est if (x["S"], x["T"], x["tier"], x["clock"]) == (185000, 8, 0, "boost"))
    r = next(r for r in rows if r["S"] == "185,000" and r["T"] == "8"
             and r["tile (query rows)"].startswith("rows64"))
    assert r["sm_120 ESTIMATE, us (model: memory + math + merge)"] == f"{e['sm120_estimate_us']:,.1f}"
    assert r["if fully overlapped, us (model: best case)"] == f"{e['sm120_overlapped_us']:,.1f}"
    assert r["full kernel, us (measured on the GPU named above)"] == f"{e['h200_us']:,.1f}"
    prod = next(f for f in index.read_record(page / PAGE)["findings"] if f["id"] == "production")
    assert prod["status"] == "open" and "never run on it" in prod["text"]
    assert (f"ESTIMATE (a model, not a measurement): {e['sm120_estimate_us']:,.1f} us per layer"
            in prod["text"])
    # the measured time is named by the GPU of the model's own file, never a fixed "H200"
    gpu = data.gpu_short(_doc(fixture_dir, "sm120_model"))
    assert gpu != "H200" and f"against {e['h200_us']:,.1f} us measured on the {gpu}" in prod["text"]
    # every sentence on the page that quotes the estimate calls it one
    text = _text(page)
    for m in re.finditer(re.escape(f"{e['sm120_estimate_us']:,.1f} us"), text):
        around = text[max(0, m.start() - 200):m.end()].lower()
        assert "estimate" in around, around


def test_sm120_estimate_at_each_clock_moves_only_the_math(page, fixture_dir):
    doc = _doc(fixture_dir, "sm120_model")
    rows = _table(page, "sm_120 ESTIMATE of the lowest tier per shape at each SM clock")
    r = next(r for r in rows if r["S"] == "185,000" and r["T"] == "8")
    at = {x["clock"]: x for x in doc["rows"] if (x["S"], x["T"]) == (185000, 8)
          and x["tier"] == min((y for y in doc["rows"] if (y["S"], y["T"], y["clock"]) == (185000, 8, "boost")),
                               key=lambda y: y["sm120_estimate_us"])["tier"]}
    assert r["boost 2.617 GHz, estimate, us"] == f"{at['boost']['sm120_estimate_us']:,.1f}"
    assert r["Max-Q 2.288 GHz, estimate, us"] == f"{at['max_q']['sm120_estimate_us']:,.1f}"
    assert "Max-Q 2.288 GHz, overlapped, us" in r


def test_sm120_second_model_is_labelled_a_model_and_quotes_its_file(page, fixture_dir):
    doc = _doc(fixture_dir, "sm120_sim")
    e = next(x for x in doc["rows"] if (x["kv_dtype"], x["T"]) == ("bfloat16", 16))
    lo = min(e["sm120_clk_per_tile_scaled"], e["sm120_clk_per_tile_shifted"])
    hi = max(e["sm120_clk_per_tile_scaled"], e["sm120_clk_per_tile_shifted"])
    text = _text(page)
    assert "second model of the math, from sm_120's own machine code" in text
    assert f"{lo:,.0f}-{hi:,.0f} clocks per 64-row tile against the first model's {e['first_model_clk_per_tile']:,.0f}" in text
    assert "spaces one warp's MMAs 16 cycles apart on sm_120 (6 on sm_90)" in text
    # the GPU the model's microbenchmarks ran on, as its file names it (the fixture's here)
    assert f"take 2.3 times the {doc['gpu'].removeprefix('NVIDIA ')}'s clocks" in text
    rows = _table(page, "sm_120 MODEL of rows64d's math at 185k")
    r = next(r for r in rows if r["KV pool"] == "fp8_e4m3" and r["T"] == "32")
    f = next(x for x in doc["rows"] if (x["kv_dtype"], x["T"]) == ("fp8_e4m3", 32))
    assert r["math, us, low"] == f"{f['sm120_math_us_low']:,.1f}"
    assert r["first model, math, us"] == f"{f['first_model_math_us']:,.1f}"
    assert r["MMAs alone, clk/tile"] == "2,176"


def test_sm120_resources_per_tier_without_invented_shared_memory(page):
    rows = _table(page, "Registers, spills and static shared memory")
    small = next(r for r in rows if r["variant"] == "small_nt1")
    assert small["tile (query rows)"] == "small (8-row tiles)"
    assert small["registers per thread (sm_120)"] == "100"
    assert small["registers per thread (sm_90, measured arch)"] == "99"
    assert not any("dynamic" in h.lower() for h in rows[0])
    assert "dynamic shared memory each tier asks for at launch is not in the build record" in \
        _text(page)


def test_sglang_backend_all_pass_is_in_box_table_and_index(page, fixture_dir):
    doc = _doc(fixture_dir, "sglang-backend")
    bf16 = [c for c in doc["cases"] if c.get("kv_dtype") != "fp8_e4m3"]   # fp8: section 12
    n = len(bf16)
    assert 0 < n < len(doc["cases"])
    want = f"through SGLang's real backend: {n}/{n} pass, memcheck clean"
    rec = index.read_record(page / PAGE)
    f = next(f for f in rec["findings"] if f["id"] == "backend")
    assert f["text"].startswith(want) and f["status"] == "pass"
    assert want in _text(page, "index.html").split("Reports")[0]
    rows = _table(page, "SGLang's real backend: every case")
    assert [r["case"] for r in rows] == [c["name"] for c in bf16]
    assert all(r["pass"] == "yes" for r in rows)
    g = doc["cases"][1]
    r = rows[1]
    assert r["replay, candidate, ms"] == f"{g['flash_replay_ms']:,.2f}"
    assert r["replay, control, ms"] == f"{g['control_replay_ms']:,.2f}"
    assert r["vs control arm (relative)"] == f"{g['rel_err_vs_control']:.2e}"
    assert "0 errors" in rows[-1]["what it covers"]


@pytest.mark.parametrize("break_it, status, words", [
    # the fixture's bf16 cases: 2 EAGLE graphs, 2 of the production shapes, adaptive, memcheck
    (lambda d: d["cases"][1].update({"pass": False}), "fail", "5/6 pass, memcheck clean"),
    (lambda d: next(c for c in d["cases"] if c["name"] == "memcheck").update(
        summary="========= ERROR SUMMARY: 2 errors", returncode=3), "fail", "6/6 pass, memcheck NOT clean"),
])
def test_a_failing_backend_case_or_dirty_memcheck_fails_the_verdict(tmp_path, cli, break_it,
                                                                     status, words):
    data = write_fixture_data(tmp_path / "data")
    path = next(data.glob("sglang-backend-*.json"))
    doc = json.loads(path.read_text())
    break_it(doc)
    path.write_text(json.dumps(doc))
    assert cli(tmp_path, "phase2", "-p", "smoke", "true", "-p", "data_dir", str(data)) == 0
    f = next(f for f in index.read_record(tmp_path / "reports" / PAGE)["findings"]
             if f["id"] == "backend")
    assert f["status"] == status and words in f["text"]
    assert "Not ready" in _text(tmp_path / "reports", "index.html")


def test_phase2_renders_without_micro_and_backend_files(tmp_path, cli):
    data = write_fixture_data(tmp_path / "data",
                              kinds=("bench", "validation", "sglang-integration"))
    assert cli(tmp_path, "phase2", "-p", "smoke", "true", "-p", "data_dir", str(data)) == 0
    text = _text(tmp_path / "reports")
    assert "No microbenchmark file in the data directory" in text
    assert "No sglang-backend file in the data directory" in text
    got = {f["id"]: f for f in index.read_record(tmp_path / "reports" / PAGE)["findings"]}
    assert got["backend"]["status"] == "open"
    assert "ESTIMATE" not in got["production"]["text"]


def test_the_ladder_compares_the_same_shape_across_micro_files(tmp_path, cli):
    data = write_fixture_data(tmp_path / "data")
    old = micro_doc("2026-11-30T08:00:00+00:00", seed=3, commit="0ldc0mm17")
    (data / "microbench-old.json").write_text(json.dumps(old))
    assert cli(tmp_path, "phase2", "-p", "smoke", "true", "-p", "data_dir", str(data)) == 0
    rows = _table(tmp_path / "reports", "Full-kernel time of the same shape and tier")
    col = next(h for h in rows[0] if h.startswith("0ldc0mm17"))
    full = next(r for r in old["rows"] if (r["T"], r["tier"], r["stage"]) == (1, 1, "full"))
    t1 = next(r for r in rows if r["T"] == "1" and r["tier"] == "1")
    assert t1[col] == f"{full['time_us']:,.1f}"
    assert list(rows[0]).index(col) < list(rows[0]).index(
        next(h for h in rows[0] if h.startswith("f1x7u7e")))   # oldest first


# ---- section 13: the production algorithm's shapes (issue 24) ----
def test_production_shapes_bench_table_is_the_json(page, fixture_dir):
    rows = _table(page, "The production algorithm's shapes, H = 8")
    bench = _doc(fixture_dir, "bench")
    ours = [r for r in bench["rows"] if r.get("algorithm") and r["impl"] == "flash"]
    assert len(rows) == len(ours) == 10
    for r in ours:
        pool = r.get("kv_dtype", "bfloat16")
        got = [x for x in rows if x["KV pool"] == pool and x["query rows per request (H x T)"] == str(8 * r["T"])
               and x["requests"] == str(r["batch"])]
        assert len(got) == 1, (pool, r["T"], r["batch"])
        g = got[0]
        assert g["ours, us"] == f"{r['time_us']:,.1f}" and g["% of roofline"] == f"{100 * r['frac_roofline']:.1f}"
        assert g["ours, ms per 61 layers"] == f"{r['time_us'] * 61 / 1e3:,.2f}"
        sgl = [x for x in bench["rows"] if x.get("algorithm") and x["impl"] == "sglang_extend"
               and x.get("kv_dtype", "bfloat16") == pool and x["T"] == r["T"] and x["batch"] == r["batch"]]
        assert g["speed-up"] == (f"{sgl[0]['time_us'] / r['time_us']:,.0f}x" if sgl else "n/a")
        if r["algorithm"] == "DDTREE":
            D = r["budget"] + 1
            assert g["algorithm"] == "DDTree" and f"D = {D} nodes" in g["verified per request"]
            assert f"{r['tree_sizes'][0]} of {D} nodes real" in g["verified per request"]
        else:
            assert g["algorithm"] == "DFLASH" and "causal block of 16" in g["verified per request"]


def test_production_shapes_validation_and_backend_tables(page, fixture_dir):
    rows = _table(page, "The production shapes against the float64 oracle")
    fams = _doc(fixture_dir, "validation")["production"]["families"]
    assert len(rows) == len(fams) == 4
    for f in fams.values():
        name = {"ddtree": "DDTree", "dflash": "DFLASH"}[f["family"]]
        got = [r for r in rows if r["algorithm"] == name and r["KV pool"] == f["kv_dtype"]]
        assert len(got) == 1
        assert got[0]["cases"] == str(f["n_cases"]) and got[0]["checks (every tier)"] == str(f["n_checks"])
        assert got[0]["worst relative error"] == f"{f['worst_rel_err']:.2e}" and got[0]["failing checks"] == "0"
    text = _text(page)
    assert "13. The production algorithm's shapes" in text and "all pass" in text
    backend = _table(page, "SGLang's real backend fed DFLASH's and DDTree's verify inputs")
    assert [r["case"] for r in backend] == ["dflash-b16-bs8", "ddtree-b32-bs4"]
    assert "DDTree (pull request #29907's verify input: D = 33" in backend[1]["what it covers"]
