"""Set-up for the SGLang plugin tests on a CPU-only machine (../../shared/reading/sglang-cpu-import.md).

Runs before any test module imports sglang: Triton's interpreter for SGLang's kernels
(read when a kernel is defined, so it must be set first), the torchvision operator shim,
the published ServerArgs of the deployment under test, and SGLang's own load_plugins().
"""
import os

import tempfile

# TRITON_INTERPRET=1 and the torchvision shim come from tests/conftest.py, loaded first
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model path below is a local config

import pytest  # noqa: E402

from sglang.srt.plugins import load_plugins  # noqa: E402

from kernel.sglang import adapter as sglang_adapter  # noqa: E402
from kernel.sglang.harness import publish_server_args  # noqa: E402
from kernel.sglang.model_configs import write_kimi_k2  # noqa: E402

# A Kimi-K2-shaped model directory holding only config.json (no weights are loaded), and
# the speculative settings of the README launch command (EAGLE, 3 steps, topk 4, 8 drafts).
MODEL_DIR = write_kimi_k2(tempfile.mkdtemp(prefix="mla-verify-kimi-k2-config-"), nextn_layers=1)
publish_server_args(MODEL_DIR, device="cpu")
load_plugins()  # what every SGLang process does first; installs our hook via the entry point


@pytest.fixture(scope="module", autouse=True)
def default_server_args():
    """Every module starts from the published ServerArgs above: a test that publishes others
    (backend_check's 16 draft tokens, say) must not decide what the next module's backends read,
    whatever order the modules run in."""
    publish_server_args(MODEL_DIR, device="cpu")


@pytest.fixture
def cpu_ops():
    """Route the adapter's kernel calls to the CPU oracle stand-in; fresh log-once state."""
    from cpu_ops import CpuOps

    stand_in = CpuOps()
    previous = sglang_adapter.use_ops(stand_in)
    sglang_adapter._logged.clear()
    sglang_adapter.calls.clear()
    yield stand_in
    sglang_adapter.use_ops(previous)


@pytest.fixture
def flash(monkeypatch, cpu_ops):
    """MLA_VERIFY_BACKEND=flash with the CPU stand-in kernel."""
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "flash")
    return cpu_ops


@pytest.fixture
def bf16_interpreter(monkeypatch):
    """Triton's interpreter multiplies bf16's raw bits in tl.dot (triton-lang/triton#11584):
    upcast bf16 operands to fp32 first, so SGLang's kernels run right in bf16 here."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    dot = interpreter.InterpreterBuilder.create_dot

    def f32(t):
        if not t.dtype.scalar.is_bf16():
            return t
        return interpreter.TensorHandle((t.data.astype(np.uint32) << 16).view(np.float32), tl.float32)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return dot(self, f32(a), f32(b), d, input_precision, max_num_imprecise_acc)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", create_dot)
