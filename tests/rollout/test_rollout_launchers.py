"""Launchers: each one passes values with spaces, quotes and ';' through as one argument
(fake ssh re-splits like the real one), drains through the server's main process only, and
the example inventory's command group really starts, reports and stops a server."""
import json
import os
import sys
import time

import pytest

import fake_bin
from rollout_helpers import REPO, free_ports, wait_for
from rollout.client import get_json
from rollout.inventory import load
from rollout.launchers import LaunchError, LocalLauncher, make_launcher

NASTY = "/models/Kimi K2;touch PWNED;\"q'"  # a space, both quotes and ';'

INV = '''
[rollout]
drain_deadline_s = {drain}
[launch]
python = {python}
sglang = {python}
model_path = {model}
draft_model_path = "/d"
[[group]]
name = "sd"
host = "gpu1"
port = 30000
gpus = [0, 1, 2, 3, 4, 5, 6, 7]
launcher = "systemd"
unit = {unit}
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
ssh = "ops@gpu3"
start = ["orch", "start", "--name", "{{name}}", "--gpus", "{{gpus}}", "--", "env", "{{env}}", "{{launch}}"]
stop = ["orch", "stop", "--name", "{{name}}", "--arm", "{{backend}}", "--within", "{{drain_s}}"]
status = ["orch", "status", "{{name}}", "{{backend}}"]
[[group]]
name = "loc"
host = "127.0.0.1"
port = {port}
gpus = [6]
launcher = "local"
command = ["{{python}}", "-c", "{script}"]
[[group]]
name = "tpl"
host = "127.0.0.1"
port = {port2}
gpus = [7]
launcher = "local"
'''

# SGLang's shape: the main process drains on SIGTERM and then ends its scheduler child, which
# has no SIGTERM handler of its own (a signal to the process group kills it at once). The main
# process writes whether its child was still alive after the drain. IGNORE_TERM: never exits.
# SCRIPT_READY appears once its handler is installed and its child started (tests wait for it, not
# for a fixed time, so that a loaded machine cannot send SIGTERM before the handler is there)
SCRIPT = ("import os,signal,subprocess,sys,time; "
          "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
          "stop = []; "
          "signal.signal(signal.SIGTERM, signal.SIG_IGN if os.environ.get('IGNORE_TERM') else "
          "(lambda s, f: stop.append(1))); "
          "open(os.environ['SCRIPT_READY'], 'w').close(); "
          "[time.sleep(0.02) for _ in iter(lambda: bool(stop), True)]; "
          "time.sleep(0.3); "
          "open(os.environ['DRAIN_REPORT'], 'w').write('alive' if child.poll() is None else 'dead'); "
          "child.kill(); child.wait()")

# stands in for `sglang` (the default launch template's `sglang serve`) and for `python` in a
# group's own command: records its argv, then idles. The record appears whole (written aside, then
# renamed): a reader polling for the file never sees it created but still empty
RECORDER = ("import json, os, sys, time\nf = os.environ['ARGV_FILE']\n"
            "open(f + '.part', 'w').write(json.dumps(sys.argv[1:]))\nos.replace(f + '.part', f)\ntime.sleep(60)\n")


