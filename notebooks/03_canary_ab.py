# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Phase 3: canary A/B at long context (185k tokens by default)
#
# Before the new kernel goes to every GPU group, one group (the canary) restarts with
# `MLA_VERIFY_BACKEND=flash` and is compared with a group still on SGLang's Triton backend
# (the control): decode speed in tokens/s at long context, round by round, and the tokens
# themselves. The rollout tool continues only if the canary is not slower than the control by
# more than the threshold (judged on the confidence interval) and gives the same tokens.

# %% tags=["parameters"]
smoke = False  # True: CI run on generated fixture data
data_dir = "reports/data"  # measurements the emulator's speed model reads
record_path = ""  # set by the runner: where this notebook writes its index record
candidate_url = ""  # canary endpoint (backend flash); empty: start an emulator
control_url = ""  # control endpoint (backend triton); empty: start an emulator
context_tokens = 185000  # prompt length of every A/B request, tokens
rounds = 5  # A/B rounds per arm
max_new_tokens = 32  # decoded tokens per request
threshold = 0.02  # largest tolerated slow-down of the canary, as a fraction of control
seed = 0  # prompt and order seed
time_scale = 1.0  # emulator only: below 1 the emulated servers decode faster (CI)

# %% tags=["remove-output"]
#papermill_description=canary_ab
import sys
import warnings
from contextlib import ExitStack

import pandas as pd
from IPython.display import HTML, Markdown, display

from notebooks import data, endpoints, figures, findings, provenance
from rollout.client import EndpointError

warnings.filterwarnings("ignore", category=FutureWarning)
figures.setup(dpi=60 if smoke else 110)
if bool(candidate_url) != bool(control_url):
    raise ValueError(f"candidate_url={candidate_url!r}, control_url={control_url!r}: give both "
                     "live endpoints, or neither to compare two local emulators")
started = not candidate_url  # this notebook starts the two emulators itself


def progress(*args, **kwargs):
    """Round-by-round progress to the console running the notebook (not into the report)."""
    print("[ab]", *args, *(f"{k}={v}" for k, v in kwargs.items()), file=sys.__stderr__,
          flush=True)


if not started and endpoints.endpoint_key(candidate_url) == endpoints.endpoint_key(control_url):
    raise EndpointError(f"candidate_url={candidate_url!r} and control_url={control_url!r} are "
                        "the same endpoint: an A/B needs two servers")
with ExitStack() as stack:
    if started:
        from rollout.emulator import start_emulator

        urls = {}
        for arm in ("flash", "triton"):
            h = start_emulator(arm, data_dir=data_dir, time_scale=time_scale)
            stack.callback(h.stop)
            urls[arm] = h.url
        cand_url, ctrl_url = urls["flash"], urls["triton"]
    else:
        cand_url, ctrl_url = candidate_url, control_url
    # What each endpoint says it is decides every label below, before minutes of A/B.
    ends = {"candidate": endpoints.identify(cand_url, "candidate"),
            "control": endpoints.identify(ctrl_url, "control")}
    endpoints.check_pair(ends["candidate"], ends["control"])
    progress(*(f"{r}: {'emulated' if e['emulated'] else 'live'} {e['arm']}"
               for r, e in ends.items()))
    from rollout.ab import run_ab
    from rollout.numerics import compare

    result = run_ab(cand_url, ctrl_url, context_tokens=context_tokens, rounds=rounds,
                    max_new_tokens=max_new_tokens, threshold=threshold, seed=seed,
                    progress=progress)
    numerics = compare(cand_url, ctrl_url)
    after = {r: endpoints.identify(e["url"], r) for r, e in ends.items()}

# %%
emulated = any(e["emulated"] for e in ends.values())
names = {r: f"{r} ({e['arm']})" for r, e in ends.items()}
# An emulator with time scale s sleeps s times the modelled step time, so its measured tokens/s
# are 1/s times the model's: scale back by the factor it reports itself (ratios unchanged).
unscale = {r: float(e["server_info"].get("time_scale", 1.0)) if e["emulated"] else 1.0
           for r, e in ends.items()}
tok_s = {r: [v * unscale[r] for v in result[r]["tok_s"]] for r in names}
model = {r: endpoints.modelled(e, context_tokens) for r, e in ends.items()}
# The files each emulator says its model read (not data_dir: a passed emulator may use others).
sources = [data.load_file(f, allow_fixture=smoke) for f in endpoints.model_files(ends.values())]

