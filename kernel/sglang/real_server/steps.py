"""The steps of the real-server job. Each takes the job's Context, returns a JSON-able dict with
"ok" (bool) and "summary" (one line for the table), and raises StepFailed (with what it saw)
when an expectation fails. Steps that need an earlier step's outcome check the machine itself
(the servers' /health and /metrics, the rollout tool's state file), so a step can be given alone
in a later device call: if the machine went back in between, the missing prerequisites run
first (ctx.ensure), each announced with its own time estimate.
"""
from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from rollout.inventory import Group, load
from rollout.launchers import make_launcher
from rollout.observe import healthy, observe_arm

from . import environment as envmod
from . import extend_over_prefix as eop
from . import measure
from .breakdown import TraceError, classify, load_trace, trace_summary

ROLLOUT_GATE_FAILED, ROLLOUT_HALTED = 3, 5


class StepFailed(RuntimeError):
    def __init__(self, message: str, result: dict | None = None):
        super().__init__(message)
        self.result = result or {}


# -- what the machine says --------------------------------------------------------------------
def observe_groups(ctx) -> dict:
    """{group: {"url", "healthy", "why", "arm", "how"}} for the runtime inventory's groups."""
    inv = load(ctx.paths.inventory)
    out = {}
    for g in inv.groups:
        ok, why = healthy(g, inv.settings["health_timeout_s"])
        arm, how = observe_arm(g, make_launcher(g, inv), inv.settings["health_timeout_s"]) if ok else (None, why)
        out[g.name] = {"url": g.url, "healthy": ok, "why": why, "arm": arm, "how": how}
    return out


def rollout_state(ctx) -> dict | None:
    p = ctx.paths.state_dir / "state.json"
    return json.loads(p.read_text()) if p.exists() else None


def groups_layers(ctx) -> int | None:
    """The layer count the rollout groups were started with (None: not started by this root)."""
    p = ctx.paths.groups_file
    return json.loads(p.read_text())["layers"] if p.exists() else None


def rollout_result(state: dict | None) -> dict | None:
    if not state or not state.get("result_path"):
        return None
    p = Path(state["result_path"])
    return json.loads(p.read_text()) if p.exists() else None


def compact_gates(state: dict | None) -> list[dict]:
    return [{k: g.get(k) for k in ("group", "gate", "passed", "reason")} for g in (state or {}).get("gates", [])]


def numerics_summary(r: dict | None) -> dict | None:
    if not r:
        return None
    keep = ("verdict", "reason", "top1_agreement", "mean_abs_logprob_diff", "max_abs_logprob_diff",
            "first_token_agreement", "exact_prompts", "control_source", "settings")
    out = {k: r.get(k) for k in keep}
    out.update(control_self=r.get("control_self"), candidate_prefill=r.get("candidate_prefill"),
               contexts=r.get("contexts"))
    return out


def speed_summary(r: dict | None) -> dict | None:
    """The speed gate's A/B with each arm's median step time (ms = accept length / tok/s)."""
    if not r:
        return None
    out = {k: r.get(k) for k in ("passed", "reason", "ratio", "ci", "context_tokens", "max_new_tokens", "rounds",
                                 "control_source")}
    for role in ("candidate", "control"):
        arm = r.get(role) or {}
        tok = arm.get("median_tok_s")
        acc = arm.get("median_accept_length") or 1.0
        out[role] = {"median_tok_s": tok, "tok_s": arm.get("tok_s"), "median_accept_length": arm.get("median_accept_length"),
                     "cached_tokens": arm.get("cached_tokens"),
                     "median_step_ms": 1000.0 * acc / tok if tok else None}
    return out


def group_result(state: dict | None, group: str) -> dict:
    return ((state or {}).get("groups") or {}).get(group, {}).get("results", {})


