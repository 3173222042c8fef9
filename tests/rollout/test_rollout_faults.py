"""The faults of the audit's section 3, each as a scenario: real `python -m rollout` processes
moving real emulator processes, with the fault injected at the moment the audit used. None
may leave a group out of service without the record saying so."""
import os
import signal
import threading
import time

from rollout.client import post_json, request
from rollout_helpers import run_tool, tool_with_fault, wait_for

# A request that holds a drain open: ~960 triton steps of 6 ms at the fleet's time scale, about
# 6 s. At 400 tokens (1 s) a loaded CI machine started the tool after the request had ended, the
# drain found nothing in flight, and the "mid-drain" moment never came.
IN_FLIGHT_TOKENS = 2400


def hold_drain_open(fleet, name) -> dict:
    """One request that lasts ~6 s on the group (IN_FLIGHT_TOKENS); returns its response."""
    return post_json(fleet.url(name), "/generate", {"input_ids": list(range(1, 4096)), "sampling_params": {
        "max_new_tokens": IN_FLIGHT_TOKENS, "ignore_eos": True}}, timeout=60)


def starts(fleet, group, arm):
    return len(fleet.events("start", group=group, arm=arm))


def serving(fleet, name) -> bool:
    return _health(fleet, name) == 200


def _health(fleet, name):
    try:
        return request(fleet.url(name), "GET", "/health", timeout=2)[0]
    except Exception:
        return None


def kill_group(fleet, name):
    os.killpg(fleet.pid(name), signal.SIGKILL)
    wait_for(lambda: not serving(fleet, name), timeout=10)


def gate_seen(fleet, group, gate, passed=True):
    return bool(fleet.events("gate", group=group, gate=gate, passed=passed))


def gating(fleet, group):
    return (fleet.state_dir / "state.json").exists() and fleet.state()["groups"][group]["step"] == "gating"


# ---- A: kill -9 during a restart, then resume ------------------------------------------------
def test_A_kill_9_while_the_canary_starts_then_resume(make_fleet):
    f = make_fleet(n=2, extra={"g0": ["--startup-s", "2"]})
    f.up()
    tool_with_fault(f.inv, ("canary",), lambda: gating(f, "g0"), lambda t: t.send_signal(signal.SIGKILL), every=0.005)
    # the audit is not behind the state: the step the state shows is in the log
    last = [a for a in f.events("group", group="g0")][-1]
    assert last["step"] == "gating" and f.state()["groups"]["g0"]["step"] == "gating"
    r = run_tool(f.inv, "resume")
    assert r.returncode == 4 and "stale" in r.stderr
    assert run_tool(f.inv, "unlock", "--reason", "the tool was killed").returncode == 0
    r = run_tool(f.inv, "resume")
    assert r.returncode == 0, r.stderr
    assert f.state()["status"] == "canary_passed" and f.arm("g0") == "flash"
    assert starts(f, "g0", "flash") == 1  # the server that was coming up was adopted, not started twice


# ---- D2b / D3: the control dies during the canary's gates ------------------------------------
def control_dies_during(make_fleet, gate_before):
    f = make_fleet(n=2, gates={"context_tokens": 4096, "max_new_tokens": 48})
    f.up()
    rc, err, _ = tool_with_fault(f.inv, ("canary",), lambda: gate_seen(f, "g0", gate_before),
                                 lambda t: kill_group(f, "g1"))
    assert rc == 5, err
    st = f.state()
    assert st["status"] == "halted" and "g1" in st["reason"] and "not blamed" in st["reason"]
    assert st["groups"]["g1"]["outcome"] == "control_failed"
    assert st["groups"]["g1"]["service"]["in_service"] is False  # the record says g1 is down
    # the canary was neither blamed nor restarted: it kept serving flash all along
    assert serving(f, "g0") and f.arm("g0") == "flash"
    assert starts(f, "g0", "triton") == 0 and len(f.events("stop", group="g0")) == 1
    assert not [g for g in st["gates"] if g["group"] == "g0" and g["passed"] is False]
    assert f.events("control_failed", group="g1")
    # once the control is back, resume runs the gates again and the canary passes
    f.up()
    r = run_tool(f.inv, "resume")
    assert r.returncode == 0, r.stderr
    assert f.state()["status"] == "canary_passed"


def test_D2b_control_dies_after_the_canary_started(make_fleet):
    control_dies_during(make_fleet, "health_generate")


def test_D3_control_dies_during_the_speed_gate(make_fleet):
    control_dies_during(make_fleet, "numerics")


