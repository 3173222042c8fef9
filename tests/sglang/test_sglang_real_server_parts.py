"""The real-server job's parts that need no server: the example inventory and its runtime copy,
the launch wrapper's environment, the planted-fault plugin (inert without its variable, never in
pyproject, found by SGLang's own load_plugins() from its temporary dist-info), the step time
estimates against the device's 10-minute calls, and the profile-trace classification."""
import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from real_server_helpers import sglang_parsed

from kernel.sglang.real_server import breakdown, environment as envmod, estimates, planted_fault
from rollout.inventory import load
from rollout.launchers import make_launcher

ROOT = Path(__file__).resolve().parents[2]
AUDIT_FLAGS = ["--load-format dummy", "--skip-tokenizer-init", "--sampling-backend pytorch",
               "--cuda-graph-backend-prefill disabled", "--context-length 200000", "--speculative-algorithm EAGLE",
               "--speculative-num-steps 3", "--speculative-eagle-topk 4", "--speculative-num-draft-tokens 8",
               "--mem-fraction-static 0.3", "--attention-backend triton", "--page-size 1", "--tp-size 1",
               "--enable-metrics", "--cuda-graph-max-bs-decode 8", "--trust-remote-code"]


def test_example_inventory_renders_the_measured_launch():
    inv = load(envmod.EXAMPLE_INVENTORY)
    assert [(g.name, g.port, g.launcher) for g in inv.groups] == [("h200-a", 30000, "local"), ("h200-b", 30001, "local")]
    assert inv.gates["context_tokens"] == 185000 and inv.gates["numerics_long_context_tokens"] == 185000
    for g in inv.groups:
        line = make_launcher(g, inv).describe_start("flash")
        for flag in AUDIT_FLAGS:
            assert f" {flag} " in line + " ", (flag, line)
        assert "--speculative-draft-model-path" not in line and "FORCE_FUSED" not in line
        # `sglang serve` through the wrapper's sglang, beside the [launch] python it names
        assert line.split()[2:4] == ["/tmp/mla-real-server/bin/sglang", "serve"]



def test_sglang_0523_parser_accepts_the_example_launch():
    inv = load(envmod.EXAMPLE_INVENTORY)
    argv = make_launcher(inv.groups[1], inv).argv("flash")
    assert argv[1:4] == ["serve", "--model-type", "llm"]
    got = sglang_parsed(argv[4:], ("load_format", "skip_tokenizer_init", "sampling_backend", "context_length",
                                   "speculative_algorithm", "mem_fraction_static", "enable_metrics", "port"))
    assert got == {"load_format": "dummy", "skip_tokenizer_init": True, "sampling_backend": "pytorch",
                   "context_length": 200000, "speculative_algorithm": "EAGLE", "mem_fraction_static": 0.3,
                   "enable_metrics": True, "port": 30001}


def test_runtime_inventory_takes_the_roots_paths_ports_and_gate_overrides(tmp_path):
    paths = envmod.Paths(tmp_path / "root")
    raw = envmod.runtime_inventory(paths, 16, ports=[41001, 41002],
                                   gates=dict([envmod.parse_override("context_tokens=4096")]))
    inv = load(envmod.write_inventory(paths, raw))
    assert inv.launch["python"] == str(paths.wrapper) and inv.launch["model_path"] == str(paths.model(16))
    assert inv.state_dir == paths.state_dir and inv.results_dir == paths.rollout_results
    assert [g.port for g in inv.groups] == [41001, 41002] and inv.gates["context_tokens"] == 4096
    example = tomllib.loads(envmod.EXAMPLE_INVENTORY.read_text())
    assert inv.launch["extra_args"] == example["launch"]["extra_args"]
    with pytest.raises(ValueError, match="2 groups need 2 ports"):
        envmod.runtime_inventory(paths, 4, ports=[1])
    with pytest.raises(ValueError, match="not a TOML value"):
        envmod.parse_override("context_tokens=four")