ratio, lo, hi = result["ratio"], result["ci"]["low"], result["ci"]["high"]
speed_ok, num_ok = bool(result["passed"]), bool(numerics["passed"])
confirmed = all(e["arm_confirmed"] for e in ends.values())
if not (speed_ok and num_ok):
    decision, status = "FAIL, roll back", "fail"
elif not confirmed:
    decision, status = ("NOT CONFIRMED: the gates passed, but the endpoints do not say which "
                        "backend they run"), "open"
else:
    decision, status = "PASS, continue to the next group", "pass"
where = ("EMULATED endpoints (local emulators, not a live service)" if emulated else
         "live endpoints")
m_c, m_t = model["candidate"], model["control"]
predicted = (m_t["step_ms"] / m_c["step_ms"] if m_c and m_t and m_c["step_ms"] and m_t["step_ms"]
             else None)
assumed = ""
if m_c:
    assumed = (f"; modelled, not measured: {m_c['fixed_ms']:g} ms of non-attention time per "
               f"step (assumed) and accept length {m_c['accept_length']:g} (assumed)"
               + (f", which predict {predicted:.3g}" if predicted else ""))
found = [
    findings.finding("decision", "canary on a live service", f"{decision}, on {where}",
                     "open" if emulated and status == "pass" else status, "gate"),
    findings.finding("ratio", "candidate / control decode speed",
                     f"{ratio:.3g} (95 % CI {lo:.3g} to {hi:.3g}) at {context_tokens:,} tokens "
                     f"of context; the gate needs at least {1 - threshold:.2f}" + assumed,
                     # an emulated ratio is the model's output, not a measured pass
                     "info" if emulated else "pass" if speed_ok else "fail", "speed"),
    findings.finding("numerics", "same tokens",
                     f"top-1 agreement {numerics['top1_agreement']:.1%}, mean |delta logprob| "
                     f"{numerics['mean_abs_logprob_diff']:.3g}",
                     "pass" if num_ok else "fail", "gate"),
    findings.finding("arms", "which backend each arm runs",
                     "; ".join(f"{r}: {e['arm']} (from {e['arm_source']})"
                               for r, e in ends.items()),
                     "pass" if confirmed else "open", "endpoints"),
]
display(HTML(findings.box(found, "<b>Findings of this A/B</b> (computed from this run)")))
if emulated:
    display(Markdown(
        "## EMULATED A/B: not a live service\n"
        + ("This run started **two local emulator instances** (`rollout.emulator`, one per "
           "backend). " if started else "The endpoints given **say they are emulators**. ")
        + "An emulator runs no model: its decode speed is a formula over the recorded kernel "
        "measurements plus assumed constants (table below). This page shows the A/B procedure "
        "and the gate, not the production service's speed. To measure the real service, pass "
        "`candidate_url` and `control_url` of two SGLang servers."))
else:
    display(Markdown("## Live endpoints\nNeither endpoint says it is an emulator (no "
                     "`X-Emulator` header, no `\"emulator\"` in `/server_info`, no "
                     f"`{endpoints.EMULATOR_GAUGE}` on `/metrics`)."))
if sources:
    display(Markdown('<a id="evidence"></a>' + provenance.evidence_box(
        sources, "The emulators' speed model") + "\n\n" + provenance.banner(
        sources, head="The emulators' speed model reads these recorded kernel measurements "
                      "(the A/B itself ran just now, against the emulators):")))
else:
    display(Markdown('<a id="evidence"></a>**Where this evidence stops.** The endpoints do not '
                     "report their GPU in `/server_info`, so this page cannot say which GPU "
                     "served them; see phase 2 for the kernel's own measurements."))

# %% [markdown]
# <a id="endpoints"></a>
# ## What each endpoint says it is

# %%
rows = []
for r, e in ends.items():
    rows.append({"arm": r, "endpoint": "local emulator started by this report" if started
                 else e["url"], "emulated": "yes: " + ", ".join(e["emulated_why"])
                 if e["emulated"] else "no", "backend": e["arm"], "backend read from":
                 e["arm_source"], "plugin metrics after the A/B": after[r]["metrics"]})
