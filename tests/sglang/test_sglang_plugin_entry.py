"""The entry point cannot fail to import, and a `flash` process whose plugin does not load stops.

SGLang's load_plugins() only logs a plugin that fails to import or run; before entry.py, a broken
install (kernel/sglang/metrics.py importing the rollout tool, absent on the server's path) left a
`flash` server serving SGLang's kernel with no arm metric. Each case runs in a fresh process where
a meta-path finder breaks kernel.sglang.plugin: its import raises, or its register() does."""
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from dist_info import ROOT, project_entry_points, write_this_checkout
from kernel.sglang import entry, plugin, strict

BREAK_PLUGIN = textwrap.dedent("""
    import importlib.abc, importlib.util, sys

    class BrokenPlugin(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path=None, target=None):
            return importlib.util.spec_from_loader(name, self) if name == "kernel.sglang.plugin" else None

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            if {how!r} == "import":
                raise ModuleNotFoundError("No module named 'rollout'")
            def register():
                raise RuntimeError("hook registry moved")
            module.register = register

    sys.meta_path.insert(0, BrokenPlugin())
""")
TORCHVISION_SHIM = textwrap.dedent("""
    import torch
    lib = torch.library.Library("torchvision", "DEF")
    for op in ("nms", "qnms"):
        lib.define(op + "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
""")
FIX = "; fix: that error in this server's Python (`python -c 'import kernel.sglang.plugin; kernel.sglang.plugin.register()'`"


def _run(code: str, switch: str | None, pythonpath: list[str] = ()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MLA_VERIFY_BACKEND", "PYTHONPATH")}
    if switch is not None:
        env["MLA_VERIFY_BACKEND"] = switch
    env["PYTHONPATH"] = os.pathsep.join([*pythonpath, str(ROOT)])
    env["SGLANG_PLUGINS"] = "mla_verify"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180, env=env)


@pytest.mark.parametrize("how, switch, cause", [
    ("import", "flash", "imported: ModuleNotFoundError: No module named 'rollout'"),
    ("import", " FLASH ", "imported: ModuleNotFoundError: No module named 'rollout'"),
    ("import", "flsh", "imported: ModuleNotFoundError: No module named 'rollout'"),   # plugin.py would refuse it too
    ("register", "flash", "registered: RuntimeError: hook registry moved"),
])
def test_a_process_asking_for_the_kernel_stops_with_one_line(how, switch, cause):
    r = _run(BREAK_PLUGIN.format(how=how) + "from kernel.sglang import entry\nentry.register()\nprint('ALIVE')\n", switch)
    assert r.returncode == 1 and "ALIVE" not in r.stdout, (r.returncode, r.stdout, r.stderr)
    [line] = r.stderr.splitlines()
    assert line.startswith(f"mla-verify: MLA_VERIFY_BACKEND={switch.strip()}, but the plugin could not be {cause}{FIX}"), line
    assert line.endswith("; or MLA_VERIFY_BACKEND=triton for SGLang's own path"), line


@pytest.mark.parametrize("how", ["import", "register"])
@pytest.mark.parametrize("switch", ["triton", "", None])
def test_triton_or_unset_logs_and_goes_on(how, switch):
    r = _run(BREAK_PLUGIN.format(how=how) + textwrap.dedent("""
        from kernel.sglang import entry
        try:
            entry.register()
        except Exception as e:        # what SGLang's load_plugins() does with it
            print("LOGGED-BY-SGLANG", type(e).__name__)
        print("ALIVE")
    """), switch)
    assert r.returncode == 0, r.stderr
    expected = "ModuleNotFoundError" if how == "import" else "RuntimeError"
    assert r.stdout.split() == ["LOGGED-BY-SGLANG", expected, "ALIVE"], r.stdout
    assert "this process serves SGLang's own verify path and publishes no arm metric" in r.stderr, r.stderr


@pytest.fixture(scope="module")
def checkout_metadata(tmp_path_factory) -> Path:
    """This checkout's entry points, ahead of whatever `pip install -e .` recorded earlier."""
    site = tmp_path_factory.mktemp("site")
    write_this_checkout(site)
    return site


def test_through_sglangs_load_plugins_flash_stops_and_triton_starts(checkout_metadata):
    # SGLang's own loader: its `except Exception` around ep.load() and func() must not hide it.
    code = TORCHVISION_SHIM + BREAK_PLUGIN.format(how="import") + textwrap.dedent("""
        from sglang.srt.plugins import load_plugins
        load_plugins()
        print("ALIVE")
    """)
    stopped = _run(code, "flash", [str(checkout_metadata)])
    assert stopped.returncode == 1 and "ALIVE" not in stopped.stdout, stopped.stderr[-3000:]
    ours = [ln for ln in stopped.stderr.splitlines() if "mla-verify" in ln]
    assert len(ours) == 1 and stopped.stderr.splitlines()[-1] == ours[0], stopped.stderr[-3000:]
    assert ours[0].startswith("mla-verify: MLA_VERIFY_BACKEND=flash, but the plugin could not be imported: "
                              "ModuleNotFoundError: No module named 'rollout'"), ours
    started = _run(code, "triton", [str(checkout_metadata)])
    assert started.returncode == 0 and started.stdout.split()[-1:] == ["ALIVE"], started.stderr[-3000:]
    assert "Failed to execute general plugin: mla_verify" in started.stderr, started.stderr[-3000:]


def test_the_entry_module_imports_only_the_standard_library():
    r = _run(textwrap.dedent("""
        import sys
        before = set(sys.modules)
        import kernel.sglang.entry
        ours = {"kernel", "kernel.sglang", "kernel.sglang.entry"}
        print(sorted(m for m in set(sys.modules) - before
                     if m not in ours and m.split(".")[0] not in sys.stdlib_module_names))
    """), "flash")
    assert r.returncode == 0 and r.stdout.split("\n")[0] == "[]", r.stdout + r.stderr


def test_the_plugin_does_not_import_the_rollout_tool():
    # data flows from the plugin to the rollout tool (kernel/sglang/metric_names.py), never back
    r = _run(TORCHVISION_SHIM + textwrap.dedent("""
        import sys
        import kernel.sglang.entry, kernel.sglang.plugin, kernel.sglang.metrics, kernel.sglang.adapter
        print(sorted(m for m in sys.modules if m == "rollout" or m.startswith("rollout.")))
    """), "triton")
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr[-2000:]


def test_entry_and_plugin_read_the_same_switch():
    assert entry.ENV == strict.ENV == plugin.ENV


def test_pyproject_names_the_entry_module():
    assert project_entry_points()["sglang.srt.plugins"] == {"mla_verify": "kernel.sglang.entry:register"}


def test_the_installed_entry_point_is_this_checkouts():
    eps = [ep for ep in entry_points(group="sglang.srt.plugins") if ep.name == "mla_verify"]
    assert len(eps) == 1, "pip install -e . did not register the sglang.srt.plugins entry point"
    assert eps[0].value == project_entry_points()["sglang.srt.plugins"]["mla_verify"], (
        f"the installed entry point is {eps[0].value!r}, pyproject.toml's is another: run `pip install -e .` "
        "(make venv) again")
    assert eps[0].load() is entry.register
