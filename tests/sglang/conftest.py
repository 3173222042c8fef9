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

from sglang.srt import runtime_context  # noqa: E402
from sglang.srt.plugins import load_plugins  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402

import transformers  # noqa: E402

from kernel.sglang import adapter as sglang_adapter  # noqa: E402

# A Kimi-K2-shaped model directory holding only config.json (no weights are loaded), and
# the speculative settings of the README launch command (EAGLE, 3 steps, topk 4, 8 drafts).
MODEL_DIR = tempfile.mkdtemp(prefix="mla-verify-kimi-k2-config-")
transformers.DeepseekV3Config(architectures=["DeepseekV3ForCausalLM"], num_hidden_layers=61, num_attention_heads=64, kv_lora_rank=512,
                              qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128).save_pretrained(MODEL_DIR)
runtime_context.publish(
    ServerArgs(model_path=MODEL_DIR, device="cpu", attention_backend="triton", page_size=1, speculative_algorithm="EAGLE",
               speculative_num_steps=3, speculative_eagle_topk=4, speculative_num_draft_tokens=8),
    role="scheduler")
load_plugins()  # what every SGLang process does first; installs our hook via the entry point


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
