"""python -m rollout VERB: plan, canary, promote, rollback, status, resume, unlock, up.

Exit codes: 0 done; 1 refused or error (bad inventory, unreachable group, rollback failed);
3 a gate failed and the rollback finished; 4 another rollout holds the lock; 130 interrupted.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from rollout import lock as locks
from rollout.engine import (CONTROL, EXIT_ERROR, EXIT_GATE, EXIT_INTERRUPTED, EXIT_LOCKED, Rollout,
                            RolloutError, RolloutFailed)
from rollout.inventory import InventoryError, load
from rollout.launchers import LaunchError
from rollout.plan import plan_lines
from rollout.record import Record

MUTATING = ("canary", "promote", "rollback", "resume", "up")


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--inventory", "-i", default=os.environ.get("ROLLOUT_INVENTORY", "rollout/inventory.toml"),
                        help="inventory TOML (default: $ROLLOUT_INVENTORY or rollout/inventory.toml)")
    common.add_argument("--startup-deadline", type=float, metavar="S", help="override [rollout] startup_deadline_s")
    common.add_argument("--drain-deadline", type=float, metavar="S", help="override [rollout] drain_deadline_s")
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
    sp = sub.add_parser("status", parents=[common], help="rollout state, lock, and each group's /health")
    sp.add_argument("--json", action="store_true", help="print the state file")
    sub.add_parser("resume", parents=[common], help="continue an interrupted canary, promote or rollback")
    sp = sub.add_parser("unlock", parents=[common], help="remove the lock of a rollout that is no longer running")
    sp.add_argument("--reason", required=True, help="why (goes into the audit log)")
    sub.add_parser("up", parents=[common], help="start on triton every group that is not serving (local fleets, demos)")
    return p


def cmd_status(inv, args) -> int:
    r = Rollout(inv)
    held = locks.read(inv.state_dir)
    if args.json:
        print(json.dumps(r.state, indent=1))
        return 0
    print(f"lock: {locks.describe(held) if held else 'free'}")
    if r.state is None:
        print(f"no rollout recorded in {r.rec.state_path}")
    else:
        st = r.state
        print(f"rollout {st['rollout_id']}: {st['status']}" + (f" -- {st['reason']}" if st["reason"] else ""))
        print(f"result: {st['result_path']}")
    for g in inv.groups:
        gs = (r.state or {}).get("groups", {}).get(g.name, {})
        ok, why = r.healthy(g.name)
        print(f"  {g.name:12s} {g.url:28s} arm={gs.get('arm', '?')!s:7s} step={gs.get('step', '-'):9s} "
              f"outcome={gs.get('outcome', '-'):12s} starts={gs.get('starts', {})} health={'ok' if ok else why}")
    return 0


def cmd_up(r: Rollout) -> int:
    p = r.p
    for g in r.inv.groups:
        launcher = r.launchers[g.name]
        if r.healthy(g.name)[0]:
            p.say(f"[{g.name}] already serving at {g.url}")
            continue
        p.say(f"[{g.name}] starting ({CONTROL}): {launcher.describe_start(CONTROL)}")
        launcher.start(CONTROL)
        r.rec.audit("up", None, group=g.name, arm=CONTROL)
        t0, deadline = time.monotonic(), r.inv.settings["startup_deadline_s"]
        while not r.healthy(g.name)[0]:
            died = launcher.died()
            if died or time.monotonic() - t0 > deadline:
                raise RolloutError(f"group {g.name} did not come up: {died or f'no /health 200 in {deadline:.0f} s'}")
            p.wait(f"[{g.name}] waiting for {g.url}/health", time.monotonic() - t0, deadline)
            time.sleep(0.1)
        p.say(f"[{g.name}] serving after {time.monotonic() - t0:.1f} s")
    return 0


def run(args) -> int:
    inv = load(args.inventory)
    if args.startup_deadline is not None:
        inv.settings["startup_deadline_s"] = args.startup_deadline
    if args.drain_deadline is not None:
        inv.settings["drain_deadline_s"] = args.drain_deadline
    if args.results_dir:
        inv.results_dir = Path(args.results_dir).resolve()
    if args.verb == "plan":
        print("\n".join(plan_lines(inv, args.group, args.rollback_all)))
        return 0
    if args.verb == "status":
        return cmd_status(inv, args)
    if args.verb == "unlock":
        if not args.reason.strip():
            raise RolloutError("unlock --reason must not be empty")
        held = locks.force_unlock(inv.state_dir)
        state = Record(inv.state_dir).load()
        Record(inv.state_dir).audit("unlock", state and state["rollout_id"], reason=args.reason, previous=held)
        print(f"lock removed ({locks.describe(held)})" if held else "no lock was held")
        return 0
    held = locks.acquire(inv.state_dir, " ".join(sys.argv[1:]) or args.verb, None)
    r = None
    try:
        r = Rollout(inv)
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
        return 0
    except KeyboardInterrupt:
        if r is not None and r.state is not None:
            r.audit("interrupted", status=r.state["status"])
        print(f"\ninterrupted; state kept in {inv.state_dir}; `python -m rollout resume` continues", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        locks.release(inv.state_dir, held)


def main(argv=None) -> int:
    args = parser().parse_args(argv)

    def on_term(signum, frame):
        raise KeyboardInterrupt  # unwind through finally: lock released, state already saved
    signal.signal(signal.SIGTERM, on_term)
    try:
        return run(args)
    except InventoryError as e:
        print(f"error: bad inventory: {e}", file=sys.stderr)
        return EXIT_ERROR
    except locks.LockHeld as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_LOCKED
    except RolloutFailed as e:
        print(f"ROLLED BACK: {e}", file=sys.stderr)
        return EXIT_GATE
    except (RolloutError, LaunchError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
