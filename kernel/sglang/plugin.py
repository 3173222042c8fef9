"""SGLang plugin: our kernel serves TARGET_VERIFY of MLA models in an unmodified SGLang, and
with `flash` also their EXTEND over a cached prefix and EAGLE's draft-model extend after each
verify (extend.py, hooked from install(): the target backend's, and the draft runner's extend
backend's).

SGLang's `load_plugins()` runs in every process it starts (launcher, each TP/scheduler
worker, detokenizer) and calls the entry point in pyproject.toml (group `sglang.srt.plugins`,
name `mla_verify`): entry.py, stdlib only, which imports this module and calls `register()`
(and stops a `flash` process with one line when that import fails). `register()` adds AFTER hooks:
- `TritonAttnBackend.__init__` (the least invasive hook, sglang.md 3.4 (a)): the backend
  name stays `triton`, so none of SGLang's name-based gates change, and the kernel is
  reached only through the existing verify fast-path call site in `forward_extend`,
  which falls back to `extend_attention_fwd` whenever the adapter returns False;
- `ServerArgs.resolve_once`: the strict checks (strict.py) on the resolved configuration,
  in the launcher before it spawns anything and again in every scheduler process;
- `DeepseekMLAForwardMixin.is_dcp_mla_decode_phase`: under `--dcp-size` > 1 with `flash`, a
  TARGET_VERIFY layer on the triton backend keeps its own heads and leaves the cross-rank
  merge to the backend (dcp_verify.py), where the plugin's DCP path does it.

The switch, read in each server process:
  MLA_VERIFY_BACKEND=flash   our kernel (the candidate)
  MLA_VERIFY_BACKEND=triton  SGLang's own path (the control); also when unset or empty
  anything else              the process refuses to start, naming the variable

With `flash`, anything that would leave SGLang's kernel serving every verify stops the
server at start with one line (StrictFlashError, a SystemExit that SGLang's exception
logging cannot swallow): an untested SGLang version, a hook target that does not resolve,
a kernel library that does not load (checked here, before any weight is loaded), a backend
class without the verify call site (a fork), and the configurations strict.py lists. Each
rank publishes which arm it installed (metrics.py), only after those checks passed. The
verify slot needs nothing sized from the draft tokens per request: the call site reads no
LSE, so the kernel writes none (adapter.py).
"""
from __future__ import annotations

import logging
import os
import pkgutil

import torch

from .. import build
from . import adapter as sglang_adapter
from . import dcp_verify, extend, metrics, strict
from .strict import StrictFlashError
from .version import check_sglang_version

logger = logging.getLogger(__name__)

ENV = strict.ENV
CHOICES = ("flash", "triton")
HOOK_TARGET = "sglang.srt.layers.attention.triton_backend.TritonAttnBackend.__init__"
RESOLVE_TARGET = "sglang.srt.server_args.ServerArgs.resolve_once"
DCP_PHASE_TARGET = ("sglang.srt.models.deepseek_common.attention_forward_methods.forward_mla."
                    "DeepseekMLAForwardMixin.is_dcp_mla_decode_phase")

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


