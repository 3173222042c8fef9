"""MLA_VERIFY_DRAFT_EXTEND, the flash arm's switch for EAGLE's draft-model extend: read by the
plugin (extend.draft_enabled) inside SGLang and by the real-server job, which records what its
servers ran. Standard library only, so the job can read it without torch or SGLang."""
from __future__ import annotations

import os

DRAFT_ENV = "MLA_VERIFY_DRAFT_EXTEND"
# On by default since it ran inside SGLang's draft-extend CUDA graph on the H200
# (reports/data/sglang-extend-h200-20261202T0742.json, real-server-h200-20261202T075043Z.json).
DEFAULT = True


def draft_extend_on(environ=None) -> bool:
    """True when a flash server runs EAGLE's draft extend through the kernel: the variable unset,
    '' or '1'; False for '0'. Anything else raises ValueError naming the variable and the value."""
    value = (os.environ if environ is None else environ).get(DRAFT_ENV, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{DRAFT_ENV}={value!r} is not one of 0, 1 (1 or unset: the draft model's extend runs "
                         f"the kernel on the flash arm; 0: SGLang's)")
    return DEFAULT if value == "" else value == "1"
