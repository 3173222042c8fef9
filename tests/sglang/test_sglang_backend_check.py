"""The GPU stage `sglang-backend` (kernel/sglang/backend_check.py), run on the CPU: the same
code with the CPU stand-in kernel, the Triton interpreter for SGLang's control arm (bf16
patched), graphs as eager calls, two layers. Its case table covers what the GPU run must."""
import dataclasses
import types

import pytest

from kernel.sglang import adapter, backend_check, strict
from kernel.sglang.backend_check import CASES, FP8_CASES, PRODUCTION_CASES, Spec, adaptive_scratch, run, run_case

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


def test_a_kernel_that_is_wrong_fails_the_case(flash, bf16_interpreter, model_dir):
    flash.scale_outputs(1.05)
    row = run_case(TINY, model_dir, device="cpu", cuda_graph=False, timing=False)
    assert not row["pass"] and row["rel_err_oracle_replay"] > 1e-2 and row["rel_err_vs_control"] > 1e-2


def test_a_fallback_at_capture_fails_the_case(flash, bf16_interpreter, model_dir, monkeypatch):
    flash.get_workspace("cpu").max_bs = 1                     # every batch exceeds the workspace: fallback
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


# ---- the fp8_e4m3 pool ----
TINY_FP8 = Spec("tiny-fp8", heads=8, draft=8, page=1, graph_bs=4, capture=(40, 9, 100), replay=(70, 3),
                control=True, layers=2, kv_dtype="fp8_e4m3", k_scale=0.05, v_scale=0.02)


@pytest.fixture
def strict_off(monkeypatch):
    """The plugin's strict checks pass whatever the pool (they refuse fp8 until the adapter serves it)."""
    monkeypatch.setattr(strict, "server_args_problem", lambda server_args: None)
    monkeypatch.setattr(strict, "backend_problem", lambda backend: None)


def test_fp8_case_the_plugin_refuses_is_a_failing_row_naming_the_refusal(flash, model_dir, strict_off,
                                                                         monkeypatch):
    msg = "mla-verify: MLA_VERIFY_BACKEND=flash, but the KV cache is float8_e4m3fn: (test refusal)"
    monkeypatch.setattr(strict, "backend_problem", lambda backend: msg)
    row = run_case(TINY_FP8, model_dir, device="cpu", cuda_graph=False, timing=False)
    assert row["pass"] is False and row["refused"] == msg
    assert row["problems"] == [f"the plugin refused the flash arm: {msg}"]
    assert row["rel_err_oracle_replay"] is None and row["kv_dtype"] == "fp8_e4m3"


def test_fp8_case_whose_layers_fall_back_names_the_reason(flash, model_dir, strict_off, monkeypatch):
    monkeypatch.setattr(adapter, "unsupported_reason",
                        lambda *a, **k: ("kv_dtype", "KV cache dtype float8_e4m3fn (test)"))
    row = run_case(TINY_FP8, model_dir, device="cpu", cuda_graph=False, timing=False)
    assert row["pass"] is False and row["refused"] is None and row["fallbacks"] == {"kv_dtype": 2}
    assert row["problems"][-1] == "every layer fell back to SGLang's kernel (reason: kv_dtype x2)"
    assert row["rel_err_oracle_replay"] is None and row["rel_err_vs_control"] is None


def test_fp8_case_passes_through_both_arms(flash, bf16_interpreter, model_dir):
    row = run_case(TINY_FP8, model_dir, device="cpu", cuda_graph=False, timing=False)
    if row["refused"] or row["fallbacks"]:
        pytest.skip(f"this plugin does not serve the fp8 pool yet: {row['problems'][-1]}")
    assert row["pass"], row
    assert row["rel_err_oracle_capture"] < 1e-2 and row["rel_err_oracle_replay"] < 1e-2
    # SGLang's arm rounds q and P to e4m3: visibly off the oracle, inside the stated bound
    assert 1e-2 < row["rel_err_vs_control"] < row["control_tol"] == backend_check.FP8_CONTROL_TOL


def test_the_stage_runs_the_fp8_cases_and_an_fp8_memcheck(flash, model_dir, monkeypatch):
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "flash")
    asked = []
    monkeypatch.setattr(backend_check, "run_sanitizer", lambda kv_dtype="auto": asked.append(kv_dtype)
                        or dict(name=f"memcheck-{kv_dtype}", **{"pass": True}))
    monkeypatch.setattr(backend_check, "run_case", lambda spec, *a, **k: dict(
        name=spec.name, kv_dtype=spec.kv_dtype, rel_err_oracle_replay=None, rel_err_vs_control=None,
        seconds=0.0, problems=[], **{"pass": True}))
    monkeypatch.setattr(backend_check, "adaptive_scratch",
                        lambda *a, **k: dict(name="adaptive-scratch", **{"pass": True}))
    doc = run(log=lambda m: None)
    assert [c["name"] for c in doc["cases"][:-3]] == [c.name for c in CASES + FP8_CASES + PRODUCTION_CASES]
    assert asked == ["auto", "fp8_e4m3"] and doc["fp8_control_tol"] == backend_check.FP8_CONTROL_TOL
    assert run([TINY], log=lambda m: None) and asked[2:] == ["auto"]   # no fp8 case, no fp8 memcheck