# -- steps -------------------------------------------------------------------------------------
def step_setup(ctx) -> dict:
    from ..model_configs import tiny_dflash_draft, tiny_mla, write_tiny_dflash_draft, write_tiny_mla
    from ..server_bundle import ARCHIVE, MANIFEST, check_site, sha256, unpack

    paths, out = ctx.paths, {}
    paths.root.mkdir(parents=True, exist_ok=True)
    if ctx.emulate is None:
        archive, manifest_path = ctx.bundle_dir / ARCHIVE, ctx.bundle_dir / MANIFEST
        if not archive.exists() or not manifest_path.exists():
            raise StepFailed(f"no server bundle at {ctx.bundle_dir} ({ARCHIVE}, {MANIFEST}): build it with `make "
                             f"sglang-server-bundle` where pip works and carry .server-bundle in the device call")
        manifest = json.loads(manifest_path.read_text())
        digest = sha256(archive)
        if digest != manifest["sha256"]:
            raise StepFailed(f"{archive}: sha256 {digest[:12]} does not match {MANIFEST} ({manifest['sha256'][:12]}): "
                             f"a partial copy? rebuild and carry it again")
        stamp = json.loads(paths.unpacked_stamp.read_text()) if paths.unpacked_stamp.exists() else {}
        t0 = time.monotonic()
        if stamp.get("sha256") != digest or not paths.site.is_dir():
            ctx.say(f"unpacking {archive} ({archive.stat().st_size / 2**20:.1f} MiB) into {paths.bundle}")
            paths.unpacked_stamp.unlink(missing_ok=True)
            unpack(archive, paths.bundle)
            problems = check_site(paths.site, manifest.get("carried", {}))
            if problems:
                raise StepFailed(f"the unpacked bundle {paths.site} is incomplete: {problems}")
            paths.unpacked_stamp.write_text(json.dumps({"sha256": digest, "unpacked": time.time()}))
            out["unpacked_s"] = round(time.monotonic() - t0, 1)
        else:
            out["unpacked_s"] = 0.0
        out["bundle"] = {k: manifest.get(k) for k in ("sglang", "python", "sha256", "archive_bytes", "unpacked_bytes",
                                                     "carried_bytes", "kernel_cache", "built", "entry_points")}
        out["bundle"]["packages"] = len(manifest.get("carried", {}))
    envmod.write_wrappers(paths, python=sys.executable,
                          emulate=None if ctx.emulate is None else {"time_scale": ctx.emulate})
    model = paths.model(ctx.layers)
    cfg = model / "config.json"
    if not cfg.exists() or json.loads(cfg.read_text()).get("num_hidden_layers") != ctx.layers:
        if ctx.emulate is not None:  # the emulator reads no config; skip transformers' import (seconds on a CI core)
            model.mkdir(parents=True, exist_ok=True)
            cfg.write_text(json.dumps({**tiny_mla(ctx.layers), "num_nextn_predict_layers": 1}))
        else:
            write_tiny_mla(model, layers=ctx.layers)
    out["model"] = {"path": str(model), "layers": ctx.layers}
    if ctx.algorithm == "DFLASH":
        draft = paths.draft(ctx.layers, ctx.block_size)
        want = tiny_dflash_draft(tiny_mla(ctx.layers), block_size=ctx.block_size)
        dcfg = draft / "config.json"
        if not dcfg.exists() or json.loads(dcfg.read_text()).get("dflash_config") != want["dflash_config"]:
            if ctx.emulate is not None:   # as the target's: no transformers import for the emulator
                draft.mkdir(parents=True, exist_ok=True)
                dcfg.write_text(json.dumps(want))
            else:
                write_tiny_dflash_draft(draft, tiny_mla(ctx.layers), block_size=ctx.block_size)
        out["draft"] = {"path": str(draft), "block_size": ctx.block_size, **{
            k: want[k] for k in ("architectures", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                 "head_dim")}, "target_layer_ids": want["dflash_config"]["target_layer_ids"]}
    paths.algorithm_file.write_text(json.dumps(ctx.served()))
    running = groups_layers(ctx)
    if running not in (None, ctx.layers) and any(g["healthy"] for g in observe_groups(ctx).values()):
        out["inventory"] = f"kept: the rollout groups serve the {running}-layer model (step down first to change it)"
    else:
        envmod.write_inventory(paths, envmod.runtime_inventory(paths, ctx.layers, algorithm=ctx.algorithm,
                                                               block_size=ctx.block_size,
                                                               kv_cache_dtype=ctx.kv_cache_dtype, ports=ctx.ports,
                                                               gates=ctx.gate_overrides))
        out["inventory"] = str(paths.inventory)
    if ctx.emulate is None:
        out["kernel"] = ctx.prebuild_kernel()
        out["device"] = ctx.device_info()
    bits = [f"L={ctx.layers}, {ctx.algorithm}" + (f" block {ctx.block_size}" if ctx.block_size else "")
            + envmod.kv_clause(ctx.kv_cache_dtype)]
    if "bundle" in out:
        bits.append(f"sglang {out['bundle']['sglang']} ({out['unpacked_s']:.0f} s to unpack)")
    if "kernel" in out:
        bits.append(f"kernel {out['kernel']['hash']} {'prebuilt' if out['kernel']['prebuilt'] else 'compiled here'}")
    return {"ok": True, "summary": ", ".join(bits), **out}


