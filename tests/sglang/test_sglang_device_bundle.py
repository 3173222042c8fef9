"""The device bundle (kernel/sglang/device_bundle.py): its probe runs the GPU check's code with
SGLang's CUDA import branches and the sgl_kernel stand-in, and calls no stand-in; what it keeps
of the wheels; the entry point it declares; the stand-in's behaviour."""
import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib

import pytest

from kernel.sglang import device_bundle as db

ROOT = db.ROOT


def test_probe_runs_the_gpu_checks_code_with_cuda_import_branches():
    found = db.run_probe()
    assert found["standins_called"] == [] and found["standins_ran"] == []
    assert "sglang.srt.layers.attention.triton_backend" in found["sglang_modules"]
    # the sglang-backend stage's DFLASH cases build SGLang's own verify input (a device run lacked it)
    assert "sglang.srt.speculative.dflash_info" in found["sglang_modules"]
    # stage dcp-sim shards with SGLang's own DCP helpers
    assert {"sglang.srt.layers.dcp.layout", "sglang.kernels.ops.attention.dcp_kernels"} <= set(found["sglang_modules"])
    carried = {n for n in found["distributions"] if n not in db.GPU_HAS | db.NOT_CARRIED}
    # what the GPU image lacks and SGLang's import needs (the list, as measured)
    assert {"pydantic", "pydantic-core", "pyzmq", "orjson", "starlette", "pybase64", "msgspec"} <= carried, carried
    assert not {"torch", "triton", "numpy", "transformers"} & carried


def test_stand_in_imports_anything_and_fails_only_when_called():
    # gemma_fused_add_rmsnorm is a placeholder; the six torch versions are
    # tests/sglang/test_sglang_standins.py's
    code = ("import json, sgl_kernel\n"
            "from sgl_kernel.flash_attn import flash_attn_varlen_func\n"
            "from sgl_kernel import gemma_fused_add_rmsnorm, scalar_type\n"
            "from sgl_kernel.utils import is_arch_support_pdl\n"
            "class Sub(flash_attn_varlen_func): pass\n"
            "try:\n    gemma_fused_add_rmsnorm(1, 2)\nexcept NotImplementedError as e:\n    msg = str(e)\n"
            "print(json.dumps([is_arch_support_pdl(), msg, sgl_kernel.called, scalar_type.scalar_types.uint4b8.__qualname__]))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(db.STANDINS)))
    assert r.returncode == 0, r.stderr
    pdl, msg, called, qual = json.loads(r.stdout)
    assert pdl is False and called == ["sgl_kernel.gemma_fused_add_rmsnorm"]
    assert msg.startswith("sgl_kernel.gemma_fused_add_rmsnorm is a stand-in")
    assert qual == "sgl_kernel.scalar_type.scalar_types.uint4b8"


def test_sglang_files_kept():
    imported = db.module_files(["sglang.srt.layers.attention.triton_backend", "sglang.srt.models.deepseek_v2"])
    keep = lambda p: db.keep_sglang_file(p, imported)  # noqa: E731
    assert keep("sglang/srt/layers/attention/triton_backend.py") and keep("sglang/srt/layers/__init__.py")
    assert keep("sglang/srt/models/deepseek_v2.py") and not keep("sglang/srt/models/llama.py")
    assert keep("sglang/srt/arg_groups/speculative_hook.py")          # a whole subtree
    assert not keep("sglang/multimodal_gen/runtime/x.py") and not keep("sglang/srt/rust_extensions/a.so")
    assert not keep("sglang/srt/layers/attention/__pycache__/triton_backend.cpython-312.pyc")
    assert keep("sglang-0.5.23.dist-info/METADATA") and not keep("sglang-0.5.23.dist-info/RECORD")


def test_carried_files_kept():
    assert db.keep_carried_file("pydantic_core/_pydantic_core.cpython-312-x86_64-linux-gnu.so")
    assert db.keep_carried_file("tvm_ffi/lib/libtvm_ffi.so") and db.keep_carried_file("zmq/sugar/socket.py")
    assert db.keep_carried_file("tvm_ffi/lib/libtvm_ffi_testing.so")   # tvm_ffi.core links it
    for dropped in ("tvm_ffi/3rdparty/libbacktrace/configure", "tvm_ffi/include/tvm/ffi/c_api.h",
                    "IPython/core/tests/test_run.py", "openai/types/chat.pyi"):
        assert not db.keep_carried_file(dropped), dropped


def test_project_dist_info_declares_the_entry_point(tmp_path):
    db.write_project_dist_info(tmp_path)
    (dist,) = list(importlib.metadata.distributions(path=[str(tmp_path)]))
    eps = {(e.group, e.name): e.value for e in dist.entry_points}
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert eps == {("sglang.srt.plugins", "mla_verify"): declared["sglang.srt.plugins"]["mla_verify"]}
    assert dist.metadata["Name"] == "mla-verify"


@pytest.mark.parametrize("name", ["pydantic", "pyzmq", "orjson", "starlette", "pybase64", "msgspec", "sglang"])
def test_gpu_image_list_does_not_claim_what_it_lacks(name):
    assert name not in db.GPU_HAS