# ---- max_unavailable on the rollback path ----------------------------------------------------
def test_rollback_never_takes_more_than_max_unavailable_out(make_fleet):
    f = make_fleet(n=3, extra={"g0": ["--fault", "slower", "--fault-arm", "flash", "--slow-factor", "20"]})
    f.up()
    # g2 is not g0's control (g1): the speed gate still fails on g0's own merit
    rc, err, _ = tool_with_fault(f.inv, ("canary",), lambda: gate_seen(f, "g0", "numerics"),
                                 lambda t: kill_group(f, "g2"))
    assert rc == 5, err
    st = f.state()
    assert st["status"] == "halted" and st["halted_from"] == "rolling_back"
    assert "rollback of group g0 held" in st["reason"] and "max_unavailable = 1" in st["reason"]
    assert gate_seen(f, "g0", "speed", passed=False)
    assert serving(f, "g0") and serving(f, "g1")  # g0 was not stopped with g2 down
    assert f.events("preflight", passed=False, next="g0", group="g2")
    f.up()
    r = run_tool(f.inv, "resume")
    assert r.returncode == 0, r.stderr
    assert f.state()["status"] == "rolled_back" and f.arm("g0") == "triton"


# ---- E / E2: SIGTERM during the speed gate and during a drain ---------------------------------
def test_E_sigterm_during_the_speed_gate(make_fleet):
    f = make_fleet(n=2, gates={"context_tokens": 4096, "max_new_tokens": 64})
    f.up()
    def sigterm(tool):
        time.sleep(0.2)  # into the speed gate's rounds
        tool.send_signal(signal.SIGTERM)
        return time.monotonic()
    rc, err, t0 = tool_with_fault(f.inv, ("canary",), lambda: gate_seen(f, "g0", "numerics"), sigterm, timeout=30)
    assert rc == 130 and time.monotonic() - t0 < 10, err
    assert not (f.state_dir / "lock.json").exists()
    st = f.state()
    assert st["groups"]["g0"]["step"] == "gating" and serving(f, "g0") and serving(f, "g1")
    assert f.events("interrupted")[-1]["hard"] is False
    r = run_tool(f.inv, "resume")
    assert r.returncode == 0, r.stderr
    assert f.state()["status"] == "canary_passed"


def test_E2_sigterm_during_a_drain_brings_the_group_back(make_fleet):
    # a long in-flight request holds g0's drain open for seconds
    f = make_fleet(n=2, settings={"drain_deadline_s": 60})
    f.up()
    box = {}

    def in_flight():
        box["r"] = hold_drain_open(f, "g0")
    client = threading.Thread(target=in_flight)
    client.start()
    time.sleep(0.3)
    try:
        rc, err, _ = tool_with_fault(f.inv, ("canary",), lambda: f.events("group", group="g0", step="stopping"),
                                     lambda t: t.send_signal(signal.SIGTERM), every=0.005)
    finally:
        client.join(60)
    assert rc == 130, err
    assert box["r"]["meta_info"]["completion_tokens"] == IN_FLIGHT_TOKENS  # the drain let the request finish
    gs = f.state()["groups"]["g0"]
    assert (gs["step"], gs["arm"], gs["outcome"]) == ("idle", "triton", "interrupted")
    assert serving(f, "g0") and f.arm("g0") == "triton"  # back in service before the tool exited
    assert starts(f, "g0", "triton") == 1 and starts(f, "g0", "flash") == 0
    r = run_tool(f.inv, "resume")
    assert r.returncode == 0, r.stderr
    assert f.state()["status"] == "canary_passed" and f.arm("g0") == "flash"


# ---- F1 / I: the record against reality --------------------------------------------------------
def test_F1_new_canary_after_a_completed_rollout_is_reconciled(make_fleet):
    f = make_fleet(n=2)
    f.up()
    assert run_tool(f.inv, "canary", "--promote").returncode == 0
    r = run_tool(f.inv, "canary")
    assert r.returncode == 1 and "already runs flash" in r.stderr
    st = f.state()
    assert st["status"] == "aborted" and {n: g["arm"] for n, g in st["groups"].items()} == {"g0": "flash", "g1": "flash"}
    assert f.events("reconcile")[-1]["observed"]["g1"]["arm"] == "flash"
    assert len(f.events("start")) == 2  # nothing was restarted by the refused canary


def test_F1_a_group_moved_behind_the_tools_back_is_not_used_as_control(make_fleet):
    f = make_fleet(n=3)
    f.up()
    assert run_tool(f.inv, "canary").returncode == 0
    assert run_tool(f.inv, "rollback").returncode == 0
    # someone restarts g1 on flash by hand; the record still says triton
    from rollout.inventory import load
    from rollout.launchers import make_launcher
    inv = load(f.inv)
    g1 = make_launcher(inv.group("g1"), inv)
    g1.stop("triton")
    g1.start("flash")
    wait_for(lambda: serving(f, "g1"), timeout=20)
    r = run_tool(f.inv, "canary", "--group", "g0")
    assert r.returncode == 0, r.stderr
    st = f.state()
    assert st["groups"]["g1"]["arm"] == "flash"  # reconciled, not assumed triton
    assert f.events("reconcile")[-1]["recorded"]["g1"] == "triton" and "the last record said triton" in r.stderr
    speed = st["groups"]["g0"]["results"]["speed"]
    assert speed["endpoints"][1]["url"] == f.url("g2")  # the control was the group really on triton


