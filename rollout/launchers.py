"""Start and stop one GPU group on an arm: a local process, a systemd unit, or a command.

All three share one shape: start(arm), stop(arm) -> how it stopped, running(arm) -> bool or
None (unknown), died() -> reason or None (lets the startup gate fail fast instead of
waiting out a 20-minute deadline on a process that is already gone).
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time

from rollout.inventory import Group, Inventory
from rollout.launch import BACKEND_ENV, group_env, launch_argv, render, shell_line
from rollout.lock import pid_alive


class LaunchError(RuntimeError):
    pass


def _run(argv: list[str], *, timeout: float, what: str, env=None) -> subprocess.CompletedProcess:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except FileNotFoundError:
        raise LaunchError(f"{what}: command not found: {argv[0]!r}") from None
    except subprocess.TimeoutExpired:
        raise LaunchError(f"{what}: no answer after {timeout:.0f} s: {shlex.join(argv)}") from None
    return p


def _checked(argv, *, timeout, what, env=None):
    p = _run(argv, timeout=timeout, what=what, env=env)
    if p.returncode != 0:
        raise LaunchError(f"{what}: exit {p.returncode}: {shlex.join(argv)}: {(p.stderr or p.stdout).strip()[-500:]}")
    return p


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

    def describe_start(self, arm: str) -> str:
        return shell_line(self.argv(arm), group_env(self.g.gpus, arm))

    def describe_stop(self, arm: str) -> str:
        return f"SIGTERM the process group in {self.pid_file} (drain), SIGKILL after {self.inv.settings['drain_deadline_s']:.0f} s"

    def _record(self) -> dict | None:
        try:
            return json.loads(self.pid_file.read_text())
        except FileNotFoundError:
            return None

    def _alive(self, pid: int) -> bool:
        if self.proc is not None and self.proc.pid == pid:
            return self.proc.poll() is None
        return pid_alive(pid)

    def start(self, arm: str) -> None:
        rec = self._record()
        if rec and self._alive(rec["pid"]):
            raise LaunchError(f"group {self.g.name}: already running as pid {rec['pid']} ({rec['arm']}); stop it first")
        argv = self.argv(arm)
        log = self.inv.state_dir / "logs" / f"{self.g.name}-{arm}-{time.strftime('%Y%m%dT%H%M%S')}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **group_env(self.g.gpus, arm)}
        with open(log, "ab") as out:
            try:
                self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=env, start_new_session=True)
            except OSError as e:
                raise LaunchError(f"group {self.g.name}: cannot start {argv[0]!r}: {e}") from None
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.pid_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": self.proc.pid, "arm": arm, "argv": argv, "log": str(log),
                                   "started": time.time()}))
        os.replace(tmp, self.pid_file)

    def stop(self, arm: str, progress=None) -> str:
        rec = self._record()
        if rec is None or not self._alive(rec["pid"]):
            self.pid_file.unlink(missing_ok=True)
            return "not running"
        pid, deadline = rec["pid"], self.inv.settings["drain_deadline_s"]
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        t0, how = time.monotonic(), "drained"
        while self._alive(pid):
            if time.monotonic() - t0 > deadline:
                # The drain deadline is the promise to the service: past it, in-flight
                # requests are abandoned so the rollout does not hold the group out forever.
                os.killpg(pid, signal.SIGKILL)
                how = "killed after drain deadline"
                while self._alive(pid):
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
        return bool(rec and rec["arm"] == arm and self._alive(rec["pid"]))

    def died(self) -> str | None:
        rec = self._record()
        if rec is None:
            return "no pid file"
        if self._alive(rec["pid"]):
            return None
        code = self.proc.returncode if self.proc is not None and self.proc.pid == rec["pid"] else "?"
        return f"process {rec['pid']} exited (code {code}); log: {rec['log']}"


class SystemdLauncher:
    """`systemctl start|stop <unit>`, optionally through ssh. One unit instance per arm:
    the unit file sets Environment=MLA_VERIFY_BACKEND=%i, so the arm is in the unit name.
    The drain is systemd's: SIGTERM, then SIGKILL after the unit's TimeoutStopSec."""

    def __init__(self, group: Group, inv: Inventory):
        self.g, self.inv = group, inv

    def unit(self, arm: str) -> str:
        return self.g.unit.format(backend=arm, name=self.g.name)

    def argv(self, *args: str) -> list[str]:
        cmd = ["systemctl"] + (["--user"] if self.g.user else []) + list(args)
        if self.g.ssh:
            # BatchMode: a password prompt in the middle of a rollout would hang it unseen.
            return ["ssh", "-o", "BatchMode=yes", self.g.ssh, shlex.join(cmd)]
        return cmd

    def describe_start(self, arm: str) -> str:
        return shlex.join(self.argv("start", self.unit(arm)))

    def describe_unit(self) -> str:
        """What the templated unit (instance = arm) should hold, from the launch template."""
        argv = launch_argv(self.inv.launch, host=self.g.host, port=self.g.port, gpus=self.g.gpus, arm="%i")
        return (f"{self.unit('')} should set Environment=CUDA_VISIBLE_DEVICES={','.join(map(str, self.g.gpus))} "
                f"Environment={BACKEND_ENV}=%i KillSignal=SIGTERM "
                f"TimeoutStopSec={self.inv.settings['drain_deadline_s']:.0f} ExecStart={shlex.join(argv)}")

    def describe_stop(self, arm: str) -> str:
        return shlex.join(self.argv("stop", self.unit(arm)))

    def start(self, arm: str) -> None:
        # --no-block: the startup gate does the waiting, with progress and its own deadline.
        _checked(self.argv("start", "--no-block", self.unit(arm)), timeout=120, what=f"group {self.g.name}: start")

    def stop(self, arm: str, progress=None) -> str:
        _checked(self.argv("stop", self.unit(arm)), timeout=self.inv.settings["drain_deadline_s"] + 120,
                 what=f"group {self.g.name}: stop")
        return "stopped by systemd"

    def running(self, arm: str) -> bool:
        return _run(self.argv("is-active", "--quiet", self.unit(arm)), timeout=60, what="is-active").returncode == 0

    def died(self) -> str | None:
        return None  # systemd may restart a unit on its own; the startup deadline decides


class CommandLauncher:
    """Shell templates for other orchestrators (Kubernetes, Slurm, a vendor CLI)."""

    def __init__(self, group: Group, inv: Inventory):
        self.g, self.inv = group, inv

    def line(self, template: str, arm: str) -> str:
        values = {"name": self.g.name, "host": self.g.host, "port": str(self.g.port),
                  "gpus": ",".join(map(str, self.g.gpus)), "backend": arm}
        values = {k: shlex.quote(v) for k, v in values.items()}
        env = group_env(self.g.gpus, arm)
        values["env"] = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        if "{launch}" in template:
            values["launch"] = shlex.join(launch_argv(self.inv.launch, host=self.g.host, port=self.g.port,
                                                      gpus=self.g.gpus, arm=arm))
        return template.format(**values)

    def _sh(self, template: str, arm: str, what: str, timeout: float):
        env = {**os.environ, **group_env(self.g.gpus, arm)}
        return _run(["/bin/sh", "-c", self.line(template, arm)], timeout=timeout, what=what, env=env)

    def describe_start(self, arm: str) -> str:
        return self.line(self.g.start, arm)

    def describe_stop(self, arm: str) -> str:
        return self.line(self.g.stop, arm)

    def start(self, arm: str) -> None:
        p = self._sh(self.g.start, arm, f"group {self.g.name}: start", 300)
        if p.returncode != 0:
            raise LaunchError(f"group {self.g.name}: start command exit {p.returncode}: {(p.stderr or p.stdout).strip()[-500:]}")

    def stop(self, arm: str, progress=None) -> str:
        p = self._sh(self.g.stop, arm, f"group {self.g.name}: stop", self.inv.settings["drain_deadline_s"] + 120)
        if p.returncode != 0:
            raise LaunchError(f"group {self.g.name}: stop command exit {p.returncode}: {(p.stderr or p.stdout).strip()[-500:]}")
        return "stopped by command"

    def running(self, arm: str) -> bool | None:
        if self.g.status is None:
            return None
        return self._sh(self.g.status, arm, f"group {self.g.name}: status", 60).returncode == 0

    def died(self) -> str | None:
        return None


def make_launcher(group: Group, inv: Inventory):
    return {"local": LocalLauncher, "systemd": SystemdLauncher, "command": CommandLauncher}[group.launcher](group, inv)
