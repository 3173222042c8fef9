"""SGLang 0.5.23's real server on the CPU, started and driven by the rollout tool.

One server for the module (`sglang serve` through the rollout CLI's `up`, the local launcher and
the default launch template): a one-layer DeepSeek-V3-architecture model with
Kimi-K2's per-rank attention (kernel.sglang.model_configs.write_tiny_mla), dummy weights, EAGLE
with its NextN layer as the draft, the plugin loaded through this checkout's entry point. CPU
flags (`[launch] extra_args`): `--device cpu`, `--dtype float32` (Triton's interpreter runs bf16
`tl.dot` wrong), a 1024-token pool, no CUDA graphs, `--load-format dummy --skip-tokenizer-init`,
one KV split per decode kernel; SGLANG_USE_CPU_ENGINE=1, TRITON_INTERPRET=1; `cpu_site/` on the
server's PYTHONPATH holds the test-only sgl_kernel stand-ins (each recorded when called), the
torchvision shim and a test-only plugin (set_embed_and_head's torch.cuda.synchronize).

Beside it, group g0 is the project's emulator. The rollout CLI then runs, in order:
  1. `up`: both groups on triton; the plugin's real `mla_verify_backend_info` says triton;
  2. `canary --group g0` with the real server as the control: reconcile reads its real arm, the
     numerics gate parses SGLang's real logprob answers (the control's own EAGLE decode against its
     own prefill scoring: top-1 1.000, |dlogprob| ~1.5e-5), the speed gate streams from it, the
     metrics gate reads SGLang's real /metrics; then `rollback`;
  3. `canary --group g1`, the real server as the canary, with a request in flight: SIGTERM to
     SGLang's main process drains it and ends the scheduler and detokenizer; the `flash` start is
     refused by strict mode with its one line (`--device cpu`); the rollback starts it again on
     triton and the arm gate reads the real metrics;
  4. the launcher's stop: the whole process tree gone, pid file removed.
The numerics thresholds are opened wide: the candidate of step 2 is an emulator, a different
model; the test reads the control's own numbers instead. No speed is asserted.

Cheapest configuration found (measured on this project's 2-core machine while other jobs shared
it, 2026-12-02): EAGLE with 1 step, topk 1, 2 draft tokens, one layer, context 256 and
`--triton-attention-num-kv-splits 1`: ~0.4 s per verify step (the template's 3/4/8 with 8 splits:
~3 s; 1/1/2 with 8 splits: ~0.9 s). By hand: HTTP up after 21-47 s, /health_generate ready after 32-57 s, ~2.4 GB
RSS over 4 processes (main, scheduler, detokenizer, resource tracker); the flash start is refused
after ~12 s with the kernel library cached (a cold cache builds it first: once per CI run, and
tests/test_kernel_build.py then finds it). Through this module: `up` 37-79 s over 6 starts (the server's
/health answers 200 after its own warm-up request), `canary --group g0` 23-27 s; one whole run:
`rollback` 2-3 s, `canary --group g1` 115-147 s (the drain of a 40-token request, the refused flash
start, a second start on triton, its gates), stop 1-3 s; 217 s in all (two runs).
"""
from __future__ import annotations

import json
import re
import socket
import threading
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import pytest

from cpu_fleet import CpuFleet
from dist_info import ROOT
from kernel.sglang.model_configs import write_tiny_mla

# What SGLang's HTTP layer and scheduler import beyond `import sglang` (requirements/sglang-cpu.lock).
SERVER_PACKAGES = ("fastapi", "opentelemetry-api", "python-multipart", "setproctitle", "soundfile", "uvicorn",
                   "uvloop", "xgrammar")
# Everything cpu_site/ stands in for; the EAGLE path of this configuration calls all but
# fill_accept_out_cache_loc_cpu (reached with topk > 1) and copy_all_layer_kv_cache_cpu (hierarchical cache).
STANDINS = {"assign_req_to_token_pool_cpu", "assign_extend_cache_locs_cpu", "assign_draft_cache_locs_contiguous_cpu",
            "fill_accept_out_cache_loc_cpu", "fill_bonus_tokens_cpu", "build_tree_kernel_efficient_cpu",
            "verify_tree_greedy_cpu", "copy_all_layer_kv_cache_cpu", "torch.cuda.synchronize@set_embed_and_head"}
EAGLE_VERIFY = {"build_tree_kernel_efficient_cpu", "verify_tree_greedy_cpu", "fill_bonus_tokens_cpu",
                "assign_draft_cache_locs_contiguous_cpu", "torch.cuda.synchronize@set_embed_and_head"}
FLASH_REFUSAL = ("mla-verify: MLA_VERIFY_BACKEND=flash, but --device cpu: the kernel runs on CUDA GPUs only; "
                 "fix: --device cuda; or MLA_VERIFY_BACKEND=triton for SGLang's own path")


