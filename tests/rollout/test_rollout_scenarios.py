"""End-to-end rollouts: real `python -m rollout` processes moving real emulator processes."""
import json
import os
import signal
import time

import pytest

from rollout.engine import PROMOTION_GATES, ROLLBACK_GATES
from rollout_helpers import run_tool, start_tool, wait_for

FULL, BACK = list(PROMOTION_GATES), list(ROLLBACK_GATES)


def starts(fleet, group, arm):
    return len(fleet.events("start", group=group, arm=arm))


def test_happy_path_three_groups(make_fleet):
    f = make_fleet(n=3)
    f.up()
    r = run_tool(f.inv, "canary")
    assert r.returncode == 0, r.stderr
    st = f.state()
    assert st["status"] == "canary_passed"
    assert [f.arm(n) for n in f.names] == ["flash", "triton", "triton"]
    assert [st["groups"][n]["outcome"] for n in f.names] == ["promoted", "pending", "pending"]

    r = run_tool(f.inv, "promote")
    assert r.returncode == 0, r.stderr
    st = f.state()
    assert st["status"] == "completed"
    assert [f.arm(n) for n in f.names] == ["flash"] * 3
    for n in f.names:
        assert starts(f, n, "flash") == 1 and starts(f, n, "triton") == 0
        assert [g["gate"] for g in st["gates"] if g["group"] == n] == FULL + (["metrics_paused"] if n == "g0" else [])
    assert all(g["passed"] for g in st["gates"])
    # the last group has no live control left: it is judged against the canary's recorded control
    assert st["groups"]["g1"]["results"]["speed"]["control_source"] == "live"
    assert st["groups"]["g2"]["results"]["speed"]["control_source"] == "recorded"

    res = f.result()
    assert res["kind"] == "rollout-ab" and res["status"] == "completed" and res["canary"] == "g0"
    assert len(res["candidate"]["tok_s"]) == 5 and len(res["control"]["tok_s"]) == 5
    assert res["ratio"] > 1.2 and res["ci"]["low"] >= 0.98 and res["passed"] is True
    assert res["candidate"]["median_accept_length"] > 1
    assert res["emulated"] is True and {e["role"] for e in res["endpoints"]} == {"candidate", "control"}
    assert all(e["emulated"] for e in res["endpoints"])
    assert res["numerics"]["passed"] and res["numerics"]["top1_agreement"] == 1.0
    assert res["numerics"]["contexts"]["long"]["gated"]["positions"] > 0  # the long prompt was checked
    assert res["arms"]["g0"]["arm"] == "flash" and "metrics" in res["arms"]["g0"]["how"]
    for key in ("gpu", "sms", "driver", "cuda", "torch", "commit", "date"):
        assert key in res
    # never more than one group out of service: each restart was preceded by a full preflight
    pre = f.events("preflight", passed=True)
    assert [p["next"] for p in pre] == f.names

    r = run_tool(f.inv, "rollback")
    assert r.returncode == 0, r.stderr
    assert f.state()["status"] == "rolled_back"
    assert [f.arm(n) for n in f.names] == ["triton"] * 3


def test_slower_canary_rolled_back_others_untouched(make_fleet):
    f = make_fleet(n=3, extra={"g0": ["--fault", "slower", "--fault-arm", "flash", "--slow-factor", "20"]})
    f.up()
    r = run_tool(f.inv, "canary")
    assert r.returncode == 3, r.stderr
    assert "gate speed failed" in r.stderr and "ROLLED BACK" in r.stderr
    st = f.state()
    assert st["status"] == "rolled_back"
    assert st["groups"]["g0"]["outcome"] == "rolled_back" and st["groups"]["g0"]["arm"] == "triton"
    assert [f.arm(n) for n in f.names] == ["triton"] * 3
    assert starts(f, "g0", "flash") == 1 and starts(f, "g0", "triton") == 1
    for n in ("g1", "g2"):
        assert not f.events("stop", group=n) and not f.events("start", group=n)
    speed = [g for g in st["gates"] if g["gate"] == "speed"]
    assert len(speed) == 1 and speed[0]["passed"] is False
    res = f.result()
    assert res["status"] == "rolled_back" and res["passed"] is False and res["ratio"] < 0.98
    # a rollback runs only the fast gates
    assert [g["gate"] for g in st["gates"]][-3:] == BACK