def test_wrapper_sets_the_servers_environment(tmp_path):
    paths = envmod.Paths(tmp_path / "root")
    wrapper = envmod.write_wrappers(paths, python=sys.executable)
    keys = ["PYTHONPATH", "SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK", "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND",
            "SGLANG_FORCE_FUSED_OP_BACKEND", "CUDA_VISIBLE_DEVICES", "MLA_VERIFY_CACHE", "MLA_VERIFY_STANDIN_LOG",
            "SGLANG_TORCH_PROFILER_DIR", "MLA_VERIFY_BACKEND", "SGLANG_IS_FLASHINFER_AVAILABLE"]
    code = f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {keys!r}}}))"
    env = dict(os.environ, SGLANG_FORCE_FUSED_OP_BACKEND="torch", CUDA_VISIBLE_DEVICES="3", MLA_VERIFY_BACKEND="flash",
               MLA_VERIFY_EXTRA_PYTHONPATH="/planted")
    r = subprocess.run([str(wrapper), "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    # the GPU set and the arm are the launcher's (from the group's gpus); the wrapper keeps them
    assert got == {"PYTHONPATH": f"{ROOT}:{paths.site}:{paths.server_only}:/planted", "SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK": "1",
                   "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND": "python", "SGLANG_FORCE_FUSED_OP_BACKEND": None,
                   "CUDA_VISIBLE_DEVICES": "3", "MLA_VERIFY_CACHE": str(paths.kernel_cache),
                   "MLA_VERIFY_STANDIN_LOG": str(paths.standin_log), "SGLANG_TORCH_PROFILER_DIR": str(paths.profiles),
                   "MLA_VERIFY_BACKEND": "flash", "SGLANG_IS_FLASHINFER_AVAILABLE": "false"}
    # `sglang serve` goes through the same wrapper: -m sglang.cli.main, with the same environment
    assert "sglang.cli.main" in (paths.bin / "sglang").read_text() and str(wrapper) in (paths.bin / "sglang").read_text()


def test_cli_env_drops_the_planted_switches_unless_asked(tmp_path):
    paths = envmod.Paths(tmp_path)
    base = {"PATH": "/usr/bin", "MLA_VERIFY_PLANTED_FAULT": "1", "MLA_VERIFY_EXTRA_PYTHONPATH": "/x",
            "SGLANG_FORCE_FUSED_OP_BACKEND": "torch"}
    env = envmod.cli_env(paths, base=base)
    assert env["PATH"].startswith(f"{paths.bin}:") and env["PYTHONPATH"] == str(envmod.ROOT)
    assert not {"MLA_VERIFY_PLANTED_FAULT", "MLA_VERIFY_EXTRA_PYTHONPATH", "SGLANG_FORCE_FUSED_OP_BACKEND"} & set(env)
    planted = envmod.cli_env(paths, envmod.planted_env(paths), base=base)
    assert planted["MLA_VERIFY_PLANTED_FAULT"] == "1" and planted["MLA_VERIFY_EXTRA_PYTHONPATH"] == str(paths.planted_site)


# -- the planted fault -------------------------------------------------------------------------
def test_pyproject_never_names_the_planted_plugin():
    text = (ROOT / "pyproject.toml").read_text()
    assert "planted" not in text
    eps = tomllib.loads(text)["project"]["entry-points"]["sglang.srt.plugins"]
    assert planted_fault.PLANTED_ENTRY_POINT not in eps


def _fake_verify_fwd(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr,
                     kv_indices, custom_mask, is_causal, mask_indptr, max_len_extend, k_scale, v_scale,
                     sm_scale=None, logit_cap=0.0, skip_prefix_custom_mask=True, sliding_window_size=-1,
                     sinks=None, window_kv_offsets=None, xai_temperature_len=-1, max_bs=None):
    o_extend.fill_(0.5)
    return sm_scale is not None   # "served" only when given a scale


def test_planted_wrapper_perturbs_only_served_calls(tmp_path, monkeypatch):
    log = tmp_path / "planted.log"
    monkeypatch.setenv(planted_fault.LOG_ENV, str(log))
    monkeypatch.setattr(planted_fault, "_logged", False)
    f = planted_fault.wrap(_fake_verify_fwd)
    o = torch.zeros(2, 8, 512, dtype=torch.bfloat16)
    args = [None, None, None, o] + [None] * 11
    assert f(*args, sm_scale=0.1) is True and torch.all(o == 0.5 + planted_fault.PLANTED_OFFSET)
    assert f(*args[:3], o_extend=o, **dict(zip(["k_buffer", "v_buffer", "qo_indptr", "kv_indptr", "kv_indices",
                                                "custom_mask", "is_causal", "mask_indptr", "max_len_extend",
                                                "k_scale", "v_scale"], [None] * 11))) is False
    assert torch.all(o == 0.5)                                    # declined: SGLang's kernel runs, untouched
    f(*args, sm_scale=0.1)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["pid"] == os.getpid() and lines[0]["offset"] == planted_fault.PLANTED_OFFSET


def test_planted_register_is_inert_without_its_variable(monkeypatch):
    from kernel.sglang import adapter

    original = adapter.verify_fwd
    monkeypatch.delenv(planted_fault.ENV, raising=False)
    planted_fault.register()
    assert adapter.verify_fwd is original
    monkeypatch.setenv(planted_fault.ENV, "1")
    try:
        planted_fault.register()
        assert adapter.verify_fwd.planted and adapter.verify_fwd.__wrapped__ is original
        planted_fault.register()   # once only
        assert adapter.verify_fwd.__wrapped__ is original
    finally:
        adapter.verify_fwd = original


LOAD = ("import json, torch\nlib = torch.library.Library('torchvision', 'DEF')\n"
        "for op in ('nms', 'qnms'):\n    lib.define(f'{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor')\n"
        "from sglang.srt.plugins import load_plugins\nload_plugins()\n"
        "from kernel.sglang import adapter\nfrom importlib.metadata import entry_points\n"
        "print(json.dumps([getattr(adapter.verify_fwd, 'planted', False),"
        " sorted(e.name for e in entry_points(group='sglang.srt.plugins'))]))\n")


def test_sglang_load_plugins_finds_the_planted_plugin_only_on_its_path(tmp_path):
    paths = envmod.Paths(tmp_path)
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{envmod.write_planted_dist_info(paths)}", MLA_VERIFY_PLANTED_FAULT="1",
               HF_HUB_OFFLINE="1")
    env.pop("SGLANG_PLUGINS", None)
    env.pop("MLA_VERIFY_BACKEND", None)
    r = subprocess.run([sys.executable, "-c", LOAD], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    wrapped, names = json.loads(r.stdout.strip().splitlines()[-1])
    assert wrapped is True and planted_fault.PLANTED_ENTRY_POINT in names and "mla_verify" in names
    dist = next(importlib.metadata.distributions(path=[str(paths.planted_site)]))
    (ep,) = dist.entry_points
    assert ep.load() is planted_fault.register


# -- estimates ---------------------------------------------------------------------------------
def _plan(steps, **kw):
    return sum(estimates.step_estimate(s, layers=4, **kw)[0] for s in steps)


def test_the_default_run_splits_into_two_calls_under_ten_minutes():
    # only the machine's first server start is a first start (SGLang's JIT compiles)
    first = _plan(["setup", "up"], first_start=True) + _plan(["planted"])
    second = _plan(["canary", "promote", "breakdown"])
    assert first < 600 and second < 600, (first, second)
    assert _plan(["setup", "up"], first_start=True) + _plan(["planted", "canary", "promote", "breakdown"]) > 600
    # a second call that finds a fresh machine re-runs setup and up itself and does not fit all of
    # its steps: the README's commands pass --budget, so the job skips what does not fit and says so
    cold = second + _plan(["setup", "up"], first_start=True)
    assert cold > 570 and _plan(["setup", "up"], first_start=True) + _plan(["canary"]) < 570, cold
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "--steps setup,up,planted --layers 4 --budget 570" in readme
    assert "--steps canary,promote,breakdown --layers 4 --budget 570" in readme


def test_estimates_follow_the_measurements():
    assert estimates.prefill_s(4) == pytest.approx(25.4) and estimates.prefill_s(16) == pytest.approx(86.1)
    assert estimates.step_ms("triton", 16) == pytest.approx(600.0) and estimates.step_ms("flash", 4) == pytest.approx(5)
    # the flash arm's measured points (draft extend on the kernel): the middle segment is used between them
    assert estimates.prefill_s(61, arm="flash") == pytest.approx(105.6)
    assert estimates.prefill_s(30, arm="flash") == pytest.approx(29.2 + (105.6 - 29.2) * 14 / 45)
    assert estimates.step_ms("flash", 61) == pytest.approx(20.5)
    # the 61-layer breakdown on a server of its own: start + flash prefill + measure, as the H200 took (223 s)
    assert 180 < estimates.step_estimate("breakdown", layers=61, flash_server_ready=False)[0] < 260
    assert estimates.step_estimate("breakdown", layers=61, flash_server_ready=False)[0] > \
        estimates.step_estimate("breakdown", layers=16, flash_server_ready=False)[0]
    with pytest.raises(ValueError, match="unknown step"):
        estimates.step_estimate("deploy", layers=4)


# -- the trace classification ------------------------------------------------------------------
def _span(name, ts, dur, tid=1):
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur}


def _launch(corr, ts, tid=1, name="cudaGraphLaunch"):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": 5,
            "args": {"correlation": corr}}


