"""Start and stop one GPU group on an arm: a local process, a systemd unit, or a command.

All three share one shape: start(arm), stop(arm) -> how it stopped, running(arm) -> bool or
None (cannot tell), recorded_arm() -> (arm or None, what the record says), died() -> reason or
None (lets the startup gate fail fast instead of waiting out a 20-minute deadline on a
process that is already gone).

Drain goes through SGLang's main process only. SGLang drains in its tokenizer-manager
(main) process; its schedulers are plain child processes without a SIGTERM handler, so a
signal to the whole process group (or systemd's default KillMode=control-group) kills them at
once and loses every in-flight request. The main process ends them itself once drained.

No value is ever spliced into a shell string: local processes get argv lists, ssh gets one
command quoted once for the one remote shell (shlex.join), command templates are argv lists.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time

from rollout.durable import write_file
from rollout.inventory import Group, Inventory
from rollout.launch import BACKEND_ENV, group_env, launch_argv, render, shell_line
from rollout.lock import pid_alive, process_start
from rollout.redact import REDACTED, redact_argv, scrub

ARMS = ("flash", "triton")


class LaunchError(RuntimeError):
    pass


def _run(argv: list[str], *, timeout: float, what: str, env=None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise LaunchError(f"{what}: command not found: {argv[0]!r}") from None
    except subprocess.TimeoutExpired:
        raise LaunchError(f"{what}: no answer after {timeout:.0f} s: {shlex.join(redact_argv(argv))}") from None


def _checked(argv, *, timeout, what, env=None):
    p = _run(argv, timeout=timeout, what=what, env=env)
    if p.returncode != 0:
        raise LaunchError(scrub(f"{what}: exit {p.returncode}: {shlex.join(redact_argv(argv))}: "
                                f"{(p.stderr or p.stdout).strip()[-500:]}"))
    return p


def ssh_argv(dest: str, argv: list[str]) -> list[str]:
    """ssh joins its command words with spaces for the remote shell, so the argv is quoted
    exactly once here and arrives as the same argv (BatchMode: a password prompt in the middle
    of a rollout would hang it unseen)."""
    return ["ssh", "-o", "BatchMode=yes", dest, shlex.join(argv)]


def group_alive(pgid: int) -> bool:
    """Whether process group `pgid` still has a process that runs (killpg(0) also finds
    zombies, which run nothing and may never be reaped by this process)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def port_answers(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class LocalLauncher:
    """A child process in its own session; pid file under <state_dir>/pids survives the tool."""

    def __init__(self, group: Group, inv: Inventory):
        self.g, self.inv = group, inv
        self.pid_file = inv.state_dir / "pids" / f"{group.name}.json"
        self.proc: subprocess.Popen | None = None

    def argv(self, arm: str) -> list[str]:
        if self.g.command is None:
            return launch_argv(self.inv.launch, host=self.g.host, port=self.g.port, gpus=self.g.gpus, arm=arm)
        values = {**self.inv.launch, "python": sys.executable, "name": self.g.name, "host": self.g.host,
                  "port": self.g.port, "gpus": ",".join(map(str, self.g.gpus)), "tp_size": len(self.g.gpus),
                  "backend": arm}
        return render(self.g.command, values)

    def _spawn_argv(self, arm: str) -> list[str]:
        # The server must check the key the tool sends; SGLang takes it only as --api-key.
        argv, key = self.argv(arm), self.inv.api_key()
        return argv + ["--api-key", key] if key and "--api-key" not in argv else argv

    def describe_start(self, arm: str) -> str:
        argv = self.argv(arm)
        if self.inv.auth["api_key_env"] or self.inv.auth["api_key_file"]:
            argv = argv + ["--api-key", REDACTED]
        return shell_line(redact_argv(argv), group_env(self.g.gpus, arm))

    def describe_stop(self, arm: str) -> str:
        return (f"SIGTERM the server's main process from {self.pid_file} (SGLang drains there, then ends its "
                f"scheduler processes), wait for its process group to exit; SIGKILL the group after "
                f"{self.inv.settings['drain_deadline_s']:.0f} s")

    def _record(self) -> dict | None:
        try:
            rec = json.loads(self.pid_file.read_text())
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError) as e:
            raise LaunchError(f"group {self.g.name}: pid file {self.pid_file} is unreadable ({e}); check whether "
                              f"its server runs and remove the file by hand") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("pid"), int) or rec.get("arm") not in ARMS:
            raise LaunchError(f"group {self.g.name}: pid file {self.pid_file} lacks pid or arm; check whether its "
                              f"server runs and remove the file by hand")
        return rec

    def _alive(self, rec: dict) -> bool:
        pid = rec["pid"]
        if self.proc is not None and self.proc.pid == pid:
            return self.proc.poll() is None
        if not pid_alive(pid):
            return False
        return rec.get("start") is None or process_start(pid) == rec["start"]  # not a recycled pid

    def _group_alive(self, pgid: int) -> bool:
        if self.proc is not None:
            self.proc.poll()
        try:  # a child of this process started by another launcher object (`up`, then `canary`)
            os.waitpid(pgid, os.WNOHANG)
        except ChildProcessError:
            pass
        return group_alive(pgid)

    def start(self, arm: str) -> None:
        rec = self._record()
        if rec and self._alive(rec):
            raise LaunchError(f"group {self.g.name}: already running as pid {rec['pid']} ({rec['arm']}); stop it first")
        if port_answers(self.g.host, self.g.port):
            raise LaunchError(f"group {self.g.name}: {self.g.host}:{self.g.port} already accepts connections, but "
                              f"no process this tool recorded runs there (pid file {self.pid_file} lost?); stop "
                              f"that server by hand, or restore its pid file")
        argv = self._spawn_argv(arm)
        log = self.inv.state_dir / "logs" / f"{self.g.name}-{arm}-{time.strftime('%Y%m%dT%H%M%S')}.log"
        log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        env = {**os.environ, **group_env(self.g.gpus, arm)}
        with open(log, "ab") as out:
            os.chmod(log, 0o600)
            try:
                self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=env, start_new_session=True)
            except OSError as e:
                raise LaunchError(f"group {self.g.name}: cannot start {argv[0]!r}: {e}") from None
        write_file(self.pid_file, json.dumps({"pid": self.proc.pid, "pgid": self.proc.pid, "arm": arm,
                                              "start": process_start(self.proc.pid), "argv": redact_argv(argv),
                                              "log": str(log), "started": time.time()}))

    def stop(self, arm: str, progress=None) -> str:
        rec = self._record()
        pgid = rec.get("pgid", rec["pid"]) if rec else None
        if rec is None or not (self._alive(rec) or self._group_alive(pgid)):
            self.pid_file.unlink(missing_ok=True)
            return "not running"
        pid, deadline = rec["pid"], self.inv.settings["drain_deadline_s"]
        try:
            os.kill(pid, signal.SIGTERM)  # the main process only: it drains, then ends its children
        except ProcessLookupError:
            pass
        t0, how = time.monotonic(), "drained"
        while self._alive(rec) or self._group_alive(pgid):
            if time.monotonic() - t0 > deadline:
                # The drain deadline is the promise to the service: past it, in-flight
                # requests are abandoned so the rollout does not hold the group out forever.
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                how = "killed after drain deadline"
                while self._group_alive(pgid):
                    time.sleep(0.05)
                break
            if progress:
                progress(time.monotonic() - t0, deadline)
            time.sleep(0.05)
        if self.proc is not None and self.proc.pid == pid:
            self.proc.wait()
        self.pid_file.unlink(missing_ok=True)
        return how

    def running(self, arm: str) -> bool:
        rec = self._record()
        return bool(rec and rec["arm"] == arm and self._alive(rec))

    def recorded_arm(self) -> tuple[str | None, str]:
        rec = self._record()
        if rec is None:
            return None, f"no pid file {self.pid_file}"
        if not self._alive(rec):
            return None, f"pid {rec['pid']} from {self.pid_file} is not running"
        return rec["arm"], f"pid {rec['pid']} started on {rec['arm']} ({self.pid_file})"

    def died(self) -> str | None:
        rec = self._record()
        if rec is None:
            return "no pid file"
        if self._alive(rec):
            return None
        code = self.proc.returncode if self.proc is not None and self.proc.pid == rec["pid"] else "?"
        return f"process {rec['pid']} exited (code {code}); log: {rec['log']}"


