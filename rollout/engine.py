"""The rollout itself: canary, promote, rollback, resume, one group at a time.

A group moves to an arm through recorded steps -- stopping -> starting -> gating -> idle --
and the state file is saved before each step runs, so `resume` re-enters at the step that
was interrupted: a group whose server is already up on the target arm is not started again,
its gates are re-run from the start. Gates for a promotion, in order: starts (startup
deadline), /health_generate, numerics vs a control group, speed vs a control group. A failed
gate rolls the group back to control (gates: starts and /health_generate only), and with
rollback_all every group this rollout changed, then exits 3 with the reason.
"""
from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from rollout.ab import run_ab
from rollout.client import EndpointError, request
from rollout.endpoint_info import describe, provenance
from rollout.inventory import Inventory
from rollout.launchers import LaunchError, make_launcher
from rollout.numerics import compare
from rollout.progress import Progress
from rollout.record import Record, now

CANDIDATE, CONTROL = "flash", "triton"
EXIT_ERROR, EXIT_GATE, EXIT_LOCKED, EXIT_INTERRUPTED = 1, 3, 4, 130
# statuses of a rollout that is not finished: a new canary is refused while one of these holds
ACTIVE = ("canary", "canary_passed", "promoting", "rolling_back")


class RolloutError(RuntimeError):
    """Refused or could not proceed; exit 1 with this message."""


class GateFailed(RuntimeError):
    def __init__(self, group: str, gate: str, reason: str):
        super().__init__(f"group {group}: gate {gate} failed: {reason}")
        self.group, self.gate, self.reason = group, gate, reason