def test_I_lost_pid_file_refuses_before_touching_anything(make_fleet):
    f = make_fleet(n=2)
    f.up()
    (f.state_dir / "pids" / "g0.json").unlink()
    r = run_tool(f.inv, "canary")
    assert r.returncode == 1 and "pid file lost?" in r.stderr
    assert not f.events("stop") and starts(f, "g0", "flash") == 0
    assert f.arm("g0") == "triton" and f.state()["status"] == "aborted"


# ---- arm confirmation ------------------------------------------------------------------------------
def test_a_flash_server_without_the_plugin_fails_the_arm_gate(make_fleet):
    f = make_fleet(n=2, extra={"g0": ["--no-plugin"]})
    f.up()
    r = run_tool(f.inv, "canary")
    assert r.returncode == 3, r.stderr
    failed = [g for g in f.state()["gates"] if g["passed"] is False]
    assert failed[0]["gate"] == "arm" and "kernel is not loaded" in failed[0]["reason"]
    assert not gate_seen(f, "g0", "numerics") and f.arm("g0") == "triton"


def test_without_metrics_the_launchers_record_confirms_the_arm(make_fleet):
    f = make_fleet(n=2)
    f.inv.write_text(f.inv.read_text().replace(', "--enable-metrics"', ""))
    f.up()
    r = run_tool(f.inv, "canary")
    assert r.returncode == 0, r.stderr
    arm_gate = [g for g in f.state()["gates"] if g["gate"] == "arm"][0]
    assert arm_gate["passed"] and "launcher record" in arm_gate["reason"]
    assert [g for g in f.state()["gates"] if g["gate"] == "metrics"][0]["passed"] is None  # skipped, said why


def test_an_unconfirmable_arm_refuses_the_rollout(make_fleet):
    f = make_fleet(n=2, extra={"g1": ["--no-plugin"]})
    f.inv.write_text(f.inv.read_text().replace(', "--enable-metrics"', "", 1))  # g0: no metrics at all
    f.up()
    (f.state_dir / "pids" / "g0.json").unlink()  # and no record either
    r = run_tool(f.inv, "canary")
    assert r.returncode == 1 and "cannot confirm which arm" in r.stderr and "group g0" in r.stderr
    assert not f.events("stop")


# ---- transient errors, inconclusive results, deadlines, abort ---------------------------------------
def test_one_transient_error_is_retried_not_rolled_back(make_fleet):
    f = make_fleet(n=2, extra={"g0": ["--fault", "drop_request", "--fault-arm", "flash", "--drop-request", "3"]},
                   settings={"gate_retry_wait_s": 0.1})
    f.up()
    r = run_tool(f.inv, "canary")
    assert r.returncode == 0, r.stderr
    retry = f.events("gate_retry", group="g0")
    assert len(retry) == 1 and retry[0]["gate"] == "numerics"
    assert starts(f, "g0", "triton") == 0


def test_corrupt_verify_path_is_rolled_back(make_fleet):
    f = make_fleet(n=2, extra={"g0": ["--fault", "corrupt_verify", "--fault-arm", "flash"]})
    f.up()
    r = run_tool(f.inv, "canary")
    assert r.returncode == 3 and "gate numerics failed" in r.stderr and "verify path disagrees" in r.stderr
    assert f.arm("g0") == "triton"


def test_corrupt_prefill_path_halts_with_what_was_seen(make_fleet):
    f = make_fleet(n=2, extra={"g0": ["--fault", "corrupt_prefill", "--fault-arm", "flash"]})
    f.up()
    r = run_tool(f.inv, "canary")
    assert r.returncode == 5 and "candidate's prefill scoring disagrees" in r.stderr
    st = f.state()
    assert st["status"] == "halted" and f.arm("g0") == "flash" and serving(f, "g0")
    numerics = [g for g in st["gates"] if g["gate"] == "numerics"][-1]
    assert numerics["passed"] is None and "not the kernel under test" in numerics["reason"]
    back = run_tool(f.inv, "rollback")                    # a person decided
    assert back.returncode == 0, back.stderr
    assert f.arm("g0") == "triton"


