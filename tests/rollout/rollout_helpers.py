"""Helpers for the rollout tests: free ports, an emulator fleet under a tmp inventory, and a
runner for `python -m rollout` as a real subprocess. (Unique module name: pytest puts every
test folder on sys.path.)"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ports import free_ports   # re-exported: the rollout tests import it from here

REPO = Path(__file__).resolve().parents[2]
TIME_SCALE = "0.1"


def run_tool(inv: Path, *args, timeout: float = 90, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rollout", *args, "--inventory", str(inv)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, **kw)


def tool_with_fault(inv: Path, args: tuple, when, fault, timeout: float = 120, every: float = 0.01):
    """Run `python -m rollout *args`; once when() holds, call fault(tool) (kill a group, signal
    the tool); wait for the tool to end. Returns (exit code, stderr, what fault returned). The
    tool is killed if anything goes wrong first, so no test leaves one running."""
    tool = start_tool(inv, *args)
    try:
        wait_for(when, timeout=60, every=every)
        got = fault(tool)
        _, err = tool.communicate(timeout=timeout)
        return tool.returncode, err, got
    finally:
        if tool.poll() is None:
            tool.kill()
            tool.communicate()


def start_tool(inv: Path, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rollout", *args, "--inventory", str(inv)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class Fleet:
    """N emulator groups (local launcher) described by an inventory in tmp_path."""

    def __init__(self, tmp_path: Path, data_dir: Path, n: int = 3, extra: dict | None = None,
                 gates: dict | None = None, settings: dict | None = None, auth: dict | None = None,
                 api_key: str | None = None, launch: dict | None = None):
        """auth: the inventory's [auth] table; api_key: what the test itself sends; launch: its
        [launch] table (the groups' emulator command may name its keys as placeholders)."""
        self.tmp, self.names = tmp_path, [f"g{i}" for i in range(n)]
        self.api_key = api_key
        self.ports = free_ports(n)
        self.results = tmp_path / "results"
        self.inv = tmp_path / "inventory.toml"
        self.state_dir = tmp_path / ".rollout"
        rollout = {"startup_deadline_s": 20, "drain_deadline_s": 5, "health_timeout_s": 5,
                   "results_dir": str(self.results), **(settings or {})}
        gates = {"context_tokens": 2048, "max_new_tokens": 24, "numerics_prompts": 2, **(gates or {})}
        lines = ["[rollout]"] + [f"{k} = {json.dumps(v)}" for k, v in rollout.items()]
        lines += ["[gates]"] + [f"{k} = {json.dumps(v)}" for k, v in gates.items()]
        if auth:
            lines += ["[auth]"] + [f"{k} = {json.dumps(v)}" for k, v in auth.items()]
        if launch:
            lines += ["[launch]"] + [f"{k} = {json.dumps(v)}" for k, v in launch.items()]
        for i, (name, port) in enumerate(zip(self.names, self.ports)):
            cmd = ["{python}", "-m", "rollout.emulator", "--port", "{port}", "--data-dir", str(data_dir),
                   "--time-scale", TIME_SCALE, "--enable-metrics"] + list((extra or {}).get(name, []))
            lines += ["[[group]]", f'name = "{name}"', 'host = "127.0.0.1"', f"port = {port}",
                      f"gpus = [{2 * i}, {2 * i + 1}]", 'launcher = "local"', f"command = {json.dumps(cmd)}"]
        self.inv.write_text("\n".join(lines) + "\n")

    def up(self):
        r = run_tool(self.inv, "up")
        assert r.returncode == 0, r.stderr
        return r

    def state(self) -> dict:
        return json.loads((self.state_dir / "state.json").read_text())

    def audit(self) -> list[dict]:
        p = self.state_dir / "audit.jsonl"
        return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []

    def events(self, event: str, **match) -> list[dict]:
        return [a for a in self.audit() if a["event"] == event and all(a.get(k) == v for k, v in match.items())]

    def server_info(self, name: str) -> dict:
        from rollout.client import get_json
        return get_json(self.url(name), "/server_info", timeout=5, api_key=self.api_key)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[self.names.index(name)]}"

    def pid(self, name: str) -> int:
        return json.loads((self.state_dir / "pids" / f"{name}.json").read_text())["pid"]

    def arm(self, name: str) -> str:
        return self.server_info(name)["emulated_arm"]

    def result(self) -> dict:
        files = sorted(self.results.glob("rollout-*.json"))
        assert len(files) == 1, files
        return json.loads(files[0].read_text())

    def kill_all(self):
        """Every emulator serving one of this fleet's ports, found by its argv (a test may have
        deleted the pid file that names it)."""
        ports = {str(p) for p in self.ports}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if "rollout.emulator" in argv and "--port" in argv and argv[argv.index("--port") + 1] in ports:
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass


def wait_for(pred, timeout: float = 30, every: float = 0.02):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise AssertionError(f"condition not met within {timeout} s")
