"""The record survives crashes and bad files: unreadable state and lock files are errors that
name the file and the way out, unlock respects a live holder, writes are durable, and the
audit log is never behind the state."""
import json
import os
import socket
import subprocess
import sys

import pytest

from rollout_helpers import run_tool

BROKEN_STATES = {"empty": "", "truncated": '{"rollout_id": "20261201T0', "null": "null",
                 "no groups": json.dumps({"rollout_id": "x", "status": "canary", "order": ["g0"], "gates": [],
                                          "reference": {}})}


@pytest.mark.parametrize("kind", sorted(BROKEN_STATES))
def test_unreadable_state_names_the_file_and_the_recovery(make_fleet, kind):
    f = make_fleet(n=2)
    f.state_dir.mkdir()
    path = f.state_dir / "state.json"
    path.write_text(BROKEN_STATES[kind])
    for verb in ("status", "resume", "rollback", "promote", "canary"):
        r = run_tool(f.inv, verb)
        assert r.returncode == 1, (verb, r.stdout, r.stderr)
        out = r.stdout + r.stderr
        assert str(path) in out and "python -m rollout recover --reason" in out, (verb, out)
        assert "Traceback" not in out
    assert not f.events("start") and not f.events("stop")  # a `null` state is not "no rollout"
    assert path.read_text() == BROKEN_STATES[kind]  # nothing overwrote the evidence


def test_recover_moves_the_state_aside_and_rebuilds_it_from_the_groups(make_fleet):
    f = make_fleet(n=2)
    f.up()
    (f.state_dir / "state.json").write_text("{trunc")
    r = run_tool(f.inv, "recover", "--reason", "disk filled up")
    assert r.returncode == 0, r.stderr
    st = f.state()
    assert st["status"] == "aborted" and "disk filled up" in st["reason"]
    assert {n: g["arm"] for n, g in st["groups"].items()} == {"g0": "triton", "g1": "triton"}
    assert "metrics" in st["groups"]["g0"]["observed"]["how"]
    kept = list(f.state_dir.glob("state.json.unreadable-*"))
    assert len(kept) == 1 and kept[0].read_text() == "{trunc"
    assert f.events("recover")[-1]["reason"] == "disk filled up"
    assert run_tool(f.inv, "recover", "--reason", "again").returncode == 1  # a readable state is not "recovered"


@pytest.mark.parametrize("text", ["", '{"owner": "a", "pi', json.dumps({"owner": "a", "time": "t", "command": "c",
                                                                        "host": "h"})])
def test_unreadable_lock_names_the_file_and_needs_force(make_fleet, text):
    f = make_fleet(n=2)
    f.state_dir.mkdir()
    (f.state_dir / "lock.json").write_text(text)
    r = run_tool(f.inv, "canary")
    assert r.returncode == 4 and str(f.state_dir / "lock.json") in r.stderr and "unlock --force" in r.stderr
    assert "Traceback" not in r.stderr
    r = run_tool(f.inv, "unlock", "--reason", "crash")
    assert r.returncode == 4 and (f.state_dir / "lock.json").exists()
    r = run_tool(f.inv, "unlock", "--force", "--reason", "tool crashed while locking")
    assert r.returncode == 0, r.stderr
    assert not (f.state_dir / "lock.json").exists()
    line = f.events("unlock")[-1]
    assert line["forced"] is True and line["reason"] == "tool crashed while locking"


def test_unlock_refuses_while_the_holder_is_alive(make_fleet):
    from rollout.lock import process_start
    f = make_fleet(n=2)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        f.state_dir.mkdir()
        (f.state_dir / "lock.json").write_text(json.dumps(
            {"owner": "ops@here", "host": socket.gethostname(), "pid": holder.pid,
             "start": process_start(holder.pid), "time": "now", "command": "canary"}))
        r = run_tool(f.inv, "unlock", "--reason", "I think it hangs")
        assert r.returncode == 4 and "is alive" in r.stderr and (f.state_dir / "lock.json").exists()
        assert not f.events("unlock")
        r = run_tool(f.inv, "unlock", "--force", "--reason", "it hangs, I checked")
        assert r.returncode == 0 and not (f.state_dir / "lock.json").exists()
        assert f.events("unlock")[-1]["holder"] == "holder alive (forced)"
    finally:
        holder.kill()
        holder.wait()


def test_lock_from_another_host_needs_force(make_fleet):
    f = make_fleet(n=2)
    f.state_dir.mkdir()
    (f.state_dir / "lock.json").write_text(json.dumps(
        {"owner": "ops@other", "host": "other-host", "pid": 1, "time": "now", "command": "canary"}))
    r = run_tool(f.inv, "unlock", "--reason", "stale?")
    assert r.returncode == 4 and "other-host" in r.stderr and "--force" in r.stderr


def test_unlock_works_and_is_audited_when_the_state_is_the_broken_part(make_fleet):
    f = make_fleet(n=2)
    f.state_dir.mkdir()
    (f.state_dir / "state.json").write_text("")
    (f.state_dir / "lock.json").write_text(json.dumps(
        {"owner": "ops@here", "host": socket.gethostname(), "pid": 2 ** 22 + 7, "time": "t", "command": "canary"}))
    r = run_tool(f.inv, "unlock", "--reason", "tool was killed")
    assert r.returncode == 0, r.stderr
    assert f.events("unlock")[-1]["reason"] == "tool was killed"


def test_writes_are_durable_with_unique_temp_names(tmp_path, monkeypatch):
    from rollout.record import Record
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    rec = Record(tmp_path / "st")
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "state.tmp").mkdir()  # the old fixed temp name, left over: must not matter
    rec.save({"rollout_id": "x"})
    assert json.loads(rec.state_path.read_text())["rollout_id"] == "x"
    assert any(p.endswith(".tmp") and ".state.json." in p for p in synced)  # the file's data
    assert str(tmp_path / "st") in synced  # and the directory entry
    rec.audit("e")
    assert str(rec.audit_path) in synced
    assert sorted(p.name for p in (tmp_path / "st").iterdir()) == ["audit.jsonl", "state.json", "state.tmp"]
    assert oct(rec.state_path.stat().st_mode & 0o777) == "0o600" and oct(rec.audit_path.stat().st_mode & 0o777) == "0o600"


def test_lock_is_created_whole(tmp_path):
    from rollout import durable
    path = tmp_path / "lock.json"
    assert durable.create_file(path, '{"a": 1}') is True
    assert durable.create_file(path, '{"b": 2}') is False
    assert path.read_text() == '{"a": 1}' and [p.name for p in tmp_path.iterdir()] == ["lock.json"]


def test_audit_line_is_written_before_the_state_moves(make_fleet, monkeypatch):
    from rollout.engine import Rollout
    from rollout.inventory import load
    from rollout.progress import Progress
    f = make_fleet(n=2)
    r = Rollout(load(f.inv), Progress(open(os.devnull, "w")))
    r.state = r.new_state(None, False, False)
    r.save()

    def crash(state):
        raise SystemExit("killed while writing the state")
    monkeypatch.setattr(r.rec, "save", crash)
    with pytest.raises(SystemExit):
        r.set_group("g0", step="gating", target="flash")
    assert r.rec.audit_lines()[-1]["event"] == "group" and r.rec.audit_lines()[-1]["step"] == "gating"
    assert r.rec.load()["groups"]["g0"]["step"] == "idle"  # the state is behind the log, never ahead
