"""notebooks.data: picking the newest file of a kind, refusing bad or fixture data, tables."""
from __future__ import annotations

import gzip
import json
import math

import pandas as pd
import pytest
from nb_fixtures import bench_doc, validation_doc, write_fixture_data

from notebooks import data, provenance


def test_newest_is_latest_date_not_latest_name(tmp_path):
    old, new = bench_doc("2026-12-02T00:00:00Z"), bench_doc("2026-12-01T00:00:00+00:00")
    old["commit"], new["commit"] = "newer-by-date", "older-by-date"
    (tmp_path / "bench-a.json").write_text(json.dumps(old))
    (tmp_path / "bench-z.json").write_text(json.dumps(new))
    doc = data.newest(tmp_path, "bench", allow_fixture=True)
    assert doc["commit"] == "newer-by-date"
    assert provenance.source(doc)["file"] == "bench-a.json"


def test_compressed_files_are_read_and_dated_with_the_plain_ones(tmp_path):
    old, new = validation_doc("2026-12-01T00:00:00Z"), validation_doc("2026-12-03T00:00:00Z")
    old["commit"], new["commit"] = "old-compressed", "new-compressed"
    (tmp_path / "validation-a.json").write_text(json.dumps(validation_doc("2026-12-02T00:00:00Z")))
    (tmp_path / "validation-b.json.gz").write_bytes(gzip.compress(json.dumps(new).encode()))
    (tmp_path / "validation-c.json.gz").write_bytes(gzip.compress(json.dumps(old).encode()))
    assert len(data.load_all(tmp_path, "validation")) == 3
    assert data.newest(tmp_path, "validation", allow_fixture=True)["commit"] == "new-compressed"
    (tmp_path / "validation-d.json.gz").write_bytes(b"not gzip")
    with pytest.raises(data.MeasurementError, match="validation-d.json.gz"):
        data.load_all(tmp_path)


def test_the_carried_tree_leaves_room_for_the_server_bundle():
    # a device call carries the checkout beside the real-server bundle (~20 MiB): tracked data must
    # not grow into that room (compress superseded validation files: notebooks/data.py)
    from kernel.sglang import server_bundle
    tree = server_bundle.working_tree_bytes()
    assert tree + 22 * 2 ** 20 <= server_bundle.BUDGET, f"working tree {tree / 2**20:.1f} MiB"


def test_missing_kind_names_kind_and_dir(tmp_path):
    write_fixture_data(tmp_path, kinds=("bench",))
    with pytest.raises(data.MeasurementError, match=r"'validation'.*" + str(tmp_path)):
        data.newest(tmp_path, "validation", allow_fixture=True)


def test_missing_dir_and_bad_json_are_named(tmp_path):
    with pytest.raises(data.MeasurementError, match="data_dir: no such directory"):
        data.load_all(tmp_path / "nope")
    (tmp_path / "bench-x.json").write_text("{not json")
    with pytest.raises(data.MeasurementError, match="bench-x.json"):
        data.load_all(tmp_path)


def test_bad_date_and_missing_provenance(tmp_path):
    doc = bench_doc("yesterday")
    (tmp_path / "b.json").write_text(json.dumps(doc))
    with pytest.raises(data.MeasurementError, match="'date' is not ISO-8601: 'yesterday'"):
        data.load_all(tmp_path)
    doc = bench_doc("2026-12-01T00:00:00Z")
    del doc["gpu"]
    (tmp_path / "b.json").write_text(json.dumps(doc))
    with pytest.raises(data.MeasurementError, match=r"missing provenance keys \['gpu'\]"):
        data.newest(tmp_path, "bench", allow_fixture=True)


def test_fixture_data_refused_outside_smoke(fixture_dir):
    with pytest.raises(data.MeasurementError, match="test fixture data"):
        data.newest(fixture_dir, "bench")
    assert data.newest(fixture_dir, "bench", allow_fixture=True)["kind"] == "bench"


def test_bench_frame_rejects_missing_columns(tmp_path):
    doc = bench_doc("2026-12-01T00:00:00Z")
    for r in doc["rows"]:
        del r["roofline_us"]
    doc["_path"] = "b.json"
    with pytest.raises(data.MeasurementError, match=r"lack columns \['roofline_us'\]"):
        data.bench_frame(doc)