def _kernel(corr, name, ts, dur):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 9, "ts": ts, "dur": dur,
            "args": {"correlation": corr}}


def synthetic_trace(layers=2, steps=3, step_us=10000):
    """`steps` decode steps: draft (graph: 2 kernels), verify (graph: per layer our kernel 100 us +
    a GEMM 300 us; an lm_head 500 us), sampling outside any span, draft_extend (attention 2000 us)."""
    ev, corr = [], 0
    for s in range(steps + 1):
        t = s * step_us
        ev.append(_span("draft", t, 1000))
        ev.append(_span("step[DRAFT bs=1]", t + 10, 900))
        corr += 1
        ev += [_launch(corr, t + 20), _kernel(corr, "_fwd_grouped_kernel_stage1", t + 100, 400),
               _kernel(corr, "nvjet_gemm", t + 500, 200)]
        ev.append(_span("step[VERIFY bs=1]", t + 1000, 3000))
        corr += 1
        ev.append(_launch(corr, t + 1010))
        k = t + 1100
        for _ in range(layers):
            ev += [_kernel(corr, "void mla_verify_kernel_small<4>(Params)", k, 100), _kernel(corr, "sm90_gemm", k + 100, 300)]
            k += 400
        ev.append(_kernel(corr, "lm_head_gemm", k, 500))
        corr += 1
        ev += [_launch(corr, t + 4100, name="cuLaunchKernel"), _kernel(corr, "verify_tree_greedy", t + 4200, 50)]
        ev.append(_span("draft_extend", t + 5000, 3000))
        corr += 1
        ev += [_launch(corr, t + 5010), _kernel(corr, "_fwd_kernel", t + 5100, 2000)]
    ev.append(_kernel(999, "orphan", 0, 5))     # no launch recorded for it
    return ev


