"""The GPU stage `sglang-backend` (kernel/sglang/backend_check.py), run on the CPU: the same
code with the CPU stand-in kernel, the Triton interpreter for SGLang's control arm (bf16
patched), graphs as eager calls, two layers. Its case table covers what the GPU run must."""
import dataclasses

import pytest

from kernel.sglang import adapter, backend_check
from kernel.sglang.backend_check import CASES, Spec, adaptive_scratch, run, run_case

TINY = Spec("tiny", heads=8, draft=8, page=1, graph_bs=4, capture=(40, 9, 100), replay=(70, 3), control=True,
            layers=2)
TINY_PAGED = Spec("tiny-paged", heads=16, draft=4, page=64, graph_bs=4, capture=(130, 64, 1, 70),
                  replay=(200, 5), control=True, layers=2, tree="star", replay_tree="ddtree")


@pytest.fixture
def model_dir(tmp_path):
    from kernel.sglang.model_configs import write_kimi_k2
    return write_kimi_k2(tmp_path / "kimi-k2", nextn_layers=1)


@pytest.mark.parametrize("spec", [TINY, TINY_PAGED], ids=lambda s: s.name)
def test_case_passes_through_both_arms(flash, bf16_interpreter, model_dir, spec):
    row = run_case(spec, model_dir, device="cpu", cuda_graph=False, timing=False)
    assert row["pass"], row
    assert row["problems"] == [] and row["finite"]
    assert row["rel_err_oracle_capture"] < 1e-2 and row["rel_err_oracle_replay"] < 1e-2
    assert row["rel_err_vs_control"] < 1e-2 and row["graph_equals_eager"]
    assert row["oracle_layers"] == [0, 1] and row["replay_bs"] < spec.graph_bs   # padded dummies on replay


def test_a_kernel_that_is_wrong_fails_the_case(flash, bf16_interpreter, model_dir, monkeypatch):
    real = flash.verify_attention

    def off_by_a_bit(*args, **kwargs):
        out, lse = real(*args, **kwargs)
        out.mul_(1.05)
        return out, lse
    monkeypatch.setattr(flash, "verify_attention", off_by_a_bit)
    row = run_case(TINY, model_dir, device="cpu", cuda_graph=False, timing=False)
    assert not row["pass"] and row["rel_err_oracle_replay"] > 1e-2 and row["rel_err_vs_control"] > 1e-2


def test_a_fallback_at_capture_fails_the_case(flash, bf16_interpreter, model_dir, monkeypatch):
    monkeypatch.setattr(adapter, "_lse_scratch", {})          # the plugin's reservation is lost
    monkeypatch.setattr(adapter, "reserve_lse", lambda *a, **k: None)
    one_arm = dataclasses.replace(TINY, control=False, layers=1)   # SGLang's kernel now runs the flash arm too
    row = run_case(one_arm, model_dir, device="cpu", cuda_graph=False, timing=False)
    assert not row["pass"] and "expected 1 kernel runs" in row["problems"][0], row["problems"]


def test_adaptive_sequence_on_the_cpu(flash, model_dir):
    row = adaptive_scratch(model_dir, device="cpu", cuda_graph=False)
    assert row["pass"] and row["sentinel_intact"], row


def test_stage_json_shape(flash, bf16_interpreter, model_dir, monkeypatch):
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "flash")   # restored after; run() sets the candidate's switch
    doc = run([TINY], sanitizer=False, device="cpu", cuda_graph=False, log=lambda m: None)
    assert doc["kind"] == "sglang-backend" and doc["sglang_version"] == "0.5.23"
    assert [c["name"] for c in doc["cases"]] == ["tiny", "adaptive-scratch"] and doc["all_pass"] is True


def test_sanitizer_missing_is_a_failure_not_a_pass(monkeypatch):
    monkeypatch.setattr(backend_check.shutil, "which", lambda name: None)
    monkeypatch.setattr(backend_check.os.path, "exists", lambda p: False)
    row = backend_check.run_sanitizer()
    assert row["pass"] is False and "not found" in row["error"]


def test_gpu_case_table_covers_the_deployment_matrix():
    assert {c.heads for c in CASES} == {8, 16, 64, 128}
    assert {c.draft for c in CASES} == {4, 8, 16}
    assert {c.graph_bs for c in CASES} == {1, 8, 48} and {c.page for c in CASES} == {1, 64}
    assert max(max(c.capture) for c in CASES) == 185_000 and all(c.layers == 61 for c in CASES)
    assert any(len(c.replay) < c.graph_bs or len(c.capture) < c.graph_bs for c in CASES)   # dummies
    for c in CASES:
        assert len(c.capture) <= c.graph_bs and len(c.replay) <= c.graph_bs
        # SGLang's path walks the prefix serially (~35 ms a layer at 185k): small S only
        assert not c.control or max(c.capture + c.replay) <= 65_536, c.name
