"""The plugin's entry point (pyproject.toml: group `sglang.srt.plugins`, `mla_verify`).

SGLang's `load_plugins()` imports an entry point's module inside `except Exception` and only
logs a failure (`sglang/srt/plugins/__init__.py`, `load_plugins_by_group`): had the entry
point been plugin.py, whose imports reach torch, the kernel build and the adapter, a broken
install would leave a server started with MLA_VERIFY_BACKEND=flash serving SGLang's own
kernel with no arm metric. So this module imports only the standard library and cannot fail
to import; `register()` imports the rest (plugin.py) and registers it.

When that import or registration fails:
  MLA_VERIFY_BACKEND=flash (or a value that is neither flash nor triton)
      the process stops with one line naming the cause and the fix (PluginStartError, a
      SystemExit that SGLang's `except Exception` cannot swallow; plugin.py's own
      StrictFlashError passes through unchanged);
  triton, unset or empty
      one log line says the server runs SGLang's own path without the plugin, and the error
      goes on to SGLang, which logs its traceback and starts.
"""
from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

ENV = "MLA_VERIFY_BACKEND"   # the switch (kernel/sglang/strict.py: ENV; a test holds them equal)
PLUGIN_MODULE = "kernel.sglang.plugin"


class PluginStartError(SystemExit):
    """The switch asks for the kernel but the plugin could not be imported or registered.

    A SystemExit, so the process exits printing this one line (no traceback)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _asks_for_kernel() -> bool:
    """True unless the switch is triton, unset or empty: `flash`, and any value plugin.py
    would refuse, must never start without the plugin."""
    return os.environ.get(ENV, "").strip().lower() not in ("", "triton")


def _cause(e: BaseException) -> str:
    first = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def register() -> None:
    """Import plugin.py and run its register(); see the module docstring for failures."""
    stage = "imported"
    try:
        from . import plugin
        stage = "registered"
        plugin.register()
    except SystemExit:
        raise   # plugin.py's StrictFlashError: already one line
    except Exception as e:
        if _asks_for_kernel():
            value = os.environ.get(ENV, "").strip()
            raise PluginStartError(
                f"mla-verify: {ENV}={value}, but the plugin could not be {stage}: {_cause(e)}; fix: that error "
                f"in this server's Python (`python -c 'import {PLUGIN_MODULE}; {PLUGIN_MODULE}.register()'` shows "
                f"its traceback; README 'Serving with SGLang' lists what the plugin needs); or {ENV}=triton "
                "for SGLang's own path") from e
        logger.warning("mla-verify: the plugin could not be %s (%s): this process serves SGLang's own verify "
                       "path and publishes no arm metric (SGLang logs the traceback next)", stage, _cause(e))
        raise