_SERVING = re.compile(r"\[(\S+)\] serving after ([0-9.]+) s")


def _warm_when_healthy(ctx, names: list[str], results: dict, stop: threading.Event):
    """Warm each group's prefix cache with the gates' prompt as soon as it answers /health."""
    inv = load(ctx.paths.inventory)
    ids = measure.gate_prompt(inv.gates)
    deadline = time.monotonic() + inv.settings["startup_deadline_s"] + 60
    for name in names:
        g = inv.group(name)
        while not stop.is_set() and time.monotonic() < deadline:
            if healthy(g, inv.settings["health_timeout_s"])[0]:
                break
            time.sleep(2.0)
        if stop.is_set() or time.monotonic() >= deadline:
            results[name] = {"error": "not healthy in time"}
            continue
        try:
            ctx.say(f"[{name}] warming the prefix cache with the gates' {len(ids):,}-token prompt")
            results[name] = measure.warm(g.url, ids, inv.gates["request_timeout_s"])
            ctx.say(f"[{name}] warm: {results[name]['seconds']:.1f} s (cached before: {results[name]['cached_tokens']})")
        except Exception as e:  # noqa: BLE001 -- recorded; the step decides
            results[name] = {"error": f"{type(e).__name__}: {e}"}


def step_up(ctx) -> dict:
    paths = ctx.paths
    running = groups_layers(ctx)
    before = observe_groups(ctx)
    if running not in (None, ctx.layers) and any(g["healthy"] for g in before.values()):
        raise StepFailed(f"the rollout groups serve the {running}-layer model; run step down first to use "
                         f"{ctx.layers} layers")
    names = list(before)
    warm_results, stop = {}, threading.Event()
    warmer = threading.Thread(target=_warm_when_healthy, args=(ctx, names, warm_results, stop), daemon=True)
    warmer.start()
    rc, text = ctx.rollout("up")
    if rc != 0:
        stop.set()
        raise StepFailed(f"`python -m rollout up` exited {rc}", {"rollout_rc": rc, "groups": observe_groups(ctx)})
    paths.groups_file.write_text(json.dumps({"layers": ctx.layers, "model_path": str(paths.model(ctx.layers)),
                                             "algorithm": ctx.algorithm, "block_size": ctx.block_size,
                                             "time": time.time()}))
    paths.started_once.write_text(str(time.time()))
    inv = load(paths.inventory)
    warmer.join(timeout=inv.gates["request_timeout_s"] * len(names) + 120)
    stop.set()
    started = {m.group(1): float(m.group(2)) for m in _SERVING.finditer(text)}
    groups = observe_groups(ctx)
    for name, g in groups.items():
        g.update(started_s=started.get(name), warm=warm_results.get(name),
                 was_serving=before[name]["healthy"])
        try:
            g["server_args"] = measure.server_args(g["url"])
        except Exception as e:  # noqa: BLE001
            g["server_args"] = {"error": str(e)}
    bad = [n for n, g in groups.items() if not g["healthy"] or g["arm"] != "triton"]
    cold = [n for n, g in groups.items() if not (g["warm"] or {}).get("seconds")]
    result = {"rollout_rc": rc, "groups": groups}
    if bad:
        raise StepFailed(f"after up, not serving on triton: {bad}", result)
    # a group's port could answer for another root's servers: what each server says it speculates with
    other = {n: speculation(g["server_args"]) for n, g in groups.items()
             if speculation(g["server_args"]) != (ctx.algorithm, ctx.block_size)}
    if other:
        raise StepFailed(f"after up, not serving {ctx.algorithm}" + (f" block {ctx.block_size}" if ctx.block_size else "")
                         + f": {other} (algorithm, block) from /server_info", result)
    wrong = kv_pool_problem(ctx, {n: g["server_args"] for n, g in groups.items()})
    if wrong:
        raise StepFailed(f"after up, {wrong}", result)
    if cold:
        raise StepFailed(f"prefix cache not warmed on {cold}: {[groups[n]['warm'] for n in cold]}", result)
    return {"ok": True, "summary": "; ".join(
        f"{n} " + (f"up in {g['started_s']:.0f} s" if g["started_s"] else "already up")
        + f", prefill {g['warm']['seconds']:.1f} s" for n, g in groups.items()), **result}


