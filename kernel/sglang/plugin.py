"""SGLang plugin: our kernel serves TARGET_VERIFY of MLA models in an unmodified SGLang.

SGLang's `load_plugins()` runs in every process it starts (launcher, each TP/scheduler
worker, detokenizer) and calls `register()` through the entry point in pyproject.toml
(group `sglang.srt.plugins`, name `mla_verify`). `register()` adds one AFTER hook on
`TritonAttnBackend.__init__` (the least invasive hook, sglang.md 3.4 (a)): the backend
name stays `triton`, so none of SGLang's name-based gates change, and the kernel is
reached only through the existing verify fast-path call site in `forward_extend`,
which falls back to `extend_attention_fwd` whenever the adapter returns False.

The switch, read in each server process when the attention backend is built:
  MLA_VERIFY_BACKEND=flash   our kernel (the candidate)
  MLA_VERIFY_BACKEND=triton  SGLang's own path (the control); also when unset or empty
  anything else              ValueError naming the variable: the worker fails to start,
                             because a canary that silently ran the control would make
                             the A/B compare triton with triton.
"""
from __future__ import annotations

import logging
import os

import torch

from . import adapter as sglang_adapter

logger = logging.getLogger(__name__)

ENV = "MLA_VERIFY_BACKEND"
CHOICES = ("flash", "triton")
HOOK_TARGET = "sglang.srt.layers.attention.triton_backend.TritonAttnBackend.__init__"

_registered = False


def selected_backend() -> str:
    """'flash' or 'triton' from MLA_VERIFY_BACKEND (unset/empty = 'triton')."""
    value = os.environ.get(ENV, "").strip()
    if value == "":
        return "triton"
    if value.lower() not in CHOICES:
        raise ValueError(f"{ENV}={value!r} is not one of {', '.join(CHOICES)} "
                         f"(flash = our verify kernel, triton = SGLang's own; unset = triton)")
    return value.lower()


def install(backend) -> bool:
    """Point a built TritonAttnBackend's verify slot at our adapter when the switch says
    flash and this backend verifies an MLA target. Returns whether it did."""
    if selected_backend() != "flash":
        return False
    if not getattr(backend, "use_mla", False) or getattr(backend, "is_draft_runner", False) \
            or getattr(backend, "skip_prefill", False):
        return False  # draft runners and non-MLA models keep SGLang's code unchanged
    m = sglang_adapter.ops()  # import now: a missing kernel build fails at startup, not mid-serve
    device = torch.device(backend.device)
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        # Sized once here, before any CUDA-graph capture; calls inside capture only look it up.
        m.get_workspace(device)
    sglang_adapter.reserve_lse(device, backend.req_to_token_pool.size * backend.target_verify_num_tokens_per_req,
                               backend.num_head)
    backend.use_verify_shared_kv = True
    backend.verify_shared_kv_fwd = torch.compiler.disable(sglang_adapter.verify_fwd)
    backend.mla_verify_backend = "flash"
    logger.info("mla-verify: %s=flash, TARGET_VERIFY on %s runs the mla-verify kernel", ENV, device)
    return True


def _after_backend_init(_result, backend, *args, **kwargs):
    install(backend)


def register() -> None:
    """Entry point called by SGLang's load_plugins(): register the backend hook."""
    global _registered
    if _registered:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    try:
        logger.info("mla-verify plugin: %s=%s", ENV, selected_backend())
    except ValueError as e:
        # Registering anyway keeps the failure loud: the hook raises when the backend is built.
        logger.error("mla-verify plugin: %s", e)
    HookRegistry.register(HOOK_TARGET, _after_backend_init, HookType.AFTER)
    _registered = True
