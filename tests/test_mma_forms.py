"""kernel.bench.mma_forms' machine code (nvcc, no GPU): each accumulation form is what its figures
claim on sm_90 and sm_120, the e4m3 launch included (emulated by f16 HMMAs on sm_90)."""
import pytest

from kernel.bench import mma_forms


@pytest.fixture(scope="module")
def rows():
    return mma_forms.check(mma_forms.lib_path())


def test_every_form_is_checked_on_both_archs_and_passes(rows):
    names = {n for n, _, _ in mma_forms.FORMS.values()}
    assert {(r["arch"], r["form"]) for r in rows} == {(f"sm_{a}", n) for a in mma_forms.ARCHS for n in names}
    assert all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]


def test_the_forms_differ_where_they_claim_to(rows):
    by = {(r["arch"], r["form"]): r for r in rows}
    for a in ("sm_90", "sm_120"):
        assert by[(a, "bf16_chain")]["accumulator"] == "chain" and by[(a, "bf16_fresh")]["accumulator"] == "fresh"
        assert by[(a, "bf16_chain")]["mma_ops"] == ["HMMA.16816.F32.BF16"]
        assert by[(a, "f16_chain")]["mma_ops"] == ["HMMA.16816.F32"]
        # a fresh MMA is issued once per iteration, not shared across unrolled ones: four FADDs each
        assert by[(a, "bf16_fresh")]["fadd_per_loop"] == 4 * by[(a, "bf16_fresh")]["mmas_per_loop"] > 0
        assert by[(a, "bf16_chain")]["fadd_per_loop"] == 0
    # e4m3 m16n8k32: f16 HMMAs after converts on sm_90, one native QMMA on sm_120
    assert by[("sm_90", "e4m3_chain")]["mma_ops"] == ["HMMA.16816.F32"] and by[("sm_90", "e4m3_chain")]["f2fp_per_loop"]
    assert by[("sm_120", "e4m3_chain")]["mma_ops"] == ["QMMA.16832.F32.E4M3.E4M3"]


def test_kernel_names_map_to_forms():
    assert mma_forms._form_of("_ZN12_GLOBAL__N_116mma_forms_kernelILi0ELb1ELi8EEEvPKjPfi") == 2
    assert mma_forms._form_of("_ZN12_GLOBAL__N_116mma_forms_kernelILi0ELb0ELi16EEEvPKjPfi") == 4
    assert mma_forms._form_of("_ZN4mlav5rowsd22mla_verify_kernel_rowsdILi2ELi0EEEvNS_6ParamsE") is None


def test_table_marks_a_missing_rate_and_a_failed_check():
    doc = {"rows": [{"form": "bf16_chain", "occupancy": "8_warps_per_sm", "TFLOPs": 582.5},
                    {"form": "e4m3_chain", "occupancy": "8_warps_per_sm", "TFLOPs": None}],
           "sass": [{"ok": True}]}
    lines = mma_forms.table(doc)
    assert "NOT citable" not in lines[0]
    assert lines[1].split()[:2] == ["bf16_chain", "582.5"] and lines[-1].split()[:2] == ["e4m3_chain", "none"]
    assert "NOT citable" in mma_forms.table(dict(doc, sass=[{"ok": False}]))[0]
