"""Strict flash: every configuration in which SGLang's kernel would still serve each
TARGET_VERIFY stops the server at start, with one line naming the setting and the fix.

The configurations go through SGLang's real ServerArgs resolution, and the refusal through
the plugin's real hook on `ServerArgs.resolve_once` (applied by conftest's load_plugins());
one test runs the real launcher, `sglang serve` (the README's), in a subprocess.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sglang.srt.server_args import prepare_server_args

from kernel import build
from kernel.sglang import plugin, strict
from kernel.sglang.model_configs import write_eagle3_draft, write_kimi_k2
from kernel.sglang.strict import StrictFlashError
from rollout.launch import launch_argv

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def command(tmp_path_factory):
    """The documented EAGLE3 command's `sglang serve` arguments, pointed at local config folders."""
    root = tmp_path_factory.mktemp("strict")
    target, draft = write_kimi_k2(root / "kimi-k2"), write_eagle3_draft(root / "draft")
    argv = launch_argv({"model_path": str(target), "draft_model_path": str(draft)}, host="127.0.0.1", port=30000,
                       gpus=list(range(8)), arm="flash")
    from sglang.cli.serve import _extract_model_type_override

    backend, server_argv = _extract_model_type_override(argv[argv.index("serve") + 1:])
    assert backend == "llm"
    return server_argv


def _without(argv, flag, values=1):
    i = argv.index(flag)
    return argv[:i] + argv[i + 1 + values:]


def _no_spec(argv):
    for flag in ("--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
                 "--speculative-eagle-topk", "--speculative-num-draft-tokens"):
        argv = _without(argv, flag)
    return argv


# name: (argv change, text the refusal must name)
CONFIGS = {
    "dcp, replicated q projection": (lambda a: a + ["--dcp-size", "2", "--dcp-comm-backend", "a2a",
                                                    "--dcp-replicate-q-proj"],
                                     "but --dcp-replicate-q-proj: .*fix: drop --dcp-replicate-q-proj"),
    "dcp, the model's NextN layer as draft": (
        lambda a: [("EAGLE" if w == "EAGLE3" else w) for w in _without(a, "--speculative-draft-model-path")]
        + ["--dcp-size", "2"],
        "but --dcp-size 2 with the model's own NextN layer as the draft on the triton backend: .*UnboundLocalError"
        ".*fix: EAGLE3 with an external draft"),
    "deterministic": (lambda a: a + ["--enable-deterministic-inference"],
                      "but --enable-deterministic-inference: .*fix: drop --enable-deterministic-inference"),
    "hybrid, verify on prefill": (lambda a: a + ["--prefill-attention-backend", "flashinfer"],
                                  "'flashinfer' attention backend \\(--prefill-attention-backend.*"
                                  "fix: --prefill-attention-backend triton"),
    "another backend": (lambda a: _without(a, "--attention-backend") + ["--attention-backend", "fa3"],
                        "'fa3' attention backend \\(--attention-backend.*fix: --attention-backend triton"),
    "fp8 e5m2 KV cache": (lambda a: a + ["--kv-cache-dtype", "fp8_e5m2"],
                          "but --kv-cache-dtype fp8_e5m2: the kernel reads a bf16 or an fp8_e4m3 KV cache only.*"
                          "fix: --kv-cache-dtype fp8_e4m3 \\(fp8\\) or auto \\(bf16\\)"),
    "fp8 KV cache under dcp": (lambda a: a + ["--dcp-size", "2", "--kv-cache-dtype", "fp8_e4m3"],
                               "but --kv-cache-dtype fp8_e4m3 with --dcp-size 2: the plugin's DCP path reads a bf16 "
                               "KV cache only.*fix: --kv-cache-dtype auto \\(bf16\\), or --dcp-size 1"),
    "ray launcher": (lambda a: a + ["--use-ray"], "but --use-ray: .*never load plugins"),
    "no speculative decoding": (_no_spec, "but no --speculative-algorithm"),
}


def _resolved(argv):
    sa = prepare_server_args(argv)
    sa.device = "cuda"   # what get_device() resolves on the GPU host; this CPU has none
    return sa


