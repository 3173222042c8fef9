"""SGLang's own verify kernels as the baseline, called exactly as its Triton backend calls them.

Where SGLang imports whole (CI's CPU venv, a real server), the real modules are used. On a
bare GPU machine that has only the sglang wheel unpacked (no server dependencies), the
attention kernel modules need just `sglang.srt.environ` and `sglang.srt.utils`; a small
stand-in for those two (and empty parent packages, so sglang/__init__.py with its heavy
imports never runs) lets SGLang's Triton kernels run unmodified.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import torch


class _Flag:
    def __init__(self, value=False):
        self.value = value

    def get(self):
        return self.value


class _Envs:
    """SGLang's `envs`: every SGLANG_* switch at its off/default value."""

    def __getattr__(self, name):
        return _Flag(1.0 if name.endswith("_MULT") else False)


def _install_stand_in() -> None:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("sglang is not installed: `pip install --no-deps sglang==0.5.23` (the wheel is enough)")
    root = Path(list(spec.submodule_search_locations)[0])
    for name, sub in (("sglang", ""), ("sglang.kernels", "kernels"), ("sglang.kernels.ops", "kernels/ops"),
                      ("sglang.kernels.ops.attention", "kernels/ops/attention"), ("sglang.srt", "srt")):
        if name not in sys.modules:
            m = types.ModuleType(name)
            m.__path__ = [str(root / sub)] if sub else [str(root)]
            sys.modules[name] = m
    env = types.ModuleType("sglang.srt.environ")
    env.envs = _Envs()
    utils = types.ModuleType("sglang.srt.utils")
    utils.is_cuda = lambda: torch.cuda.is_available() and torch.version.cuda is not None
    utils.is_hip = lambda: False
    utils.is_gfx95_supported = lambda: False
    utils.is_gfx1250_supported = lambda: False
    utils.get_device_core_count = lambda device_id=0: torch.cuda.get_device_properties(device_id).multi_processor_count
    sys.modules.setdefault("sglang.srt.environ", env)
    sys.modules.setdefault("sglang.srt.utils", utils)


def load():
    """Returns a namespace with SGLang's extend_attention_fwd and verify_shared_kv_fwd."""
    try:
        ext = importlib.import_module("sglang.kernels.ops.attention.extend_attention")
        vmla = importlib.import_module("sglang.kernels.ops.attention.verify_mla")
    except Exception:
        for k in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
            del sys.modules[k]
        _install_stand_in()
        ext = importlib.import_module("sglang.kernels.ops.attention.extend_attention")
        vmla = importlib.import_module("sglang.kernels.ops.attention.verify_mla")
    return types.SimpleNamespace(extend_attention_fwd=ext.extend_attention_fwd,
                                 verify_shared_kv_fwd=vmla.verify_shared_kv_fwd)


def _views(case):
    q = case.q
    k_buffer = case.kv_cache
    v_buffer = case.kv_cache[..., :512]           # SGLang's MLA pool: V is a view of K
    v_extend = case.k_extend[..., :512]
    max_len = int(max(case.meta["draft_lens"]))
    return q, k_buffer, v_buffer, v_extend, max_len


def run_extend(sgl, case, o: torch.Tensor, page_size: int = 1) -> None:
    """extend_attention_fwd as TritonAttnBackend.forward_extend calls it in TARGET_VERIFY."""
    q, k_buffer, v_buffer, v_extend, max_len = _views(case)
    mask = case.custom_mask
    sgl.extend_attention_fwd(q, case.k_extend, v_extend, o, k_buffer, v_buffer, case.qo_indptr, case.kv_indptr,
                             case.kv_indices, mask, True, case.mask_indptr, max_len, 1.0, 1.0,
                             sm_scale=case.sm_scale, logit_cap=0.0, page_size=page_size)


def run_verify_mla(sgl, case, o: torch.Tensor) -> bool:
    """SGLang's split-KV grouped-head verify (chains only; AMD-gated in the server)."""
    q, k_buffer, v_buffer, v_extend, max_len = _views(case)
    return bool(sgl.verify_shared_kv_fwd(q, case.k_extend, v_extend, o, k_buffer, v_buffer, case.qo_indptr,
                                         case.kv_indptr, case.kv_indices, case.custom_mask, True, case.mask_indptr,
                                         max_len, 1.0, 1.0, sm_scale=case.sm_scale, logit_cap=0.0,
                                         max_bs=len(case.meta["draft_lens"])))