def kv_pool_problem(ctx, reported: dict) -> str | None:
    """What is wrong with the KV pools servers report ({server: measure.server_args}), or None:
    each must report the --kv-cache-dtype the job asked for (SGLang's /server_info echoes the
    flag, "auto" when none was given), so a server asked for fp8_e4m3 never serves bf16 unseen."""
    other = {n: a.get("kv_cache_dtype") for n, a in reported.items() if a.get("kv_cache_dtype") != ctx.kv_cache_dtype}
    if not other:
        return None
    return (f"--kv-cache-dtype {ctx.kv_cache_dtype} asked for, but /server_info reports kv_cache_dtype "
            + ", ".join(f"{'nothing' if v is None else repr(v)} on {n}" for n, v in other.items()))


def speculation(server_args: dict) -> tuple:
    """(algorithm, DFLASH block or None) a server reports in /server_info (measure.server_args)."""
    algo = server_args.get("speculative_algorithm")
    return algo, (server_args.get("speculative_num_draft_tokens") if algo == "DFLASH" else None)


def recover_rollout(ctx, step: str, keep=()) -> None:
    """Make the rollout tool usable again after a device call was cut off in the middle of one
    of its commands: a lock whose process is gone is removed (`unlock`), and an unfinished
    rollout whose status is not in `keep` is ended with every group serving (`abort`)."""
    from rollout.engine import ACTIVE
    from rollout.lock import LockCorrupt, holder_alive, read

    try:
        held = read(ctx.paths.state_dir)
    except LockCorrupt:
        held = None   # the rollout command then names it and the fix
    if held and holder_alive(held) is False:
        ctx.say(f"the rollout lock is held by pid {held.get('pid')}, which is gone: unlocking")
        ctx.rollout("unlock", "--reason", f"real-server job ({step}): the process that held the lock is gone (a "
                                          f"device call cut off?)")
    state = rollout_state(ctx)
    if state and state.get("status") in ACTIVE and state["status"] not in keep:
        ctx.say(f"rollout {state['rollout_id']} is unfinished ({state['status']}): aborting it, every group serving")
        ctx.rollout("abort", "--reason", f"real-server job ({step}) starts over from an unfinished rollout "
                                         f"({state['status']})")


def _expect_rollout(ctx, rc: int, extra: dict) -> dict:
    state = rollout_state(ctx)
    return {"rollout_rc": rc, "rollout_id": (state or {}).get("rollout_id"), "status": (state or {}).get("status"),
            "reason": (state or {}).get("reason"), "gates": compact_gates(state), **extra}


