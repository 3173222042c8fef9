"""A whole rollout against local emulator groups: up, canary + promote, tear down.

    python -m rollout.demo [--data-dir reports/data] [--results-dir .rollout/demo] [--groups 3]
                           [--time-scale 0.05] [--fault slower]

Each group is `python -m rollout.emulator` on 127.0.0.1 under the local launcher, its speed
modelled on the measurements in --data-dir; the result goes to --results-dir as
rollout-<id>.json with "emulated": true on every endpoint. The default keeps emulated results
out of reports/data (where the reports read measurements); pass --results-dir reports/data to
put one there on purpose. Delays are multiplied by --time-scale, so measured tokens/s are
1/time_scale times the modelled ones (the ratio is not).
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
from pathlib import Path

from rollout.__main__ import main as rollout_main
from rollout.emulator import FAULTS
from rollout.inventory import load
from rollout.launchers import make_launcher
from rollout.speed_model import MissingMeasurements, SpeedModel


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_inventory(path: Path, *, groups: int, data_dir: Path, results_dir: Path, time_scale: float,
                    context_tokens: int, fault: str | None) -> Path:
    lines = ["[rollout]", 'startup_deadline_s = 60', 'drain_deadline_s = 30', f"results_dir = {json.dumps(str(results_dir))}",
             "[gates]", f"context_tokens = {context_tokens}", "request_timeout_s = 600"]
    for i in range(groups):
        cmd = ["{python}", "-m", "rollout.emulator", "--port", "{port}", "--data-dir", str(data_dir),
               "--time-scale", str(time_scale), "--enable-metrics"]
        if fault and i == 0:
            cmd += ["--fault", fault, "--fault-arm", "flash"]
        lines += ["[[group]]", f'name = "demo{i}"', 'host = "127.0.0.1"', f"port = {free_port()}",
                  f"gpus = {list(range(8 * i, 8 * i + 8))}", 'launcher = "local"', f"command = {json.dumps(cmd)}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m rollout.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default="reports/data", help="measurements the emulators model (default reports/data)")
    p.add_argument("--results-dir", default=".rollout/demo",
                   help="where rollout-<id>.json goes (default .rollout/demo; reports/data only when asked)")
    p.add_argument("--groups", type=int, default=3)
    p.add_argument("--time-scale", type=float, default=0.05)
    p.add_argument("--context-tokens", type=int, default=185000)
    p.add_argument("--fault", choices=FAULTS, help="give the canary's flash arm this fault (shows a rollback)")
    a = p.parse_args(argv)
    if a.groups < 2:
        p.error(f"--groups must be >= 2 (a canary and a control), got {a.groups}")
    data_dir = Path(a.data_dir).resolve()
    try:
        SpeedModel(data_dir)  # fail here, with the missing file named, not inside three servers
    except MissingMeasurements as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rollout-demo-") as tmp:
        inv_path = write_inventory(Path(tmp) / "inventory.toml", groups=a.groups, data_dir=data_dir,
                                   results_dir=Path(a.results_dir).resolve(), time_scale=a.time_scale,
                                   context_tokens=a.context_tokens, fault=a.fault)
        inv = load(inv_path)
        try:
            rc = rollout_main(["up", "--inventory", str(inv_path)])
            if rc == 0:
                rc = rollout_main(["canary", "--promote", "--inventory", str(inv_path)])
                rollout_main(["status", "--inventory", str(inv_path)])
        finally:
            for g in inv.groups:
                launcher = make_launcher(g, inv)
                for arm in ("flash", "triton"):
                    launcher.stop(arm)
    return rc


if __name__ == "__main__":
    sys.exit(main())