@pytest.fixture
def fakebin(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a `;touch PWNED` that ran would leave PWNED here
    monkeypatch.setenv("DRAIN_REPORT", str(tmp_path / "drain.txt"))
    monkeypatch.setenv("SCRIPT_READY", str(tmp_path / "ready"))
    monkeypatch.setenv("ARGV_FILE", str(tmp_path / "argv.json"))
    return fake_bin.install(tmp_path, monkeypatch)


def inventory(tmp_path, drain=5, model="/m", unit="sglang-{name}@{backend}.service"):
    rec = tmp_path / "recorder.py"
    rec.write_text(f"#!{sys.executable}\n{RECORDER}")
    rec.chmod(0o755)
    p = tmp_path / "inv.toml"
    ports = free_ports(2)
    p.write_text(INV.format(drain=drain, script=SCRIPT, python=json.dumps(str(rec)), model=json.dumps(model),
                            unit=json.dumps(unit), port=ports[0], port2=ports[1]))
    return load(p)


def test_systemd_drains_through_main_process_only(tmp_path, fakebin):
    inv = inventory(tmp_path)
    sd = make_launcher(inv.group("sd"), inv)
    sd.start("triton")
    assert sd.running("triton") is True and sd.recorded_arm() == ("triton", "unit sglang-sd@triton.service is active")
    assert sd.stop("triton") == "drained"
    assert sd.running("triton") is False
    calls = [c[4] for c in fakebin() if c[0] == "ssh"]
    kill = calls.index("systemctl kill --kill-who=main --signal=SIGTERM sglang-sd@triton.service")
    # SIGTERM goes to the main process first; `systemctl stop` (the whole cgroup) only after it is gone
    assert calls.index("systemctl stop sglang-sd@triton.service") > kill
    assert not any(c.startswith("systemctl stop") for c in calls[:kill])
    assert "KillMode=mixed" in sd.describe_unit() and "--kill-who=main" in sd.describe_stop("triton")


def test_systemd_values_with_spaces_quotes_and_semicolon(tmp_path, fakebin):
    inv = inventory(tmp_path, unit="sg kimi;touch PWNED;\"q'@{backend}.service")
    sd = make_launcher(inv.group("sd"), inv)
    sd.start("flash")
    starts = [c for c in fakebin() if c[0] == "systemctl" and c[1] == "start"]
    assert starts == [["systemctl", "start", "--no-block", "sg kimi;touch PWNED;\"q'@flash.service", None]]
    assert not (tmp_path / "PWNED").exists()


def test_systemd_user_unit_and_failure(tmp_path, fakebin, monkeypatch):
    inv = inventory(tmp_path)
    sdl = make_launcher(inv.group("sdl"), inv)
    sdl.start("triton")
    assert fakebin()[-1][:5] == ["systemctl", "--user", "start", "--no-block", "sglang@triton"]
    monkeypatch.setenv("FAKE_RC", "4")
    assert sdl.running("triton") is False
    with pytest.raises(LaunchError, match="group sdl: stop: exit 4"):
        sdl.stop("triton")


def test_command_templates_are_argv_over_ssh(tmp_path, fakebin, monkeypatch):
    inv = inventory(tmp_path, model=NASTY)
    c = make_launcher(inv.group("cmd"), inv)
    c.start("flash")
    c.stop("flash")
    assert c.running("triton") is True
    calls = [x for x in fakebin() if x[0] == "orch"]
    start = calls[0]
    assert start[:7] == ["orch", "start", "--name", "cmd", "--gpus", "4,5", "--"]
    assert start[7:10] == ["env", "CUDA_VISIBLE_DEVICES=4,5", "MLA_VERIFY_BACKEND=flash"]
    assert start[start.index("--model-path") + 1] == NASTY  # one argument, through ssh and the remote shell
    assert not (tmp_path / "PWNED").exists()
    assert calls[1][:8] == ["orch", "stop", "--name", "cmd", "--arm", "flash", "--within", "5"]
    assert calls[2][:4] == ["orch", "status", "cmd", "triton"]
    monkeypatch.setenv("FAKE_RC", "1")
    assert c.running("flash") is False
    monkeypatch.setenv("FAKE_RC", "255")  # ssh itself failed: unknown, not "not running"
    assert c.running("flash") is None and c.recorded_arm()[0] is None
    monkeypatch.setenv("FAKE_RC", "1")
    with pytest.raises(LaunchError, match="start command exit 1"):
        c.start("flash")


def test_local_values_with_spaces_quotes_and_semicolon(tmp_path, fakebin):
    inv = inventory(tmp_path, model=NASTY)
    loc = LocalLauncher(inv.group("tpl"), inv)
    loc.start("flash")
    try:
        argv = wait_for(lambda: (tmp_path / "argv.json").exists() and json.loads((tmp_path / "argv.json").read_text()))
        assert argv[argv.index("--model-path") + 1] == NASTY and not (tmp_path / "PWNED").exists()
    finally:
        loc.stop("flash")


def test_local_drains_through_main_process_only(tmp_path, fakebin):
    inv = inventory(tmp_path)
    loc = LocalLauncher(inv.group("loc"), inv)
    loc.start("flash")
    rec = json.loads(loc.pid_file.read_text())
    assert rec["arm"] == "flash" and loc.running("flash") and not loc.running("triton")
    assert oct(loc.pid_file.stat().st_mode & 0o777) == "0o600"
    env = open(f"/proc/{rec['pid']}/environ", "rb").read().split(b"\0")
    assert b"CUDA_VISIBLE_DEVICES=6" in env and b"MLA_VERIFY_BACKEND=flash" in env
    with pytest.raises(LaunchError, match="already running"):
        loc.start("flash")
    wait_for(lambda: (tmp_path / "ready").exists())  # its handler installed, its child started
    assert loc.stop("flash") == "drained"
    # SGLang's scheduler child lived through the drain: only the main process got SIGTERM
    assert (tmp_path / "drain.txt").read_text() == "alive"
    with pytest.raises(ProcessLookupError):
        os.killpg(rec["pgid"], 0)  # and nothing of the group is left
    assert not loc.pid_file.exists() and loc.died() == "no pid file"
    assert loc.stop("flash") == "not running"


def test_local_kills_after_drain_deadline(tmp_path, fakebin, monkeypatch):
    monkeypatch.setenv("IGNORE_TERM", "1")
    inv = inventory(tmp_path, drain=1)
    loc = LocalLauncher(inv.group("loc"), inv)
    loc.start("triton")
    wait_for(lambda: (tmp_path / "ready").exists())  # its handler installed, its child started
    seen = []
    t0 = time.monotonic()
    assert loc.stop("triton", lambda e, d: seen.append(d)) == "killed after drain deadline"
    assert 1.0 <= time.monotonic() - t0 < 5 and seen and seen[0] == 1
    assert not loc.running("triton")


def test_local_reports_a_dead_process(tmp_path, fakebin):
    inv = inventory(tmp_path)
    inv.group("loc").command = ["{python}", "-c", "import sys; sys.exit(7)"]
    loc = LocalLauncher(inv.group("loc"), inv)
    loc.start("flash")
    assert "exited (code 7)" in wait_for(lambda: "exited (code 7)" in (loc.died() or "") and loc.died())


def test_local_refuses_to_start_where_another_server_answers(tmp_path, fakebin, data_dir):
    # a lost pid file: the old server still listens; a new one would fail to bind, and every
    # gate would then talk to the old one
    from rollout.emulator import start_emulator
    inv = inventory(tmp_path)
    g = inv.group("tpl")
    with start_emulator("triton", port=g.port, data_dir=data_dir, time_scale=0.05):
        with pytest.raises(LaunchError, match="already accepts connections.*pid file .* lost"):
            LocalLauncher(g, inv).start("flash")


EXAMPLE_SERVER = f"""#!{sys.executable}
import json, os, sys
open(os.environ['ARGV_FILE'], 'w').write(json.dumps(sys.argv[1:]))
port = sys.argv[sys.argv.index('--port') + 1]
os.execve(sys.executable, [sys.executable, '-m', 'rollout.emulator', '--port', port, '--time-scale', '0.05',
          '--enable-metrics', '--data-dir', os.environ['EMU_DATA']], {{**os.environ, 'PYTHONPATH': {str(REPO)!r}}})
"""


def test_example_command_group_starts_reports_and_stops(tmp_path, fakebin, data_dir, monkeypatch):
    """The example inventory's command group, as shipped, with only its host directory, its ssh
    destination and `sglang` pointed at this machine: status is false with nothing running (no
    pgrep -f matching itself), true on the right arm only, and stop drains and ends it."""
    srv = tmp_path / "srv"
    srv.mkdir()
    server = tmp_path / "python-sglang"
    server.write_text(EXAMPLE_SERVER)
    server.chmod(0o755)
    monkeypatch.setenv("EMU_DATA", str(data_dir))
    inv = load(REPO / "rollout" / "inventory.example.toml")
    g = inv.group("gpu-c")
    port = free_ports(1)[0]
    g.host, g.port, g.ssh = "127.0.0.1", port, "sglang@127.0.0.1"
    for field in ("start", "stop", "status"):
        setattr(g, field, [a.replace("/srv/sglang", str(srv)) for a in getattr(g, field)])
    inv.launch.update(sglang=str(server), model_path=NASTY)
    inv.settings["drain_deadline_s"] = 10
    c = make_launcher(g, inv)
    assert c.running("flash") is False and c.running("triton") is False  # nothing runs yet
    c.start("flash")
    try:
        info = wait_for(lambda: _info(port), timeout=30)
        assert info["emulated_arm"] == "flash"  # MLA_VERIFY_BACKEND reached the server through env "$@"
        argv = json.loads((tmp_path / "argv.json").read_text())
        assert argv[argv.index("--model-path") + 1] == NASTY and not (tmp_path / "PWNED").exists()
        assert c.running("flash") is True and c.running("triton") is False
        assert c.recorded_arm()[0] == "flash"
        pid = int((srv / "pid").read_text())
        assert os.getpgid(pid) == pid  # its own session: stop can end the whole of it past the deadline
    finally:
        assert c.stop("flash") == "stopped by command"
    assert c.running("flash") is False and _info(port) is None


def _info(port):
    try:
        return get_json(f"http://127.0.0.1:{port}", "/server_info", timeout=1)
    except Exception:
        return None
