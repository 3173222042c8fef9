"""The canary between two real SGLang 0.5.23 servers on one GPU, driven by the rollout CLI.

    python3 -m kernel.sglang.real_server --steps setup,up,planted,canary,promote,breakdown \\
        --layers 4 --out $OUT [--algorithm EAGLE|DFLASH [--block-size 16]] [--kv-cache-dtype auto|fp8_e4m3] \\
        [--bundle .server-bundle] [--root /tmp/mla-real-server]

--algorithm picks what the servers speculate with: EAGLE (the default; the target's NextN layer
is the draft) or DFLASH (SGLang's block-diffusion worker with a tiny DFlash draft beside the
target, verifying --block-size tokens per request; its example inventory is
rollout/inventory.h200-local-dflash.toml, its default root /tmp/mla-real-server-dflash, its
ports 30002-30003). --kv-cache-dtype picks SGLang's KV pool on both arms: auto (the default, the
model's bf16, no flag) or fp8_e4m3 (`--kv-cache-dtype fp8_e4m3` on every server's command line,
the pool a Kimi-K2.6 deployment may run; its own default root, the algorithm's with -fp8, and the
example's ports + 4: 30004-30005, DFLASH 30006-30007). A root serves one configuration, the
algorithm and the KV dtype (setup records them): another's state, results and servers are never
read or overwritten, and its files are named real-server-<kind>[-dflash][-fp8]-*.

Steps, run in the order given (setup,up,planted,canary,promote,breakdown is the order with the
fewest server restarts: the planted canary's rollback leaves both groups on triton for the real
one); the predicted wall time of each is printed before it starts (estimates.py):
  setup      unpack the server bundle (make sglang-server-bundle), write the launch wrapper,
             the tiny MLA model (--layers), for DFLASH its tiny DFlash draft, and the runtime
             inventory (the algorithm's example inventory with this root), load/prebuild the
             kernel library
  up         `python -m rollout up`: both groups on triton; each group's prefix cache warmed
             with the speed gate's exact 185,000-token prompt as soon as it answers /health
  planted    `python -m rollout canary` with a test-only plugin that perturbs the flash
             kernel's output on the canary's server only: the gates must fail it (numerics)
             and roll it back to triton
  canary     `python -m rollout plan`, then `canary` with the real plugin: must pass; then, both
             arms warm, one timed decode per arm and issue 26's measurements (extend_over_prefix.py:
             each arm's prefill of the prompt, TTFT of 1-, 16- and 256-token follow-ups over it,
             greedy tokens of one follow-up on both arms), recorded even when they fail
  promote    `python -m rollout promote`: the other group to flash
  breakdown  where the flash arm's decode step goes at 185k (SGLang's profiler; breakdown.py),
             on a flash group of this layer count or a flash server of its own; the per-layer
             slope once breakdowns exist at two layer counts
  down       drain and stop every server this root started (first, to free the GPU for a
             breakdown at another layer count; last, to end)
State lives under --root and survives between device calls while the machine stays warm
(the servers run in their own sessions); a step whose prerequisites are gone (a fresh
machine) runs them first. After every step --out gets real-server-<gpu|emulated>-<stamp>.json
(every step's result for this layer count, breakdowns at every layer count, stand-ins that
ran, "extend_over_prefix", the provenance keys gpu/sms/driver/cuda/torch/commit/date) and
real-server-logs-<stamp>.tar.xz (server logs, rollout CLI output, state, audit log),
and --out/rollout/ the rollout tool's own result files: at most 8 files. A short table is
printed last. Exit 0 when every step did what it should, 1 when one did not or was not started
for lack of --budget (later steps are skipped), 2 for bad arguments.
--emulate: rollout's emulator stands in for SGLang (no GPU, no bundle): the orchestration only.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
import traceback
from pathlib import Path

from ..draft_switch import DRAFT_ENV, draft_extend_on
from . import environment as envmod
from . import extend_over_prefix
from .breakdown import slopes
from .estimates import step_estimate
from .steps import ORDER, STEPS, StepFailed, observe_groups, rollout_state, run_python

# the plugin's switches besides the arm (draft_switch.py, version.py): the
# servers inherit them from the job, so the JSON says what the flash arm served
PLUGIN_OPT_INS = (DRAFT_ENV, "MLA_VERIFY_ALLOW_UNTESTED_SGLANG")
LOG_FILE_LIMIT = 8 * 2 ** 20      # a file bigger than this stays out of the logs archive


def git_commit() -> str:
    """HEAD's short hash, '+dirty' with uncommitted changes to tracked files; 'unknown' without
    git or a repository (a device machine's copy of the work tree may have no .git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=envmod.ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=envmod.ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (head + ("+dirty" if dirty else "")) if head else "unknown"


def standin_record():
    """sgl_kernel's _record module, loaded alone (the package itself imports torch)."""
    import importlib.util

    path = envmod.ROOT / "kernel" / "sglang" / "standins" / "sgl_kernel" / "_record.py"
    spec = importlib.util.spec_from_file_location("mla_verify_standin_record", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Context:
    def __init__(self, a):
        self.paths = envmod.Paths(Path(a.root).resolve())
        self.layers = a.layers
        self.algorithm = a.algorithm
        self.block_size = a.block_size   # DFLASH's block (tokens verified per request); None for EAGLE
        self.kv_cache_dtype = a.kv_cache_dtype   # SGLang's --kv-cache-dtype on both arms (auto: no flag)
        self.emulate = a.emulate
        self.bundle_dir = Path(a.bundle).resolve()
        self.ports = a.ports
        self.gate_overrides = dict(envmod.parse_override(g) for g in a.gate)
        self.out = Path(a.out).resolve() if a.out else None
        self.stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self.cli_count = 0
        self.last_lines: list[tuple[float, str]] = []   # the last rollout command's output, with arrival times
        self.rows: list[dict] = []
        self.running: set[str] = set()
        self.prior_breakdowns: dict[int, dict] = {}
        self.budget = a.budget
        self.commit = a.commit
        self.paths.logs.mkdir(parents=True, exist_ok=True)
        self.log_path = self.paths.logs / f"job-{self.stamp}.log"

    # -- output -----------------------------------------------------------------------------
    def say(self, msg: str) -> None:
        line = f"[real-server {time.monotonic() - self.t0:7.1f} s] {msg}"
        print(line, flush=True)
        with open(self.log_path, "a") as f:
            f.write(line + "\n")

    def rollout(self, verb: str, *args: str, extra_env: dict | None = None, timeout: float = 3600) -> tuple[int, str]:
        """`python -m rollout VERB -i <runtime inventory>`, its output streamed here and to a log."""
        self.cli_count += 1
        log = self.paths.logs / f"{self.stamp}-{self.cli_count:02d}-rollout-{verb}.log"
        cmd = [sys.executable, "-m", "rollout", verb, "--inventory", str(self.paths.inventory), *args]
        self.say(f"$ python -m rollout {verb} --inventory {self.paths.inventory} {' '.join(args)}".rstrip()
                 + (f"   (with {', '.join(sorted(extra_env))})" if extra_env else ""))
        lines = []
        self.last_lines = []
        proc = subprocess.Popen(cmd, cwd=envmod.ROOT, env=envmod.cli_env(self.paths, extra_env), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def overdue(sig):
            if proc.poll() is None:
                self.say(f"rollout {verb}: past its {timeout:.0f} s allowance, sending {sig.name} (the tool stops at "
                         f"its next safe point; `rollout resume` or `abort` continues)")
                proc.send_signal(sig)
        timers = [threading.Timer(timeout, overdue, (signal.SIGTERM,)),
                  threading.Timer(timeout + 180, overdue, (signal.SIGKILL,))]
        for t in timers:
            t.daemon = True
            t.start()
        try:
            with open(log, "w") as f:
                for line in proc.stdout:
                    self.last_lines.append((time.monotonic(), line))
                    lines.append(line)
                    f.write(line)
                    print(f"    | {line.rstrip()}", flush=True)
            rc = proc.wait()
        finally:
            for t in timers:
                t.cancel()
        self.say(f"rollout {verb}: exit {rc}")
        return rc, "".join(lines)

    # -- environment facts ------------------------------------------------------------------
    def kernel_env(self) -> dict:
        return {**os.environ, "MLA_VERIFY_CACHE": str(self.paths.kernel_cache), "PYTHONPATH": str(envmod.ROOT)}

    def prebuild_kernel(self) -> dict:
        """The kernel library in the bundle's cache: found by source hash, else compiled now."""
        from ... import build

        want = build.lib_dir(root=self.paths.kernel_cache)
        prebuilt = (want / build.LIB).exists()
        t0 = time.monotonic()
        if not prebuilt:
            self.say(f"kernel: no prebuilt library for hash {build.source_hash()} in the bundle; compiling (nvcc)")
            p = run_python(["-m", "kernel.build"], self.kernel_env(), timeout=1800)
            if p.returncode != 0:
                raise StepFailed(f"python -m kernel.build failed (exit {p.returncode}): {p.stderr[-2000:]}")
        return {"hash": build.source_hash(), "dir": str(want), "prebuilt": prebuilt,
                "seconds": round(time.monotonic() - t0, 1)}

    def device_info(self) -> dict:
        code = ("import json, torch, triton; p = torch.cuda.get_device_properties(0); print(json.dumps({'gpu': p.name, "
                "'sms': p.multi_processor_count, 'memory_gib': round(p.total_memory / 2**30, 1), 'torch': "
                "torch.__version__, 'cuda': torch.version.cuda, 'triton': triton.__version__}))")
        p = run_python(["-c", code], self.kernel_env(), timeout=300)
        try:
            info = json.loads(p.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            info = {"error": (p.stderr or p.stdout)[-500:]}
        try:
            info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
        info["python"] = sys.version.split()[0]
        return info

    # -- prerequisites ----------------------------------------------------------------------
    def setup_done(self) -> bool:
        p = self.paths
        if not (p.wrapper.exists() and p.inventory.exists() and (p.model(self.layers) / "config.json").exists()):
            return False
        if p.served() != self.served():
            return False
        if self.algorithm == "DFLASH" and not (p.draft(self.layers, self.block_size) / "config.json").exists():
            return False
        if self.emulate is not None:
            return "emulated_server" in p.wrapper.read_text()
        if "emulated_server" in p.wrapper.read_text() or not p.site.is_dir() or not p.unpacked_stamp.exists():
            return False
        from ..server_bundle import MANIFEST
        manifest = self.bundle_dir / MANIFEST
        if manifest.exists() and json.loads(manifest.read_text())["sha256"] != \
                json.loads(p.unpacked_stamp.read_text()).get("sha256"):
            return False
        from ... import build
        return (build.lib_dir(root=p.kernel_cache) / build.LIB).exists()

    def ensure_setup(self) -> None:
        if not self.setup_done():
            self.run_step("setup", auto=True)

    def ensure_up(self) -> None:
        self.ensure_setup()
        groups = observe_groups(self)
        if not all(g["healthy"] for g in groups.values()):
            self.run_step("up", auto=True)

    def ensure_triton_groups(self) -> None:
        """Both groups serving triton (a finished rollout left on flash is rolled back first)."""
        self.ensure_up()
        groups = observe_groups(self)
        on_flash = [n for n, g in groups.items() if g["arm"] == "flash"]
        if on_flash:
            self.say(f"groups {on_flash} serve flash from an earlier rollout: `rollout rollback` first "
                     f"(about {len(on_flash) * 75} s)")
            self.rollout("rollback")
            groups = observe_groups(self)
        bad = {n: (g["arm"], g["how"]) for n, g in groups.items() if not g["healthy"] or g["arm"] != "triton"}
        if bad:
            raise StepFailed(f"the groups do not all serve triton: {bad}")

    def ensure_canary_passed(self) -> None:
        state = rollout_state(self)
        if state and state.get("status") == "canary_passed":
            return
        self.run_step("canary", auto=True)

    def breakdown_slopes(self, extra: dict | None = None) -> dict | None:
        found = dict(self.prior_breakdowns)
        for f in sorted((self.paths.root / "results").glob("L*/breakdown.json")):
            r = json.loads(f.read_text())
            if r.get("classified"):
                found[int(r["layers"])] = r["classified"]
        found.update({k: v for k, v in (extra or {}).items() if v})
        return slopes(found)

    # -- steps ------------------------------------------------------------------------------
    def estimate(self, step: str) -> tuple[float, str]:
        gates = {"context_tokens": 185000, "rounds": 5, "max_new_tokens": 32}
        if self.paths.inventory.exists():
            import tomllib
            gates.update(tomllib.loads(self.paths.inventory.read_text()).get("gates", {}))
        gates.update(self.gate_overrides)
        first = not self.paths.started_once.exists()
        to_start = 2
        flash_ready = False
        if step in ("up", "breakdown") and self.paths.inventory.exists():
            try:
                groups = observe_groups(self)
                to_start = sum(not g["healthy"] for g in groups.values())
                flash_ready = any(g["arm"] == "flash" for g in groups.values()) and \
                    json.loads(self.paths.groups_file.read_text())["layers"] == self.layers
            except Exception:  # noqa: BLE001 -- an estimate never stops the job
                pass
        prebuilt = True
        if step == "setup":
            from ..server_bundle import MANIFEST
            from ... import build
            m = self.bundle_dir / MANIFEST
            prebuilt = self.emulate is not None or (m.exists() and json.loads(m.read_text()).get("kernel_cache") ==
                                                    build.lib_dir().name)
        return step_estimate(step, layers=self.layers, context=gates["context_tokens"], rounds=gates["rounds"],
                             max_new_tokens=gates["max_new_tokens"], first_start=first, servers_to_start=to_start,
                             kernel_prebuilt=prebuilt, flash_server_ready=flash_ready)

    def run_step(self, name: str, auto: bool = False) -> dict:
        if name in self.running:
            raise StepFailed(f"step {name} needs itself (a prerequisite loop)")
        self.running.add(name)
        predicted, how = self.estimate(name)
        left = self.budget - (time.monotonic() - self.t0) if self.budget else None
        if left is not None and predicted > left:
            self.running.discard(name)
            msg = (f"not started: predicted {predicted:.0f} s ({how}), {max(left, 0):.0f} s left of --budget "
                   f"{self.budget:.0f} s; run it in the next call")
            self.say(f"=== step {name}: {msg}")
            if auto:
                raise StepFailed(f"prerequisite step {name} {msg}")
            row = {"step": name, "ok": False, "status": "skipped", "summary": msg, "wall_s": 0.0,
                   "predicted_s": round(predicted, 1), "auto": False}
            self.rows.append(row)
            return row
        self.say(f"=== step {name}{' (a prerequisite)' if auto else ''}: predicted {predicted:.0f} s ({how})")
        results = self.paths.step_results(self.layers)
        results.mkdir(parents=True, exist_ok=True)
        (results / f"{name}.json").write_text(json.dumps({"step": name, "ok": None, "status": "running",
                                                          "started": time.time(), "predicted_s": predicted}))
        t0 = time.monotonic()
        try:
            result = STEPS[name](self)
        except StepFailed as e:
            result = {"ok": False, "summary": str(e), **e.result}
        except Exception as e:  # noqa: BLE001 -- recorded, then the job stops
            result = {"ok": False, "summary": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}
        finally:
            self.running.discard(name)
        wall = time.monotonic() - t0
        result.update(step=name, layers=self.layers, wall_s=round(wall, 1), predicted_s=round(predicted, 1),
                      predicted_how=how, auto=auto, finished=time.time(), emulated=self.emulate is not None,
                      status="ok" if result["ok"] else "failed")
        (results / f"{name}.json").write_text(json.dumps(result, indent=1, default=str))
        self.rows.append(result)
        self.say(f"=== step {name}: {'ok' if result['ok'] else 'FAILED'} in {wall:.0f} s (predicted {predicted:.0f} s): "
                 f"{result['summary']}")
        if not result["ok"]:
            self.print_server_log_tails(since=self.wall0)
        self.write_out()
        if not result["ok"] and auto:
            raise StepFailed(f"prerequisite step {name} failed: {result['summary']}")
        return result

    def print_server_log_tails(self, since: float, lines: int = 40) -> None:
        logs = sorted((self.paths.state_dir / "logs").glob("*.log"), key=lambda p: p.stat().st_mtime)
        for log in [p for p in logs if p.stat().st_mtime >= since][-3:]:
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            self.say(f"--- last {len(tail)} lines of {log}")
            for line in tail:
                print(f"    {line}", flush=True)

    # -- output files -----------------------------------------------------------------------
    def merged(self) -> dict:
        steps = {}
        for name in ORDER:
            f = self.paths.step_results(self.layers) / f"{name}.json"
            if f.exists():
                steps[name] = json.loads(f.read_text())
        breakdowns = {}
        for f in sorted((self.paths.root / "results").glob("L*/breakdown.json")):
            r = json.loads(f.read_text())
            breakdowns[str(r.get("layers"))] = {k: r.get(k) for k in ("summary", "ok", "timed", "warm", "classified",
                                                                      "profiled_timing", "server_args")}
        planted = self.paths.planted_log
        setup = steps.get("setup", {})
        dev = setup.get("device") or {}
        # the keys every measurement file carries (notebooks/data.py PROVENANCE_KEYS)
        prov = ({"gpu": "none: rollout.emulator stands in for SGLang", "sms": 0, "driver": "none", "cuda": "none",
                 "torch": "none"} if self.emulate is not None else
                {k: dev.get(k, "unknown") for k in ("gpu", "sms", "driver", "cuda", "torch")})
        return {
            "kind": "real-server-canary", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **prov, "commit": self.commit,
            "stamp": self.stamp, "emulated": self.emulate is not None,
            "label": ("emulated SGLang servers (rollout.emulator)" if self.emulate is not None else
                      f"real SGLang {(setup.get('bundle') or {}).get('sglang') or '0.5.23'} server, dummy-weight "
                      f"{self.layers}-layer MLA model, one {dev.get('gpu', 'GPU')}") + f", {self.algorithm_words()}"
                     + envmod.kv_clause(self.kv_cache_dtype),
            # what the servers speculated with: the verify shape the flash arm served
            "algorithm": self.algorithm, "block_size": self.block_size, "draft": setup.get("draft"),
            # the KV pool both arms were asked for (the steps refuse a server that reports another)
            "kv_cache_dtype": self.kv_cache_dtype,
            # the plugin's opt-ins every server inherited (the arm switch itself is the rollout's)
            "plugin_env": {k: os.environ[k] for k in PLUGIN_OPT_INS if k in os.environ},
            "draft_extend": draft_extend_on(),   # what a flash server of this run did with EAGLE's draft extend
            "layers": self.layers, "device": setup.get("device"), "bundle": setup.get("bundle"),
            "kernel": setup.get("kernel"), "steps": steps, "breakdowns": breakdowns,
            "slopes": self.breakdown_slopes(),
            "extend_over_prefix": extend_over_prefix.record(steps),
            "standins": standin_record().read_log(self.paths.standin_log),
            "planted_log": planted.read_text().splitlines() if planted.exists() else [],
            "invocation": {"argv": sys.argv[1:], "rows": [{k: r.get(k) for k in ("step", "status", "wall_s",
                                                                                 "predicted_s", "auto")}
                                                          for r in self.rows]},
        }

    def served(self) -> dict:
        """What setup records in the root's marker (environment.Paths.served)."""
        return {"algorithm": self.algorithm, "block_size": self.block_size, "kv_cache_dtype": self.kv_cache_dtype}

    def algorithm_words(self) -> str:
        if self.algorithm == "DFLASH":
            return f"DFLASH (tiny DFlash draft, block {self.block_size})"
        return "EAGLE (the model's NextN layer as the draft)"

    def config_words(self) -> str:
        return f"{self.algorithm_words()}, {envmod.kv_words(self.kv_cache_dtype)}"

    def file_stem(self, what: str) -> str:
        """real-server-<what>[-dflash][-fp8]-<stamp>: a bf16 EAGLE run's files keep their names."""
        return (f"real-server-{what}" + ("-dflash" if self.algorithm == "DFLASH" else "")
                + ("-fp8" if self.kv_cache_dtype == "fp8_e4m3" else "") + f"-{self.stamp}")

    def gpu_kind(self, gpu: str) -> str:
        """The file name's word for where the servers ran: emulated, or the card ("NVIDIA H100 80GB
        HBM3" -> h100; the name said h200 on every GPU until 2026-12-05), "gpu" before setup probed it."""
        if self.emulate is not None:
            return "emulated"
        if not gpu or gpu == "unknown":
            return "gpu"
        from ...bench.env import gpu_word   # (torch, which the emulated job never needs)
        return gpu_word(gpu)

    def write_out(self) -> None:
        if self.out is None:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        merged = self.merged()
        (self.out / f"{self.file_stem(self.gpu_kind(merged['gpu']))}.json").write_text(
            json.dumps(merged, indent=1, default=str))
        from .steps import copy_rollout_results
        copy_rollout_results(self.paths.rollout_results, self.out / "rollout", since=self.wall0)
        self.write_logs_archive(self.out / f"{self.file_stem('logs')}.tar.xz")

    def write_logs_archive(self, dest: Path) -> None:
        p = self.paths
        sources = [*sorted(p.logs.glob("*")), *sorted((p.state_dir / "logs").glob("*.log")),
                   p.state_dir / "state.json", p.state_dir / "audit.jsonl", p.inventory, p.groups_file,
                   p.standin_log, p.planted_log, *sorted(p.rollout_results.glob("rollout-*.json")),
                   *sorted((p.root / "results").glob("L*/*.json")), *sorted(p.profiles.glob("*.trace.json*"))]
        tmp = dest.with_name(dest.name + ".tmp")
        skipped = []
        with tarfile.open(tmp, "w:xz", preset=3) as tar:   # rewritten after every step: fast over small
            for f in sources:
                if not f.is_file():
                    continue
                if f.stat().st_size > LOG_FILE_LIMIT:
                    skipped.append(f"{f} ({f.stat().st_size / 2**20:.1f} MiB)")
                    continue
                tar.add(f, arcname=str(f.relative_to(p.root)) if f.is_relative_to(p.root) else f.name)
            if skipped:
                data = ("left out (over 8 MiB):\n" + "\n".join(skipped) + "\n").encode()
                info = tarfile.TarInfo("LEFT-OUT.txt")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        tmp.replace(dest)

    def table(self) -> str:
        lines = [f"L={self.layers}, {self.config_words()}",
                 f"{'step':10s} {'result':7s} {'wall s':>7s} {'pred s':>7s}  what"]
        for r in self.rows:
            lines.append(f"{r['step'] + ('*' if r.get('auto') else ''):10s} {r['status']:7s} {r['wall_s']:7.0f} "
                         f"{r['predicted_s']:7.0f}  {str(r.get('summary'))[:300]}")
        m = self.merged()
        st = m["standins"]
        lines.append(f"stand-ins that ran (torch versions): {', '.join(st['ran']) or 'none'}; placeholders called: "
                     f"{', '.join(st['called']) or 'none'} ({st['processes']} server processes)")
        if m["slopes"]:
            f = m["slopes"]["fits"]
            lines.append(f"per layer over L={m['slopes']['layers']}: step {f['step_ms']['per_layer_ms']:.3f} ms, verify "
                         f"attention {f['phases.verify.attention_ms_per_step']['per_layer_ms']:.3f} ms, verify rest "
                         f"{f['phases.verify.other_ms_per_step']['per_layer_ms']:.3f} ms; at {m['slopes']['predict_at']} "
                         f"layers: step {f['step_ms']['at_predict_ms']:.1f} ms")
        lines += extend_over_prefix.table_lines(m["extend_over_prefix"])
        if any(r.get("auto") for r in self.rows):
            lines.append("* a prerequisite the job ran itself")
        if self.out:
            lines.append(f"results: {self.out}")
        return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m kernel.sglang.real_server", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--steps", default="setup,up,planted,canary,promote,breakdown",
                    help=f"comma-separated, run in the order given, from {', '.join(ORDER)}")
    ap.add_argument("--layers", type=int, default=4, help="target layers of the tiny MLA model (default 4)")
    ap.add_argument("--out", help="folder for the merged JSON, the logs archive and rollout's result files")
    ap.add_argument("--algorithm", default="EAGLE", choices=envmod.ALGORITHMS,
                    help="the servers' speculative algorithm (default EAGLE; DFLASH: SGLang's block-diffusion worker "
                         "with a tiny DFlash draft)")
    ap.add_argument("--block-size", type=int, default=None,
                    help=f"DFLASH only: tokens verified per request (default {envmod.DFLASH_BLOCK})")
    ap.add_argument("--kv-cache-dtype", default="auto", choices=envmod.KV_DTYPES,
                    help="SGLang's KV pool on both arms (default auto: the model's bf16, no flag; fp8_e4m3: "
                         "`--kv-cache-dtype fp8_e4m3` on every server, its own root and ports)")
    ap.add_argument("--root", default=None, help="state root (default /tmp/mla-real-server, with --algorithm DFLASH "
                                                 "/tmp/mla-real-server-dflash; with --kv-cache-dtype fp8_e4m3 either "
                                                 "with -fp8)")
    ap.add_argument("--bundle", default=str(envmod.ROOT / ".server-bundle"),
                    help="folder with server-bundle.tar.xz and BUNDLE.json (default .server-bundle)")
    ap.add_argument("--gate", action="append", default=[], metavar="KEY=VALUE",
                    help="override one [gates] value of the runtime inventory (repeatable), e.g. context_tokens=65536")
    ap.add_argument("--ports", help="comma-separated ports of the groups (default the example's: EAGLE 30000,30001, "
                                    "DFLASH 30002,30003; with --kv-cache-dtype fp8_e4m3 each + 4)")
    ap.add_argument("--emulate", type=float, metavar="TIME_SCALE", default=None,
                    help="rollout's emulator instead of SGLang, delays times TIME_SCALE (no GPU; tests)")
    ap.add_argument("--prior", action="append", default=[], metavar="JSON",
                    help="an earlier run's real-server-*.json: its breakdowns join the per-layer slope (repeatable)")
    ap.add_argument("--budget", type=float, default=0.0, metavar="S",
                    help="start no step whose predicted time exceeds what is left of S seconds since the start "
                         "(a device call's limit, less a margin), so no rollout command is cut off midway")
    ap.add_argument("--commit", default=os.environ.get("MLA_VERIFY_COMMIT") or git_commit(),
                    help="recorded with the results (default: $MLA_VERIFY_COMMIT, else git HEAD, '+dirty' with "
                         "local changes, else 'unknown')")
    ap.add_argument("--keep-going", action="store_true", help="run the remaining steps after a failed one")
    return ap


def main(argv=None) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    steps = [s.strip() for s in a.steps.split(",") if s.strip()]
    unknown = [s for s in steps if s not in STEPS]
    if unknown or not steps:
        ap.error(f"--steps: unknown step(s) {unknown} (known: {', '.join(ORDER)})" if unknown else "--steps: none given")
    if a.layers < 1:
        ap.error(f"--layers: must be >= 1, got {a.layers}")
    try:   # the servers inherit it: a value the plugin would refuse stops the job before any start
        draft_extend_on()
    except ValueError as e:
        ap.error(str(e))
    if a.algorithm == "DFLASH":
        a.block_size = envmod.DFLASH_BLOCK if a.block_size is None else a.block_size
        if a.block_size < 2:
            ap.error(f"--block-size: DFLASH verifies at least 2 tokens per request, got {a.block_size}")
        if a.layers < 2:
            ap.error(f"--layers: DFLASH needs a target of at least 2 layers (its draft reads a target layer's "
                     f"output, and SGLang never captures the last one's), got {a.layers}")
    elif a.block_size is not None:
        ap.error(f"--block-size: DFLASH's parameter; --algorithm is {a.algorithm}")
    a.root = a.root or str(envmod.default_root(a.algorithm, a.kv_cache_dtype))
    served = envmod.Paths(Path(a.root).resolve()).served()
    if served and served.get("algorithm") != a.algorithm:
        ap.error(f"--root {a.root}: its servers, state and results are a {served.get('algorithm')} run's; --algorithm "
                 f"{a.algorithm} takes its own root (default {envmod.default_root(a.algorithm, a.kv_cache_dtype)})")
    if served and served["kv_cache_dtype"] != a.kv_cache_dtype:
        # a pool is fixed when a server starts: this root's running servers, state and results are the other's
        ap.error(f"--root {a.root}: its servers, state and results are a run's with --kv-cache-dtype "
                 f"{served['kv_cache_dtype']}; --kv-cache-dtype {a.kv_cache_dtype} takes its own root (default "
                 f"{envmod.default_root(a.algorithm, a.kv_cache_dtype)})")
    try:
        a.ports = [int(p) for p in a.ports.split(",")] if a.ports else None
        for g in a.gate:
            envmod.parse_override(g)
    except ValueError as e:
        ap.error(str(e))
    prior = {}
    for f in a.prior:
        try:
            for layers, b in json.loads(Path(f).read_text()).get("breakdowns", {}).items():
                if b.get("classified"):
                    prior[int(layers)] = b["classified"]
        except (OSError, ValueError, AttributeError) as e:
            ap.error(f"--prior {f}: not a real-server JSON ({e})")
    ctx = Context(a)
    ctx.prior_breakdowns = prior
    ordered = steps
    predicted = 0.0
    for s in ordered:
        predicted += ctx.estimate(s)[0]
    ctx.say(f"steps {', '.join(ordered)} at {a.layers} layers, {ctx.config_words()}; predicted {predicted:.0f} s "
            f"in all; root {ctx.paths.root}")
    ok = True
    for s in ordered:
        r = ctx.run_step(s)
        if not r["ok"]:
            ok = False
            if r["status"] == "skipped" or not a.keep_going:
                ctx.say(f"stopping after step {s} ({r['status']}); state kept in {ctx.paths.root}")
                break
    ctx.write_out()
    print(ctx.table(), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
