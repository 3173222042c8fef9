"""The GPU stage `sglang-extend` (kernel/sglang/extend_check.py), run on the CPU: the same code
with the CPU stand-in kernel and the Triton interpreter for SGLang's control arm (bf16 patched),
two layers. A wrong kernel or a fallback fails a case; the case table covers issue 26's shapes."""
import pytest

from kernel.bench import extend_validate
from kernel.sglang import extend_check

TINY = dict(name="tiny", S=[40, 0, 9], T=[6, 5, 1], page=1, layers=2)
TINY_FP8 = dict(name="tiny-fp8", S=[30, 0], T=[4, 7], page=16, layers=2, kv="fp8_e4m3", v_factor=0.5)


@pytest.fixture
def model_dir(tmp_path):
    from kernel.sglang.model_configs import write_kimi_k2
    return write_kimi_k2(tmp_path / "kimi-k2", nextn_layers=1)


@pytest.fixture(autouse=True)
def references_on_the_cpu(monkeypatch):
    monkeypatch.setattr(extend_validate, "DEVICE", "cpu")
    monkeypatch.setattr(extend_validate, "ORACLE_BYTES", 6 * 8 * 46 * 8 - 1)   # request 0: sampled rows + fp32


@pytest.mark.parametrize("spec", [TINY, TINY_FP8], ids=lambda s: s["name"])
def test_case_passes_through_both_arms(flash, bf16_interpreter, model_dir, spec):
    row = extend_check.run_case(spec, model_dir, device="cpu", timing=False)
    assert row["pass"], row
    assert row["kernel_calls"] == 2 and row["fallbacks"] == {} and row["problems"] == []
    assert row["rel_err_all"] < 1e-2 and row["rel_err_vs_control"] < row["control_tol"]
    assert row["requests_sampled"] == (1 if spec is TINY else 0)


def test_a_kernel_that_is_wrong_fails_the_case(flash, bf16_interpreter, model_dir):
    flash.scale_outputs(1.05)
    row = extend_check.run_case(TINY, model_dir, device="cpu", timing=False)
    assert not row["pass"] and row["rel_err_all"] > 1e-2 and row["rel_err_vs_control"] > 1e-2


def test_a_fallback_fails_the_case(flash, bf16_interpreter, model_dir, monkeypatch):
    monkeypatch.setattr(flash, "get_workspace", lambda device: type("W", (), {"max_bs": 1})())
    row = extend_check.run_case(TINY, model_dir, device="cpu", timing=False)
    assert not row["pass"] and row["kernel_calls"] == 0 and row["fallbacks"] == {"extend/batch_size": 2}


def test_case_table_covers_issue_26():
    names = {c["name"]: c for c in extend_check.CASES}
    assert {tuple(c["T"]) for c in names.values() if c["S"] == [185000]} >= {(2,), (16,)}
    assert any(8192 in c["T"] for c in names.values())
    assert any(0 in c["S"] and len(c["S"]) > 1 for c in names.values())
    assert {c.get("kv", "auto") for c in names.values()} == {"auto", "fp8_e4m3"}


TINY_DRAFT = dict(name="tiny-draft", graph_bs=4, replays=([40, 9, 3], [17, 60, 5, 30]), page=1, layers=1)
TINY_DRAFT_FP8 = dict(name="tiny-draft-fp8", graph_bs=2, replays=([30], [12, 41]), page=16, layers=1,
                      kv="fp8_e4m3", k_scale=0.05, v_scale=0.02)


@pytest.mark.parametrize("spec", [TINY_DRAFT, TINY_DRAFT_FP8], ids=lambda s: s["name"])
def test_draft_case_passes_through_both_arms_graph_form(flash, bf16_interpreter, model_dir, spec):
    # the capture and replay code of the GPU stage, run eagerly (no CUDA graph on the CPU)
    row = extend_check.run_draft_case(spec, model_dir, device="cpu", timing=False, cuda_graph=False)
    assert row["pass"], row
    assert row["fallbacks"] == {} and row["problems"] == [] and len(row["replay_results"]) == 2
    for r in row["replay_results"]:
        assert r["rel_err_all"] < 1e-2 and r["rel_err_vs_control"] < row["control_tol"]
        assert r["graph_equals_eager"]          # the stand-in is deterministic: graph form == eager
    graph_call, eager_call = flash.calls[-2:]   # the last replay's flash call, then its eager twin
    # the graph reads SGLang's fixed index buffer, the eager call a fresh one of the batch's prefix
    assert graph_call["kv_indices"].numel() > eager_call["kv_indices"].numel() == sum(spec["replays"][-1])
    assert all(c["with_lse"] is False and c["max_draft_len"] == 8 for c in (graph_call, eager_call))


def test_a_wrong_draft_kernel_fails_the_draft_case(flash, bf16_interpreter, model_dir):
    flash.scale_outputs(1.05)
    row = extend_check.run_draft_case(TINY_DRAFT, model_dir, device="cpu", timing=False, cuda_graph=False)
    assert not row["pass"] and all(r["rel_err_all"] > 1e-2 for r in row["replay_results"])


def test_draft_case_table_covers_the_real_server_shape():
    names = {c["name"]: c for c in extend_check.DRAFT_CASES}
    assert extend_check.DRAFT_WIDTH == 8                               # EAGLE, 8 draft tokens
    assert any([185000] in c["replays"] for c in names.values())      # the breakdown's context
    assert any(len(r) < c["graph_bs"] for c in names.values() for r in c["replays"])   # a padded replay
    assert {c.get("kv", "auto") for c in names.values()} == {"auto", "fp8_e4m3"}