def test_different_tokens_rolled_back(make_fleet):
    f = make_fleet(n=3, extra={"g0": ["--fault", "different_tokens", "--fault-arm", "flash"]})
    f.up()
    r = run_tool(f.inv, "canary", "--promote")
    assert r.returncode == 3, r.stderr
    assert "gate numerics failed" in r.stderr
    st = f.state()
    assert [g["gate"] for g in st["gates"] if g["group"] == "g0"] == FULL[:4] + BACK
    assert st["groups"]["g0"]["results"]["numerics"]["top1_agreement"] < 0.5
    assert [f.arm(n) for n in f.names] == ["triton"] * 3
    assert not f.events("start", group="g1") and not f.events("start", group="g2")


def test_group_fails_to_start(make_fleet):
    f = make_fleet(n=2, extra={"g0": ["--fault", "fail_start", "--fault-arm", "flash"]},
                   settings={"startup_deadline_s": 60})
    f.up()
    t0 = time.monotonic()
    r = run_tool(f.inv, "canary")
    assert r.returncode == 3, r.stderr
    assert time.monotonic() - t0 < 30, "a dead process must fail the gate at once, not at the deadline"
    st = f.state()
    first = st["gates"][0]
    assert first["gate"] == "starts" and not first["passed"] and "exited" in first["reason"]
    assert st["status"] == "rolled_back" and f.arm("g0") == "triton"


def test_hang_on_health_hits_startup_deadline(make_fleet):
    f = make_fleet(n=2, extra={"g0": ["--fault", "hang_health", "--fault-arm", "flash"]},
                   settings={"startup_deadline_s": 2, "health_timeout_s": 0.5})
    f.up()
    r = run_tool(f.inv, "canary")
    assert r.returncode == 3, r.stderr
    st = f.state()
    assert "startup deadline 2 s" in st["gates"][0]["reason"]
    assert f.arm("g0") == "triton" and st["status"] == "rolled_back"


def test_unreachable_endpoint_refuses_before_touching_anything(make_fleet):
    f = make_fleet(n=3)
    f.up()
    pid = json.loads((f.state_dir / "pids" / "g2.json").read_text())["pid"]
    os.killpg(pid, signal.SIGKILL)
    r = run_tool(f.inv, "canary")
    assert r.returncode == 1
    assert "group g2 is not in service" in r.stderr and "refusing" in r.stderr
    assert not f.events("stop") and not f.events("start")
    assert f.arm("g0") == "triton" and f.arm("g1") == "triton"
    assert f.events("preflight", passed=False, group="g2")
    assert f.state()["status"] == "aborted"  # nothing changed, so a later canary may start afresh


def test_killed_mid_rollout_then_resume(make_fleet):
    f = make_fleet(n=3, gates={"context_tokens": 4096, "max_new_tokens": 48})
    f.up()
    tool = start_tool(f.inv, "canary", "--promote")
    try:
        wait_for(lambda: (f.state_dir / "state.json").exists() and f.state()["groups"]["g1"]["step"] == "gating",
                 timeout=60, every=0.005)
    finally:
        tool.send_signal(signal.SIGKILL)
        tool.communicate()
    st = f.state()
    assert st["status"] == "promoting" and st["groups"]["g1"]["step"] == "gating"

    # the dead tool left its lock: refused, and the message says it is stale
    r = run_tool(f.inv, "resume")
    assert r.returncode == 4 and "stale" in r.stderr
    r = run_tool(f.inv, "unlock", "--reason", "tool was killed by the test")
    assert r.returncode == 0
    assert f.events("unlock")[-1]["reason"] == "tool was killed by the test"
    r = run_tool(f.inv, "resume")
    assert r.returncode == 0, r.stderr
    st = f.state()
    assert st["status"] == "completed"
    assert [f.arm(n) for n in f.names] == ["flash"] * 3
    for n in f.names:  # nothing restarted twice
        assert starts(f, n, "flash") == 1
    assert f.events("resume", status="promoting")
    # g1's gates ran again from the start after resume, and passed
    g1 = [g["gate"] for g in st["gates"] if g["group"] == "g1" and g["passed"]]
    assert g1[-6:] == FULL


def test_resume_does_not_start_a_server_that_is_already_up(make_fleet):
    # The tool died after the launcher started g0 on flash but before it recorded that:
    # the state says "starting", the server is up. Resume must adopt it, not start a second one.
    f = make_fleet(n=2)
    f.up()
    assert run_tool(f.inv, "canary").returncode == 0
    st = f.state()
    st["status"], st["gates"] = "canary", []
    st["groups"]["g0"].update(step="starting", target="flash", outcome="pending")
    (f.state_dir / "state.json").write_text(json.dumps(st))
    r = run_tool(f.inv, "resume")
    assert r.returncode == 0, r.stderr
    assert f.events("start_skipped", group="g0", arm="flash")
    assert starts(f, "g0", "flash") == 1
    assert f.state()["status"] == "canary_passed"