def test_classify_splits_a_step_by_phase_and_kernel_kind():
    c = breakdown.classify(synthetic_trace(layers=2, steps=3), layers=2)
    assert c["steps"] == 3 and c["step_ms"] == pytest.approx(10.0)
    ph = c["phases"]
    assert ph["verify"]["attention_ms_per_step"] == pytest.approx(0.2) and ph["verify"]["ours_ms_per_step"] == \
        pytest.approx(0.2)
    assert ph["verify"]["other_ms_per_step"] == pytest.approx(0.6 + 0.5)
    assert ph["verify"]["attention_kernels_per_step"] == pytest.approx(2)
    assert ph["draft"]["ms_per_step"] == pytest.approx(0.6) and ph["draft"]["attention_ms_per_step"] == pytest.approx(0.4)
    assert ph["draft_extend"]["attention_ms_per_step"] == pytest.approx(2.0)
    assert ph["outside"]["ms_per_step"] == pytest.approx(0.05)
    busy = 0.6 + 1.3 + 0.05 + 2.0
    assert c["gpu_busy_ms_per_step"] == pytest.approx(busy)
    assert c["verify_attention_ms_per_layer"] == pytest.approx(0.1) and c["unattributed_kernels"] == 1
    assert c["top_kernels"][0]["name"] == "_fwd_kernel" and c["top_kernels"][0]["phases"] == ["draft_extend"]


def test_trace_summary_says_what_a_trace_holds():
    t = breakdown.trace_summary(synthetic_trace(layers=2, steps=3))
    assert t["categories"]["kernel"] == 4 * 9 + 1 and t["categories"]["cuda_runtime"] == 16
    assert t["spans"] == {"draft": 4, "step[DRAFT bs=N]": 4, "step[VERIFY bs=N]": 4, "draft_extend": 4}
    assert t["kernels"]["void mla_verify_kernel_small<4>(Params)"] == 8


def test_classify_needs_two_verify_steps():
    with pytest.raises(breakdown.TraceError, match="step\\[VERIFY"):
        breakdown.classify(synthetic_trace(steps=0), layers=2)


def test_slopes_over_layer_counts():
    by = {L: breakdown.classify(synthetic_trace(layers=L), layers=L) for L in (2, 4, 8)}
    s = breakdown.slopes(by, predict_at=61)
    fit = s["fits"]["phases.verify.attention_ms_per_step"]
    assert fit["per_layer_ms"] == pytest.approx(0.1) and fit["intercept_ms"] == pytest.approx(0.0, abs=1e-9)
    other = s["fits"]["phases.verify.other_ms_per_step"]
    assert other["per_layer_ms"] == pytest.approx(0.3) and other["intercept_ms"] == pytest.approx(0.5)
    assert other["at_predict_ms"] == pytest.approx(0.5 + 0.3 * 61)
    assert breakdown.slopes({4: by[4]}) is None


def test_load_trace_reads_gzip(tmp_path):
    import gzip
    p = tmp_path / "t.trace.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump({"traceEvents": synthetic_trace()}, f)
    assert breakdown.load_trace(p) == synthetic_trace()
