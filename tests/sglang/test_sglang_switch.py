"""MLA_VERIFY_BACKEND picks our kernel (flash) or SGLang's path (triton, unset); else an error."""
import inspect

import pytest
import torch
from sglang.kernels.ops.attention.verify_mla import verify_shared_kv_fwd
from sglang.srt.configs.model_config import AttentionArch

from kernel.sglang import adapter as sglang_adapter
from kernel.inputs import make_case
from sglang_harness import Harness, oracle, rel_err


def _case():
    return make_case([37, 120], [8, 8], 8, tree="random", seed=11)


def test_flash_points_the_verify_slot_at_the_adapter(flash):
    b = Harness().backend
    assert b.use_verify_shared_kv is True and b.mla_verify_backend == "flash"
    assert inspect.unwrap(b.verify_shared_kv_fwd) is sglang_adapter.verify_fwd


@pytest.mark.parametrize("value", ["triton", None, ""])
def test_triton_or_unset_leaves_sglang_path_untouched(monkeypatch, cpu_ops, value):
    if value is None:
        monkeypatch.delenv("MLA_VERIFY_BACKEND", raising=False)
    else:
        monkeypatch.setenv("MLA_VERIFY_BACKEND", value)
    h = Harness(dtype=torch.float32)  # float32: SGLang's kernel runs correctly under the interpreter
    b = h.backend
    assert b.use_verify_shared_kv is False and not hasattr(b, "mla_verify_backend")
    assert inspect.unwrap(b.verify_shared_kv_fwd) is verify_shared_kv_fwd
    case = _case()
    assert rel_err(h.run_eager(case), oracle(case)) < 1e-5
    assert cpu_ops.calls == [] and not sglang_adapter.calls, "the adapter ran under the control setting"


def test_flash_in_float32_reaches_the_adapter_and_falls_back(flash):
    # Same run as the control test above, but the adapter is consulted and declines.
    h = Harness(dtype=torch.float32)
    case = _case()
    assert rel_err(h.run_eager(case), oracle(case)) < 1e-5
    assert flash.calls == [] and sum(sglang_adapter.calls.values()) == 1 and not sglang_adapter.calls["flash"]


@pytest.mark.parametrize("value", ["flsh", "on", "1"])
def test_invalid_value_fails_backend_construction_naming_the_variable(monkeypatch, cpu_ops, value):
    monkeypatch.setenv("MLA_VERIFY_BACKEND", value)
    with pytest.raises(ValueError, match=f"MLA_VERIFY_BACKEND='{value}' is not one of flash, triton"):
        Harness()


def test_draft_runner_keeps_sglang_code(flash):
    b = Harness(draft_worker=True).backend
    assert b.use_verify_shared_kv is False and not hasattr(b, "mla_verify_backend")


def test_non_mla_model_keeps_sglang_code(flash):
    b = Harness(arch=AttentionArch.MHA).backend
    assert b.use_verify_shared_kv is False and not hasattr(b, "mla_verify_backend")
