"""notebooks.extend_data on the recorded H200 EXTEND files in reports/data/ (issue 26's shapes, every
table number read back from the raw JSON) and on malformed copies of them (the error names the
file and the field)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from notebooks import data, extend_data, findings

DATA = Path(__file__).resolve().parents[2] / "reports" / "data"


@pytest.fixture(scope="module")
def ext():
    e = extend_data.load(DATA)
    assert all(e.values()), {k: v is not None for k, v in e.items()}
    return e


def _raw(doc):
    return json.loads(open(doc["_path"]).read())


@pytest.mark.parametrize("pool", [data.BF16_KV, data.FP8_KV])
def test_bench_table_holds_the_issue_shapes_against_the_raw_rows(ext, pool):
    raw = _raw(ext["bench"])
    mma = raw["ceilings"]["mma_TFLOPs"]
    t = extend_data.bench_table(ext["bench"], pool).set_index("T")
    assert {2, 16, 256, 8192} <= set(t.index)        # issue 26: T = 2, 16, 256, 8,192 at S = 185k, H = 8
    assert set(t["S"]) == {185000} and set(t["H"]) == {8}
    for T, r in t.iterrows():
        rows = {x["impl"]: x for x in raw["rows"] if x["sweep"].endswith("extend_T") and x["T"] == T
                and data.row_kv(x) == pool}
        o = rows["flash"]
        assert r["ours_us"] == o["time_us"] and r["tile"] == data.tier_name(o["tier"])
        assert r["pct_mma"] == pytest.approx(100 * o["TFLOPs"] / mma)
        assert r["pct_roofline"] == pytest.approx(100 * o["frac_roofline"])
        assert r["speedup"] == pytest.approx(rows["sglang_extend"]["time_us"] / o["time_us"])
        alt = [x for k, x in rows.items() if k.startswith("flash_t")]
        assert (r["alt_us"] == alt[0]["time_us"]) if alt else r["alt_us"] != r["alt_us"]
    # at the largest T the matrix work bounds the roofline, at T = 1 the bytes do
    assert t.loc[8192, "bound"] == "math" and t.loc[1, "bound"] == "memory"


def test_prefill_is_the_sum_of_its_chunks(ext):
    raw = _raw(ext["bench"])
    p = extend_data.prefill_table(ext["bench"])
    assert len(p) == len(raw["prefill_185k"])
    for r in p.itertuples():
        chunks = [x for x in raw["rows"] if x["sweep"].endswith("extend_prefill185k") and x["impl"] == r.impl
                  and data.row_kv(x) == r.pool]
        assert r.chunks == len(chunks) and sum(x["T"] for x in chunks) == r.prompt_tokens
        assert r.ms_per_layer == pytest.approx(sum(x["time_us"] for x in chunks) / 1e3)
        assert r.all_layers_s == pytest.approx(r.ms_per_layer * data.LAYERS / 1e3)


def test_validation_summary_agrees_with_the_file(ext):
    raw = _raw(ext["validation"])
    v = extend_data.validation_summary(ext["validation"])
    assert v["n_cases"] == raw["n_cases"] == len(raw["cases"]) and v["n_checks"] == raw["n_checks"]
    assert v["all_pass"] == raw["all_pass"] and v["n_failing"] == raw["n_failing_checks"]
    assert set(v["pools"]["pool"]) == {data.BF16_KV, data.FP8_KV}
    # the worst case found here is the one the validation itself named
    assert (v["worst"]["case"], v["worst"]["pool"]) == (raw["worst"]["name"], data.row_kv(raw["worst"]))
    assert v["worst"]["rel_err"] == pytest.approx(raw["worst"]["rel_err_all"])
    assert v["mask_cases"] == len(raw["mask_identity"])
    by = extend_data.validation_by_case(ext["validation"])
    assert len(by) == len({c["name"] for c in raw["cases"]})


def test_sglang_cases_keep_the_failing_case_failing(ext):
    raw = _raw(ext["sglang"])
    c = extend_data.sglang_cases(ext["sglang"]).set_index("case")
    assert len(c) == len(raw["cases"]) + len(raw["draft_cases"])
    assert list(c.index[~c["pass"]]) == [x["name"] for x in raw["cases"] + raw["draft_cases"] if not x["pass"]]
    for x in raw["cases"]:
        assert c.loc[x["name"], "flash_ms"] == x["flash_ms_per_layer"]
        assert c.loc[x["name"], "speedup"] == pytest.approx(x["control_ms_per_layer"] / x["flash_ms_per_layer"])
    for x in raw["draft_cases"]:
        assert c.loc[x["name"], "what"] == "draft extend"
        assert c.loc[x["name"], "err_all"] == max(r["rel_err_all"] for r in x["replay_results"])
    fails = {f["case"]: f for f in extend_data.failures(ext["sglang"])}
    if "fp8-ragged" in fails:   # the recorded H200 run: non-finite, every error within tolerance
        f = fails["fp8-ragged"]
        assert "not finite" in f["why"] and ">" not in f["why"]
        assert f["fix"] is extend_data.HARNESS_FIXES[(extend_data.SGLANG, "fp8-ragged")]
        assert f["fix_measured"] in (False, None)   # measured before the fix (None: git here cannot tell)
    assert all(c.loc[n, "why"] == "" for n in c.index[c["pass"]])


def test_finding_fails_while_a_case_fails(ext):
    f = findings.extend_kernel(ext)
    assert f["id"] == "extend-kernel" and f["anchor"] == "extend"
    failing = extend_data.failures(ext["sglang"])
    assert (f["status"] == "fail") == bool(failing)
    for x in failing:
        assert f"FAIL {x['case']}" in f["text"]
    assert findings.extend_kernel({"bench": None, "validation": None, "sglang": None}) is None
    only = findings.extend_kernel({**ext, "sglang": None})
    assert "not measured here: SGLang's backend" in only["text"] and only["status"] in ("open", "fail")


def test_fix_measured_reads_git_or_says_it_cannot():
    doc = {"commit": "0" * 7}
    assert extend_data.fix_measured(doc, "6e194ee") is None     # an unknown commit: cannot tell
    assert extend_data.fix_measured({"commit": "not recorded"}, "6e194ee") is None
    here = extend_data.fix_measured({"commit": "HEAD"}, "6e194ee")
    assert here in (True, None)   # the fix is in this tree's history (None: a shallow clone)


def _broken(tmp_path, name_prefix, edit):
    src = sorted(DATA.glob(f"{name_prefix}-*.json"))[-1]
    dst = tmp_path / src.name
    shutil.copy(src, dst)
    doc = json.loads(dst.read_text())
    edit(doc)
    dst.write_text(json.dumps(doc))
    return extend_data.load(tmp_path), dst.name


def test_malformed_bench_names_file_and_field(tmp_path):
    ext, name = _broken(tmp_path, "extend-bench", lambda d: d["rows"][3].pop("time_us"))
    with pytest.raises(data.MeasurementError, match=rf"{name}: rows\[3\] lacks field 'time_us'"):
        extend_data.bench_table(ext["bench"])


def test_bench_roofline_must_match_the_file_ceilings(tmp_path):
    ext, name = _broken(tmp_path, "extend-bench", lambda d: d["ceilings"].update(mma_TFLOPs=1.0))
    with pytest.raises(data.MeasurementError, match=rf"{name}: .*frac_roofline .* disagrees"):
        extend_data.bench_table(ext["bench"])


def test_prefill_must_sum_its_chunks(tmp_path):
    def edit(d):
        next(iter(d["prefill_185k"].values()))["time_ms_per_layer"] *= 2
    ext, name = _broken(tmp_path, "extend-bench", edit)
    with pytest.raises(data.MeasurementError, match=rf"{name}: prefill_185k\[.*\]: \d+ chunks, .* but its rows"):
        extend_data.prefill_table(ext["bench"])


def test_malformed_validation_and_sglang_name_file_and_field(tmp_path):
    ext, name = _broken(tmp_path, "extend-validation", lambda d: d["cases"][2].pop("tiers"))
    with pytest.raises(data.MeasurementError, match=rf"{name}: cases\[2\] lacks field 'tiers'"):
        extend_data.validation_summary(ext["validation"])
    ext, name = _broken(tmp_path, "sglang-extend", lambda d: d["draft_cases"][1]["replay_results"][0].pop("finite"))
    with pytest.raises(data.MeasurementError,
                       match=rf"{name}: draft_cases\[1\]\.replay_results\[0\] lacks field 'finite'"):
        extend_data.sglang_cases(ext["sglang"])
    ext, name = _broken(tmp_path, "extend-validation", lambda d: d.update(n_cases=d["n_cases"] + 1))
    with pytest.raises(data.MeasurementError, match=rf"{name}: n_cases="):
        extend_data.validation_summary(ext["validation"])
