"""The SGLang versions the plugin was tested with, and the guard that refuses `flash` on others.

The hook depends on SGLang internals that no API promises: the fields and keywords of the
verify call site in `TritonAttnBackend.forward_extend`, the FULL_MASK tree-mask layout of
T * (S + T) per request, per-token kv_indices, triton not being an absorb-core backend
(tests/sglang/test_sglang_internals_canary.py lists them all). On another version a change
there gives wrong tokens or a silent no-op, so `flash` needs a version listed here, or
MLA_VERIFY_ALLOW_UNTESTED_SGLANG=1 (logged) for a deliberate trial.
"""
from __future__ import annotations

import logging
import os

from .strict import StrictFlashError

logger = logging.getLogger(__name__)

TESTED = ("0.5.23",)
OVERRIDE_ENV = "MLA_VERIFY_ALLOW_UNTESTED_SGLANG"


def check_sglang_version(version: str | None = None) -> str:
    """The running SGLang version, when `flash` may run on it; else StrictFlashError."""
    if version is None:
        import sglang

        version = sglang.__version__
    if version in TESTED:
        return version
    if os.environ.get(OVERRIDE_ENV, "").strip() in ("1", "true", "yes"):
        logger.warning("mla-verify: SGLang %s is not a tested version (%s); running flash anyway because %s is set",
                       version, ", ".join(TESTED), OVERRIDE_ENV)
        return version
    raise StrictFlashError(f"mla-verify: MLA_VERIFY_BACKEND=flash, but SGLang {version} is not a version the plugin "
                           f"was tested with ({', '.join(TESTED)}): its verify call site may differ; fix: install "
                           f"sglang=={TESTED[-1]}, or set {OVERRIDE_ENV}=1 to try anyway; or MLA_VERIFY_BACKEND=triton "
                           "for SGLang's own path")
