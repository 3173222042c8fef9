"""The rollout itself: canary, promote, rollback, resume, abort, one group at a time.

A group moves to an arm through recorded steps -- stopping -> starting -> gating -> idle. The
audit line of each step is written, then the state, before the step runs, so `resume`
re-enters at the step that was interrupted: a group whose server is already up on the target
arm is not started again, its gates are re-run from the start.

Gates for a promotion, in order: starts (startup deadline), arm (the plugin's metrics or the
launcher's record confirm the target arm; a group whose arm cannot be confirmed is not gated),
/health_generate, numerics vs a control group (the candidate's verify path, rollout.numerics),
speed vs a control group, metrics (SGLang's /metrics over the gates, rollout.metrics_check).
A rollback runs starts, arm and /health_generate.

Outcomes of a gate: pass; FAIL -> the group is rolled back to control (with rollback_all,
every group this rollout changed), exit 3; inconclusive -> the rollout halts where every group
serves, exit 5, `resume` runs the gate again. A transient error (connection, timeout, 5xx) is
retried gate_retries times first. An error that is the control's (it went out of service) is
recorded against the control: the candidate is neither blamed nor restarted.

Never more than max_unavailable groups out of service: before any group is stopped, rollback
included, every other group's /health is read; a stop that would exceed it is refused.
"""
from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from rollout.ab import run_ab
from rollout.client import EndpointError
from rollout.durable import write_file
from rollout.endpoint_info import describe, provenance
from rollout.inventory import Inventory
from rollout.kernel_spread import bf16_spread
from rollout.launchers import LaunchError, make_launcher
from rollout.metrics_check import check as metric_check, scrape, window
from rollout.numerics import compare
from rollout.observe import healthy, launcher_can_tell, observe_arm
from rollout.progress import Progress
from rollout.record import Record, now
from rollout.redact import scrub
from rollout.sglang_logprobs import LayoutError
from rollout.stop import Interrupted, Stop

CANDIDATE, CONTROL = "flash", "triton"
EXIT_ERROR, EXIT_GATE, EXIT_LOCKED, EXIT_HALTED, EXIT_INTERRUPTED = 1, 3, 4, 5, 130
# statuses of a rollout that is not finished: a new canary is refused while one of these holds
ACTIVE = ("canary", "canary_passed", "promoting", "rolling_back", "halted")
# the gates of a promotion and of a rollback, in the order move() runs them
PROMOTION_GATES = ("starts", "arm", "health_generate", "numerics", "speed", "metrics")
ROLLBACK_GATES = ("starts", "arm", "health_generate")


class RolloutError(RuntimeError):
    """Refused or could not proceed; exit 1 with this message."""


class GateFailed(RuntimeError):
    def __init__(self, group: str, gate: str, reason: str):
        super().__init__(f"group {group}: gate {gate} failed: {reason}")
        self.group, self.gate, self.reason = group, gate, reason


class Halted(RuntimeError):
    """The rollout stopped where every group serves (inconclusive gate, control out of
    service, progress deadline, a rollback held back by max_unavailable); exit 5."""


class RolloutFailed(RuntimeError):
    """A gate failed and the rollback finished; exit 3 with this reason."""