class SystemdLauncher:
    """`systemctl` on one unit instance per arm, optionally through ssh: the unit file sets
    Environment=MLA_VERIFY_BACKEND=%i, so the arm is in the unit name. Stop = SIGTERM to the
    unit's main process only (`systemctl kill --kill-who=main`), wait until it is inactive,
    then `systemctl stop` for anything left (SIGKILL after the unit's TimeoutStopSec). That
    drains whatever KillMode the unit has; describe_unit recommends KillMode=mixed as well."""

    def __init__(self, group: Group, inv: Inventory):
        self.g, self.inv = group, inv

    def unit(self, arm: str) -> str:
        return self.g.unit.format(backend=arm, name=self.g.name)

    def argv(self, *args: str) -> list[str]:
        cmd = ["systemctl"] + (["--user"] if self.g.user else []) + list(args)
        return ssh_argv(self.g.ssh, cmd) if self.g.ssh else cmd

    def describe_start(self, arm: str) -> str:
        return shlex.join(self.argv("start", "--no-block", self.unit(arm)))

    def describe_unit(self) -> str:
        """What the templated unit (instance = arm) should hold, from the launch template."""
        argv = redact_argv(launch_argv(self.inv.launch, host=self.g.host, port=self.g.port, gpus=self.g.gpus,
                                       arm="%i"))
        key = ""
        if self.inv.auth["api_key_env"] or self.inv.auth["api_key_file"]:
            env = self.inv.auth["api_key_env"] or "SGLANG_API_KEY"
            key = f" --api-key ${{{env}}} (EnvironmentFile=<a 0600 file with {env}=...>)"
        return (f"{self.unit('')} should set Environment=CUDA_VISIBLE_DEVICES={','.join(map(str, self.g.gpus))} "
                f"Environment={BACKEND_ENV}=%i KillMode=mixed KillSignal=SIGTERM Restart=on-failure "
                f"TimeoutStopSec={self.inv.settings['drain_deadline_s']:.0f} ExecStart={shlex.join(argv)}{key}")

    def describe_stop(self, arm: str) -> str:
        return (f"{shlex.join(self.argv('kill', '--kill-who=main', '--signal=SIGTERM', self.unit(arm)))}; wait "
                f"until inactive; {shlex.join(self.argv('stop', self.unit(arm)))}")

    def start(self, arm: str) -> None:
        # --no-block: the startup gate does the waiting, with progress and its own deadline.
        _checked(self.argv("start", "--no-block", self.unit(arm)), timeout=120, what=f"group {self.g.name}: start")

    def stop(self, arm: str, progress=None) -> str:
        what, unit = f"group {self.g.name}: stop", self.unit(arm)
        if self.running(arm) is False:
            _checked(self.argv("stop", unit), timeout=120, what=what)  # clears a failed or activating unit
            return "not running"
        _checked(self.argv("kill", "--kill-who=main", "--signal=SIGTERM", unit), timeout=120, what=what)
        deadline, t0, how = self.inv.settings["drain_deadline_s"], time.monotonic(), "drained"
        while self.running(arm) is not False:
            if time.monotonic() - t0 > deadline:
                how = "stopped by systemd after the drain deadline"
                break
            if progress:
                progress(time.monotonic() - t0, deadline)
            time.sleep(1.0)
        _checked(self.argv("stop", unit), timeout=self.inv.settings["drain_deadline_s"] + 120, what=what)
        return how

    def running(self, arm: str) -> bool | None:
        rc = _run(self.argv("is-active", "--quiet", self.unit(arm)), timeout=60, what="is-active").returncode
        if rc == 0:
            return True
        return None if rc == 255 else False  # 255: ssh itself failed, the unit's state is unknown

    def recorded_arm(self) -> tuple[str | None, str]:
        active = {arm: self.running(arm) for arm in ARMS}
        on = [a for a, v in active.items() if v]
        if len(on) == 1 and None not in active.values():
            return on[0], f"unit {self.unit(on[0])} is active"
        return None, "active units: " + ", ".join(f"{self.unit(a)}={v}" for a, v in active.items())

    def died(self) -> str | None:
        return None  # systemd may restart a unit on its own; the startup deadline decides


