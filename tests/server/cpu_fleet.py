"""A rollout fleet whose group g1 is SGLang 0.5.23's real server on the CPU and g0 rollout's
emulator (the tool keeps one group serving): the tiny model's inventory, the server's environment
(this checkout's plugin entry point, the test plugin and cpu_site/'s stand-ins on its PYTHONPATH,
each stand-in recorded when it runs) and the rollout CLI as a subprocess. Used by
test_real_sglang_server.py (EAGLE) and test_real_sglang_dflash_server.py (DFLASH)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dist_info import ROOT, write_dist_info, write_this_checkout
from ports import free_ports

CPU_SITE = Path(__file__).resolve().parent / "cpu_site"
CPU_FLAGS = ["--device", "cpu", "--dtype", "float32", "--max-total-tokens", "1024",
             "--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled",
             "--load-format", "dummy", "--skip-tokenizer-init", "--triton-attention-num-kv-splits", "1"]


class CpuFleet:
    """Files in tmp. launch: the algorithm's `[launch]` lines (the model's and the CPU flags are
    added here); rollout: extra `[rollout]` lines; gates: the `[gates]` lines, if any;
    emulator_args: extra flags of g0's emulator."""

    def __init__(self, tmp: Path, model: Path, launch: list[str], *, rollout: list[str] = (),
                 gates: list[str] = (), emulator_args: list[str] = ()):
        self.tmp = tmp
        self.timings: dict[str, float] = {}
        site = tmp / "site"
        write_this_checkout(site)     # this checkout's entry point, whatever `pip install -e .` recorded
        write_dist_info(site, "mla-verify-cpu-test-plugin",
                        {"sglang.srt.plugins": {"mla_verify_cpu_test": "mla_verify_cpu_test_plugin:register"}})
        self.standin_log = tmp / "standins.log"
        self.env = {k: v for k, v in os.environ.items() if k not in ("MLA_VERIFY_BACKEND", "SGLANG_PLUGINS")}
        self.env.update(
            PYTHONPATH=os.pathsep.join([str(site), str(CPU_SITE), str(ROOT)] + ([os.environ["PYTHONPATH"]]
                                                                                 if os.environ.get("PYTHONPATH") else [])),
            SGLANG_USE_CPU_ENGINE="1", TRITON_INTERPRET="1", HF_HUB_OFFLINE="1",
            MLA_VERIFY_STANDIN_LOG=str(self.standin_log))
        self.ports = free_ports(2)
        self.port = self.ports[1]
        self.results = tmp / "results"
        self.state_dir = tmp / ".rollout"
        emulator = ["{python}", "-m", "rollout.emulator", "--port", "{port}", "--data-dir", str(ROOT / "reports" / "data"),
                    "--time-scale", "0.01", "--enable-metrics", *emulator_args]
        # drain_deadline_s: a 40-token request drains in ~16 s at ~0.4 s a step, but past 120 s (killed, not
        # drained) while compiles shared the machine's two cores (2026-12-07); the tests assert how it stopped
        lines = [
            "[rollout]", "startup_deadline_s = 900", "drain_deadline_s = 300", "health_timeout_s = 30", *rollout,
            f"results_dir = {json.dumps(str(self.results))}",
            "[launch]", f"python = {json.dumps(sys.executable)}", f"model_path = {json.dumps(str(model))}", *launch,
            "context_length = 256", f"extra_args = {json.dumps(CPU_FLAGS)}",
            *(["[gates]", *gates] if gates else []),
            "[[group]]", 'name = "g0"', 'host = "127.0.0.1"', f"port = {self.ports[0]}", "gpus = [1]",
            'launcher = "local"', f"command = {json.dumps(emulator)}",
            "[[group]]", 'name = "g1"', 'host = "127.0.0.1"', f"port = {self.ports[1]}", "gpus = [0]",
            'launcher = "local"',
        ]
        self.inv = tmp / "inventory.toml"
        self.inv.write_text("\n".join(lines) + "\n")
        self.url = f"http://127.0.0.1:{self.port}"

    def cli(self, *args, timeout: float = 1200) -> subprocess.CompletedProcess:
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "rollout", *args, "--inventory", str(self.inv)], cwd=ROOT,
                           env=self.env, capture_output=True, text=True, timeout=timeout)
        self.timings[" ".join(args)] = round(time.monotonic() - t0, 1)
        return r

    def record(self, name: str = "g1") -> dict | None:
        p = self.state_dir / "pids" / f"{name}.json"
        return json.loads(p.read_text()) if p.exists() else None

    def state(self) -> dict:
        return json.loads((self.state_dir / "state.json").read_text())

    def gate(self, group: str, gate: str) -> dict:
        return [g for g in self.state()["gates"] if g["group"] == group and g["gate"] == gate][-1]

    def log_tail(self, arm: str = "triton", n: int = 3000) -> str:
        logs = sorted((self.state_dir / "logs").glob(f"g1-{arm}-*.log"))
        return logs[-1].read_text()[-n:] if logs else "(no log)"

    def standins(self) -> set[str]:
        return {line.split(" ", 1)[1] for line in self.standin_log.read_text().splitlines()} \
            if self.standin_log.exists() else set()

    def launcher(self, name: str = "g1"):
        from rollout.inventory import load
        from rollout.launchers import make_launcher

        inv = load(self.inv)
        return make_launcher(inv.group(name), inv)

    def stop_all(self):
        """Whatever is still running, by its launcher, else its process group killed."""
        for name in ("g0", "g1"):
            rec = self.record(name)
            if rec is None:
                continue
            try:
                self.launcher(name).stop(rec["arm"])
            except Exception:
                try:
                    os.killpg(rec.get("pgid", rec["pid"]), signal.SIGKILL)
                except ProcessLookupError:
                    pass
