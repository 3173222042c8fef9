"""The real-server job end to end against rollout's emulator (`--emulate`): the same wrapper,
runtime inventory, rollout CLI calls, expectations, result files and table as on the GPU
machine, with rollout.emulator behind the launch wrapper (its `corrupt_verify` fault where the
planted plugin would be). And a step given alone on a fresh root runs its prerequisites."""
import json
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from ports import free_ports
from real_server_helpers import stop_all

from kernel.sglang.real_server import environment as envmod

ROOT = Path(__file__).resolve().parents[2]
# a context where the emulated triton arm is ~10x slower than flash, so the speed gate's verdict
# does not depend on the machine's load
GATES = ["--gate", "context_tokens=16384", "--gate", "max_new_tokens=16", "--gate", "numerics_prompts=2"]


def run_job(root, out, ports, steps, timeout=420):
    return subprocess.run([sys.executable, "-m", "kernel.sglang.real_server", "--emulate", "0.2", "--root", str(root),
                           "--out", str(out), "--ports", ",".join(map(str, ports)), "--steps", steps, *GATES],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def port_open(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("real-server-job")
    root, out, ports = tmp / "root", tmp / "out", free_ports(2)
    try:
        r = run_job(root, out, ports, "setup,up,planted,canary,promote,breakdown,down")
    finally:
        stop_all(root)
    merged = [json.loads(p.read_text()) for p in out.glob("real-server-emulated-*.json")]
    return r, root, out, ports, merged


def test_every_step_does_what_it_should(full_run):
    r, _, _, ports, merged = full_run
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    (m,) = merged
    assert m["emulated"] and m["layers"] == 4 and m["label"].startswith("emulated")
    assert {k: v["status"] for k, v in m["steps"].items()} == {s: "ok" for s in (
        "setup", "up", "planted", "canary", "promote", "breakdown", "down")}
    assert not any(port_open(p) for p in ports)          # down drained both groups


def test_planted_canary_fails_numerics_and_is_rolled_back(full_run):
    m = full_run[4][0]["steps"]["planted"]
    assert m["rollout_rc"] == 3 and m["status"] == "ok" and m["planted_log"]
    canary = m["canary"]
    gates = [(g["gate"], g["passed"]) for g in m["gates"] if g["group"] == canary]
    # promotion gates up to the failed one, then the rollback's own
    assert gates == [("starts", True), ("arm", True), ("health_generate", True), ("numerics", False),
                     ("starts", True), ("arm", True), ("health_generate", True)]
    assert m["numerics"]["verdict"] == "fail" and m["numerics"]["control_self"]["top1_agreement"] >= 0.95
    assert m["groups_after"][canary]["arm"] == "triton"


def test_real_canary_passes_and_promote_completes(full_run):
    steps = full_run[4][0]["steps"]
    c = steps["canary"]
    assert c["rollout_rc"] == 0 and c["status"] == "ok"
    assert [g["gate"] for g in c["gates"] if g["passed"]] == ["starts", "arm", "health_generate", "numerics", "speed",
                                                              "metrics"]
    sp = c["speed"]
    assert sp["passed"] and sp["candidate"]["median_tok_s"] > sp["control"]["median_tok_s"]
    assert sp["candidate"]["median_step_ms"] < sp["control"]["median_step_ms"]
    assert any(line.startswith("canary") or "canary" in line for line in c["plan"])
    p = steps["promote"]
    assert p["status"] == "ok" and {g["arm"] for g in p["groups_after"].values()} == {"flash"}
    b = steps["breakdown"]
    assert b["status"] == "ok" and b["timed"][0]["ttft_s"] > 0 and b["profile"].startswith("skipped")


def test_issue_26_measurements_land_in_the_merged_json_and_the_table(full_run):
    r, _, _, _, (m,) = full_run
    e = m["extend_over_prefix"]
    assert e == m["steps"]["canary"]["extend_over_prefix"] and "error" not in e, e.get("traceback")
    assert (e["layers"], e["context_tokens"], e["canary"], e["control"]) == (4, 16384, "h200-a", "h200-b")
    assert set(e["units"]) >= {"prefill_s", "prefill_ms_per_layer", "ttft_ms"}
    t, f = e["prefill"]["triton"], e["prefill"]["flash"]
    assert t["measured"] and t["group"] == "h200-b" and t["cached_tokens"] == 0
    # the canary's prefill, timed from the real rollout CLI's progress lines around the numerics gate's
    # warm-up: at least the emulator's modelled prefill (16,384 tokens at 8,000 tokens/s, time scale 0.2)
    assert f["measured"] and f["group"] == "h200-a" and f["prefill_s"] >= 16384 / 8000 * 0.2
    assert f["prefill_ms_per_layer"] == pytest.approx(1000 * f["prefill_s"] / 4)
    for arm in ("triton", "flash"):
        assert set(e["followup"][arm]) == {"1", "16", "256"}
        assert all(v["cached_tokens"] == [16384] * 3 and len(v["ttft_ms"]) == 3 for v in e["followup"][arm].values())
    assert e["all_prefix_hit"] and e["greedy"]["equal"] and e["wall_s"] > 0
    # provenance a measurement file needs (notebooks/data.py), honest about the emulator
    assert m["gpu"].startswith("none: rollout.emulator") and m["commit"] and m["sms"] == 0
    tail = r.stdout.split("=== step down: ok")[-1]     # the table, printed last
    assert "EXTEND over the cached prompt (issue 26), L=4, 16,384 tokens:" in tail
    assert "follow-up of 256 token(s), TTFT median of 3 (ms): triton" in tail and "equal on both arms" in tail


def test_the_phase3_fixture_keeps_the_jobs_structure(full_run):
    """tests/notebooks/fixtures/ holds this job's --emulate output for the phase-3 tests: it must
    have what the job writes today (regenerate it as its README says when this fails)."""
    (m,) = full_run[4]
    path = sorted((ROOT / "tests" / "notebooks" / "fixtures").glob("real-server-emulated-*.json"))[-1]
    fixture = json.loads(path.read_text())
    assert fixture["emulated"] is True and fixture["fixture"] is True and fixture["kind"] == m["kind"]
    assert set(fixture) - {"fixture"} == set(m)
    assert set(fixture["steps"]) == set(m["steps"]) - {"down"}
    for step in fixture["steps"]:
        assert set(fixture["steps"][step]) == set(m["steps"][step]), step
    assert set(fixture["extend_over_prefix"]) == set(m["extend_over_prefix"])


def test_outputs_fit_the_device_tool_and_keep_the_logs(full_run):
    r, root, out, _, _ = full_run
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8 and all(len(p.relative_to(out).parts) <= 3 for p in files), files
    rollout_files = sorted(p.name for p in (out / "rollout").glob("rollout-*.json"))
    assert len(rollout_files) == 2            # the planted canary's rollout and the real one
    (archive,) = out.glob("real-server-logs-*.tar.xz")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert any(n.startswith("rollout-state/logs/h200-a-flash-") for n in names)
    assert {"rollout-state/audit.jsonl", "rollout-state/state.json", "inventory.toml"} <= set(names)
    assert sum(n.startswith("logs/") and "-rollout-" in n for n in names) >= 5   # each CLI call's output
    # the table comes last, one row per step
    tail = r.stdout.strip().splitlines()
    head = next(i for i, line in enumerate(tail) if line.startswith("step "))
    assert [line.split()[0] for line in tail[head + 1:head + 8]] == ["setup", "up", "planted", "canary", "promote",
                                                                      "breakdown", "down"]


def cut_off(root):
    """What a device call killed in the middle of `rollout canary` leaves: the lock of a process
    that is gone and an unfinished rollout."""
    state_dir = envmod.Paths(root).state_dir
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock = {"owner": "test", "host": socket.gethostname(), "pid": int(dead.stdout), "time": "2026-12-02T00:00:00Z",
            "command": "canary", "rollout_id": None}
    (state_dir / "lock.json").write_text(json.dumps(lock))
    state = json.loads((state_dir / "state.json").read_text())
    state["status"] = "canary"
    (state_dir / "state.json").write_text(json.dumps(state))


def test_a_step_alone_runs_its_prerequisites_and_recovers_a_cut_off_rollout(tmp_path):
    root, out, ports = tmp_path / "root", tmp_path / "out", free_ports(2)
    try:
        r = run_job(root, out, ports, "canary")
        cut_off(root)
        again = run_job(root, out, ports, "canary")
        r2 = run_job(root, out, ports, "down")
    finally:
        stop_all(root)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    rows = [json.loads(p.read_text()) for p in sorted(out.glob("real-server-emulated-*.json"))][0]
    auto = {x["step"]: x["auto"] for x in rows["invocation"]["rows"]}
    assert auto == {"setup": True, "up": True, "canary": False}
    assert "(a prerequisite)" in r.stdout
    # the second canary found a stale lock and an unfinished rollout with the canary on flash
    assert again.returncode == 0, again.stdout[-6000:]
    assert "which is gone: unlocking" in again.stdout and "aborting it, every group serving" in again.stdout
    assert "rollout rollback" in again.stdout
    assert r2.returncode == 0 and not any(port_open(p) for p in ports)


def test_budget_leaves_a_step_that_would_not_finish_for_the_next_call(tmp_path):
    root, out, ports = tmp_path / "root", tmp_path / "out", free_ports(2)
    r = subprocess.run([sys.executable, "-m", "kernel.sglang.real_server", "--emulate", "0.2", "--root", str(root),
                        "--out", str(out), "--ports", ",".join(map(str, ports)), "--steps", "setup,up,planted",
                        "--budget", "60"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    stop_all(root)
    assert r.returncode == 1
    (m,) = [json.loads(p.read_text()) for p in out.glob("real-server-emulated-*.json")]
    assert [(x["step"], x["status"]) for x in m["invocation"]["rows"]] == [("setup", "ok"), ("up", "skipped")]
    assert not any(port_open(p) for p in ports)      # nothing was started
    assert "not started: predicted" in r.stdout and "left of --budget 60 s" in r.stdout


def test_breakdown_at_a_layer_count_no_group_serves_uses_a_flash_server_of_its_own(tmp_path):
    """Its own server takes the first free port after the groups': the next one is held here (as
    another fleet on the machine would hold it), so the job must pass over it."""
    root, out, ports = tmp_path / "root", tmp_path / "out", free_ports(2)
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", max(ports) + 1))
    except OSError:
        held.close()
        held = None                      # taken already: the job must pass over it all the same
    try:
        r = run_job(root, out, ports, "breakdown", timeout=180)
    finally:
        if held is not None:
            held.close()
        stop_all(root)
    assert r.returncode == 0, r.stdout[-4000:]
    b = json.loads((root / "results" / "L4" / "breakdown.json").read_text())
    own = int(b["url"].rsplit(":", 1)[1])
    assert b["url"] == f"http://127.0.0.1:{own}" and own > max(ports) + 1 and b["stopped"] == "drained"
    assert b["timed"][1]["tok_s"] > 0 and Path(b["server_log"]).name.startswith("breakdown-L4-flash-")
    assert not (root / "rollout-state" / "pids" / "breakdown-L4.json").exists()
    assert not any(port_open(p) for p in [*ports, own])


def test_the_result_file_names_the_card_the_servers_ran_on():
    from types import SimpleNamespace

    from kernel.sglang.real_server.job import Context
    real, emulated = SimpleNamespace(emulate=None), SimpleNamespace(emulate=100.0)
    assert Context.gpu_kind(real, "NVIDIA H100 80GB HBM3") == "h100"
    assert Context.gpu_kind(real, "NVIDIA H200") == "h200"
    assert Context.gpu_kind(real, "unknown") == "gpu"
    assert Context.gpu_kind(emulated, "none: rollout.emulator stands in for SGLang") == "emulated"