class CommandLauncher:
    """argv templates for other orchestrators (Kubernetes, Slurm, a vendor CLI), run without a
    local shell; with `ssh`, on that host through one quoted remote command."""

    def __init__(self, group: Group, inv: Inventory):
        self.g, self.inv = group, inv

    def expand(self, template: list[str], arm: str, *, shown: bool = False) -> list[str]:
        values = {"name": self.g.name, "host": self.g.host, "port": str(self.g.port),
                  "gpus": ",".join(map(str, self.g.gpus)), "backend": arm,
                  "drain_s": f"{self.inv.settings['drain_deadline_s']:.0f}"}
        out = []
        for item in template:
            if item == "{env}":
                out += [f"{k}={v}" for k, v in group_env(self.g.gpus, arm).items()]
            elif item == "{launch}":
                argv = launch_argv(self.inv.launch, host=self.g.host, port=self.g.port, gpus=self.g.gpus, arm=arm)
                out += redact_argv(argv) if shown else argv
            else:
                out.append(item.format(**values))
        return out

    def full_argv(self, template: list[str], arm: str, *, shown: bool = False) -> list[str]:
        argv = self.expand(template, arm, shown=shown)
        return ssh_argv(self.g.ssh, argv) if self.g.ssh else argv

    def _exec(self, template: list[str], arm: str, what: str, timeout: float):
        env = {**os.environ, **group_env(self.g.gpus, arm)}
        return _run(self.full_argv(template, arm), timeout=timeout, what=what, env=env)

    def describe_start(self, arm: str) -> str:
        return shlex.join(self.full_argv(self.g.start, arm, shown=True))

    def describe_stop(self, arm: str) -> str:
        return shlex.join(self.full_argv(self.g.stop, arm, shown=True))

    def _must(self, p, what: str):
        if p.returncode != 0:
            raise LaunchError(scrub(f"group {self.g.name}: {what} command exit {p.returncode}: "
                                    f"{(p.stderr or p.stdout).strip()[-500:]}"))

    def start(self, arm: str) -> None:
        self._must(self._exec(self.g.start, arm, f"group {self.g.name}: start", 300), "start")

    def stop(self, arm: str, progress=None) -> str:
        p = self._exec(self.g.stop, arm, f"group {self.g.name}: stop", self.inv.settings["drain_deadline_s"] + 120)
        self._must(p, "stop")
        return "stopped by command"

    def running(self, arm: str) -> bool | None:
        if self.g.status is None:
            return None
        rc = self._exec(self.g.status, arm, f"group {self.g.name}: status", 60).returncode
        return {0: True, 1: False}.get(rc)  # anything else (ssh's 255, a typo's 127): cannot tell

    def recorded_arm(self) -> tuple[str | None, str]:
        if self.g.status is None:
            return None, "no status template"
        active = {arm: self.running(arm) for arm in ARMS}
        on = [a for a, v in active.items() if v]
        if len(on) == 1 and None not in active.values():
            return on[0], f"status template says {on[0]}"
        return None, "status template per arm: " + ", ".join(f"{a}={v}" for a, v in active.items())

    def died(self) -> str | None:
        return None


def make_launcher(group: Group, inv: Inventory):
    return {"local": LocalLauncher, "systemd": SystemdLauncher, "command": CommandLauncher}[group.launcher](group, inv)