@pytest.mark.parametrize("name", CONFIGS)
def test_resolution_refuses_with_one_line_naming_setting_and_fix(command, monkeypatch, name):
    change, expected = CONFIGS[name]
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "flash")
    sa = _resolved(change(list(command)))
    with pytest.raises(StrictFlashError, match=expected) as e:
        sa.resolve_once()   # the plugin's AFTER hook runs the check
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("mla-verify: MLA_VERIFY_BACKEND=flash, but ")
    assert msg.endswith("or MLA_VERIFY_BACKEND=triton for SGLang's own path")


@pytest.mark.parametrize("name", ["dcp, the model's NextN layer as draft", "fp8 e5m2 KV cache", "hybrid, verify on prefill"])
def test_control_arm_starts_with_the_same_configuration(command, monkeypatch, name):
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "triton")
    _resolved(CONFIGS[name][0](list(command))).resolve_once()


def test_verify_on_a_triton_decode_backend_is_accepted(command, monkeypatch):
    # TARGET_VERIFY follows --speculative-attention-mode: decode -> the (triton) decode backend
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "flash")
    sa = _resolved(command + ["--prefill-attention-backend", "flashinfer", "--speculative-attention-mode", "decode"])
    sa.resolve_once()
    assert strict.server_args_problem(sa) is None


def test_documented_command_is_accepted(command, monkeypatch):
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "flash")
    _resolved(list(command)).resolve_once()


@pytest.mark.parametrize("value", ["fp8_e4m3", "bf16", "auto"])
def test_kv_cache_dtypes_the_kernel_reads_are_accepted(command, monkeypatch, value):
    # fp8_e4m3: the kernel reads SGLang's float8_e4m3fn pool with the layer's k/v scales
    from sglang.srt.arg_groups.overrides import resolving_view

    monkeypatch.setenv("MLA_VERIFY_BACKEND", "flash")
    assert "--kv-cache-dtype" not in command   # the documented command leaves it at SGLang's default
    sa = _resolved(list(command) + ["--kv-cache-dtype", value])
    sa.resolve_once()   # the plugin's AFTER hook runs the check: no StrictFlashError
    assert resolving_view(sa).kv_cache_dtype == value and strict.server_args_problem(sa) is None


@pytest.mark.parametrize("arm", ["flash", "triton"])
@pytest.mark.parametrize("dcp", [2, 8])
def test_dcp_with_tree_verify_passes_sglang_validation_and_strict_flash(command, monkeypatch, arm, dcp):
    # Issue 14, step 1: SGLang 0.5.23's whole ServerArgs resolution (its arg_groups hooks) accepts
    # --dcp-size > 1 with --attention-backend triton and EAGLE3 at topk 4 on a CUDA device; on
    # flash the plugin's strict checks accept it too (its DCP path serves TARGET_VERIFY).
    from sglang.srt.arg_groups.overrides import resolving_view

    monkeypatch.setenv("MLA_VERIFY_BACKEND", arm)
    sa = _resolved(list(command) + ["--dcp-size", str(dcp)])
    sa.resolve_once()
    cfg = resolving_view(sa)
    assert (cfg.dcp_size, cfg.tp_size, cfg.attention_backend, cfg.speculative_algorithm) == (dcp, 8, "triton", "EAGLE3")
    assert cfg.speculative_eagle_topk == 4 and cfg.speculative_num_draft_tokens == 8 and cfg.device == "cuda"
    assert strict.server_args_problem(sa) is None


def test_resolution_refuses_when_the_backend_hook_was_not_applied(command, monkeypatch):
    # SGLang's apply_hooks() logs a failure per target and carries on
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
    monkeypatch.setattr(TritonAttnBackend, "__init__", TritonAttnBackend.__dict__["__init__"].__wrapped__)
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "flash")
    with pytest.raises(StrictFlashError, match="TritonAttnBackend.__init__ was not applied"):
        _resolved(list(command)).resolve_once()


def test_register_refuses_flash_when_the_kernel_library_cannot_load(monkeypatch):
    def no_toolchain(*a, **k):
        raise build.BuildError("nvcc not found: install the CUDA toolkit, put nvcc on PATH, or set NVCC / CUDA_HOME")
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "flash")
    monkeypatch.setattr(plugin, "_registered", False)
    monkeypatch.setattr(build, "load", no_toolchain)
    with pytest.raises(StrictFlashError, match="the plugin cannot start: BuildError: nvcc not found"):
        plugin.register()
    assert isinstance(StrictFlashError("x"), SystemExit)  # SGLang's `except Exception` cannot swallow it


