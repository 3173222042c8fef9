"""The plugin reaches SGLang through its own mechanism: entry point -> load_plugins() -> hook.
(The entry point itself: test_sglang_plugin_entry.py.)"""
import inspect
import os
import subprocess
import sys
import textwrap

from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
from sglang.srt.plugins.hook_registry import HookRegistry, HookType

from kernel.sglang import plugin as sglang_plugin


def test_load_plugins_installed_the_after_hook_on_the_real_backend_init():
    # conftest.py ran SGLang's load_plugins(), as every SGLang process does first.
    hooks = HookRegistry._hooks[sglang_plugin.HOOK_TARGET]
    ours = [(t, src) for t, fn, src in hooks if fn is sglang_plugin._after_backend_init]
    assert ours == [(HookType.AFTER, ours[0][1])] and ours[0][1].plugin_name == "mla_verify"
    assert sglang_plugin.HOOK_TARGET in HookRegistry._patched
    init = TritonAttnBackend.__dict__["__init__"]
    assert init is not inspect.unwrap(init), "TritonAttnBackend.__init__ is not wrapped"


def test_register_twice_adds_one_hook():
    before = len(HookRegistry._hooks[sglang_plugin.HOOK_TARGET])
    sglang_plugin.register()
    assert len(HookRegistry._hooks[sglang_plugin.HOOK_TARGET]) == before


def test_fresh_process_gets_the_hook_from_load_plugins_alone():
    # A spawned SGLang worker starts from nothing but load_plugins(); no import of ours.
    code = textwrap.dedent("""
        import torch
        lib = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            lib.define(op + "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        import sys
        from sglang.srt.plugins import load_plugins
        assert "kernel.sglang.plugin" not in sys.modules
        load_plugins()
        from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
        init = TritonAttnBackend.__dict__["__init__"]
        print("HOOKED" if getattr(init, "__wrapped__", None) is not None
              and "kernel.sglang.plugin" in sys.modules else "NOT-HOOKED")
    """)
    env = dict(os.environ, MLA_VERIFY_BACKEND="flash", SGLANG_PLUGINS="")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "HOOKED", r.stdout + r.stderr[-2000:]