def _device(backend) -> torch.device:
    device = torch.device(backend.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def install(backend) -> bool:
    """Point a built target TritonAttnBackend's verify slot at our adapter when the switch
    says flash; publish the arm either way. Returns whether the kernel was installed for
    TARGET_VERIFY (False for a draft runner's backend, whose extend it may still hook).

    Raises StrictFlashError when the switch says flash but this backend's TARGET_VERIFY
    cannot reach the kernel (strict.backend_problem)."""
    arm = selected_backend()
    if getattr(backend, "is_draft_runner", False) or getattr(backend, "skip_prefill", False):
        # Draft runners never run TARGET_VERIFY (unpublished). The one that runs the draft model's
        # extend (EAGLE's draft-extend backend, not skip_prefill) sends it to the kernel on flash
        # unless MLA_VERIFY_DRAFT_EXTEND=0; the draft decode backends (skip_prefill) stay SGLang's.
        if arm == "flash" and not getattr(backend, "skip_prefill", False) and extend.draft_enabled():
            extend.install_draft(backend)
        return False
    device = _device(backend)
    if arm != "flash":
        metrics.publish_backend("triton", device)
        return False
    strict.check_backend(backend)
    m = sglang_adapter.ops()
    if device.type == "cuda":
        # Sized once here, before any CUDA-graph capture; calls inside capture only look it up.
        m.get_workspace(device)
    if getattr(backend, "dcp_size", 1) > 1:
        # forward_extend sends every DCP extend to _forward_extend_dcp before the verify call site
        dcp_verify.install(backend)
    else:
        backend.use_verify_shared_kv = True
        backend.verify_shared_kv_fwd = torch.compiler.disable(sglang_adapter.verify_fwd)
    extend.install(backend)   # EXTEND over a cached prefix, on the same switch (extend.py)
    backend.mla_verify_backend = "flash"
    metrics.publish_backend("flash", device, kernel_hash=build.source_hash())
    logger.info("mla-verify: %s=flash, TARGET_VERIFY on %s runs the mla-verify kernel %s", ENV, device,
                build.source_hash())
    return True


def _after_backend_init(_result, backend, *args, **kwargs):
    install(backend)


def _after_dcp_phase(result, attn_module, forward_batch, *args, **kwargs):
    if result and dcp_verify.keeps_local_heads(attn_module, forward_batch):
        return False
    return None


def _after_resolve(_result, server_args, *args, **kwargs):
    if selected_backend() != "flash":
        return
    # SGLang applies each hook in its own try and only logs a failure: this hook running
    # proves nothing about the other, so look at the backend's __init__ itself.
    from sglang.srt.arg_groups.overrides import resolving_view

    targets = [HOOK_TARGET] + ([DCP_PHASE_TARGET] if (resolving_view(server_args).dcp_size or 1) > 1 else [])
    for target in targets:
        owner, attr = target.rsplit(".", 1)
        if getattr(pkgutil.resolve_name(owner).__dict__.get(attr), "__wrapped__", None) is None:
            raise StrictFlashError(f"mla-verify: {ENV}=flash, but the hook on {target} was not applied (see "
                                   "SGLang's 'Failed to apply hooks' log line), so TARGET_VERIFY would not reach "
                                   f"the kernel; fix: that error; or {ENV}=triton for SGLang's own path")
    strict.check_server_args(server_args)


def _check_flash_can_run() -> None:
    """What `flash` needs before any weight is loaded: a tested SGLang, hook targets that
    resolve (SGLang would only log a failure to apply them), a kernel library that loads
    (prebuilt, or nvcc to build it now: seconds, not after the weight load). The DCP target
    lives in SGLang's model code, whose imports a backend-only install may lack; it is checked
    at resolution, and only under --dcp-size > 1 (`_after_resolve`)."""
    check_sglang_version()
    for target in (HOOK_TARGET, RESOLVE_TARGET):
        owner, attr = target.rsplit(".", 1)
        if not hasattr(pkgutil.resolve_name(owner), attr):
            raise AttributeError(f"{target} does not exist")
    build.load()


def register() -> None:
    """Entry point called by SGLang's load_plugins(): checks, then the hooks.

    With `flash`, any failure raises StrictFlashError (the process exits with one line);
    with `triton`, a failure is left to SGLang, which logs it and runs its own path."""
    global _registered
    if _registered:
        return
    try:
        arm = selected_backend()
    except ValueError as e:
        raise StrictFlashError(f"mla-verify: {e}") from None
    try:
        if arm == "flash":
            _check_flash_can_run()
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType

        HookRegistry.register(HOOK_TARGET, _after_backend_init, HookType.AFTER)
        HookRegistry.register(RESOLVE_TARGET, _after_resolve, HookType.AFTER)
        # a no-op until a flash target backend installs the DCP path in this process
        HookRegistry.register(DCP_PHASE_TARGET, _after_dcp_phase, HookType.AFTER)
    except StrictFlashError:
        raise
    except Exception as e:
        if arm == "flash":
            raise StrictFlashError(f"mla-verify: {ENV}=flash, but the plugin cannot start: "
                                   f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; fix: see "
                                   f"the README's 'Serving with SGLang'; or {ENV}=triton for SGLang's own path") from e
        raise
    _registered = True
    logger.info("mla-verify plugin: %s=%s", ENV, arm)