def step_planted(ctx) -> dict:
    recover_rollout(ctx, "planted")
    ctx.ensure_triton_groups()
    paths = ctx.paths
    paths.planted_log.unlink(missing_ok=True)
    rc, text = ctx.rollout("canary", extra_env=envmod.planted_env(paths))
    state = rollout_state(ctx)
    canary = state["order"][0] if state else None
    res = group_result(state, canary)
    planted = [json.loads(x) for x in paths.planted_log.read_text().splitlines()] if paths.planted_log.exists() else []
    result = _expect_rollout(ctx, rc, {"canary": canary, "numerics": numerics_summary(res.get("numerics")),
                                                       "planted_log": planted})
    if rc in (0, ROLLOUT_HALTED):
        # never leave the planted plugin serving: back to triton with a clean environment
        rb_rc, _ = ctx.rollout("rollback")
        result["cleanup_rollback_rc"] = rb_rc
    result["groups_after"] = observe_groups(ctx)
    mine = [g for g in result["gates"] if g["group"] == canary]
    problems = []
    if rc != ROLLOUT_GATE_FAILED:
        problems.append(f"rollout canary exited {rc}, expected {ROLLOUT_GATE_FAILED} (a failed gate, rolled back)")
    # the canary's first arm gate is the promotion's (expected flash); a later one is the rollback's
    arm_gate = next((g for g in mine if g["gate"] == "arm"), None)
    if not arm_gate or not arm_gate["passed"] or "runs flash" not in (arm_gate["reason"] or ""):
        problems.append(f"the arm gate did not confirm flash: {arm_gate}")
    num_gate = next((g for g in mine if g["gate"] == "numerics"), None)
    if not num_gate or num_gate["passed"] is not False:
        problems.append(f"the numerics gate did not fail: {num_gate}")
    if (state or {}).get("status") != "rolled_back":
        problems.append(f"rollout status {(state or {}).get('status')!r}, expected 'rolled_back'")
    after = result["groups_after"].get(canary, {})
    if after.get("arm") != "triton":
        problems.append(f"canary {canary} is not back on triton: {after.get('arm')} ({after.get('how')})")
    if not planted:
        problems.append(f"no server wrote {paths.planted_log}: the planted fault never ran")
    if problems:
        raise StepFailed("; ".join(problems), result)
    num = result["numerics"] or {}
    cs = (num.get("control_self") or {})
    return {"ok": True, "summary": (f"rolled back at numerics: top-1 {num.get('top1_agreement', 0):.3f}, mean "
                                    f"|dlogprob| {num.get('mean_abs_logprob_diff', 0):.3g} (control's own verify: top-1 "
                                    f"{cs.get('top1_agreement') or 0:.3f}); {canary} back on triton"), **result}


def step_canary(ctx) -> dict:
    recover_rollout(ctx, "canary")
    ctx.ensure_triton_groups()
    _, plan = ctx.rollout("plan")
    rc, text = ctx.rollout("canary")
    canary_lines = list(ctx.last_lines)     # (arrival time, line): times the gates' warm-up of the canary
    state = rollout_state(ctx)
    canary = state["order"][0] if state else None
    res = group_result(state, canary)
    result = _expect_rollout(ctx, rc, {
        "canary": canary, "plan": plan.splitlines(), "speed": speed_summary(res.get("speed")),
        "numerics": numerics_summary(res.get("numerics")), "metrics": res.get("metrics"),
        "arms": (rollout_result(state) or {}).get("arms")})
    result["groups_after"] = observe_groups(ctx)
    if rc != 0 or (state or {}).get("status") != "canary_passed":
        raise StepFailed(f"rollout canary exited {rc} with status {(state or {}).get('status')!r}: "
                         f"{(state or {}).get('reason')}", result)
    # the canary's flash server is a new process: the A/B counts only if both arms serve the pool asked for
    for name, g in result["groups_after"].items():
        try:
            g["server_args"] = measure.server_args(g["url"])
        except Exception as e:  # noqa: BLE001 -- then it reports no pool: the check below names it
            g["server_args"] = {"error": str(e)}
    wrong = kv_pool_problem(ctx, {n: g["server_args"] for n, g in result["groups_after"].items()})
    if wrong:
        raise StepFailed(f"after the canary, {wrong}: its A/B is not of the pool asked for", result)
    # one direct request per arm, prefix cached: TTFT, which the speed gate leaves out, beside its tok/s
    inv = load(ctx.paths.inventory)
    ids = measure.gate_prompt(inv.gates)
    result["timed"] = {}
    for name, g in result["groups_after"].items():
        result["timed"][g["arm"] or name] = {"group": name, **measure.timed_decode(
            g["url"], ids, inv.gates["max_new_tokens"], inv.gates["request_timeout_s"])}
    result["extend_over_prefix"] = extend_measurements(ctx, inv, result["groups_after"], canary, canary_lines)
    sp = result["speed"] or {}
    c, k = sp.get("candidate") or {}, sp.get("control") or {}
    ttft = {arm: t["ttft_s"] * 1000 for arm, t in result["timed"].items()}
    return {"ok": True, "summary": (f"passed: flash {c.get('median_tok_s') or 0:.2f} vs triton "
                                    f"{k.get('median_tok_s') or 0:.2f} tok/s (x{sp.get('ratio') or 0:.2f}, CI "
                                    f"{(sp.get('ci') or {}).get('low', 0):.2f}..{(sp.get('ci') or {}).get('high', 0):.2f}); "
                                    f"step {c.get('median_step_ms') or 0:.1f} vs {k.get('median_step_ms') or 0:.1f} ms; "
                                    f"TTFT (cached) " + ", ".join(f"{a} {v:.0f} ms" for a, v in sorted(ttft.items()))),
            **result}