def test_second_rollout_refused_by_lock(make_fleet):
    f = make_fleet(n=2, gates={"context_tokens": 4096, "max_new_tokens": 64})
    f.up()
    first = start_tool(f.inv, "canary")
    try:
        wait_for(lambda: (f.state_dir / "lock.json").exists(), timeout=30, every=0.005)
        r = run_tool(f.inv, "canary")
        assert r.returncode == 4
        assert "held by" in r.stderr and str(first.pid) in r.stderr
        out, err = first.communicate(timeout=90)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    assert not (f.state_dir / "lock.json").exists()
    # the lock is free now, but the rollout's canary has passed: a new canary is refused until promoted
    r = run_tool(f.inv, "canary")
    assert r.returncode == 1 and "canary_passed" in r.stderr
    # and resume does not promote behind a person's back: the pause after the canary holds
    r = run_tool(f.inv, "resume")
    assert r.returncode == 1 and "paused" in r.stderr and f.arm("g1") == "triton"


def test_failed_promotion_with_rollback_all_restores_every_group(make_fleet):
    f = make_fleet(n=3, extra={"g2": ["--fault", "slower", "--fault-arm", "flash", "--slow-factor", "20"]})
    f.up()
    r = run_tool(f.inv, "canary", "--promote", "--rollback-all")
    assert r.returncode == 3, r.stderr
    st = f.state()
    assert st["status"] == "rolled_back" and st["rollback_targets"] == ["g2", "g1", "g0"]
    assert [f.arm(n) for n in f.names] == ["triton"] * 3
    for n in f.names:
        assert starts(f, n, "flash") == 1 and starts(f, n, "triton") == 1


def test_plan_touches_nothing(make_fleet):
    f = make_fleet(n=3)
    r = run_tool(f.inv, "plan")
    assert r.returncode == 0, r.stderr
    assert not f.state_dir.exists() and not f.results.exists()
    out = r.stdout
    assert "order: g0 (canary), g1, g2" in out
    assert "CUDA_VISIBLE_DEVICES=0,1 MLA_VERIFY_BACKEND=flash" in out
    assert out.count("gate speed") == 3 and "recorded during the canary" in out


def test_recorded_control_is_used_only_under_the_same_settings(make_fleet):
    # no group is left on triton, so there is no live control: only the canary's recording can
    # judge, and a recording made under other settings is no judge: inconclusive, not a failure
    from rollout.engine import Halted, Rollout
    from rollout.inventory import load
    from rollout.progress import Progress
    f = make_fleet(n=2)
    r = Rollout(load(f.inv), Progress(open(os.devnull, "w")))
    r.state = r.new_state(None, False, False)
    for n in f.names:
        r.state["groups"][n]["arm"] = "flash"
    settings = {"context_tokens": 2048, "max_new_tokens": 24, "rounds": 5, "seed": 0}
    with pytest.raises(Halted, match="no control speed data were recorded"):
        r.control_for("g1", "speed", settings)
    r.state["reference"] = {"speed_control": {"tok_s": [1.0] * 5}, "speed_settings": settings}
    assert r.control_for("g1", "speed", settings) is None
    with pytest.raises(Halted, match="were taken with"):
        r.control_for("g1", "speed", {**settings, "context_tokens": 185000})
    assert [g["passed"] for g in r.state["gates"]] == [None, None]


def test_canary_that_dies_mid_stream_is_restarted_on_control(make_fleet):
    f = make_fleet(n=2, extra={"g0": ["--fault", "die_midstream", "--fault-arm", "flash"]})
    f.up()
    r = run_tool(f.inv, "canary")
    assert r.returncode == 3, r.stderr
    st = f.state()
    failed = [g for g in st["gates"] if not g["passed"]]
    assert len(failed) == 1 and failed[0]["group"] == "g0" and failed[0]["gate"] == "speed"
    assert "without [DONE]" in failed[0]["reason"] or "connection" in failed[0]["reason"].lower()
    assert [e["how"] for e in f.events("stop", group="g0")] == ["drained", "not running"]  # it had crashed
    assert f.arm("g0") == "triton" and st["status"] == "rolled_back"