class RealFleet(CpuFleet):
    """g0: the emulator; g1: SGLang's real server with EAGLE 1/1/2 and its NextN draft."""

    def __init__(self, tmp: Path):
        # topk_method and scoring_func as in Kimi-K2's config.json: transformers 5's DeepseekV3Config does
        # not keep them by default, and SGLang's MoE gate of the NextN layer reads topk_method
        model = write_tiny_mla(tmp / "model", layers=1, topk_method="noaux_tc", scoring_func="sigmoid")
        super().__init__(
            tmp, model,
            ['speculative_algorithm = "EAGLE"', "speculative_num_steps = 1", "speculative_eagle_topk = 1",
             "speculative_num_draft_tokens = 2"],
            rollout=["gate_retries = 1", "gate_retry_wait_s = 1"],
            gates=["numerics_prompts = 1", "numerics_prompt_tokens = 8", "numerics_new_tokens = 3",
                   "numerics_long_context_tokens = 0",
                   # the candidate of the first canary is an emulator, another model: its numbers are read, not gated
                   "min_top1_agreement = 0.0", "max_mean_abs_logprob_diff = 1e9",
                   "context_tokens = 16", "rounds = 5", "max_new_tokens = 3", "speed_threshold = 0.99",
                   "request_timeout_s = 300"])