def extend_measurements(ctx, inv, groups: dict, canary: str, rollout_lines: list) -> dict:
    """Issue 26's measurements once the canary passed (extend_over_prefix.py): each arm's prefill of
    the gates' prompt and follow-up TTFTs over it. Never fails the step: an error is recorded."""
    rec = {"what": eop.WHAT, "layers": ctx.layers, "context_tokens": inv.gates["context_tokens"],
           "units": eop.UNITS, "canary": canary, "emulated": ctx.emulate is not None}
    try:
        control = next((n for n, g in groups.items() if n != canary and g["arm"] == "triton"), None)
        rec["control"] = control
        up_file = ctx.paths.step_results(ctx.layers) / "up.json"
        up = json.loads(up_file.read_text()) if up_file.exists() else {}
        up_warm = ((up.get("groups") or {}).get(control) or {}).get("warm") if control else None
        flash_warm = eop.warm_from_progress(rollout_lines, groups[canary]["url"])
        rec["prefill"] = {
            "triton": eop.prefill_entry(control, up_warm, ctx.layers,
                                        "step up: the job's warm-up request on the canary's control group"),
            "flash": eop.prefill_entry(canary, flash_warm, ctx.layers,
                                       "step canary: the rollout numerics gate's warm-up of the restarted canary, "
                                       "timed by the rollout CLI's progress lines around it")}
        t, f = rec["prefill"]["triton"], rec["prefill"]["flash"]
        rec["prefill_ratio_triton_over_flash"] = (t["prefill_s"] / f["prefill_s"] if t["measured"] and f["measured"]
                                                  and f["prefill_s"] > 0 else None)
        urls = {g["arm"]: g["url"] for n, g in groups.items() if g["healthy"] and n in (canary, control)}
        ctx.say(f"issue 26: follow-ups of {', '.join(map(str, eop.FOLLOWUP_TOKENS))} tokens x{eop.REPEATS} and "
                f"{eop.GREEDY_TOKENS} greedy tokens after the cached {len(measure.gate_prompt(inv.gates)):,}-token "
                f"prompt on {', '.join(f'{a} ({u})' for a, u in urls.items())}")
        rec.update(eop.measure_followups(urls, measure.gate_prompt(inv.gates), seed=inv.gates["seed"],
                                         timeout=inv.gates["request_timeout_s"], say=lambda m: ctx.say(f"  {m}")))
    except Exception as e:  # noqa: BLE001 -- recorded; the canary's verdict is the rollout tool's
        rec["error"] = f"{type(e).__name__}: {e}"
        rec["traceback"] = traceback.format_exc()[-3000:]
        ctx.say(f"issue 26 measurements failed: {rec['error']}")
    return rec


