"""notebooks.provenance: 'measured anew' only for files the same invocation's kernel.gpu_run
wrote; every page says which GPU its data came from and that sm_120 was never run."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from notebooks import provenance


def _doc(date: str, gpu: str = "NVIDIA H200", **extra) -> dict:
    return {"kind": "bench", "_path": f"/d/bench-{date[:10]}.json", "gpu": gpu, "sms": 132,
            "driver": "d", "cuda": "c", "torch": "t", "commit": "abc", "date": date,
            "_date": datetime.fromisoformat(date).replace(tzinfo=timezone.utc), **extra}


OLD, NEW, SINCE = "2026-11-29T20:43:10", "2026-12-01T10:00:05", "2026-12-01T10:00:00+00:00"


@pytest.mark.parametrize("dates,since,head", [
    ([OLD], "", "Rendered from recorded measurements"),
    ([OLD], SINCE, "Rendered from recorded measurements"),   # gpu_run ran but wrote nothing shown
    ([NEW], SINCE, "Measured anew"),
    ([OLD, NEW], SINCE, "Partly measured anew"),
])
def test_banner_claims_only_what_this_run_measured(dates, since, head):
    text = provenance.banner([_doc(d) for d in dates], since)
    assert text.startswith(f"**{head}**")
    rows = [line for line in text.splitlines() if line.startswith("| bench")]
    assert [r.split(" | ")[3] for r in rows] == [
        "yes" if since and d == NEW else "no" for d in dates]


def test_record_says_measured_now_only_when_every_source_is_fresh(tmp_path):
    import json

    for dates, want in (([NEW], True), ([OLD, NEW], False), ([], False)):
        out = tmp_path / "r.json"
        provenance.write_record(out, "t", [_doc(d) for d in dates], measured_since=SINCE)
        assert json.loads(out.read_text())["measured_now"] is want


def test_a_bad_measured_since_is_an_error_naming_it():
    with pytest.raises(provenance.MeasurementError, match="measured_since: not ISO-8601: 'x'"):
        provenance.banner([_doc(OLD)], "x")


def test_evidence_box_names_the_gpu_and_the_production_build():
    res = [{"kernel": "mla_verify_kernel", "arch": "sm_120", "registers": 250,
            "spill_stores": 4, "spill_loads": 4},
           {"kernel": "mla_verify_kernel", "arch": "sm_90", "registers": 200}]
    text = provenance.evidence_box([_doc(OLD, resources=res)])
    assert "measured on **NVIDIA H200 (132 SMs)**" in text
    assert "sm_120 (RTX PRO 6000 Blackwell), is compiled for (`bench-2026-11-29.json` records " \
           "its build: mla_verify_kernel, up to 250 registers, 8 bytes spilled) " \
           "**but was never run**" in text
    assert "no build record" in provenance.evidence_box([_doc(OLD)])


def test_a_file_from_the_production_gpu_ends_the_never_run_claim():
    docs = [_doc(OLD), _doc(NEW, gpu="NVIDIA RTX PRO 6000 Blackwell Server Edition")]
    text = provenance.evidence_box(docs)
    assert "never run" not in text and "is among them" in text
    assert provenance.evidence_limits(docs)["production_ran"] is True


def test_production_build_names_each_kernel_once_even_from_mangled_records():
    # a record made before the probe kernel had a short name kept one mangled name per
    # instantiation; the evidence box lists kernels, not instantiations
    mangled = "_ZN50_GLOBAL__N__3d4ce141_17_mma_ldsm_probe_cu_9179494721mma_ldsm_probe_kernelILi{}ELi4EEEvPfi"
    res = [{"arch": "sm_120", "kernel": mangled.format(i), "registers": 40, "spill_stores": 0, "spill_loads": 0}
           for i in (1, 2)]
    res.append({"arch": "sm_120", "kernel": "mla_verify_kernel", "registers": 255, "spill_stores": 0,
                "spill_loads": 0})
    doc = {"_path": "reports/data/bench-x.json", "_date": datetime(2026, 12, 1, tzinfo=timezone.utc),
           "resources": res}
    b = provenance.production_build([doc])
    assert b["kernels"] == ["mla_verify_kernel", "mma_ldsm_probe_kernel"]
    assert b["registers"] == 255


def test_banner_names_each_files_kernel_source_and_says_when_they_differ():
    docs = [_doc(OLD, kernel_source="aaaa1111"), dict(_doc(OLD, kernel_source="bbbb2222"), kind="validation"),
            dict(_doc(OLD), kind="dcp-sim")]
    text = provenance.banner(docs)
    rows = {ln.split("|")[1].strip(): ln.split("|") for ln in text.splitlines() if ".json" in ln}
    assert rows["bench"][7].strip() == "`aaaa1111`" and rows["validation"][7].strip() == "`bbbb2222`"
    assert rows["dcp-sim"][7].strip() == "-"                      # a file that records none
    assert "measured on 2 kernel sources (`aaaa1111`: bench; `bbbb2222`: validation)" in text
    # one kernel source among the shown files: no such line
    assert "kernel sources" not in provenance.banner([docs[0], docs[2]])