figures.table(pd.DataFrame(rows), caption="Each arm as its /server_info and /metrics describe "
              "it; the backend must be flash on the candidate and triton on the control")

# %%
if m_c and m_t:
    mod = pd.DataFrame([{"arm": names[r], "layers": m["layers"],
                         "non-attention time per step, ms (assumed)": m["fixed_ms"],
                         "accept length, tokens per step (assumed)": m["accept_length"],
                         "modelled step time, ms": m["step_ms"], "bench file": m["bench_file"]}
                        for r, m in model.items()])
    display(figures.table(mod, {"modelled step time, ms": "{:,.1f}",
                                "non-attention time per step, ms (assumed)": "{:g}",
                                "accept length, tokens per step (assumed)": "{:g}"},
                          f"The emulators' model at {context_tokens:,} tokens: "
                          f"{m_c['formula']}"))
    if predicted:
        f0 = float(m_c["fixed_ms"])
        att = {r: model[r]["step_ms"] - f0 for r in model}
        doubled = (att["control"] + 2 * f0) / (att["candidate"] + 2 * f0)
        display(Markdown(
            f"The modelled speed ratio is the ratio of step times, **{predicted:.3g}**; it rests "
            f"on the assumed {f0:g} ms of non-attention work per step (the other layers, "
            f"sampling, scheduling), which no measurement here supplies. With twice that, the "
            f"same model would give {doubled:.3g}."))

# %% [markdown]
# <a id="speed"></a>
# ## Decode speed per arm

# %%
per_round = pd.concat([pd.DataFrame({"arm": names[a], "round": range(1, len(tok_s[a]) + 1),
                                     "tokens_per_s": tok_s[a]}) for a in names])
label = "emulated" if emulated else "live"
figures.show(figures.tokens_per_s(per_round, f"Decode speed at {context_tokens:,} tokens of "
                                  f"context, {label} endpoints: one point per round"))
summary = pd.DataFrame([{"arm": names[a], "rounds": len(tok_s[a]),
                         "median tokens/s": pd.Series(tok_s[a]).median(),
                         "min tokens/s": min(tok_s[a]),
                         "max tokens/s": max(tok_s[a]),
                         "median accept length": pd.Series(result[a].get("accept_length", [])).median()}
                        for a in names])
figures.table(summary, {"median tokens/s": "{:,.2f}", "min tokens/s": "{:,.2f}",
                        "max tokens/s": "{:,.2f}", "median accept length": "{:.2f}"},
              f"Tokens/s per arm ({label}"
              + (", scaled back to the modelled service by each emulator's time scale"
                 if emulated else "") + "); accept length = tokens accepted per verify step")

# %% [markdown]
# <a id="gate"></a>
# ## Speed ratio, numerics and the gate

# %%
display(Markdown(
    f"- Speed: candidate / control median tokens/s = **{ratio:.3g}**, {result['ci']['level']:.0%} "
    f"confidence interval [{lo:.3g}, {hi:.3g}]; the gate needs the canary no more than "
    f"{threshold:.0%} slower. Speed gate: **{'pass' if speed_ok else 'FAIL'}**.\n"
    f"- Numerics: top-1 token agreement {numerics['top1_agreement']:.1%}, mean |delta logprob| "
    f"{numerics['mean_abs_logprob_diff']:.3g} (largest single difference "
    f"{numerics['max_abs_logprob_diff']:.3g}): "
    + ("**within the thresholds**" if num_ok else "**outside the thresholds**") + ".\n"
    f"- Arms: " + "; ".join(f"{r} {e['arm']}" + ("" if e["arm_confirmed"] else " (not confirmed)")
                             for r, e in ends.items()) + ".\n\n"
    f"### Gate decision: {decision}" + (" (on emulated endpoints: this shows the procedure, "
                                         "not the live service)" if emulated else "")))

# %%
provenance.write_record(
    record_path, "Phase 3: canary A/B at long context" + (" (emulated)" if emulated else ""),
    sources, findings=found,
    extra={"emulated": emulated, "gate_pass": status == "pass" and not emulated,
           "decision": decision,
           "endpoints": [f"{r}: {'local emulator' if started else e['url']} "
                         f"({'emulated' if e['emulated'] else 'live'}, {e['arm']})"
                         for r, e in ends.items()]})