def test_progress_deadline_halts_with_every_group_serving(make_fleet):
    # the control decodes 5x slower than the others, so its gates outlast a 3 s deadline
    f = make_fleet(n=2, gates={"context_tokens": 4096, "max_new_tokens": 64}, extra={"g1": ["--time-scale", "0.5"]})
    f.up()
    r = run_tool(f.inv, "canary", "--progress-deadline", "3")
    assert r.returncode == 5 and "progress deadline of 3 s" in r.stderr, r.stderr
    assert f.state()["status"] == "halted" and serving(f, "g0") and serving(f, "g1")
    r = run_tool(f.inv, "resume")
    assert r.returncode == 0, r.stderr
    assert f.state()["status"] == "canary_passed"


def test_abort_stops_a_running_rollout_and_leaves_every_group_serving(make_fleet):
    f = make_fleet(n=2, gates={"context_tokens": 4096, "max_new_tokens": 64})
    f.up()
    rc, err, r = tool_with_fault(f.inv, ("canary",), lambda: gate_seen(f, "g0", "health_generate"),
                                 lambda t: run_tool(f.inv, "abort", "--reason", "pager went off"), timeout=30)
    assert r.returncode == 0, r.stderr
    assert rc == 130, err
    st = f.state()
    assert st["status"] == "aborted" and "pager went off" in st["reason"]
    assert serving(f, "g0") and serving(f, "g1") and st["groups"]["g0"]["step"] == "idle"
    assert run_tool(f.inv, "resume").returncode == 1  # an aborted rollout is over


def test_abort_after_kill_9_mid_drain_restarts_the_group(make_fleet):
    f = make_fleet(n=2, settings={"drain_deadline_s": 60})
    f.up()
    client = threading.Thread(target=lambda: hold_drain_open(f, "g0"))
    client.start()
    time.sleep(0.3)
    try:
        # killed once g0 drains (its /health says 503): the tool never gets to start it again
        tool_with_fault(f.inv, ("canary",), lambda: f.events("group", group="g0", step="stopping")
                        and _health(f, "g0") == 503, lambda t: t.send_signal(signal.SIGKILL), every=0.005)
    finally:
        client.join(60)
    wait_for(lambda: not serving(f, "g0"), timeout=30)  # the drain finished; g0 is down, recorded "stopping"
    assert f.state()["groups"]["g0"]["step"] == "stopping"
    assert run_tool(f.inv, "unlock", "--reason", "tool killed").returncode == 0
    r = run_tool(f.inv, "abort", "--reason", "give up for today")
    assert r.returncode == 0, r.stderr
    gs = f.state()["groups"]["g0"]
    assert (gs["step"], gs["arm"]) == ("idle", "triton") and serving(f, "g0") and f.arm("g0") == "triton"


# ---- metric checks during the gates and while paused --------------------------------------------
def test_low_accept_length_fails_the_metrics_gate(make_fleet):
    f = make_fleet(n=2, extra={"g0": ["--fault", "low_accept", "--fault-arm", "flash"]})
    f.up()
    r = run_tool(f.inv, "canary")
    assert r.returncode == 3, r.stderr
    failed = [g for g in f.state()["gates"] if g["passed"] is False][0]
    assert failed["gate"] == "metrics" and "accept_length_ratio" in failed["reason"]
    assert gate_seen(f, "g0", "speed")  # it was fast enough; only the metrics saw it


def test_errors_while_paused_are_caught_before_promotion(make_fleet):
    f = make_fleet(n=2)
    f.up()
    assert run_tool(f.inv, "canary").returncode == 0
    assert run_tool(f.inv, "check").returncode == 0
    os.kill(f.pid("g0"), signal.SIGUSR1)  # from now on g0 answers live traffic with HTTP 500

    def generate() -> int:
        return request(f.url("g0"), "POST", "/generate",
                       {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}})[0]
    # the emulator takes the signal asynchronously: under load a request can still be served
    # before it does, so wait for the first 500 before counting on them
    wait_for(lambda: generate() == 500, timeout=30)
    for _ in range(3):
        assert generate() == 500
    r = run_tool(f.inv, "check")
    assert r.returncode == 3 and "error_rate" in r.stdout
    r = run_tool(f.inv, "promote")
    assert r.returncode == 3 and "metrics_paused" in r.stderr
    assert f.state()["status"] == "rolled_back" and f.arm("g0") == "triton" and f.arm("g1") == "triton"


def test_control_that_dies_while_paused_halts_promote_until_it_is_back(make_fleet):
    f = make_fleet(n=2)
    f.up()
    assert run_tool(f.inv, "canary").returncode == 0
    kill_group(f, "g1")
    r = run_tool(f.inv, "promote")
    assert r.returncode == 5 and "g1" in r.stderr and "not blamed" in r.stderr
    st = f.state()
    assert st["status"] == "halted" and st["groups"]["g1"]["service"]["in_service"] is False
    assert serving(f, "g0") and f.arm("g0") == "flash"
    f.up()
    r = run_tool(f.inv, "promote")
    assert r.returncode == 0, r.stderr
    assert f.state()["status"] == "completed" and f.arm("g1") == "flash"
