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

# %%
import sys
import warnings
from contextlib import ExitStack

import pandas as pd
from IPython.display import Markdown, display

from notebooks import data, figures

warnings.filterwarnings("ignore", category=FutureWarning)
figures.setup(dpi=60 if smoke else 110)
if bool(candidate_url) != bool(control_url):
    raise ValueError(f"candidate_url={candidate_url!r}, control_url={control_url!r}: give both "
                     "live endpoints, or neither to compare two local emulators")
emulated = not candidate_url
sources = []
if emulated:
    sources = [data.newest(data_dir, "bench", allow_fixture=smoke),
               data.newest(data_dir, "sglang-integration", allow_fixture=smoke)]
    display(Markdown(
        "## EMULATED A/B: not a live service\n"
        "No endpoints were given, so this run starts **two local emulator instances** "
        "(`rollout.emulator`, one per backend) whose decode speed comes from the recorded "
        f"kernel measurements below, with time scale {time_scale:g}. It shows the A/B "
        "procedure and gate, not the production service's speed. To measure the real service, "
        "pass `candidate_url` and `control_url`.\n\n" + data.banner(sources, False)))
else:
    display(Markdown(f"**Live endpoints.** Candidate (canary, `flash`): `{candidate_url}`; "
                     f"control (`triton`): `{control_url}`."))
display(Markdown(f"Every A/B request carries **{context_tokens:,} tokens of context** and decodes "
                 f"{max_new_tokens} tokens; {rounds} rounds per arm; seed {seed}."))

# %% tags=["remove-output"]
#papermill_description=canary_ab
def progress(*args, **kwargs):
    """Round-by-round progress to the console running the notebook (not into the report)."""
    print("[ab]", *args, *(f"{k}={v}" for k, v in kwargs.items()), file=sys.__stderr__,
          flush=True)


with ExitStack() as stack:
    if emulated:
        from rollout.emulator import start_emulator

        arms = {}
        for arm in ("flash", "triton"):
            h = start_emulator(arm, data_dir=data_dir, time_scale=time_scale)
            stack.callback(h.stop)
            arms[arm] = h.url
        cand_url, ctrl_url = arms["flash"], arms["triton"]
    else:
        cand_url, ctrl_url = candidate_url, control_url
    from rollout.ab import run_ab
    from rollout.numerics import compare

    result = run_ab(cand_url, ctrl_url, context_tokens=context_tokens, rounds=rounds,
                    max_new_tokens=max_new_tokens, threshold=threshold, seed=seed,
                    progress=progress)
    numerics = compare(cand_url, ctrl_url)

# %% [markdown]
# ## Decode speed per arm

# %%
names = {"candidate": "candidate (flash)", "control": "control (triton)"}
# An emulator run with time_scale s sleeps s times the modelled step time, so its measured
# tokens/s are 1/s times the model's; scale back to the modelled service (ratios unchanged).
unscale = time_scale if emulated else 1.0
tok_s = {a: [v * unscale for v in result[a]["tok_s"]] for a in names}
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
              f"Tokens/s per arm ({label}); accept length = tokens accepted per verify step")

# %% [markdown]
# ## Speed ratio, numerics and the gate

# %%
lo, hi = result["ci"]["low"], result["ci"]["high"]
numerics_text = (f"top-1 token agreement {numerics['top1_agreement']:.1%}, largest log-prob "
                 f"difference {numerics['max_abs_logprob_diff']:.3g}: "
                 + ("**within the thresholds**" if numerics["passed"] else "**outside the thresholds**"))
go = bool(result["passed"]) and bool(numerics["passed"])
display(Markdown(
    f"- Speed: candidate / control median tokens/s = **{result['ratio']:.3f}**, confidence "
    f"interval [{lo:.3f}, {hi:.3f}]; the gate needs the canary no more than "
    f"{threshold:.0%} slower. Speed gate: **{'pass' if result['passed'] else 'FAIL'}** "
    f"({result['reason']}).\n"
    f"- Numerics: {numerics_text}.\n\n"
    + (f"### Gate decision: {'PASS, continue to the next group' if go else 'FAIL, roll back'}"
       + (" (emulated endpoints)" if emulated else ""))))

# %%
data.write_record(record_path, "Phase 3: canary A/B at long context"
                  + (" (emulated)" if emulated else ""), sources, measured_now=False,
                  extra={"emulated": emulated, "endpoints": [cand_url, ctrl_url],
                         "gate_pass": go})
