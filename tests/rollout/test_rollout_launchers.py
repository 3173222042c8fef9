"""Launchers: the systemd and command launchers build the right commands (fake systemctl/ssh
on PATH record them); the local launcher drains with SIGTERM and kills past the deadline."""
import json
import os
import stat
import sys
import time

import pytest

from rollout.inventory import load
from rollout.launchers import LaunchError, LocalLauncher, make_launcher

INV = '''
[rollout]
drain_deadline_s = {drain}
[launch]
model_path = "/m"
draft_model_path = "/d"
[[group]]
name = "sd"
host = "gpu1"
port = 30000
gpus = [0, 1, 2, 3, 4, 5, 6, 7]
launcher = "systemd"
unit = "sglang-{{name}}@{{backend}}.service"
ssh = "ops@gpu1"
[[group]]
name = "sdl"
host = "gpu2"
port = 30000
gpus = [0]
launcher = "systemd"
unit = "sglang@{{backend}}"
user = true
[[group]]
name = "cmd"
host = "gpu3"
port = 30001
gpus = [4, 5]
launcher = "command"
start = "orch start --name {{name}} --gpus {{gpus}} -- {{env}} {{launch}}"
stop = "orch stop --name {{name}} --arm {{backend}}"
status = "orch status {{name}} {{backend}}"
[[group]]
name = "loc"
host = "127.0.0.1"
port = 30002
gpus = [6]
launcher = "local"
command = ["{{python}}", "-c", "{script}"]
'''

# a server that ignores SIGTERM only when told to, so both drain outcomes can be tested
SCRIPT = ("import os,signal,time; "
          "signal.signal(signal.SIGTERM, signal.SIG_IGN if os.environ.get('IGNORE_TERM') else signal.SIG_DFL); "
          "time.sleep(60)")


@pytest.fixture
def fakebin(tmp_path, monkeypatch):
    """systemctl, ssh and orch that append their argv (and the arm env) to calls.jsonl."""
    log = tmp_path / "calls.jsonl"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("systemctl", "ssh", "orch"):
        p = bindir / name
        p.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                     f"open({str(log)!r}, 'a').write(json.dumps([os.path.basename(sys.argv[0])] + sys.argv[1:]"
                     f" + [os.environ.get('MLA_VERIFY_BACKEND')]) + '\\n')\n"
                     f"sys.exit(int(os.environ.get('FAKE_RC', '0')))\n")
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return lambda: [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def inventory(tmp_path, drain=5):
    p = tmp_path / "inv.toml"
    p.write_text(INV.format(drain=drain, script=SCRIPT))
    return load(p)


def test_systemd_over_ssh(tmp_path, fakebin):
    inv = inventory(tmp_path)
    sd = make_launcher(inv.group("sd"), inv)
    sd.stop("triton")
    sd.start("flash")
    assert sd.running("flash") is True
    calls = fakebin()
    assert calls[0][:5] == ["ssh", "-o", "BatchMode=yes", "ops@gpu1", "systemctl stop sglang-sd@triton.service"]
    assert calls[1][4] == "systemctl start --no-block sglang-sd@flash.service"
    assert calls[2][4] == "systemctl is-active --quiet sglang-sd@flash.service"


def test_systemd_local_user_unit_and_failure(tmp_path, fakebin, monkeypatch):
    inv = inventory(tmp_path)
    sdl = make_launcher(inv.group("sdl"), inv)
    sdl.start("triton")
    assert fakebin()[-1][:5] == ["systemctl", "--user", "start", "--no-block", "sglang@triton"]
    monkeypatch.setenv("FAKE_RC", "3")
    assert sdl.running("triton") is False
    with pytest.raises(LaunchError, match="group sdl: stop: exit 3"):
        sdl.stop("triton")


def test_command_templates(tmp_path, fakebin, monkeypatch):
    inv = inventory(tmp_path)
    c = make_launcher(inv.group("cmd"), inv)
    c.start("flash")
    c.stop("flash")
    assert c.running("triton") is True
    calls = fakebin()
    start = calls[0]
    assert start[:6] == ["orch", "start", "--name", "cmd", "--gpus", "4,5"]
    assert "CUDA_VISIBLE_DEVICES=4,5" in start and "MLA_VERIFY_BACKEND=flash" in start
    assert "sglang.launch_server" in start and start[-1] == "flash"  # env of the command too
    assert calls[1] == ["orch", "stop", "--name", "cmd", "--arm", "flash", "flash"]
    assert calls[2] == ["orch", "status", "cmd", "triton", "triton"]
    monkeypatch.setenv("FAKE_RC", "1")
    with pytest.raises(LaunchError, match="start command exit 1"):
        c.start("flash")


def test_local_drains_with_sigterm(tmp_path):
    inv = inventory(tmp_path)
    loc = LocalLauncher(inv.group("loc"), inv)
    loc.start("flash")
    rec = json.loads(loc.pid_file.read_text())
    assert rec["arm"] == "flash" and loc.running("flash") and not loc.running("triton")
    env = open(f"/proc/{rec['pid']}/environ", "rb").read().split(b"\0")
    assert b"CUDA_VISIBLE_DEVICES=6" in env and b"MLA_VERIFY_BACKEND=flash" in env
    with pytest.raises(LaunchError, match="already running"):
        loc.start("flash")
    assert loc.stop("flash") == "drained"
    assert not loc.pid_file.exists() and loc.died() == "no pid file"
    assert loc.stop("flash") == "not running"


def test_local_kills_after_drain_deadline(tmp_path, monkeypatch):
    monkeypatch.setenv("IGNORE_TERM", "1")
    inv = inventory(tmp_path, drain=1)
    loc = LocalLauncher(inv.group("loc"), inv)
    loc.start("triton")
    time.sleep(0.5)  # let it install its SIGTERM handler
    seen = []
    t0 = time.monotonic()
    assert loc.stop("triton", lambda e, d: seen.append(d)) == "killed after drain deadline"
    assert 1.0 <= time.monotonic() - t0 < 5 and seen and seen[0] == 1
    assert not loc.running("triton")


def test_local_reports_a_dead_process(tmp_path):
    inv = inventory(tmp_path)
    inv.group("loc").command = ["{python}", "-c", "import sys; sys.exit(7)"]
    loc = LocalLauncher(inv.group("loc"), inv)
    loc.start("flash")
    time.sleep(0.5)
    assert "exited (code 7)" in loc.died()