def step_promote(ctx) -> dict:
    state = rollout_state(ctx) or {}
    # a passed canary, or a promotion cut off or halted: `promote` continues it
    resumable = state.get("status") in ("canary_passed", "promoting") or (
        state.get("status") == "halted" and state.get("halted_from") in ("canary_passed", "promoting"))
    recover_rollout(ctx, "promote", keep=(state["status"],) if resumable else ())
    if not resumable:
        ctx.ensure_canary_passed()
    rc, text = ctx.rollout("promote")
    state = rollout_state(ctx)
    others = (state or {}).get("order", [])[1:]
    result = _expect_rollout(ctx, rc, {
        "promoted": {n: {"speed": speed_summary(group_result(state, n).get("speed")),
                         "numerics": numerics_summary(group_result(state, n).get("numerics"))} for n in others}})
    result["groups_after"] = observe_groups(ctx)
    if rc != 0 or (state or {}).get("status") != "completed":
        raise StepFailed(f"rollout promote exited {rc} with status {(state or {}).get('status')!r}: "
                         f"{(state or {}).get('reason')}", result)
    arms = {n: g["arm"] for n, g in result["groups_after"].items()}
    if set(arms.values()) != {"flash"}:
        raise StepFailed(f"after promote the groups serve {arms}", result)
    return {"ok": True, "summary": "completed: every group on flash (" + ", ".join(
        f"{n} {(p['speed'] or {}).get('candidate', {}).get('median_tok_s') or 0:.2f} tok/s"
        for n, p in result["promoted"].items()) + ")", **result}


def _free_port_from(port: int, host: str = "127.0.0.1") -> int:
    """The first port from `port` up that nothing listens on or holds bound now (another fleet on
    the machine, e.g. the DFLASH example's 30002-30003, may own the next one)."""
    for p in range(port, 65536):
        with socket.socket() as s:
            try:
                s.bind((host, p))
            except OSError:
                continue
            return p
    raise StepFailed(f"no free port from {port} up for the breakdown's own server", {})


def _dedicated_server(ctx):
    """A flash server of its own for a layer count the rollout groups do not serve: the local
    launcher on the first free port after the groups', the inventory's launch with this layer
    count's model."""
    inv = load(ctx.paths.inventory)
    port = _free_port_from(max(g.port for g in inv.groups) + 1)
    group = Group(name=f"breakdown-L{ctx.layers}", host="127.0.0.1", port=port, gpus=[0], launcher="local")
    inv.launch = {**inv.launch, "model_path": str(ctx.paths.model(ctx.layers))}
    return group, make_launcher(group, inv), inv