def test_register_refuses_flash_when_a_hook_target_is_gone(monkeypatch):
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "flash")
    monkeypatch.setattr(plugin, "_registered", False)
    monkeypatch.setattr(plugin, "RESOLVE_TARGET", "sglang.srt.server_args.ServerArgs.resolve_twice")
    monkeypatch.setattr(build, "load", lambda *a, **k: None)
    with pytest.raises(StrictFlashError, match="ServerArgs.resolve_twice does not exist"):
        plugin.register()


def test_register_does_not_need_the_dcp_target_without_dcp(monkeypatch):
    """The GPU machine's SGLang bundle cannot import SGLang's model code; without --dcp-size the
    DCP hook is never needed, so flash must still start (its target is checked at resolution)."""
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "flash")
    monkeypatch.setattr(plugin, "_registered", False)
    monkeypatch.setattr(plugin, "DCP_PHASE_TARGET", "sglang.srt.no_such_models.Mixin.is_dcp_mla_decode_phase")
    monkeypatch.setattr(build, "load", lambda *a, **k: None)
    from sglang.srt.plugins.hook_registry import HookRegistry
    monkeypatch.setattr(HookRegistry, "_hooks", type(HookRegistry._hooks)(list))
    plugin.register()
    assert plugin._registered
    assert "sglang.srt.no_such_models.Mixin.is_dcp_mla_decode_phase" in HookRegistry._hooks


def test_register_refuses_an_invalid_switch_value(monkeypatch):
    monkeypatch.setenv("MLA_VERIFY_BACKEND", "fast")
    monkeypatch.setattr(plugin, "_registered", False)
    with pytest.raises(StrictFlashError, match="MLA_VERIFY_BACKEND='fast' is not one of flash, triton"):
        plugin.register()


LAUNCH_ENV = {"HF_HUB_OFFLINE": "1", "SGLANG_PLUGINS": ""}


def _launch(argv, **env):
    """The real launcher, as an operator starts it (a torchvision shim first: CPU torch)."""
    code = ("import runpy, sys, torch\n"
            "lib = torch.library.Library('torchvision', 'DEF')\n"
            "for op in ('nms', 'qnms'):\n"
            "    lib.define(op + '(Tensor dets, Tensor scores, float iou_threshold) -> Tensor')\n"
            "sys.argv = ['sglang', 'serve', '--model-type', 'llm'] + sys.argv[1:]\n"
            "from sglang.cli.main import main\n"
            "main()\n")
    # (the timeout only stops a hung launcher: a cold SGLang import under load has taken 90 s)
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=600,
                       env={**os.environ, **LAUNCH_ENV, **env}, cwd=ROOT)
    return r


def test_real_launcher_refuses_first_thing_with_one_line(command, tmp_path):
    r = _launch(command + ["--device", "cuda", "--kv-cache-dtype", "fp8_e5m2"], MLA_VERIFY_BACKEND="flash")
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 1, r.stderr[-3000:]
    assert last.startswith("mla-verify: MLA_VERIFY_BACKEND=flash, but --kv-cache-dtype fp8_e5m2"), r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    # and without a kernel build and without nvcc, the launcher stops at load_plugins(), first thing
    env = {"MLA_VERIFY_BACKEND": "flash", "MLA_VERIFY_CACHE": str(tmp_path / "empty"), "NVCC": "/nonexistent",
           "CUDA_HOME": str(tmp_path), "PATH": str(Path(sys.executable).parent)}
    r2 = _launch(list(command), **env)
    assert r2.returncode == 1 and "BuildError: nvcc not found" in r2.stderr.strip().splitlines()[-1], r2.stderr[-3000:]
    # "first thing" by what ran, not by the clock (a loaded machine slows the imports, not the
    # order): the launch above got as far as SGLang's own timestamped log lines (its server
    # arguments), this one stops before any of them
    sglang_log = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\]", re.M)
    assert sglang_log.search(r.stderr), r.stderr[-3000:]
    assert not sglang_log.search(r2.stderr), r2.stderr[-3000:]