class Rollout:
    def __init__(self, inv: Inventory, progress: Progress | None = None, stop: Stop | None = None):
        self.inv, self.p, self.stop = inv, progress or Progress(), stop or Stop()
        self.rec = Record(inv.state_dir, inv.path)
        self.launchers = {g.name: make_launcher(g, inv) for g in inv.groups}
        self.api_key = inv.api_key()
        self.state: dict | None = self.rec.load()
        self.deadline = time.monotonic() + inv.settings["progress_deadline_s"]

    # ---- record --------------------------------------------------------------------------
    @property
    def rid(self):
        return self.state["rollout_id"] if self.state else None

    def audit(self, event: str, **kw):
        return self.rec.audit(event, self.rid, **kw)

    def save(self):
        self.rec.save(self.state)

    def group_state(self, name: str) -> dict:
        return self.state["groups"][name]

    def set_group(self, name: str, **kw):
        self.audit("group", group=name, **kw)  # the log first: after a crash it is never behind the state
        self.group_state(name).update(kw)
        self.save()

    def set_status(self, status: str, event: str = "status", **kw):
        self.audit(event, status=status, **kw)
        self.state["status"] = status
        if "reason" in kw:
            self.state["reason"] = kw["reason"]
        self.save()

    def new_state(self, canary: str | None, rollback_all: bool, auto_promote: bool) -> dict:
        order = self.inv.order(canary)
        rid = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
        return {"rollout_id": rid, "inventory": str(self.inv.path), "created": now(), "status": "canary",
                "candidate": CANDIDATE, "control": CONTROL, "order": order, "rollback_all": rollback_all,
                "auto_promote": auto_promote, "reason": None, "rollback_targets": [], "reference": {},
                "gates": [], "halted_from": None, "result_path": str(self.inv.results_dir / f"rollout-{rid}.json"),
                "groups": {n: {"arm": None, "target": None, "step": "idle", "outcome": "pending", "from": None,
                               "changed": False, "service": None, "observed": None,
                               "starts": {CANDIDATE: 0, CONTROL: 0}, "results": {}} for n in order}}

    # ---- what the groups do ----------------------------------------------------------------
    def healthy(self, name: str) -> tuple[bool, str]:
        return healthy(self.inv.group(name), self.inv.settings["health_timeout_s"], self.api_key)

    def note_service(self, name: str, ok: bool, why: str):
        """Keep each group's last known service state in the record (a control that went down
        must show in the state, not only in a message)."""
        if self.state is None or name not in self.state["groups"]:
            return
        gs = self.group_state(name)
        if gs.get("service") is None or gs["service"]["in_service"] != ok:
            self.audit("service", group=name, in_service=ok, why=why)
        gs["service"] = {"in_service": ok, "why": why, "time": now()}
        if ok and gs["outcome"] == "control_failed":
            gs["outcome"] = "pending"  # it serves again; its failure stays in the audit log

    def observe(self, name: str) -> tuple[str | None, str]:
        arm, how = observe_arm(self.inv.group(name), self.launchers[name], self.inv.settings["health_timeout_s"],
                               self.api_key)
        if self.state is not None and name in self.state["groups"]:
            self.group_state(name)["observed"] = {"arm": arm, "how": how, "time": now()}
        return arm, how

    def may_take_out(self, name: str):
        """Refuses (RolloutError) a stop that would leave more than max_unavailable groups out
        of service. A group that is itself already out may always be restarted."""
        limit = self.inv.settings["max_unavailable"]
        down = {}
        for g in self.inv.groups:
            ok, why = self.healthy(g.name)
            self.note_service(g.name, ok, why)
            if not ok:
                down[g.name] = why
        others = {g: w for g, w in down.items() if g != name}
        if name not in down and len(others) + 1 > limit:
            g, why = next(iter(others.items()))
            self.audit("preflight", passed=False, next=name, group=g, reason=why, out_of_service=others,
                       max_unavailable=limit)
            if self.state is not None:
                self.save()
            raise RolloutError(f"group {g} is not in service ({why}); refusing to take group {name} out of "
                               f"service as well (max_unavailable = {limit})")
        self.audit("preflight", passed=True, next=name, out_of_service=others, max_unavailable=limit)

    def reconcile(self) -> dict[str, str]:
        """Every group's real arm, before a new rollout is planned on top of the last record."""
        old = self.state.get("previous_arms") or {}
        seen, unknown = {}, []
        for name in self.state["order"]:
            arm, how = self.observe(name)
            seen[name] = {"arm": arm, "how": how}
            if arm is None:
                unknown.append(f"group {name}: {how}")
            elif old.get(name) not in (None, arm):
                self.p.say(f"[{name}] the last record said {old[name]}, it serves {arm} ({how}); the record follows it")
        self.audit("reconcile", observed=seen, recorded=old)
        if unknown:
            raise RolloutError("cannot confirm which arm every group runs, so no rollout is planned on it: "
                               + "; ".join(unknown))
        return {n: s["arm"] for n, s in seen.items()}

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    def check_progress(self, name: str):
        """At a point where every group serves: honour a stop request and the progress deadline."""
        self.stop.check(f"while group {name} serves")
        if self.time_left() <= 0 and not self.stop.holding:
            raise Halted(f"progress deadline of {self.inv.settings['progress_deadline_s']:.0f} s passed while group "
                         f"{name} serves; every group is in service; `python -m rollout resume` continues")

    def request_timeout(self) -> float:
        return max(1.0, min(self.inv.gates["request_timeout_s"], self.time_left()))

    # ---- gates ---------------------------------------------------------------------------
    def _gate(self, name: str, gate: str, passed: bool | None, reason: str, detail: dict | None = None):
        """passed: True, False (raise GateFailed), None (inconclusive: raise Halted)."""
        entry = {"time": now(), "group": name, "gate": gate, "passed": passed, "reason": reason}
        self.audit("gate", **entry)
        self.state["gates"].append(entry)
        if detail is not None:
            self.group_state(name)["results"][gate] = detail
        self.save()
        word = {True: "pass", False: "FAIL", None: "INCONCLUSIVE"}[passed]
        self.p.say(f"[{name}] gate {gate}: {word} -- {reason}")
        if passed is False:
            raise GateFailed(name, gate, reason)
        if passed is None:
            raise Halted(f"group {name}: gate {gate} inconclusive: {reason}; every group serves; "
                         f"`python -m rollout resume` runs the gate again, `rollback` undoes the group")

    def gate_starts(self, name: str):
        g, launcher = self.inv.group(name), self.launchers[name]
        deadline, t0 = self.inv.settings["startup_deadline_s"], time.monotonic()
        while True:
            elapsed = time.monotonic() - t0
            try:
                died = launcher.died()  # first: a server that died at bind must not pass on another's /health
            except LaunchError as e:
                died = str(e)
            if died:
                return self._gate(name, "starts", False, f"server exited while starting: {died}")
            ok, why = self.healthy(name)
            if ok:
                return self._gate(name, "starts", True, f"/health answered 200 after {elapsed:.1f} s")
            if elapsed > deadline:
                return self._gate(name, "starts", False, f"no /health 200 within the startup deadline "
                                                         f"{deadline:.0f} s (last: {why})")
            self.p.wait(f"[{name}] waiting for {g.url}/health", elapsed, deadline)
            time.sleep(min(1.0, max(0.05, deadline / 200)))

    def gate_arm(self, name: str, arm: str):
        seen, how = self.observe(name)
        if seen is None:
            return self._gate(name, "arm", False, f"cannot confirm which arm it runs, so it is not gated: {how}")
        self._gate(name, "arm", seen == arm, f"runs {seen} (expected {arm}): {how}")

    def gate_health_generate(self, name: str):
        from rollout.client import request
        url, timeout = self.inv.group(name).url, self.inv.settings["health_timeout_s"]
        try:
            status, _, _ = request(url, "GET", "/health_generate", timeout=timeout, api_key=self.api_key)
            ok, why = status == 200, f"HTTP {status}"
        except EndpointError as e:
            ok, why = False, str(e)
        self._gate(name, "health_generate", ok, f"{url}/health_generate: {why}")

    def control_peer(self, name: str) -> str | None:
        """Name of a group that serves the control arm (confirmed), None when no group is left
        on it by design (the last group). Raises Halted when control groups exist but none
        serves: the failure is theirs, recorded against them."""
        candidates = [o for o in self.state["order"] if o != name and self.group_state(o)["arm"] == CONTROL
                      and self.group_state(o)["step"] == "idle"]
        problems = {}
        for other in candidates:
            ok, why = self.healthy(other)
            self.note_service(other, ok, why)
            if not ok:
                problems[other] = why
                continue
            arm, how = self.observe(other)
            if arm == CONTROL:
                return other
            ok, why = self.healthy(other)  # it may have died between the two reads
            self.note_service(other, ok, why)
            problems[other] = f"does not confirm arm {CONTROL}: {how}" if ok else why
        if not candidates:
            return None
        for other, why in problems.items():
            self.group_state(other)["outcome"] = "control_failed"
            self.audit("control_failed", group=other, reason=why, while_gating=name)
        self.save()
        raise Halted(f"no control group serves ({'; '.join(f'{g}: {w}' for g, w in problems.items())}); group "
                     f"{name} is not blamed and keeps serving {self.group_state(name)['arm']}; bring the control "
                     f"back, then `python -m rollout resume`")

    def control_for(self, name: str, gate: str, settings: dict) -> str | None:
        """URL of a live control group, or None to use the canary's recorded control data."""
        peer = self.control_peer(name)
        if peer is not None:
            return self.inv.group(peer).url
        ref = self.state["reference"]
        if f"{gate}_control" not in ref:
            self._gate(name, gate, None, f"no group is left on {CONTROL} and no control {gate} data were recorded")
        if ref.get(f"{gate}_settings") != settings:
            self._gate(name, gate, None, f"recorded control {gate} data were taken with "
                                         f"{ref.get(f'{gate}_settings')}, the inventory now says {settings}")
        return None

    def attempt(self, name: str, gate: str, fn):
        """Run fn(), retrying transient errors; an error that is a group's own (it went out of
        service) fails that group's gate (candidate) or halts the rollout (control)."""
        tries = self.inv.settings["gate_retries"] + 1
        cand_url = self.inv.group(name).url
        last = None
        for i in range(tries):
            self.check_progress(name)
            try:
                with self.stop.interruptible():
                    return fn()
            except LayoutError as e:
                self._gate(name, gate, None, f"an answer is not in SGLang 0.5.23's layout: {e}")
            except EndpointError as e:
                last = e
                if e.url == cand_url:
                    ok, why = self.healthy(name)
                    try:
                        died = self.launchers[name].died()
                    except LaunchError as le:
                        died = str(le)
                    if died or not ok:
                        self._gate(name, gate, False, f"{e} -- and the group is out of service: {died or why}")
                else:
                    self.control_peer(name)  # halts, recording the control, if it is gone
                if not e.transient:
                    self._gate(name, gate, None, f"{e} (not a transient error; retrying will not help)")
                self.audit("gate_retry", group=name, gate=gate, attempt=i + 1, of=tries, error=str(e))
                self.p.say(f"[{name}] gate {gate}: transient error, attempt {i + 1}/{tries}: {e}")
                if i + 1 < tries:
                    with self.stop.interruptible():
                        time.sleep(self.inv.settings["gate_retry_wait_s"])
        self._gate(name, gate, None, f"transient errors in all {tries} attempts, the last: {last}")

    def gate_numerics(self, name: str):
        gt, ref = self.inv.gates, self.state["reference"]
        settings = {k: gt[k] for k in ("numerics_prompts", "numerics_prompt_tokens", "numerics_new_tokens",
                                       "numerics_long_context_tokens", "seed", "numerics_mode")}

        def run():
            peer = self.control_for(name, "numerics", settings)
            self.p.say(f"[{name}] numerics vs {peer or 'recorded control scoring'}")
            return peer, compare(
                self.inv.group(name).url, peer, prompts=gt["numerics_prompts"],
                prompt_tokens=gt["numerics_prompt_tokens"], new_tokens=gt["numerics_new_tokens"],
                long_context_tokens=gt["numerics_long_context_tokens"], seed=gt["seed"],
                min_top1_agreement=gt["min_top1_agreement"], max_mean_abs_logprob_diff=gt["max_mean_abs_logprob_diff"],
                mode=gt["numerics_mode"], min_token_agreement=gt["min_token_agreement"],
                timeout=self.request_timeout(), api_key=self.api_key, recorded_control=ref.get("numerics_control"),
                progress=lambda m: (self.check_progress(name), self.p.say(f"[{name}]   {m}")))
        peer, r = self.attempt(name, "numerics", run)
        if peer is not None and "numerics_control" not in ref:
            ref["numerics_control"], ref["numerics_settings"] = r["control_outputs"], settings
        r["control_url"] = peer
        r["bf16_spread"] = bf16_spread()
        passed = {"pass": True, "fail": False}.get(r["verdict"])
        self._gate(name, "numerics", passed, r["reason"], {k: v for k, v in r.items() if k != "control_outputs"})

    def gate_speed(self, name: str):
        gt, ref = self.inv.gates, self.state["reference"]
        settings = {k: gt[k] for k in ("context_tokens", "max_new_tokens", "rounds", "seed")}

        def run():
            peer = self.control_for(name, "speed", settings)
            self.p.say(f"[{name}] speed A/B at {gt['context_tokens']} tokens vs {peer or 'recorded control samples'}")
            return peer, run_ab(
                self.inv.group(name).url, peer, context_tokens=gt["context_tokens"], rounds=gt["rounds"],
                max_new_tokens=gt["max_new_tokens"], threshold=gt["speed_threshold"], seed=gt["seed"],
                ci_level=gt["ci_level"], timeout=self.request_timeout(), api_key=self.api_key,
                progress=lambda m: (self.check_progress(name), self.p.say(f"[{name}]   {m}")),
                recorded_control=ref.get("speed_control"))
        peer, r = self.attempt(name, "speed", run)
        if peer is not None and "speed_control" not in ref:
            ref["speed_control"], ref["speed_settings"] = r["control"], settings
        self._gate(name, "speed", r["passed"], r["reason"], r)

    def metrics_snapshot(self, name: str) -> dict | None:
        """Scrapes of the group and of a control group, to open a metric-check window."""
        try:
            peer = self.control_peer(name)
        except Halted:
            peer = None
        snap = {"group": name, "control": peer}
        for role, g in (("candidate", name), ("control_metrics", peer)):
            if g is None:
                continue
            try:
                snap[role] = scrape(self.inv.group(g).url, self.api_key, self.inv.settings["health_timeout_s"])
            except EndpointError as e:
                snap[role] = None
                snap[f"{role}_error"] = str(e)
        return snap

    def gate_metrics(self, name: str, gate: str, since: dict | None):
        if not since or not since.get("candidate"):
            why = (since or {}).get("candidate_error", "no scrape at the start of the window")
            entry = {"time": now(), "group": name, "gate": gate, "passed": None, "reason": f"skipped: {why}"}
            self.audit("gate", **entry)
            self.state["gates"].append(entry)
            self.save()
            self.p.say(f"[{name}] gate {gate}: skipped -- {why}")
            return

        def run():
            url = self.inv.group(name).url
            cand = window(since["candidate"], scrape(url, self.api_key, self.inv.settings["health_timeout_s"]))
            ctrl = None
            peer = since.get("control")
            if peer and since.get("control_metrics"):
                try:
                    ctrl = window(since["control_metrics"], scrape(self.inv.group(peer).url, self.api_key,
                                                                   self.inv.settings["health_timeout_s"]))
                except EndpointError:
                    self.control_peer(name)  # halts when the control is gone; else compare without it
            return metric_check(cand, ctrl, self.inv.gates)
        r = self.attempt(name, gate, run)
        self._gate(name, gate, r["passed"], r["reason"], r)

    # ---- moving one group ----------------------------------------------------------------
    def restore_after_stop(self, name: str, arm: str):
        """A signal came while the group drained: it is down now, so start it again on the
        arm it had before the tool exits."""
        launcher = self.launchers[name]
        self.p.say(f"[{name}] stop requested: starting it again on {arm} before exiting")
        self.set_group(name, arm=arm, step="starting", target=arm)
        with self.stop.deferred():
            launcher.start(arm)
            self.group_state(name)["starts"][arm] += 1
            self.audit("start", group=name, arm=arm, command=launcher.describe_start(arm), why="restore")
            self.gate_starts(name)
        self.set_group(name, step="idle", target=None, outcome="interrupted")

    def move(self, name: str, arm: str, *, full_gates: bool, preflight_done: bool = False):
        """Take group `name` to `arm`, resuming at its recorded step. Raises GateFailed."""
        gs, launcher = self.group_state(name), self.launchers[name]
        if gs["step"] == "idle":
            seen, how = self.observe(name)
            if gs["arm"] == arm and seen == arm:
                self.audit("skip", group=name, arm=arm, reason=f"already runs {arm}: {how}")
                return
            if seen != gs["arm"]:
                raise RolloutError(f"group {name} is recorded on {gs['arm']} but {'runs ' + seen if seen else 'its arm cannot be confirmed'} "
                                   f"({how}); refusing to move it (`python -m rollout abort` then a new canary "
                                   f"reconciles the record)")
            if launcher_can_tell(launcher) and self.healthy(name)[0] and launcher.running(gs["arm"]) is False:
                raise RolloutError(f"group {name} serves at {self.inv.group(name).url}, but its launcher has no record "
                                   f"of that server ({how}; pid file lost?); the tool cannot drain what it did not "
                                   f"start: stop it by hand or restore its record, then try again")
            self.check_progress(name)
            if not preflight_done:
                self.may_take_out(name)
            self.check_progress(name)  # a stop asked for during the preflight: nothing is down yet
            self.set_group(name, target=arm, step="stopping", changed=True, **{"from": gs["arm"]})
        if gs["target"] != arm:
            raise RolloutError(f"group {name} is in the middle of a move to {gs['target']} (step {gs['step']}); "
                               f"resume or roll back first")
        if gs["step"] == "stopping":
            old_arms = [gs["arm"]] if gs["arm"] else [CANDIDATE, CONTROL]
            with self.stop.deferred():
                for old in old_arms:
                    self.p.say(f"[{name}] draining and stopping ({old}): {launcher.describe_stop(old)}")
                    try:
                        how = launcher.stop(old, lambda e, d: self.p.wait(f"[{name}] draining", e, d))
                    except LaunchError as e:
                        raise GateFailed(name, "stop", str(e)) from None
                    self.audit("stop", group=name, arm=old, how=how)
            self.set_group(name, arm=None, step="starting")
            if self.stop.requested and gs.get("from") and not self.stop.holding:
                self.restore_after_stop(name, gs["from"])
                raise Interrupted(f"stopped by signal after group {name} drained; it serves {gs['from']} again")
        if gs["step"] == "starting":
            with self.stop.deferred():
                if launcher.running(arm):
                    self.audit("start_skipped", group=name, arm=arm, reason="already running on this arm")
                else:
                    self.p.say(f"[{name}] starting ({arm}): {launcher.describe_start(arm)}")
                    self.audit("start", group=name, arm=arm, command=launcher.describe_start(arm))
                    gs["starts"][arm] += 1
                    self.save()
                    try:
                        launcher.start(arm)
                    except (LaunchError, ValueError) as e:
                        self.set_group(name, arm=arm, step="gating")
                        self._gate(name, "starts", False, str(e))
                self.set_group(name, arm=arm, step="gating")
        with self.stop.deferred():  # a server that is coming up is waited for, not abandoned
            self.gate_starts(name)
        self.check_progress(name)
        self.gate_arm(name, arm)
        with self.stop.interruptible():
            self.gate_health_generate(name)
        if full_gates:
            since = self.metrics_snapshot(name)
            self.gate_numerics(name)
            self.gate_speed(name)
            self.gate_metrics(name, "metrics", since)
        self.set_group(name, step="idle", target=None, outcome="promoted" if arm == CANDIDATE else "rolled_back")
        self.write_result()

    # ---- commands ------------------------------------------------------------------------
    def start_rollout(self, canary: str | None, rollback_all: bool, auto_promote: bool):
        if self.state and self.state["status"] in ACTIVE:
            raise RolloutError(f"rollout {self.rid} is '{self.state['status']}' (state {self.rec.state_path}); "
                               f"run promote, rollback, resume or abort, not a new canary")
        previous = {n: g.get("arm") for n, g in self.state["groups"].items()} if self.state else {}
        self.state = self.new_state(canary, rollback_all or self.inv.settings["rollback_all"], auto_promote)
        self.state["previous_arms"] = previous  # what the last record said, for reconcile
        self.audit("rollout_start", order=self.state["order"], rollback_all=self.state["rollback_all"],
                   inventory=str(self.inv.path))
        self.save()

    def abort_start(self, reason: str):
        # nothing was touched: the rollout ends here and a new canary may start later
        self.set_status("aborted", event="rollout_end", reason=reason)

    def run_canary(self):
        name = self.state["order"][0]
        gs = self.group_state(name)
        fresh = gs["step"] == "idle" and gs["outcome"] == "pending" and not gs["changed"]
        if fresh:
            try:
                self.may_take_out(name)
                arms = self.reconcile()
                for n, a in arms.items():
                    self.group_state(n)["arm"] = a
                    if a == CANDIDATE:
                        self.group_state(n)["outcome"] = "already_candidate"
                self.save()
                if arms[name] != CONTROL:
                    raise RolloutError(f"group {name} already runs {arms[name]}: it cannot be the canary")
                if not any(a == CONTROL for n, a in arms.items() if n != name):
                    raise RolloutError(f"no other group runs {CONTROL}, so the canary has no control to be compared "
                                       f"with (every other group runs {CANDIDATE}: a completed rollout?)")
            except RolloutError as e:
                self.abort_start(str(e))
                raise
        self.p.say(f"rollout {self.rid}: canary is group {name}")
        try:
            self.guarded(name, lambda: self.move(name, CANDIDATE, full_gates=True, preflight_done=fresh))
        except RolloutError as e:
            if gs["step"] == "idle" and not gs["changed"]:
                self.abort_start(str(e))  # refused before anything moved
            raise
        self.state["pause_metrics"] = self.metrics_snapshot(name)
        self.set_status("canary_passed", event="canary_passed", group=name)
        self.write_result()
        self.p.say(f"canary {name} passed; `python -m rollout promote` continues with "
                   f"{', '.join(self.state['order'][1:]) or 'no other group'} (`check` reads the canary's metrics "
                   f"meanwhile)")
        if self.state["auto_promote"]:
            self.run_promote()

    def run_promote(self):
        if self.state and self.state["status"] == "halted" and self.state["halted_from"] in ("canary_passed",
                                                                                               "promoting"):
            self.set_status(self.state["halted_from"], event="promote_after_halt")
        if self.state is None or self.state["status"] not in ("canary_passed", "promoting"):
            raise RolloutError(f"promote needs a rollout whose canary passed; state is "
                               f"{self.state['status'] if self.state else 'absent'} ({self.rec.state_path})")
        canary = self.state["order"][0]
        if self.state["status"] == "canary_passed":
            # what the canary did while it waited for a person: Argo's background analysis
            self.guarded(canary, lambda: self.gate_metrics(canary, "metrics_paused", self.state.get("pause_metrics")))
            self.set_status("promoting")
        for name in self.state["order"][1:]:
            gs = self.group_state(name)
            if gs["arm"] == CANDIDATE and gs["step"] == "idle":
                continue
            self.guarded(name, lambda: self.move(name, CANDIDATE, full_gates=True))
        self.set_status("completed", event="rollout_end")
        self.write_result()
        self.p.say(f"rollout {self.rid} completed: every group runs {CANDIDATE}")

    def guarded(self, name: str, fn):
        """Run a promotion step; on a failed gate, roll back and raise RolloutFailed. A halt
        keeps the status to return to (`resume`)."""
        try:
            fn()
        except GateFailed as e:
            self.state["reason"] = str(e)
            targets = [name]
            if self.state["rollback_all"]:
                targets += [n for n in reversed(self.state["order"]) if n != name and self.group_state(n)["changed"]]
            self.state["rollback_targets"] = targets
            self.set_status("rolling_back", event="rollback_start", reason=str(e), targets=targets)
            self.p.say(f"{e}; rolling back {', '.join(targets)} to {CONTROL}")
            self.run_rollback(failed=True)
            raise RolloutFailed(str(e)) from None
        except Halted as e:
            self.halt(str(e))
            raise

    def halt(self, reason: str):
        if self.state["status"] != "halted":
            self.state["halted_from"] = self.state["status"]
        self.set_status("halted", event="halted", reason=reason)
        self.write_result()

    def run_rollback(self, failed: bool = False):
        if self.state is None:
            raise RolloutError(f"no rollout state in {self.rec.state_path}: nothing to roll back")
        if self.state["status"] not in ("rolling_back",) and not (self.state["status"] == "halted"
                                                                   and self.state["halted_from"] == "rolling_back"):
            self.state["rollback_targets"] = [n for n in reversed(self.state["order"]) if self.group_state(n)["changed"]
                                              or self.group_state(n)["step"] != "idle"]
            self.state["reason"] = self.state["reason"] or "manual rollback"
            self.set_status("rolling_back", event="rollback_start", reason=self.state["reason"],
                            targets=self.state["rollback_targets"], manual=not failed)
        elif self.state["status"] == "halted":
            self.set_status("rolling_back", event="rollback_resume")
        for name in self.state["rollback_targets"]:
            gs = self.group_state(name)
            try:
                with self.stop.deferred():
                    if gs["step"] in ("starting", "gating") and gs["target"] == CANDIDATE:
                        # abandon the interrupted promotion; a serving group counts against max_unavailable
                        self.may_take_out(name)
                        self.set_group(name, target=CONTROL, step="stopping")
                    elif gs["step"] == "stopping" and gs["target"] == CANDIDATE:
                        self.set_group(name, target=CONTROL)
                    self.move(name, CONTROL, full_gates=False)
            except RolloutError as e:
                # held back (max_unavailable, an unconfirmed arm): the group keeps serving as it is
                self.halt(f"rollback of group {name} held: {e}; it keeps serving {gs['arm']}; "
                          f"`python -m rollout rollback` (or resume) continues once that is fixed")
                raise Halted(self.state["reason"]) from None
            except GateFailed as e:
                self.state["reason"] = f"{self.state['reason']}; rollback of {name} failed: {e}"
                self.set_status("rollback_failed", event="rollout_end", reason=self.state["reason"])
                self.write_result()
                raise RolloutError(f"ROLLBACK FAILED, group {name} is out of service: {e} "
                                   f"(state {self.rec.state_path})") from None
        self.set_status("rolled_back", event="rollout_end", reason=self.state["reason"])
        self.write_result()
        self.p.say(f"rollout {self.rid} rolled back: {', '.join(self.state['rollback_targets']) or 'nothing'} on {CONTROL}")

    def run_resume(self):
        if self.state is None or self.state["status"] not in ACTIVE:
            raise RolloutError(f"nothing to resume: state is {self.state['status'] if self.state else 'absent'} "
                               f"({self.rec.state_path})")
        status = self.state["status"]
        if status == "halted":
            status = self.state["halted_from"] or "canary"
        if status == "canary_passed" and not self.state["auto_promote"]:
            raise RolloutError(f"rollout {self.rid}: the canary passed and the rollout is paused for a person; "
                               f"`python -m rollout promote` continues, `rollback` undoes it")
        self.audit("resume", status=self.state["status"], continues=status)
        self.p.say(f"resuming rollout {self.rid} ({status})")
        if self.state["status"] == "halted" and status != "rolling_back":
            self.set_status(status)
        {"canary": self.run_canary, "canary_passed": self.run_promote, "promoting": self.run_promote,
         "rolling_back": self.run_rollback}[status]()

    def run_abort(self, reason: str):
        """End the rollout where it stands, every group in service: a group left down by a
        killed tool is started again on the arm it came from; a serving one is left as it is."""
        if self.state is None or self.state["status"] not in ACTIVE:
            raise RolloutError(f"nothing to abort: state is {self.state['status'] if self.state else 'absent'} "
                               f"({self.rec.state_path})")
        self.audit("abort", reason=reason, status=self.state["status"])
        for name in self.state["order"]:
            gs, launcher = self.group_state(name), self.launchers[name]
            if gs["step"] == "idle":
                continue
            ok, why = self.healthy(name)
            if ok and gs["step"] in ("starting", "gating") and gs["target"] and launcher.running(gs["target"]) is not False:
                self.set_group(name, arm=gs["target"], step="idle", target=None, outcome="aborted_ungated")
                continue
            back = gs.get("from") or CONTROL
            if gs["step"] == "stopping" and ok and gs["arm"] == back:
                self.set_group(name, step="idle", target=None, outcome="aborted")
                continue
            self.p.say(f"[{name}] out of service ({why}); starting it on {back}")
            for old in (CANDIDATE, CONTROL):
                self.audit("stop", group=name, arm=old, how=launcher.stop(old))
            self.set_group(name, arm=None, step="starting", target=back)
            self.audit("start", group=name, arm=back, command=launcher.describe_start(back), why="abort")
            gs["starts"][back] += 1
            launcher.start(back)
            self.set_group(name, arm=back, step="gating")
            self.gate_starts(name)
            self.set_group(name, step="idle", target=None, outcome="aborted")
        self.set_status("aborted", event="rollout_end", reason=f"aborted: {reason}")
        self.write_result()

    # ---- result file ---------------------------------------------------------------------
    def write_result(self) -> dict:
        """<results_dir>/rollout-<id>.json: the canary's A/B at top level, every group below."""
        st = self.state
        canary = st["order"][0]
        ab = self.group_state(canary)["results"].get("speed")
        if ab is None:
            endpoints = []
            for n in st["order"]:
                try:
                    endpoints.append(describe(self.inv.group(n).url, "candidate" if n == canary else "control",
                                              timeout=5, api_key=self.api_key))
                except EndpointError as e:
                    endpoints.append({"url": self.inv.group(n).url, "role": "unreachable", "emulated": None,
                                      "error": str(e)})
            ok = [e for e in endpoints if "server_info" in e]
            ab = {"kind": "rollout-ab", **provenance(ok), "endpoints": endpoints,
                  "emulated": any(e["emulated"] for e in ok), "passed": False}
        out = {**ab, "kind": "rollout-ab", "date": now(), "rollout_id": st["rollout_id"], "status": st["status"],
               "reason": st["reason"], "canary": canary, "numerics": self.group_state(canary)["results"].get("numerics"),
               "metrics": self.group_state(canary)["results"].get("metrics"),
               "arms": {n: g.get("observed") for n, g in st["groups"].items()},
               "gates": st["gates"], "inventory": st["inventory"], "groups": st["groups"]}
        write_file(Path(st["result_path"]), scrub(json.dumps(out, indent=1, default=str)), mode=0o644)
        return out
