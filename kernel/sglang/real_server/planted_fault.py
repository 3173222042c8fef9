"""TEST-ONLY SGLang plugin: makes the flash arm's TARGET_VERIFY output wrong, so a real canary
can show that the rollout's gates roll back a verify kernel that claims to be flash but is not
right. Never shipped: pyproject.toml does not name it (a test holds that); the real-server job
(`planted` step) writes a temporary dist-info whose entry point (PLANTED_ENTRY_POINT) names
`register`, and puts it on the PYTHONPATH of the canary's server only, with
MLA_VERIFY_PLANTED_FAULT=1. Without that variable `register` changes nothing.

How: `register` (run by SGLang's load_plugins() in every server process, before any attention
backend is built) wraps `kernel.sglang.adapter.verify_fwd`, the function the mla_verify plugin
installs as the verify slot when a target backend is built with MLA_VERIFY_BACKEND=flash.
Whenever the kernel served a call, the wrapper adds PLANTED_OFFSET to every element of its
output o_extend [N, H, 512] (in place, so CUDA-graph capture records it). The arm metric still
says flash with the kernel's hash: only the numbers betray it.

Why an offset of 64: SGLang's dummy weights are uniform in +-1e-3, so each layer adds to the
residual stream about sqrt(512) * sqrt(1024) * (1e-3 / sqrt(3))^2 = 2.4e-4 times the
attention output's magnitude, against embeddings of about 5.8e-4. The true attention output
is an average of latent rows (~1e-3 or less), so it barely moves the logits; +64 in every
element adds the same ~1.5e-2 vector in every layer, which then dominates the final norm: the
verify logits pick the same token whatever the input, and the numerics gate's top-1 agreement
with the control's prefill scoring falls to about 1/vocab, far below its 0.95 floor, while
the control's own verify path still agrees with its prefill.
"""
from __future__ import annotations

import inspect
import json
import logging
import os
import time

ENV = "MLA_VERIFY_PLANTED_FAULT"
LOG_ENV = "MLA_VERIFY_PLANTED_LOG"
PLANTED_OFFSET = 64.0
PLANTED_ENTRY_POINT = "mla_verify_planted_fault"
logger = logging.getLogger(__name__)

calls = 0          # served verify calls this process perturbed (captures count once; replays never call Python)
_logged = False


def _note(o_extend) -> None:
    global calls, _logged
    calls += 1
    path = os.environ.get(LOG_ENV)
    if path and not _logged:
        _logged = True
        try:
            with open(path, "a") as f:
                f.write(json.dumps({"pid": os.getpid(), "offset": PLANTED_OFFSET, "shape": list(o_extend.shape),
                                    "time": time.time()}) + "\n")
        except OSError:
            pass


def wrap(verify_fwd):
    """A verify_fwd that adds PLANTED_OFFSET to o_extend whenever `verify_fwd` served the call."""
    sig = inspect.signature(verify_fwd)

    def planted_verify_fwd(*args, **kwargs):
        served = verify_fwd(*args, **kwargs)
        if served:
            o_extend = sig.bind(*args, **kwargs).arguments["o_extend"]
            o_extend.add_(PLANTED_OFFSET)
            _note(o_extend)
        return served

    planted_verify_fwd.__wrapped__ = verify_fwd
    planted_verify_fwd.planted = True
    return planted_verify_fwd


def register() -> None:
    """Entry point (only in the planted step's temporary dist-info). Inert unless ENV is '1'."""
    if os.environ.get(ENV) != "1":
        logger.warning("mla-verify planted fault: entry point loaded but %s is not 1: inert", ENV)
        return
    from kernel.sglang import adapter

    if getattr(adapter.verify_fwd, "planted", False):
        return
    adapter.verify_fwd = wrap(adapter.verify_fwd)
    logger.warning("mla-verify PLANTED FAULT ACTIVE: a flash TARGET_VERIFY output gets +%g in every element "
                   "(test only; %s=1)", PLANTED_OFFSET, ENV)