class Rollout:
    def __init__(self, inv: Inventory, progress: Progress | None = None):
        self.inv, self.p = inv, progress or Progress()
        self.rec = Record(inv.state_dir)
        self.launchers = {g.name: make_launcher(g, inv) for g in inv.groups}
        self.state: dict | None = self.rec.load()

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
        self.group_state(name).update(kw)
        self.save()
        self.audit("group", group=name, **kw)

    def new_state(self, canary: str | None, rollback_all: bool, auto_promote: bool) -> dict:
        order = self.inv.order(canary)
        rid = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
        return {"rollout_id": rid, "inventory": str(self.inv.path), "created": now(), "status": "canary",
                "candidate": CANDIDATE, "control": CONTROL, "order": order, "rollback_all": rollback_all,
                "auto_promote": auto_promote, "reason": None, "rollback_targets": [], "reference": {},
                "gates": [], "result_path": str(self.inv.results_dir / f"rollout-{rid}.json"),
                "groups": {n: {"arm": CONTROL, "target": None, "step": "idle", "outcome": "pending",
                               "starts": {CANDIDATE: 0, CONTROL: 0}, "results": {}} for n in order}}

    # ---- health --------------------------------------------------------------------------
    def healthy(self, name: str) -> tuple[bool, str]:
        g = self.inv.group(name)
        try:
            status, _, _ = request(g.url, "GET", "/health", timeout=self.inv.settings["health_timeout_s"])
        except EndpointError as e:
            return False, str(e)
        return status == 200, f"{g.url}/health: HTTP {status}"

    def preflight(self, about_to_restart: str):
        """Every group must be in service before one more is taken out: at most one is ever down."""
        for g in self.inv.groups:
            ok, why = self.healthy(g.name)
            if not ok:
                self.audit("preflight", passed=False, group=g.name, reason=why, next=about_to_restart)
                raise RolloutError(f"group {g.name} is not in service ({why}); refusing to take group "
                                   f"{about_to_restart} out of service as well")
        self.audit("preflight", passed=True, next=about_to_restart)

    # ---- gates ---------------------------------------------------------------------------
    def _gate(self, name: str, gate: str, passed: bool, reason: str, detail: dict | None = None):
        entry = {"time": now(), "group": name, "gate": gate, "passed": passed, "reason": reason}
        self.state["gates"].append(entry)
        if detail is not None:
            self.group_state(name)["results"][gate] = detail
        self.save()
        self.audit("gate", **entry)
        self.p.say(f"[{name}] gate {gate}: {'pass' if passed else 'FAIL'} -- {reason}")
        if not passed:
            raise GateFailed(name, gate, reason)

    def gate_starts(self, name: str):
        g, launcher = self.inv.group(name), self.launchers[name]
        deadline, t0 = self.inv.settings["startup_deadline_s"], time.monotonic()
        while True:
            ok, why = self.healthy(name)
            elapsed = time.monotonic() - t0
            if ok:
                return self._gate(name, "starts", True, f"/health answered 200 after {elapsed:.1f} s")
            died = launcher.died()
            if died:
                return self._gate(name, "starts", False, f"server exited while starting: {died}")
            if elapsed > deadline:
                return self._gate(name, "starts", False, f"no /health 200 within the startup deadline "
                                                         f"{deadline:.0f} s (last: {why})")
            self.p.wait(f"[{name}] waiting for {g.url}/health", elapsed, deadline)
            time.sleep(min(1.0, max(0.05, deadline / 200)))

    def gate_health_generate(self, name: str):
        url, timeout = self.inv.group(name).url, self.inv.settings["health_timeout_s"]
        try:
            status, _, _ = request(url, "GET", "/health_generate", timeout=timeout)
            ok, why = status == 200, f"HTTP {status}"
        except EndpointError as e:
            ok, why = False, str(e)
        self._gate(name, "health_generate", ok, f"{url}/health_generate: {why}")

    def control_peer(self, name: str) -> str | None:
        """URL of a group serving the control arm, or None when none is left (last group)."""
        for other in self.state["order"]:
            gs = self.group_state(other)
            if other != name and gs["arm"] == CONTROL and gs["step"] == "idle" and self.healthy(other)[0]:
                return self.inv.group(other).url
        return None

    def control_for(self, name: str, gate: str, settings: dict) -> str | None:
        """URL of a live control group, or None to use the canary's recorded control data.
        Fails the gate when neither exists or the recording was taken under other settings."""
        peer = self.control_peer(name)
        if peer is None:
            ref = self.state["reference"]
            if f"{gate}_control" not in ref:
                self._gate(name, gate, False, f"no control group in service and no recorded control {gate} data")
            if ref.get(f"{gate}_settings") != settings:
                self._gate(name, gate, False, f"recorded control {gate} data were taken with "
                                              f"{ref.get(f'{gate}_settings')}, the inventory now says {settings}")
        return peer

    def gate_numerics(self, name: str):
        gt, ref = self.inv.gates, self.state["reference"]
        settings = {k: gt[k] for k in ("numerics_prompts", "numerics_prompt_tokens", "numerics_new_tokens", "seed")}
        peer = self.control_for(name, "numerics", settings)
        self.p.say(f"[{name}] numerics vs {peer or 'recorded control outputs'}")
        try:
            r = compare(self.inv.group(name).url, peer, prompts=gt["numerics_prompts"],
                        prompt_tokens=gt["numerics_prompt_tokens"], new_tokens=gt["numerics_new_tokens"],
                        seed=gt["seed"], min_top1_agreement=gt["min_top1_agreement"],
                        max_mean_abs_logprob_diff=gt["max_mean_abs_logprob_diff"], timeout=gt["request_timeout_s"],
                        recorded_control=ref.get("numerics_control"))
        except (EndpointError, KeyError, TypeError, ValueError) as e:
            return self._gate(name, "numerics", False, f"{type(e).__name__}: {e}")
        if peer is not None and "numerics_control" not in ref:
            ref["numerics_control"], ref["numerics_settings"] = r["control_outputs"], settings
        r["control_url"] = peer
        self._gate(name, "numerics", r["passed"], r["reason"], {k: v for k, v in r.items() if k != "control_outputs"})

    def gate_speed(self, name: str):
        gt, ref = self.inv.gates, self.state["reference"]
        settings = {k: gt[k] for k in ("context_tokens", "max_new_tokens", "rounds", "seed")}
        peer = self.control_for(name, "speed", settings)
        self.p.say(f"[{name}] speed A/B at {gt['context_tokens']} tokens vs {peer or 'recorded control samples'}")
        try:
            r = run_ab(self.inv.group(name).url, peer, context_tokens=gt["context_tokens"], rounds=gt["rounds"],
                       max_new_tokens=gt["max_new_tokens"], threshold=gt["speed_threshold"], seed=gt["seed"],
                       ci_level=gt["ci_level"], timeout=gt["request_timeout_s"],
                       progress=lambda m: self.p.say(f"[{name}]   {m}"), recorded_control=ref.get("speed_control"))
        except (EndpointError, KeyError, TypeError, ValueError) as e:
            return self._gate(name, "speed", False, f"{type(e).__name__}: {e}")
        if peer is not None and "speed_control" not in ref:
            ref["speed_control"], ref["speed_settings"] = r["control"], settings
        self._gate(name, "speed", r["passed"], r["reason"], r)

    # ---- moving one group ----------------------------------------------------------------
    def move(self, name: str, arm: str, *, full_gates: bool):
        """Take group `name` to `arm`, resuming at its recorded step. Raises GateFailed."""
        gs, launcher = self.group_state(name), self.launchers[name]
        if gs["step"] == "idle":
            if gs["arm"] == arm and launcher.running(arm) is not False:
                return
            self.set_group(name, target=arm, step="stopping")
        if gs["target"] != arm:
            raise RolloutError(f"group {name} is in the middle of a move to {gs['target']} (step {gs['step']}); "
                               f"resume or roll back first")
        if gs["step"] == "stopping":
            for old in ([gs["arm"]] if gs["arm"] else [CANDIDATE, CONTROL]):
                self.p.say(f"[{name}] draining and stopping ({old}): {launcher.describe_stop(old)}")
                try:
                    how = launcher.stop(old, lambda e, d: self.p.wait(f"[{name}] draining", e, d))
                except LaunchError as e:
                    raise GateFailed(name, "stop", str(e)) from None
                self.audit("stop", group=name, arm=old, how=how)
            self.set_group(name, arm=None, step="starting")
        if gs["step"] == "starting":
            if launcher.running(arm):
                self.audit("start_skipped", group=name, arm=arm, reason="already running on this arm")
            else:
                self.p.say(f"[{name}] starting ({arm}): {launcher.describe_start(arm)}")
                gs["starts"][arm] += 1
                self.save()
                try:
                    launcher.start(arm)
                except (LaunchError, ValueError) as e:
                    self.set_group(name, arm=arm, step="gating")
                    self._gate(name, "starts", False, str(e))
                self.audit("start", group=name, arm=arm, command=launcher.describe_start(arm))
            self.set_group(name, arm=arm, step="gating")
        self.gate_starts(name)
        self.gate_health_generate(name)
        if full_gates:
            self.gate_numerics(name)
            self.gate_speed(name)
        self.set_group(name, step="idle", target=None, outcome="promoted" if arm == CANDIDATE else "rolled_back")
        self.write_result()

    # ---- commands ------------------------------------------------------------------------
    def start_rollout(self, canary: str | None, rollback_all: bool, auto_promote: bool):
        if self.state and self.state["status"] in ACTIVE:
            raise RolloutError(f"rollout {self.rid} is '{self.state['status']}' (state {self.rec.state_path}); "
                               f"run promote, rollback or resume, not a new canary")
        self.state = self.new_state(canary, rollback_all or self.inv.settings["rollback_all"], auto_promote)
        self.save()
        self.audit("rollout_start", order=self.state["order"], rollback_all=self.state["rollback_all"],
                   inventory=str(self.inv.path))

    def run_canary(self):
        name = self.state["order"][0]
        if self.group_state(name)["step"] == "idle" and self.group_state(name)["arm"] == CONTROL:
            try:
                self.preflight(name)
            except RolloutError as e:
                # nothing was touched: the rollout ends here and a new canary may start later
                self.state.update(status="aborted", reason=str(e))
                self.save()
                self.audit("rollout_end", status="aborted", reason=str(e))
                raise
        self.p.say(f"rollout {self.rid}: canary is group {name}")
        self.guarded(name, lambda: self.move(name, CANDIDATE, full_gates=True))
        self.state["status"] = "canary_passed"
        self.save()
        self.audit("canary_passed", group=name)
        self.write_result()
        self.p.say(f"canary {name} passed; `python -m rollout promote` continues with "
                   f"{', '.join(self.state['order'][1:]) or 'no other group'}")
        if self.state["auto_promote"]:
            self.run_promote()

    def run_promote(self):
        if self.state is None or self.state["status"] not in ("canary_passed", "promoting"):
            raise RolloutError(f"promote needs a rollout whose canary passed; state is "
                               f"{self.state['status'] if self.state else 'absent'} ({self.rec.state_path})")
        self.state["status"] = "promoting"
        self.save()
        for name in self.state["order"][1:]:
            gs = self.group_state(name)
            if gs["outcome"] == "promoted" and gs["step"] == "idle":
                continue
            if gs["step"] == "idle":
                self.preflight(name)
            self.guarded(name, lambda: self.move(name, CANDIDATE, full_gates=True))
        self.state["status"] = "completed"
        self.save()
        self.audit("rollout_end", status="completed")
        self.write_result()
        self.p.say(f"rollout {self.rid} completed: every group runs {CANDIDATE}")

    def guarded(self, name: str, fn):
        """Run a promotion step; on a failed gate, roll back and raise RolloutFailed."""
        try:
            fn()
        except GateFailed as e:
            self.state["reason"] = str(e)
            targets = [name]
            if self.state["rollback_all"]:
                targets += [n for n in reversed(self.state["order"]) if n != name
                            and (self.group_state(n)["arm"] != CONTROL or self.group_state(n)["step"] != "idle")]
            self.state["rollback_targets"] = targets
            self.state["status"] = "rolling_back"
            self.save()
            self.audit("rollback_start", reason=str(e), targets=targets)
            self.p.say(f"{e}; rolling back {', '.join(targets)} to {CONTROL}")
            self.run_rollback(failed=True)
            raise RolloutFailed(str(e)) from None

    def run_rollback(self, failed: bool = False):
        if self.state is None:
            raise RolloutError(f"no rollout state in {self.rec.state_path}: nothing to roll back")
        if self.state["status"] != "rolling_back":
            self.state["rollback_targets"] = [n for n in reversed(self.state["order"])
                                              if self.group_state(n)["arm"] != CONTROL or self.group_state(n)["step"] != "idle"]
            self.state["status"] = "rolling_back"
            self.state["reason"] = self.state["reason"] or "manual rollback"
            self.save()
            self.audit("rollback_start", reason="manual", targets=self.state["rollback_targets"])
        for name in self.state["rollback_targets"]:
            gs = self.group_state(name)
            if gs["step"] != "idle" and gs["target"] == CANDIDATE:
                self.set_group(name, target=CONTROL, step="stopping")  # abandon the interrupted promotion
            try:
                self.move(name, CONTROL, full_gates=False)
            except GateFailed as e:
                self.state["status"] = "rollback_failed"
                self.state["reason"] = f"{self.state['reason']}; rollback of {name} failed: {e}"
                self.save()
                self.audit("rollout_end", status="rollback_failed", reason=self.state["reason"])
                self.write_result()
                raise RolloutError(f"ROLLBACK FAILED, group {name} is out of service: {e} "
                                   f"(state {self.rec.state_path})") from None
        self.state["status"] = "rolled_back"
        self.save()
        self.audit("rollout_end", status="rolled_back", reason=self.state["reason"])
        self.write_result()
        self.p.say(f"rollout {self.rid} rolled back: {', '.join(self.state['rollback_targets']) or 'nothing'} on {CONTROL}")

    def run_resume(self):
        if self.state is None or self.state["status"] not in ACTIVE:
            raise RolloutError(f"nothing to resume: state is {self.state['status'] if self.state else 'absent'} "
                               f"({self.rec.state_path})")
        if self.state["status"] == "canary_passed" and not self.state["auto_promote"]:
            raise RolloutError(f"rollout {self.rid}: the canary passed and the rollout is paused for a person; "
                               f"`python -m rollout promote` continues, `rollback` undoes it")
        self.audit("resume", status=self.state["status"])
        self.p.say(f"resuming rollout {self.rid} ({self.state['status']})")
        {"canary": self.run_canary, "canary_passed": self.run_promote, "promoting": self.run_promote,
         "rolling_back": self.run_rollback}[self.state["status"]]()

    # ---- result file ---------------------------------------------------------------------
    def write_result(self) -> dict:
        """reports/data/rollout-<id>.json: the canary's A/B at top level, every group below."""
        st = self.state
        canary = st["order"][0]
        ab = self.group_state(canary)["results"].get("speed")
        if ab is None:
            endpoints = []
            for n in st["order"]:
                try:
                    endpoints.append(describe(self.inv.group(n).url, "candidate" if n == canary else "control", timeout=5))
                except EndpointError as e:
                    endpoints.append({"url": self.inv.group(n).url, "role": "unreachable", "emulated": None,
                                      "error": str(e)})
            ok = [e for e in endpoints if "server_info" in e]
            ab = {"kind": "rollout-ab", **provenance(ok), "endpoints": endpoints,
                  "emulated": any(e["emulated"] for e in ok), "passed": False}
        out = {**ab, "kind": "rollout-ab", "date": now(), "rollout_id": st["rollout_id"], "status": st["status"],
               "reason": st["reason"], "canary": canary, "numerics": self.group_state(canary)["results"].get("numerics"),
               "gates": st["gates"], "inventory": st["inventory"],
               "groups": st["groups"]}
        path = Path(st["result_path"])
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(out, indent=1, default=str))
        tmp.replace(path)
        return out


class RolloutFailed(RuntimeError):
    """A gate failed and the rollback finished; exit 3 with this reason."""

