"""`plan`: every step a canary + promote would take, with commands and thresholds. Dry run:
it reads the inventory and nothing else (no lock, no state, no HTTP, no process)."""
from __future__ import annotations

from rollout.ab import WARM_DECODE_TOKENS
from rollout.engine import CANDIDATE, CONTROL
from rollout.inventory import Inventory
from rollout.launch import BACKEND_ENV
from rollout.launchers import make_launcher


def plan_lines(inv: Inventory, canary: str | None = None, rollback_all: bool = False) -> list[str]:
    """Raises ValueError when a launch command cannot be rendered (e.g. model_path unset)."""
    s, gt = inv.settings, inv.gates
    order = inv.order(canary)
    lines = [f"plan for {inv.path} (dry run: nothing is started, stopped, locked or written)",
             f"candidate arm {CANDIDATE} ({BACKEND_ENV}={CANDIDATE}), control arm {CONTROL} ({BACKEND_ENV}={CONTROL})",
             f"order: {order[0]} (canary), " + ", ".join(order[1:]) if len(order) > 1 else f"order: {order[0]} (canary)",
             f"state {inv.state_dir}, results {inv.results_dir}/rollout-<id>.json",
             f"deadlines: startup {s['startup_deadline_s']:.0f} s, drain {s['drain_deadline_s']:.0f} s, "
             f"health requests {s['health_timeout_s']:.0f} s, whole run {s['progress_deadline_s']:.0f} s; "
             f"gate retries on a transient error: {s['gate_retries']}",
             f"at most {s['max_unavailable']} group(s) out of service at any time, rollback included",
             "API key: " + (f"from ${inv.auth['api_key_env']}" if inv.auth["api_key_env"] else
                            f"from file {inv.auth['api_key_file']}" if inv.auth["api_key_file"] else "none")
             + " (sent as Authorization: Bearer; never printed)",
             "before anything moves: every group's arm is confirmed (plugin metrics on /metrics, else the "
             "launcher's record) and the record reconciled to it"]
    n = 0

    def step(text: str):
        nonlocal n
        n += 1
        lines.append(f"{n:3d}. {text}")

    for i, name in enumerate(order):
        g, launcher = inv.group(name), make_launcher(inv.group(name), inv)
        peers = [o for o in order[i + 1:]]
        control = f"control group {peers[0]} ({inv.group(peers[0]).url})" if peers else \
            "the control outputs and speed samples recorded during the canary"
        step(f"preflight: GET /health on every group ({', '.join(inv.order(canary))}); {name} is stopped only if "
             f"then at most {s['max_unavailable']} group(s) are out of service; its arm is confirmed {CONTROL}")
        if hasattr(launcher, "describe_unit"):
            lines.append(f"     note: {launcher.describe_unit()}")
        step(f"[{name}] drain and stop ({CONTROL}): {launcher.describe_stop(CONTROL)}")
        step(f"[{name}] start ({CANDIDATE}) on GPUs {g.gpus}: {launcher.describe_start(CANDIDATE)}")
        step(f"[{name}] gate starts: {g.url}/health answers 200 within {s['startup_deadline_s']:.0f} s")
        step(f"[{name}] gate arm: {g.url}/metrics (mla_verify_backend_info) or the launcher's record says "
             f"{CANDIDATE}; a group whose arm cannot be confirmed is not gated")
        step(f"[{name}] gate health_generate: GET {g.url}/health_generate answers 200")
        long = gt["numerics_long_context_tokens"]
        step(f"[{name}] gate numerics vs {control}: {gt['numerics_prompts']} prompts of "
             f"{gt['numerics_prompt_tokens']} tokens" + (f" and one of {long} (prefix cache warmed)" if long else "")
             + f", {gt['numerics_new_tokens']} greedy tokens each; " + (
                 f"the candidate's decode-time logprobs (its verify path) vs the control's teacher-forced scoring of "
                 f"the same tokens: top-1 agreement >= {gt['min_top1_agreement']}, mean |dlogprob| <= "
                 f"{gt['max_mean_abs_logprob_diff']}" if gt["numerics_mode"] == "logprobs" else
                 f"no logprobs asked (mode tokens): the candidate's greedy tokens (its verify path) vs the control's "
                 f"greedy tokens after the same context: agreement >= {gt['min_token_agreement']}"))
        step(f"[{name}] gate speed vs {control}: {gt['rounds']} interleaved rounds, {gt['context_tokens']} tokens of "
             f"context (prefix cache and decode path warmed, {WARM_DECODE_TOKENS} tokens untimed), {gt['max_new_tokens']} "
             f"streamed tokens, ignore_eos; pass if median "
             f"ratio and CI{gt['ci_level']:.0%} low >= {1 - gt['speed_threshold']:.3f}")
        step(f"[{name}] gate metrics over the gates ({g.url}/metrics vs the control's): error rate <= "
             f"{gt['max_error_rate']}, queue <= {gt['max_queue_reqs']}, accept length ratio >= "
             f"{gt['min_accept_length_ratio']}, inter-token latency ratio <= {gt['max_itl_ratio']}")
        if i == 0:
            lines.append("     pause: the canary is done; `python -m rollout check` reads its metrics since the pause; "
                         "`promote` checks them once more, then continues (or canary --promote)")
    lines.append(f"on a failed gate: stop the group, start it on {CONTROL}, gates starts + arm + health_generate"
                 + (", then the same for every group this rollout changed" if rollback_all or s["rollback_all"] else "")
                 + "; exit 3 with the reason")
    lines.append("on an inconclusive gate (after retries), a control out of service, or the progress deadline: halt "
                 "with every group serving, exit 5; `resume` runs the gate again")
    return lines