def step_breakdown(ctx) -> dict:
    ctx.ensure_setup()
    paths = ctx.paths
    inv = load(paths.inventory)
    gates = inv.gates
    url, dedicated = None, None
    if groups_layers(ctx) == ctx.layers:
        flash = [g for g in observe_groups(ctx).values() if g["healthy"] and g["arm"] == "flash"]
        url = flash[0]["url"] if flash else None
    result = {"layers": ctx.layers}
    try:
        if url is None:
            group, launcher, dinv = _dedicated_server(ctx)
            dedicated = (group, launcher)
            t0 = time.monotonic()
            if launcher.running("flash"):   # left by a call cut off before its stop
                ctx.say(f"{group.name} still runs on {group.url} from an earlier call: using it")
            else:
                ctx.say(f"no flash group serves the {ctx.layers}-layer model: starting {group.name} on {group.url}")
                launcher.start("flash")
            deadline = dinv.settings["startup_deadline_s"]
            pid_file = paths.state_dir / "pids" / f"{group.name}.json"
            result["server_log"] = json.loads(pid_file.read_text()).get("log")
            while not healthy(group, dinv.settings["health_timeout_s"])[0]:
                died = launcher.died()
                if died or time.monotonic() - t0 > deadline:
                    raise StepFailed(f"{group.name} did not come up: {died or f'no /health in {deadline:.0f} s'}",
                                     result)
                time.sleep(2.0)
            result["started_s"] = round(time.monotonic() - t0, 1)
            url = group.url
            arm, how = observe_arm(group, launcher, dinv.settings["health_timeout_s"])
            if arm != "flash":
                raise StepFailed(f"{group.name} does not confirm flash: {how}", result)
        result["url"] = url
        result["server_args"] = measure.server_args(url)
        wrong = kv_pool_problem(ctx, {url: result["server_args"]})
        if wrong:   # before any timing: a breakdown of another pool than asked for is not this run's
            raise StepFailed(f"the breakdown's flash server: {wrong}", result)
        ids = measure.gate_prompt(gates)
        timeout = gates["request_timeout_s"]
        result["warm"] = measure.warm(url, ids, timeout)
        result["timed"] = [measure.timed_decode(url, ids, gates["max_new_tokens"], timeout) for _ in range(2)]
        if ctx.emulate is not None:
            result["profile"] = "skipped: the emulator has no profiler"
        else:
            profile_id = f"mla-breakdown-L{ctx.layers}-{int(time.time())}"
            trace, timing = measure.profiled_decode(url, ids, gates["max_new_tokens"], paths.profiles, profile_id, timeout)
            result["profiled_timing"] = timing
            result["trace"] = str(trace)
            result["trace_bytes"] = trace.stat().st_size
            events = load_trace(trace)
            result["trace_summary"] = trace_summary(events)
            try:
                result["classified"] = classify(events, ctx.layers)
            except TraceError as e:
                raise StepFailed(f"the profile trace {trace} could not be classified: {e} (its summary is in the "
                                 f"result; the trace is in the logs archive when under 8 MiB)", result) from None
    finally:
        if dedicated is not None:
            result["stopped"] = dedicated[1].stop("flash")
    result["slopes"] = ctx.breakdown_slopes(extra={ctx.layers: result.get("classified")})
    t = result["timed"][-1]
    bits = [f"L={ctx.layers}: {t['tok_s']:.2f} tok/s, step {t['step_ms']:.1f} ms, TTFT {t['ttft_s'] * 1000:.0f} ms"]
    c = result.get("classified")
    if c:
        ph = c["phases"]
        if ctx.algorithm == "DFLASH":   # its draft attends with its own GQA layers: SGLang's triton, not the kernel
            c["draft_attention"] = DFLASH_DRAFT_ATTENTION
            draft = (f"DFlash draft {ph['draft']['ms_per_step']:.2f} (its GQA attention {ph['draft']['attention_ms_per_step']:.2f}"
                     f" on SGLang's triton, not the kernel)")
        else:
            draft = (f"draft {ph['draft']['ms_per_step']:.2f} + draft_extend {ph['draft_extend']['ms_per_step']:.2f}")
        bits.append(f"profiled step {c['step_ms']:.1f} ms = verify attn {ph['verify']['attention_ms_per_step']:.2f} + verify "
                    f"rest {ph['verify']['other_ms_per_step']:.2f} + {draft} + outside {ph['outside']['ms_per_step']:.2f} "
                    f"+ GPU idle {c['gpu_idle_ms_per_step']:.2f} ms")
    return {"ok": True, "summary": "; ".join(bits), **result}


DFLASH_DRAFT_ATTENTION = ("DFLASH's draft phase is the DFlash draft model over its block: its own GQA attention "
                          "(head_dim 128) over the whole context in its own KV cache, served by SGLang's triton MHA "
                          "kernels on both arms; the mla-verify kernel serves only the target's MLA verify")


def step_down(ctx) -> dict:
    paths = ctx.paths
    stopped = {}
    if paths.inventory.exists():
        inv = load(paths.inventory)
        for g in inv.groups:
            stopped[g.name] = make_launcher(g, inv).stop("triton")
        for pid_file in sorted((paths.state_dir / "pids").glob("breakdown-L*.json")):
            name = pid_file.stem
            group = Group(name=name, host="127.0.0.1", port=1, gpus=[0], launcher="local")
            stopped[name] = make_launcher(group, inv).stop("flash")
    paths.groups_file.unlink(missing_ok=True)
    return {"ok": True, "summary": ", ".join(f"{n}: {how}" for n, how in stopped.items()) or "nothing ran",
            "stopped": stopped}


STEPS = {"setup": step_setup, "up": step_up, "planted": step_planted, "canary": step_canary,
         "promote": step_promote, "breakdown": step_breakdown, "down": step_down}
ORDER = tuple(STEPS)


def copy_rollout_results(src: Path, dest: Path, since: float, limit: int = 4) -> list[str]:
    """rollout-*.json written since `since` (this invocation) into dest; at most `limit`, newest."""
    files = sorted((p for p in src.glob("rollout-*.json") if p.stat().st_mtime >= since),
                   key=lambda p: p.stat().st_mtime)[-limit:]
    if files:
        dest.mkdir(parents=True, exist_ok=True)
    for p in files:
        shutil.copy2(p, dest / p.name)
    return [p.name for p in files]


def run_python(args: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=envmod.ROOT)