def _row(impl, t, **kw):
    base = {"sweep": "S", "S": 1000, "prefix_lens": [1000], "T": 8, "H": 8,
            "layout": "scattered", "page_size": 1, "batch": 1, "impl": impl, "time_us": t,
            "bytes": 1, "flops": 1, "GBps": 1, "TFLOPs": 1, "roofline_us": 1, "frac_roofline": 1}
    return {**base, **kw}


def test_speedups_pair_rows_of_the_same_configuration():
    doc = {"_path": "b.json", "ceilings": {"read_GBps": 1, "mma_TFLOPs": 1}, "rows": [
        _row("flash", 10.0), _row("sglang_extend", 250.0), _row("sglang_verify_mla", 40.0),
        _row("flash", 20.0, S=2000, prefix_lens=[2000]),
        _row("sglang_extend", 1000.0, S=2000, prefix_lens=[2000])]}
    sp = data.speedups(data.bench_frame(doc)).set_index("S")
    assert sp.loc[1000, "x_over_sglang_extend"] == pytest.approx(25.0)
    assert sp.loc[1000, "x_over_sglang_verify_mla"] == pytest.approx(4.0)
    assert sp.loc[2000, "x_over_sglang_extend"] == pytest.approx(50.0)
    assert math.isnan(sp.loc[2000, "x_over_sglang_verify_mla"])  # not measured: no ratio


def test_centre_takes_median_of_repeats_and_step_ms_scales_by_layers():
    rows = [_row("flash", t, sweep=s, S=185000, prefix_lens=[185000])
            for s, t in (("S", 90.0), ("T", 100.0), ("H", 200.0))]
    df = data.bench_frame({"_path": "b", "ceilings": {"read_GBps": 1, "mma_TFLOPs": 1},
                           "rows": rows})
    assert data.centre(df)["time_us"].tolist() == [100.0]
    assert data.step_ms(df, "flash") == pytest.approx(100.0 * 61 / 1e3)
    with pytest.raises(data.MeasurementError, match="no 'sglang_extend' row at S=185000"):
        data.step_ms(df, "sglang_extend")


def test_validation_summary_counts_poison_and_checks_case_count():
    doc = validation_doc("2026-12-01T00:00:00Z", n=6)
    doc["_path"] = "v.json"
    doc["cases"][2].update(nan=True, unwritten=3, rel_err=0.5, **{"pass": False})
    doc["worst"] = doc["cases"][2]
    s = data.validation_summary(doc)
    assert (s["n_cases"], s["n_pass"], s["nan_cases"], s["unwritten_total"]) == (6, 5, 1, 3)
    assert s["all_pass"] is False and s["worst"]["id"] == "case002"
    doc["n_cases"] = 7
    with pytest.raises(data.MeasurementError, match="n_cases=7 but 6 cases"):
        data.validation_summary(doc)


def test_integration_speedup_is_triton_over_plugin(fixture_dir):
    it = data.integration_frame(data.newest(fixture_dir, "sglang-integration",
                                            allow_fixture=True))
    assert isinstance(it, pd.DataFrame) and len(it) == 6
    assert (it["speedup"] == it["triton_ms_per_step"] / it["plugin_ms_per_step"]).all()


def test_missing_data_dir_reads_as_no_measurement(tmp_path):
    with pytest.raises(data.MeasurementError,
                       match=r"no measurement of kind 'bench' in .*\(the directory does not exist\)"):
        data.newest(tmp_path / "reports" / "data", "bench")


def test_new_kinds_and_keys_do_not_break_loading_and_are_listed(tmp_path):
    """The lead adds microbench / sglang-backend files and per-row keys (e.g. a kernel tier):
    the pages keep loading what they know and list the rest, inventing nothing for it."""
    write_fixture_data(tmp_path, kinds=("bench",))
    bench = json.loads(next(tmp_path.glob("bench-*.json")).read_text())
    for r in bench["rows"]:
        r["tier"] = "t1"
    bench["kernel_version"] = "v9"
    (tmp_path / "bench-tier.json").write_text(json.dumps({**bench, "date": "2026-12-05T00:00:00Z"}))
    (tmp_path / "micro-x.json").write_text(json.dumps({"kind": "microbench", "date": "soon",
                                                       "results": [{"what": "ldmatrix"}]}))
    (tmp_path / "sglang-backend-x.json").write_text(json.dumps(
        {"kind": "sglang-backend", "date": "2026-12-04T00:00:00Z"}))
    (tmp_path / "odd.json").write_text(json.dumps({"kind": "something-new", "date": "2026-12-03"}))
    doc = data.newest(tmp_path, "bench", allow_fixture=True)
    assert doc["kernel_version"] == "v9"
    df = data.bench_frame(doc)
    assert "tier" in df and not data.centre(df).empty
    listed = {o["kind"]: o for o in data.not_shown(tmp_path, [doc])}
    assert set(listed) == {"microbench", "sglang-backend", "something-new"}
    assert listed["something-new"]["what"] == "unknown kind"
    assert listed["microbench"]["file"] == "micro-x.json"
    with pytest.raises(data.MeasurementError, match="micro-x.json: 'date' is not ISO-8601"):
        data.newest(tmp_path, "microbench")


