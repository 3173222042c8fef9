"""MLA_VERIFY_BACKEND picks our kernel (flash) or SGLang's path (triton, unset); else an error.
With flash, a target backend whose TARGET_VERIFY cannot reach the kernel refuses to be built."""
import inspect

import pytest
import torch
from sglang.kernels.ops.attention.verify_mla import verify_shared_kv_fwd
from sglang.srt.configs.model_config import AttentionArch

from kernel.sglang import adapter as sglang_adapter
from kernel.sglang.strict import StrictFlashError
from kernel.inputs import make_case
from kernel.sglang.harness import Harness, oracle, rel_err


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


@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.float8_e5m2])
def test_flash_refuses_a_kv_cache_the_kernel_cannot_read(flash, kv_dtype):
    # Before: the backend was built, every verify fell back to SGLang's kernel, the log said ours ran.
    with pytest.raises(StrictFlashError, match=f"the KV cache is {str(kv_dtype).replace('torch.', '')}: the kernel "
                                               "reads a bfloat16 or a float8_e4m3fn KV cache only.*"
                                               "fix: --kv-cache-dtype fp8_e4m3 \\(fp8\\) or auto"):
        Harness(dtype=kv_dtype if kv_dtype == torch.float32 else torch.bfloat16, kv_dtype=kv_dtype)


def test_flash_installs_on_an_fp8_e4m3_pool(flash):
    # SGLang's --kv-cache-dtype fp8_e4m3 pool (uint8 storage, float8_e4m3fn views): the kernel reads it
    h = Harness(kv_dtype=torch.float8_e4m3fn)
    b = h.backend
    assert h.pool.dtype == torch.float8_e4m3fn and h.pool.store_dtype == torch.uint8
    assert b.use_verify_shared_kv is True and b.mla_verify_backend == "flash"
    assert inspect.unwrap(b.verify_shared_kv_fwd) is sglang_adapter.verify_fwd


def test_control_arm_serves_an_fp8_cache_with_sglangs_kernel(monkeypatch, cpu_ops):
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "triton")
    b = Harness(kv_dtype=torch.float8_e4m3fn).backend
    assert b.use_verify_shared_kv is False


@pytest.mark.parametrize("value", ["flsh", "on", "1"])
def test_invalid_value_fails_backend_construction_naming_the_variable(monkeypatch, cpu_ops, value):
    monkeypatch.setenv("MLA_VERIFY_BACKEND", value)
    with pytest.raises(ValueError, match=f"MLA_VERIFY_BACKEND='{value}' is not one of flash, triton"):
        Harness()


def test_draft_runner_keeps_sglang_code(flash):
    b = Harness(draft_worker=True).backend
    assert b.use_verify_shared_kv is False and not hasattr(b, "mla_verify_backend")


def test_flash_refuses_a_non_mla_target(flash):
    with pytest.raises(StrictFlashError, match="the target model's attention is not MLA"):
        Harness(arch=AttentionArch.MHA)


def test_control_arm_keeps_sglang_code_for_a_non_mla_model(monkeypatch, cpu_ops):
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "triton")
    b = Harness(arch=AttentionArch.MHA).backend
    assert b.use_verify_shared_kv is False and not hasattr(b, "mla_verify_backend")