def test_fp8_memcheck_runs_the_fp8_case_in_the_subprocess(monkeypatch, tmp_path):
    seen = {}

    def fake_run(cmd, **kw):
        seen["cmd"] = cmd
        return types.SimpleNamespace(returncode=0, stderr="",
                                     stdout="========= ERROR SUMMARY: 0 errors")
    monkeypatch.setattr(backend_check.shutil, "which", lambda name: "/bin/true")
    monkeypatch.setattr(backend_check.subprocess, "run", fake_run)
    row = backend_check.run_sanitizer(kv_dtype="fp8_e4m3")
    assert seen["cmd"][-2:] == ["--kv-dtype", "fp8_e4m3"] and row["name"] == "memcheck-fp8"
    assert row["pass"] is False   # no inner row was written: a memcheck that checked nothing fails


def test_fp8_case_table_covers_scales_tiers_padding_and_the_centre():
    from kernel.ops import pick_tier
    assert all(c.kv_dtype == "fp8_e4m3" and c.layers == 61 for c in FP8_CASES)
    assert any(c.k_scale == c.v_scale == 1.0 for c in FP8_CASES)    # a checkpoint without KV scales
    assert any(c.k_scale != c.v_scale for c in FP8_CASES)           # separate checkpoint scales
    assert max(max(c.capture) for c in FP8_CASES) == 185_000
    tiers = {pick_tier(c.heads, c.graph_bs * c.draft, c.graph_bs, c.draft, kv_fp8=True) for c in FP8_CASES}
    assert tiers == {1, 4, 8}   # small8's 8- and 32-row tiles and rows64d's copy: each row count's default
    assert any(c.control for c in FP8_CASES)
    assert any(len(c.replay) < c.graph_bs for c in FP8_CASES)      # padded dummies on replay
    for c in FP8_CASES:
        assert len(c.capture) <= c.graph_bs and len(c.replay) <= c.graph_bs
        assert not c.control or max(c.capture + c.replay) <= 65_536, c.name


# ---- the production algorithm's shapes (issue 24): DFLASH and DDTree's pull request ----
TINY_DFLASH = Spec("tiny-dflash", heads=8, draft=16, page=1, graph_bs=4, capture=(40, 9, 100), replay=(70, 0),
                   control=True, layers=2, algorithm="DFLASH")
TINY_DDTREE = Spec("tiny-ddtree", heads=8, draft=16, page=1, graph_bs=4, capture=(40, 0, 100), replay=(70, 3),
                   control=True, layers=2, algorithm="DDTREE", budget=32, topk=2)


@pytest.mark.parametrize("spec", [TINY_DFLASH, TINY_DDTREE], ids=lambda s: s.name)
def test_production_shapes_pass_through_both_arms(flash, bf16_interpreter, model_dir, spec):
    row = run_case(spec, model_dir, device="cpu", cuda_graph=False, timing=False)
    assert row["pass"], row
    assert row["fallbacks"] == {} and row["algorithm"] == spec.algorithm
    assert row["rel_err_oracle_replay"] < 1e-2 and row["rel_err_vs_control"] < 1e-2 and row["graph_equals_eager"]


def test_production_case_table_covers_the_issue():
    dd = [c for c in PRODUCTION_CASES if c.algorithm == "DDTREE"]
    fl = [c for c in PRODUCTION_CASES if c.algorithm == "DFLASH"]
    assert {c.draft for c in fl} == {16} and {c.draft for c in dd} == {16}       # the server's block of 16
    assert {c.width for c in dd} == {17, 33, 65} and {c.topk for c in dd} == {1, 2}
    assert {c.kv_dtype for c in fl} == {c.kv_dtype for c in dd} == {"auto", "fp8_e4m3"}
    assert any(0 in c.capture + c.replay for c in dd)                            # padding over no prefix
    assert max(max(c.capture) for c in fl) == max(max(c.capture) for c in dd) == 185_000
    assert any(c.control for c in fl) and any(c.control for c in dd)
    for c in PRODUCTION_CASES:
        assert len(c.capture) <= c.graph_bs and len(c.replay) <= c.graph_bs and c.layers == 61
        assert not c.control or max(c.capture + c.replay) <= 65_536, c.name
