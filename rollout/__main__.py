"""python -m rollout VERB: plan, canary, promote, rollback, status, check, resume, abort, unlock, recover, up.

Exit codes: 0 done; 1 refused or error (bad inventory, unreadable record, unreachable group,
rollback failed); 3 a gate failed and the rollback finished; 4 another rollout holds the lock;
5 halted with every group in service (inconclusive gate, control out of service, progress
deadline, rollback held by max_unavailable): `resume` continues; 130 interrupted.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from rollout import lock as locks
from rollout.engine import (CONTROL, EXIT_ERROR, EXIT_GATE, EXIT_HALTED, EXIT_INTERRUPTED, EXIT_LOCKED, Halted,
                            Rollout, RolloutError, RolloutFailed)
from rollout.inventory import InventoryError, load
from rollout.launchers import LaunchError
from rollout.metrics_check import check as metric_check, scrape, window
from rollout.plan import plan_lines
from rollout.record import Record, RecordError
from rollout.stop import Interrupted, Stop


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--inventory", "-i", default=os.environ.get("ROLLOUT_INVENTORY", "rollout/inventory.toml"),
                        help="inventory TOML (default: $ROLLOUT_INVENTORY or rollout/inventory.toml)")
    common.add_argument("--startup-deadline", type=float, metavar="S", help="override [rollout] startup_deadline_s")
    common.add_argument("--drain-deadline", type=float, metavar="S", help="override [rollout] drain_deadline_s")
    common.add_argument("--progress-deadline", type=float, metavar="S", help="override [rollout] progress_deadline_s")
    common.add_argument("--results-dir", help="override [rollout] results_dir (where rollout-<id>.json goes)")
    p = argparse.ArgumentParser(prog="python -m rollout", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n")[1])
    sub = p.add_subparsers(dest="verb", required=True)
    sp = sub.add_parser("plan", parents=[common], help="print every step; touches nothing")
    sp.add_argument("--group", help="canary group (default [rollout] canary, else the first group)")
    sp.add_argument("--rollback-all", action="store_true")
    sp = sub.add_parser("canary", parents=[common], help="move the canary group to flash, behind every gate")
    sp.add_argument("--group", help="canary group (default [rollout] canary, else the first group)")
    sp.add_argument("--promote", action="store_true", help="continue with every other group if the canary passes")
    sp.add_argument("--rollback-all", action="store_true", help="on a failed gate restore every group this rollout changed")
    sp = sub.add_parser("promote", parents=[common], help="after a passed canary: the other groups, one at a time")
    sp.add_argument("--rollback-all", action="store_true")
    sub.add_parser("rollback", parents=[common], help="restore every group this rollout changed to triton")
    sp = sub.add_parser("status", parents=[common], help="rollout state, lock, and each group's /health and arm")
    sp.add_argument("--json", action="store_true", help="print the state file")
    sub.add_parser("check", parents=[common],
                   help="metric check of the paused canary vs a control since the pause (read-only; exit 0/3/5)")
    sub.add_parser("resume", parents=[common], help="continue an interrupted or halted canary, promote or rollback")
    sp = sub.add_parser("abort", parents=[common],
                        help="end the rollout where it stands, every group in service (stops a running rollout first)")
    sp.add_argument("--reason", required=True, help="why (goes into the audit log)")
    sp = sub.add_parser("unlock", parents=[common], help="remove the lock of a rollout that is no longer running")
    sp.add_argument("--reason", required=True, help="why (goes into the audit log)")
    sp.add_argument("--force", action="store_true",
                    help="also when the holder cannot be checked (other host, unreadable lock) or is alive")
    sp = sub.add_parser("recover", parents=[common],
                        help="move an unreadable state file aside; rebuild the state from what each group serves")
    sp.add_argument("--reason", required=True, help="why (goes into the audit log)")
    sub.add_parser("up", parents=[common], help="start on triton every group that is not serving (local fleets, demos)")
    return p


def cmd_status(inv, args) -> int:
    try:
        held = locks.read(inv.state_dir)
        lock_line = locks.describe(held) if held else "free"
    except locks.LockCorrupt as e:
        lock_line = str(e)
    try:
        r = Rollout(inv)
    except RecordError as e:
        print(f"lock: {lock_line}\nstate: {e}")
        return EXIT_ERROR
    if args.json:
        print(json.dumps(r.state, indent=1))
        return 0
    print(f"lock: {lock_line}")
    if r.state is None:
        print(f"no rollout recorded in {r.rec.state_path}")
    else:
        st = r.state
        print(f"rollout {st['rollout_id']}: {st['status']}" + (f" -- {st['reason']}" if st["reason"] else ""))
        print(f"result: {st['result_path']}")
    for g in inv.groups:
        gs = (r.state or {}).get("groups", {}).get(g.name, {})
        ok, why = r.healthy(g.name)
        arm, how = r.observe(g.name)
        print(f"  {g.name:12s} {g.url:28s} recorded={gs.get('arm', '?')!s:7s} serves={arm or 'unconfirmed'!s:11s} "
              f"step={gs.get('step', '-'):9s} outcome={gs.get('outcome', '-'):16s} health={'ok' if ok else why}")
        if arm is None:
            print(f"  {'':12s} arm: {how}")
    return 0


def cmd_check(inv) -> int:
    r = Rollout(inv)
    st = r.state
    if st is None or st["status"] != "canary_passed" or not (st.get("pause_metrics") or {}).get("candidate"):
        raise RolloutError("check reads a paused canary's metrics since the pause; no paused canary with a metrics "
                           f"scrape is recorded ({r.rec.state_path})")
    since, canary = st["pause_metrics"], st["order"][0]
    cand = window(since["candidate"], scrape(inv.group(canary).url, r.api_key))
    ctrl = None
    if since.get("control") and since.get("control_metrics"):
        ctrl = window(since["control_metrics"], scrape(inv.group(since["control"]).url, r.api_key))
    res = metric_check(cand, ctrl, inv.gates)
    print(f"canary {canary} since the pause ({cand['seconds']:.0f} s, {cand['requests']:g} requests): "
          f"{'pass' if res['passed'] else 'FAIL'} -- {res['reason']}")
    return 0 if res["passed"] else EXIT_GATE


def cmd_up(r: Rollout) -> int:
    p = r.p
    for g in r.inv.groups:
        launcher = r.launchers[g.name]
        if r.healthy(g.name)[0]:
            p.say(f"[{g.name}] already serving at {g.url}")
            continue
        p.say(f"[{g.name}] starting ({CONTROL}): {launcher.describe_start(CONTROL)}")
        r.rec.audit("up", None, group=g.name, arm=CONTROL, command=launcher.describe_start(CONTROL))
        launcher.start(CONTROL)
        t0, deadline = time.monotonic(), r.inv.settings["startup_deadline_s"]
        while not r.healthy(g.name)[0]:
            died = launcher.died()
            if died or time.monotonic() - t0 > deadline:
                raise RolloutError(f"group {g.name} did not come up: {died or f'no /health 200 in {deadline:.0f} s'}")
            p.wait(f"[{g.name}] waiting for {g.url}/health", time.monotonic() - t0, deadline)
            time.sleep(0.1)
        p.say(f"[{g.name}] serving after {time.monotonic() - t0:.1f} s")
    return 0


def cmd_unlock(inv, args) -> int:
    held, what = locks.check_unlock(inv.state_dir, args.force)
    try:
        state = Record(inv.state_dir, inv.path).load()
        rid = state and state["rollout_id"]
    except RecordError:
        rid = None  # the lock must still be removable when the state is the broken part
    Record(inv.state_dir).audit("unlock", rid, reason=args.reason, forced=args.force, previous=held, holder=what)
    locks.remove(inv.state_dir)
    print(f"lock removed ({locks.describe(held) if held else what})" if held or what != "no lock" else "no lock was held")
    return 0


def wait_for_holder(inv, timeout: float) -> None:
    """abort: ask a live rollout on this host to stop at its next safe point, and wait for it."""
    try:
        held = locks.read(inv.state_dir)
    except locks.LockCorrupt:
        return
    if not held or locks.holder_alive(held) is not True:
        return
    os.kill(held["pid"], 15)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            now_held = locks.read(inv.state_dir)
        except locks.LockCorrupt:
            return
        if not now_held or now_held.get("pid") != held["pid"] or locks.holder_alive(now_held) is False:
            return
        time.sleep(0.1)
    raise RolloutError(f"the running rollout (pid {held['pid']}) did not stop within {timeout:.0f} s")


def cmd_recover(inv, args) -> int:
    rec = Record(inv.state_dir, inv.path)
    try:
        if rec.load() is not None:
            raise RolloutError(f"{rec.state_path} is readable; nothing to recover (`status` shows it)")
    except RecordError:
        pass
    aside = rec.move_aside()
    r = Rollout(inv)
    r.state = r.new_state(None, False, False)
    r.state.update(status="aborted", reason=f"state rebuilt by recover: {args.reason}")
    for name in r.state["order"]:
        arm, how = r.observe(name)
        ok, why = r.healthy(name)
        r.note_service(name, ok, why)
        r.group_state(name).update(arm=arm, outcome="recovered")
        print(f"  {name}: {'serves ' + arm if arm else 'arm unconfirmed'} ({how}); health {'ok' if ok else why}")
    r.audit("recover", reason=args.reason, moved_aside=str(aside) if aside else None,
            observed={n: r.group_state(n)["observed"] for n in r.state["order"]})
    r.save()
    print(f"state rebuilt in {rec.state_path}" + (f"; the unreadable one is kept as {aside}" if aside else ""))
    return 0


def run(args, stop: Stop) -> int:
    inv = load(args.inventory)
    for flag, key in (("startup_deadline", "startup_deadline_s"), ("drain_deadline", "drain_deadline_s"),
                      ("progress_deadline", "progress_deadline_s")):
        if getattr(args, flag) is not None:
            inv.settings[key] = getattr(args, flag)
    if args.results_dir:
        inv.results_dir = Path(args.results_dir).resolve()
    if args.verb == "plan":
        print("\n".join(plan_lines(inv, args.group, args.rollback_all)))
        return 0
    if args.verb == "status":
        return cmd_status(inv, args)
    if args.verb == "check":
        return cmd_check(inv)
    if args.verb == "unlock":
        if not args.reason.strip():
            raise RolloutError("unlock --reason must not be empty")
        return cmd_unlock(inv, args)
    if args.verb == "abort":
        if not args.reason.strip():
            raise RolloutError("abort --reason must not be empty")
        s = inv.settings
        wait_for_holder(inv, s["drain_deadline_s"] + s["startup_deadline_s"] + 60)
    held = locks.acquire(inv.state_dir, " ".join(sys.argv[1:]) or args.verb, None)
    r = None
    try:
        if args.verb == "recover":
            return cmd_recover(inv, args)
        r = Rollout(inv, stop=stop)
        if args.verb == "up":
            return cmd_up(r)
        if args.verb == "canary":
            r.start_rollout(args.group, args.rollback_all, args.promote)
            r.run_canary()
        elif args.verb == "promote":
            if args.rollback_all and r.state:
                r.state["rollback_all"] = True
            r.run_promote()
        elif args.verb == "rollback":
            r.run_rollback()
        elif args.verb == "resume":
            r.run_resume()
        elif args.verb == "abort":
            r.run_abort(args.reason)
        return 0
    except (KeyboardInterrupt, Interrupted) as e:
        hard = isinstance(e, KeyboardInterrupt)
        if r is not None and r.state is not None:
            r.audit("interrupted", status=r.state["status"], hard=hard, reason=str(e) or "second signal",
                    steps={n: g["step"] for n, g in r.state["groups"].items()})
        where = ("" if not (r and r.state) else
                 "; " + ", ".join(f"{n} {g['step']}" for n, g in r.state["groups"].items() if g["step"] != "idle"))
        print(f"\ninterrupted ({'at once' if hard else str(e)}){where}; state kept in {inv.state_dir}; "
              f"`python -m rollout resume` continues, `abort` ends it with every group in service", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        locks.release(inv.state_dir, held)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    stop = Stop()
    stop.install()
    try:
        return run(args, stop)
    except InventoryError as e:
        print(f"error: bad inventory: {e}", file=sys.stderr)
        return EXIT_ERROR
    except (locks.LockHeld, locks.LockCorrupt) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_LOCKED
    except RolloutFailed as e:
        print(f"ROLLED BACK: {e}", file=sys.stderr)
        return EXIT_GATE
    except Halted as e:
        print(f"HALTED, every group in service: {e}", file=sys.stderr)
        return EXIT_HALTED
    except (KeyboardInterrupt, Interrupted) as e:
        print(f"\ninterrupted before the rollout started: {e}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (RolloutError, RecordError, LaunchError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