def _children(pid: int) -> dict[int, str]:
    """{pid: cmdline} of the live children of `pid`."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                out[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except (OSError, IndexError, ValueError):
            continue
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    missing = []
    for name in SERVER_PACKAGES:
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    assert not missing, (f"SGLang's server needs {missing}, pinned in requirements/sglang-cpu.lock: run `make venv` "
                         "(its stamp depends on the lock files)")
    f = RealFleet(tmp_path_factory.mktemp("real-sglang"))
    try:
        yield f
    finally:
        f.stop_all()
        print(f"\ntimings (s): {json.dumps(f.timings)}")


def test_the_server_packages_are_pinned_as_sglang_requires():
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    lock = dict(line.split("==") for line in (ROOT / "requirements" / "sglang-cpu.lock").read_text().splitlines()
                if line and not line.startswith("#"))
    lock = {canonicalize_name(k): v for k, v in lock.items()}
    theirs = {canonicalize_name(r.name): r for r in map(Requirement, metadata.requires("sglang") or [])}
    for name in SERVER_PACKAGES:
        assert canonicalize_name(name) in lock, f"{name} is not pinned in requirements/sglang-cpu.lock"
        req = theirs.get(canonicalize_name(name))
        if req is not None:
            assert req.specifier.contains(lock[canonicalize_name(name)]), (name, str(req), lock[canonicalize_name(name)])


def test_up_starts_the_real_server_with_the_plugin_on_triton(fleet):
    r = fleet.cli("up")
    assert r.returncode == 0, r.stderr[-2000:] + fleet.log_tail()
    seconds = re.search(r"\[g1\] serving after ([\d.]+) s", r.stdout + r.stderr)
    fleet.timings["g1 serving after"] = float(seconds.group(1)) if seconds else -1
    from rollout.arm import read_arm

    rep = read_arm(fleet.url)
    assert (rep.arm, rep.ranks, rep.sglang_versions, rep.kernel_hashes) == ("triton", 1, ["0.5.23"], []), rep
    rec = fleet.record()
    kids = _children(rec["pid"]).values()
    assert any("sglang::scheduler" in c for c in kids) and any("sglang::detokenizer" in c for c in kids), kids
    status = fleet.cli("status")
    assert re.search(r"g1 .* serves=triton .* health=ok", status.stdout), status.stdout


def test_canary_against_the_real_server_as_control(fleet):
    r = fleet.cli("canary", "--group", "g0")
    assert r.returncode == 0, r.stderr[-3000:] + fleet.log_tail()
    st = fleet.state()
    assert st["status"] == "canary_passed", st["reason"]
    # reconcile read the real server's arm from the plugin's metrics
    audit = [json.loads(x) for x in (fleet.state_dir / "audit.jsonl").read_text().splitlines()]
    seen = [a["observed"]["g1"] for a in audit if a["event"] == "reconcile"][-1]
    assert seen["arm"] == "triton" and seen["how"].startswith("metrics: triton on 1 rank(s)"), seen
    results = st["groups"]["g0"]["results"]
    # numerics: SGLang's real answers parsed; its own EAGLE decode (verify logits) vs its own prefill scoring
    own = results["numerics"]["control_self"]
    assert own["positions"] == 2 and own["top1_agreement"] == 1.0 and own["max_abs_logprob_diff"] < 1e-3, own
    assert results["numerics"]["gated"]["positions"] == 2
    # speed: the request path against the real server (streamed, prefix cache warmed); no speed asserted
    ctrl = results["speed"]["control"]
    assert results["speed"]["clock"] == "wall" and len(ctrl["tok_s"]) == 5 and all(t > 0 for t in ctrl["tok_s"])
    # the warmed prefix is reused: 14 of the 16 context tokens here (SGLang 0.5.23 with EAGLE recomputes
    # the last two; the emulator models one)
    assert ctrl["completion_tokens"] == [3] * 5 and all(c >= 14 for c in ctrl["cached_tokens"]), ctrl
    assert all(a >= 1.0 for a in ctrl["accept_length"]) and len(ctrl["accept_length"]) == 5, ctrl
    # metrics: SGLang's own series over the gates' window
    # (sglang:spec_accept_length is read but still 0 here: SGLang sets it every 40 decode batches, so
    # the gate's accept-length ratio needs longer windows than this test's)
    window = results["metrics"]["control"]
    assert window["requests"] >= 3 and window["errors"] == 0 and window["accept_length"] is not None, window
    assert "error_rate" in {c["check"] for c in results["metrics"]["checks"]}, results["metrics"]
    called = fleet.standins()
    assert EAGLE_VERIFY <= called <= STANDINS, called   # EAGLE drafted and verified, through known stand-ins only
    back = fleet.cli("rollback")
    assert back.returncode == 0 and fleet.state()["status"] == "rolled_back", back.stderr[-2000:]


def test_canary_on_the_real_server_drains_is_refused_flash_and_rolls_back(fleet):
    from rollout.client import stream_generate

    old = fleet.record()
    old_kids = _children(old["pid"])
    box, decoding = {}, threading.Event()

    def in_flight():
        # streamed, so the test knows it is decoding before the canary starts the drain
        body = {"input_ids": list(range(2000, 2012)),
                "sampling_params": {"max_new_tokens": 40, "temperature": 0.0, "ignore_eos": True}}
        try:
            for _, chunk in stream_generate(fleet.url, body, timeout=600):
                decoding.set()
                box["last"] = chunk["meta_info"]
            box["done"] = True          # stream_generate raises on a stream without [DONE]
            box["ended"] = datetime.now(timezone.utc)
        except Exception as e:          # noqa: BLE001 -- the assertion below names it
            box["error"] = repr(e)
        decoding.set()

    t = threading.Thread(target=in_flight, daemon=True)
    t.start()
    assert decoding.wait(120) and "done" not in box and "error" not in box, box
    r = fleet.cli("canary", "--group", "g1")
    t.join(600)
    assert r.returncode == 3 and "ROLLED BACK" in r.stderr, r.stderr[-3000:]
    # SIGTERM to SGLang's main process drained the request, then ended the scheduler and detokenizer
    audit = [json.loads(x) for x in (fleet.state_dir / "audit.jsonl").read_text().splitlines()]
    sigterm = next(a for a in audit if a["event"] == "group" and a.get("group") == "g1" and a.get("step") == "stopping")
    assert box.get("done") and box["last"]["completion_tokens"] == 40, box
    assert box["ended"] > datetime.strptime(sigterm["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc), \
        (box, sigterm)   # it was still decoding when the drain began
    assert not _alive(old["pid"]) and not [p for p in old_kids if _alive(p)], old_kids
    stop = [a for a in audit if a["event"] == "stop" and a.get("group") == "g1"]
    assert stop[0]["how"] == "drained", stop
    # strict mode refused flash with its one line, the process's last
    flash_log = fleet.log_tail("flash", 20000).strip().splitlines()
    ours = [ln for ln in flash_log if "mla-verify:" in ln]
    assert ours == [FLASH_REFUSAL] and flash_log[-1] == FLASH_REFUSAL, flash_log[-20:]
    starts = [g for g in fleet.state()["gates"] if g["group"] == "g1" and g["gate"] == "starts"]
    assert starts[0]["passed"] is False and "exited" in starts[0]["reason"], starts
    # the rollback started it again on triton, and the arm gate read the plugin's real metrics
    arm = fleet.gate("g1", "arm")
    assert arm["passed"] and arm["reason"].startswith("runs triton (expected triton): metrics: triton on 1 rank(s)"), arm
    new = fleet.record()
    assert new["arm"] == "triton" and new["pid"] != old["pid"] and _alive(new["pid"]), new


def test_stop_ends_the_real_process_tree_and_removes_the_pid_file(fleet):
    rec = fleet.record()
    kids = _children(rec["pid"])
    assert any("sglang::scheduler" in c for c in kids.values()), kids
    t0 = time.monotonic()
    how = fleet.launcher("g1").stop("triton")
    fleet.timings["g1 stop"] = round(time.monotonic() - t0, 1)
    assert how == "drained", how
    assert not _alive(rec["pid"]) and not [p for p in kids if _alive(p)], kids
    assert fleet.record() is None
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", fleet.ports[1]), timeout=1).close()