def test_repeat_spread_is_the_noise_of_one_configuration():
    rows = [_row("flash", t, sweep=s, S=185000, prefix_lens=[185000])
            for s, t in (("S", 100.0), ("T", 102.0), ("H", 101.0))]
    df = data.bench_frame({"_path": "b", "ceilings": {"read_GBps": 1, "mma_TFLOPs": 1},
                           "rows": rows})
    assert data.repeat_spread(df) == (3, pytest.approx(0.02 / 1.01))


def test_build_record_tiles_name_the_fp8_copies():
    # the resource table's tile column: each fp8 kernel is its tier's copy for SGLang's fp8 pool
    doc = {"resources": [{"kernel": "mla_verify_kernel", "arch": a, "variant": v, "registers": 200,
                          "spill_stores": 0, "spill_loads": 0, "stack": 0, "smem_static": 0}
                         for a in ("sm_120", "sm_90")
                         for v in ("rows64d", "rows64d_fp8", "rows32d_math_fp8", "rows32d_modes", "small_nt1_fp8", "small_nt4_math_fp8",
                                   "combine_r32", "combine_r8_few", "rows64d_tail", "rows64d_math_fp8_tail")]}
    tiles = dict(zip(*data.resources_frame(doc, "sm_120")[["variant", "tile"]].T.values))
    assert tiles["rows64d_fp8"] == tiles["rows64d"] + ", fp8 copy"
    # the design D tiers' diagnostic copies say which (tier_rowsd.cuh's Kind)
    assert tiles["rows32d_math_fp8"] == "rows32d (32-row tiles), math-alone copy, fp8 copy"
    assert tiles["rows32d_modes"] == "rows32d (32-row tiles), diagnostic-modes copy"
    assert tiles["small_nt4_math_fp8"] == "small (32-row tiles), math-alone copy, fp8 copy"
    assert tiles["small_nt1_fp8"] == "small (8-row tiles), fp8 copy"
    # rows64d's tail kernels, taken where a launch's static shape ends in a tail
    assert tiles["rows64d_tail"] == tiles["rows64d"] + ", tail kernel"
    assert tiles["rows64d_math_fp8_tail"] == "rows64d (64-row tiles), math-alone copy, fp8 copy, tail kernel"
    # the merge's two shapes, chosen at launch
    assert tiles["combine_r32"] == "merge of 32-row tiles"
    assert tiles["combine_r8_few"] == "merge of 8-row tiles, few-CTA shape"


def test_gpu_short_names_the_files_gpu_and_the_h200_where_a_file_does_not_say():
    assert data.gpu_short({"gpu": "NVIDIA H100 80GB HBM3"}) == "H100 80GB HBM3"
    assert data.gpu_short({"gpu": "NVIDIA H200"}) == "H200"
    assert data.gpu_short({}) == data.gpu_short(None) == "H200"
    # a CPU model names the GPU of the data it read
    assert data.gpu_short({"gpu": "none: a CPU model on NVIDIA H200 data"}) == "H200"
    assert data.gpu_short({"gpu": "none: a CPU model on NVIDIA H100 80GB HBM3 data",
                           "data_gpu": "NVIDIA H100 80GB HBM3"}) == "H100 80GB HBM3"


def test_the_production_finding_names_the_gpu_its_estimate_was_modelled_from(tmp_path):
    from notebooks import findings
    est = {"sm120_estimate_us": 180.0, "S": 185000, "T": 8, "H": 8, "tier": 8, "h200_us": 100.6}
    (tmp_path / "bench-a.json").write_text(json.dumps(bench_doc("2026-12-06T00:00:00Z")))
    doc = data.newest(tmp_path, "bench", allow_fixture=True)
    with pytest.raises(ValueError, match="measured_on"):
        findings.production([doc], est)          # no silent "H200" for an H100's model file
    f = findings.production([doc], est, "H100 80GB HBM3")
    assert "against 100.6 us measured on the H100 80GB HBM3" in f["text"]
