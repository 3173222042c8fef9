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
#
# Two parts, never mixed: the **real-server canary** recorded by `python -m
# kernel.sglang.real_server` on the GPU machine (two real SGLang servers, the rollout CLI's
# gates, a planted verify fault that must be rolled back, where the step time goes, follow-up
# turns over a cached prompt), read from the `real-server-*.json` files in `data_dir`: one device
# call writes one file, so each part comes from the file that holds it (the canary from the newest
# run with a canary, its breakdowns from every file of the same configuration, a planted fault
# from another configuration only where it says so; the section's first table names each file);
# and the A/B this page runs itself when it is rendered (against emulators unless live endpoints
# are given).

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
from pathlib import Path

import pandas as pd
from IPython.display import HTML, Markdown, display

from kernel.sglang.real_server.extend_over_prefix import prefix_hit
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
# The real-server run (kernel.sglang.real_server): the newest real run with a canary, with its
# planted fault, promote and breakdowns chosen per part (data.real_server); the newest emulated
# one only without a real one, which every label below calls EMULATED; None when data_dir holds
# neither.
real = data.real_server(data_dir, allow_fixture=smoke)
real_is_real = real is not None and not real.get("emulated")
ab_decision = findings.finding("decision", "canary on a live service", f"{decision}, on {where}",
                               "open" if emulated and status == "pass" else status, "gate")
ab_ratio = findings.finding("ratio", "candidate / control decode speed",
                            f"{ratio:.3g} (95 % CI {lo:.3g} to {hi:.3g}) at {context_tokens:,} "
                            f"tokens of context; the gate needs at least {1 - threshold:.2f}"
                            + assumed,
                            # an emulated ratio is the model's output, not a measured pass
                            "info" if emulated else "pass" if speed_ok else "fail", "speed")
real_ratio = findings.real_speed(real) if real is not None else None
if emulated:
    # this page's own A/B ran on emulators: the live-service line is the real-server run's
    live = findings.live_canary(real, f"{decision}, on {where}")
    ab_decision = {**ab_decision, "id": "emulated-decision",
                   "check": "gate decision of this page's emulated A/B (the procedure only)"}
    if real_ratio:
        ab_ratio = {**ab_ratio, "id": "emulated-ratio",
                    "check": "candidate / control decode speed, emulated"}
    top = [live] + ([real_ratio] if real_ratio else [])
else:
    top = [ab_decision] + ([{**real_ratio, "id": "real-ratio"}] if real_ratio else [])
    ab_decision = None
found = [
    *top, findings.planted(real), findings.extend_followups(real),
    *([ab_decision] if ab_decision else []), ab_ratio,
    findings.finding("numerics", "same tokens",
                     f"top-1 agreement {numerics['top1_agreement']:.1%}, mean |delta logprob| "
                     f"{numerics['mean_abs_logprob_diff']:.3g}",
                     "pass" if num_ok else "fail", "gate"),
    findings.finding("arms", "which backend each arm runs",
                     "; ".join(f"{r}: {e['arm']} (from {e['arm_source']})"
                               for r, e in ends.items()),
                     "pass" if confirmed else "open", "endpoints"),
]
display(HTML(findings.box(found, "<b>Findings</b> (the real-server run from its JSON; the A/B "
                                 "from this render)")))

# %%
# The real-server section: every number from the JSON, nothing typed here. Every heading says
# which it is: a real server, the job's emulated run, or nothing recorded.
rs_head = "Real server" if real_is_real else "EMULATED real-server run, not a real server"
real_steps = (real or {}).get("steps") or {}
real_files = (real or {}).get("_files") or []


def section(anchor: str, title: str, docs: list | None = None) -> bool:
    """A subsection heading and the file(s) it reads (`docs`, default the canary run's), with the
    configuration of any that is not the canary run's; without a real-server file only its anchor,
    which the findings link to. True when there is a file to show."""
    if real is None:
        display(Markdown(findings.anchor(anchor)))
        return False
    docs = list({d["_path"]: d for d in (docs if docs is not None else [real]) if d is not None}.values())
    notes = [f"`{Path(d['_path']).name}`" + (f" ({findings.config_words(d, real)})"
                                             if data.real_config(d) != data.real_config(real) else "")
             for d in docs]
    display(Markdown(findings.anchor(anchor) + f"\n### {rs_head}: {title}\n"
                     + (f"From {', '.join(notes)}." if notes else "")))
    return True


display(Markdown(findings.anchor("real-server") + "\n## " + (
    f"Real SGLang server canary: {findings.real_label(real)}" if real_is_real else
    "Real SGLang server canary: none recorded" if real is None else
    "Real-server canary: an EMULATED run of the job, not a real server")))
if real is None:
    display(Markdown(
        f"**No real-server run in `{data_dir}`** (no `real-server-*.json` of kind "
        f"`{data.REAL_SERVER}`), so nothing on this page comes from a real SGLang server. "
        "`python -m kernel.sglang.real_server --out $OUT` on the GPU machine writes one; copy it "
        "into `reports/data/`."))
elif not real_is_real:
    display(Markdown(
        f"**EMULATED, not a real server.** `{Path(real['_path']).name}` was written by the "
        "job's `--emulate` mode: "
        "`rollout.emulator` answered behind the job's launch wrapper, so no SGLang server, no "
        "GPU and no kernel ran. It shows the job's orchestration and this section's layout; "
        "every number in it is the emulator's."))
else:
    display(Markdown(
        "Two such servers on the one GPU, a triton control and a flash canary, each with its share "
        "of the GPU's memory, started, gated, rolled back and promoted by the rollout CLI itself "
        "(`plan`, `canary`, `promote`); the model is DeepSeek-V3-shaped with random weights, so "
        "its tokens mean nothing but are the same computation on both arms.\n\n"
        + provenance.evidence_box(real_files, "The real-server run")))
if real is not None:
    def part_row(part: str, d: dict | None) -> dict:
        return {"part of this section": part, "file": Path(d["_path"]).name if d else "none in the data",
                "written": d.get("date") if d else None, "target layers": d.get("layers") if d else None,
                "configuration": None if d is None else findings.config_words(d) if d is real else
                "the canary run's" if data.real_config(d) == data.real_config(real) else
                "ANOTHER: " + findings.config_words(d, real)}
    part_rows = [part_row("canary: gates, decode speed, follow-up turns, server arguments", real),
                 part_row("planted verify fault", real.get("_planted_doc")),
                 part_row("promote", real.get("_promote_doc")),
                 *(part_row(f"breakdown at {n} layers", m["doc"]) for n, m in (real.get("_breakdowns") or {}).items())]
    if real.get("_slopes"):
        part_rows.append({"part of this section": f"per-layer slope over {', '.join(map(str, real['_slopes']['layers']))} layers"
                                  + (" (as the file recorded it)" if real.get("_slopes_recorded") else
                                     " (computed here from those breakdowns)"),
                          "file": ", ".join(Path(d["_path"]).name for d in real["_slopes_docs"]),
                          "configuration": "the canary run's"})
    display(figures.table(pd.DataFrame(part_rows), {"target layers": "{:,.0f}"},
                          "Which real-server file each part of this section shows (one device call writes "
                          "one file; a part of another configuration says so)",
                          text=("part of this section", "file", "configuration")))
    display(Markdown(provenance.banner(real_files, head="The real-server files this section reads:")))
    st = real.get("standins") or {}
    where_rows = [
        ("served by", findings.real_label(real)),
        ("EAGLE's draft extend on the flash arm",
         "not EAGLE" if data.real_draft_extend(real) is None else
         findings.DRAFT_WORDS[data.real_draft_extend(real)] + (
             f" (recorded: draft_extend {real['draft_extend']})" if "draft_extend" in real else
             f" (a file from before the job recorded draft_extend: plugin_env {real.get('plugin_env') or {}})")),
        ("file", Path(real["_path"]).name), ("written", real.get("date")),
        ("GPU", f"{real.get('gpu')} ({real.get('sms')} SMs), driver {real.get('driver')}, CUDA "
                f"{real.get('cuda')}, torch {real.get('torch')}"),
        ("target layers", real.get("layers")),
        ("SGLang", (real.get("bundle") or {}).get("sglang") or "not recorded (no server bundle)"),
        ("kernel source hash",
         (real.get("kernel") or {}).get("hash") or "not recorded (no kernel built)"),
        ("commit", real.get("commit")),
        ("server bundle sha256", str((real.get("bundle") or {}).get("sha256") or "none")[:16]),
        ("stand-ins that ran (torch versions of sgl_kernel functions)",
         ", ".join(st.get("ran") or []) or "none"),
        ("placeholders called (they raise)", ", ".join(st.get("called") or []) or "none"),
        ("server processes that logged stand-ins", st.get("processes")),
    ]
    display(figures.table(pd.DataFrame(where_rows, columns=["what", "value"]),
                          caption="What served the run (from its JSON)", text=("what", "value")))
    steps_rows = [{"file": Path(d["_path"]).name, "layers": d.get("layers"), "step": n,
                   "result": r.get("status"), "wall s": r.get("wall_s"), "predicted s": r.get("predicted_s"),
                   "run by": "the job, as a prerequisite" if r.get("auto") else "asked for",
                   "summary": r.get("summary")}
                  for d in real_files for n, r in ((d.get("steps") or {}).items())]
    display(figures.table(pd.DataFrame(steps_rows), {"wall s": "{:,.0f}", "predicted s": "{:,.0f}"},
                          "The job's steps in each file this section reads (wall time and the job's own "
                          "prediction; a file repeats the steps of earlier calls at its layer count)",
                          text=("summary",), nowrap=("file",)))

# %%
canary_step = real_steps.get("canary")
if section("real-gates", "the canary's gates"):
    if canary_step is None:
        display(Markdown("No real-server file of this kind has a canary step."))
    else:
        display(figures.table(
            pd.DataFrame([{"group": g["group"], "gate": g["gate"], "passed": g["passed"],
                           "reason": g["reason"]} for g in canary_step.get("gates") or []]),
            caption=f"`rollout canary`'s gates, in order (canary {canary_step.get('canary')}; "
                    f"exit {canary_step.get('rollout_rc')})", text=("reason",), nowrap=("group", "gate")))
        passed = canary_step.get("status") == "ok"
        display(Markdown(
            f"**Decision: {'canary PASSED, the rollout may continue' if passed else 'canary FAILED'}"
            + ("" if real_is_real else " (EMULATED)") + f"**: {canary_step.get('summary')}"))

# %%
sp = (canary_step or {}).get("speed")
if section("real-speed", "decode speed per arm"):
    if not sp:
        display(Markdown("No speed gate result in this file."))
    else:
        timed = canary_step.get("timed") or {}
        speed_rows = []
        for role, arm in (("candidate", "flash"), ("control", "triton")):
            a, t = sp.get(role) or {}, timed.get(arm) or {}
            speed_rows.append({
                "arm": f"{role} ({arm})", "rounds": len(a.get("tok_s") or []),
                "median tokens/s": a.get("median_tok_s"), "median step, ms": a.get("median_step_ms"),
                "median accept length": a.get("median_accept_length"),
                "TTFT, cached prompt, ms": (1000 * t["ttft_s"] if t.get("ttft_s") is not None
                                            else None),
                "one more request, tokens/s": t.get("tok_s")})
        display(figures.table(
            pd.DataFrame(speed_rows),
            {"median tokens/s": "{:,.2f}", "median step, ms": "{:,.1f}",
             "median accept length": "{:.2f}", "TTFT, cached prompt, ms": "{:,.0f}",
             "one more request, tokens/s": "{:,.2f}"},
            f"The speed gate at {sp.get('context_tokens') or 0:,} tokens, "
            f"{sp.get('max_new_tokens')} greedy tokens a request (prompt cached): step = accept "
            "length / tokens/s; the last two columns are one more streamed request per arm after "
            "the gates"))
        rounds = pd.concat([pd.DataFrame({"arm": f"{r} ({arm})",
                                          "tokens_per_s": (sp.get(r) or {}).get("tok_s") or []})
                            for r, arm in (("candidate", "flash"), ("control", "triton"))])
        if not rounds.empty:
            figures.show(figures.tokens_per_s(
                rounds, ("Real server" if real_is_real else "EMULATED, not a real server")
                + f": decode speed per round, {real.get('layers')} layers, "
                  f"{sp.get('context_tokens') or 0:,} tokens"))
        ci = sp.get("ci") or {}
        display(Markdown(
            f"Candidate / control median tokens/s = **{sp.get('ratio', float('nan')):.3g}** "
            f"({ci.get('level', 0.95):.0%} CI {ci.get('low', float('nan')):.3g} to "
            f"{ci.get('high', float('nan')):.3g}); speed gate "
            f"**{'pass' if sp.get('passed') else 'FAIL'}**: {sp.get('reason')}"))

# %%
# One line per configuration (algorithm, draft extend, kernel): the canary above is the newest
# run's, and a newer run of another algorithm must not hide an older configuration's result.
canaries = (real or {}).get("_canaries") or []
if len(canaries) > 1 and section("real-canaries", "every configuration's newest canary", canaries):
    def canary_row(d: dict) -> dict:
        c = d["steps"]["canary"]
        s = c.get("speed") or {}
        a, k, ci = s.get("candidate") or {}, s.get("control") or {}, s.get("ci") or {}
        return {"configuration": findings.config_words(d), "layers": d.get("layers"),
                "file": Path(d["_path"]).name, "written": str(d.get("date"))[:16],
                "context tokens": s.get("context_tokens"), "flash tokens/s": a.get("median_tok_s"), "triton tokens/s": k.get("median_tok_s"),
                "flash / triton": s.get("ratio"), "95 % CI": f"{ci.get('low', float('nan')):.3g} to "
                                                              f"{ci.get('high', float('nan')):.3g}",
                "flash step, ms": a.get("median_step_ms"), "triton step, ms": k.get("median_step_ms"),
                "canary": "passed" if c.get("status") == "ok" else c.get("status")}
    display(figures.table(
        pd.DataFrame([canary_row(d) for d in canaries]),
        {"layers": "{:,.0f}", "context tokens": "{:,.0f}", "flash tokens/s": "{:,.2f}", "triton tokens/s": "{:,.2f}",
         "flash / triton": "{:.3g}", "flash step, ms": "{:,.1f}", "triton step, ms": "{:,.1f}"},
        "The newest real-server canary of each configuration, newest first (the first is the one "
        "this section shows)",
        text=("configuration",), nowrap=("file",)))

# %%
p_doc = (real or {}).get("_planted_doc")
pl = findings.planted_caught(p_doc) if p_doc is not None else None
if section("real-planted", "a planted verify fault", [p_doc]):
    if pl is None:
        display(Markdown("No real-server file of this kind has a planted-fault step."))
    else:
        p_step = p_doc["steps"]["planted"]
        if p_doc is not real:
            display(Markdown(
                f"The canary run (`{Path(real['_path']).name}`) did not plant a fault; this is the newest run that "
                f"did, `{Path(p_doc['_path']).name}` ({p_doc.get('date')}), "
                + ("of the same configuration." if data.real_config(p_doc) == data.real_config(real) else
                   f"run with **{findings.config_words(p_doc, real)}**, not the canary run's configuration. The "
                   "planted fault perturbs the target's verify output (the plugin's verify slot, not the draft "
                   "extend), which the flash arm serves through the kernel in either configuration.")))
        display(figures.table(
            pd.DataFrame([{"gate": g["gate"], "passed": g["passed"], "reason": g["reason"]}
                          for g in p_step.get("gates") or [] if g["group"] == pl["canary"]]),
            caption=f"The canary {pl['canary']} restarted with a test-only plugin that perturbs "
                    "the flash kernel's output (never loadable by the shipped entry point): its "
                    "gates, then the rollback's", text=("reason",), nowrap=("gate",)))
        num = pl["numerics"]
        cs = num.get("control_self") or {}
        display(Markdown(
            f"Caught by the **{pl['gate']}** gate"
            + (f": top-1 agreement {num['top1_agreement']:.3f}, mean |delta logprob| "
               f"{num['mean_abs_logprob_diff']:.3g} (the control's own verify against its "
               f"prefill: top-1 {cs.get('top1_agreement') or 0:.3f})"
               if num.get("top1_agreement") is not None else "")
            + f". After `rollout canary` exited {p_step.get('rollout_rc')}, {pl['canary']} "
            f"serves **{pl['after']}**; planted-fault log entries: "
            f"{len(p_step.get('planted_log') or [])}. "
            + ("As expected." if pl["ok"] else f"**Not as expected**: {p_step.get('summary')}")))

# %%
pr_doc = (real or {}).get("_promote_doc")
pr = ((pr_doc or {}).get("steps") or {}).get("promote")
if section("real-promote", "promote", [pr_doc]):
    if pr is None:
        display(Markdown("No real-server file of this kind has a promote step."))
    else:
        if pr_doc is not real:
            display(Markdown(
                f"The canary run (`{Path(real['_path']).name}`) did not promote; this is the newest run that did, "
                f"`{Path(pr_doc['_path']).name}` ({pr_doc.get('date')}), "
                + ("of the same configuration." if data.real_config(pr_doc) == data.real_config(real) else
                   f"run with **{findings.config_words(pr_doc, real)}**, not the canary run's configuration.")))
        prom = [{"group": n,
                 "median tokens/s": ((p.get("speed") or {}).get("candidate") or {}).get("median_tok_s"),
                 "speed gate": (p.get("speed") or {}).get("passed"),
                 "numerics": (p.get("numerics") or {}).get("verdict"),
                 "serves now": ((pr.get("groups_after") or {}).get(n) or {}).get("arm")}
                for n, p in (pr.get("promoted") or {}).items()]
        if prom:
            display(figures.table(pd.DataFrame(prom), {"median tokens/s": "{:,.2f}"},
                                  "`rollout promote`: every other group to flash, gated against "
                                  "the canary's recorded control"))
        display(Markdown(f"Promote: **{pr.get('status')}**: {pr.get('summary')}"))

# %%
def draft_note(doc: dict, ours_ms: float) -> str:
    """What the file's flash arm did with EAGLE's draft-model extend (data.real_draft_extend): on by
    default since the H200 run, MLA_VERIFY_DRAFT_EXTEND=0 leaves it to SGLang."""
    on = data.real_draft_extend(doc)
    was = (f"`{Path(doc['_path']).name}` recorded draft_extend {doc['draft_extend']}" if "draft_extend" in doc
           else f"`{Path(doc['_path']).name}` predates the draft_extend record; its plugin_env "
                f"{doc.get('plugin_env') or {}} means {'on' if on else 'off'}")
    return ("EAGLE's draft-model extend runs the kernel on the flash arm by default (since it ran inside "
            "SGLang's draft-extend CUDA graph on the H200); `MLA_VERIFY_DRAFT_EXTEND=0` leaves it to SGLang. "
            f"This run had it **{'on' if on else 'off'}** ({was}); {ours_ms:,.2f} ms of it was the kernel's.")


merged = (real or {}).get("_breakdowns") or {}
bds = {n: m["breakdown"] for n, m in merged.items()}
bd_file = {n: Path(m["doc"]["_path"]).name for n, m in merged.items()}
classified = {k: b["classified"] for k, b in sorted(bds.items()) if b.get("classified")}
if section("real-breakdown", "where the flash arm's step goes",
           list({id(m["doc"]): m["doc"] for m in merged.values()}.values())):
    if merged:
        display(Markdown(
            "Every breakdown of the canary run's configuration (" + findings.config_words(real) + "), one per "
            "layer count, from the newest file that measured it; files of another configuration are not "
            "merged here."))
    if not classified:
        why = ((real_steps.get("breakdown") or {}).get("profile")
               or "no breakdown with a classified profile in these files")
        display(Markdown(f"No profiled breakdown: {why}."))
    for n, c in classified.items():
        ph = c["phases"]
        rows = [{"phase": name, "GPU ms per step": ph[name]["ms_per_step"],
                 "of which attention, ms": ph[name]["attention_ms_per_step"],
                 "of which our kernel, ms": ph[name]["ours_ms_per_step"],
                 "kernels per step": ph[name]["kernels_per_step"]} for name in ph]
        rows.append({"phase": "GPU idle (waiting on the host)",
                     "GPU ms per step": c["gpu_idle_ms_per_step"]})
        display(figures.table(
            pd.DataFrame(rows), {"GPU ms per step": "{:,.2f}", "of which attention, ms": "{:,.2f}",
                                 "of which our kernel, ms": "{:,.3f}", "kernels per step": "{:,.1f}"},
            f"{n} target layers, flash arm: a {c['step_ms']:,.1f} ms step from SGLang's profiler "
            f"over {c['steps']} steps (verify = the target's TARGET_VERIFY forward; its attention "
            f"{c['verify_attention_ms_per_layer']:.3f} ms per layer); from {bd_file[n]}"))
    sl = real.get("_slopes")
    SLOPE_NAMES = {"step_ms": "whole step", "gpu_busy_ms_per_step": "GPU busy",
                   "gpu_idle_ms_per_step": "GPU idle (waiting on the host)",
                   "phases.verify.ms_per_step": "verify (target layers, lm_head)",
                   "phases.verify.attention_ms_per_step": "verify: attention",
                   "phases.verify.other_ms_per_step": "verify: everything else",
                   "phases.draft.ms_per_step": "draft decode", "phases.draft_extend.ms_per_step": "draft extend",
                   "phases.outside.ms_per_step": "outside the spans (sampling, tree, KV bookkeeping)"}
    if sl:
        at = f"at {sl['predict_at']} layers, ms"
        display(figures.table(
            pd.DataFrame([{"quantity": SLOPE_NAMES.get(k, k),
                           "per layer, ms": f["per_layer_ms"], "intercept, ms": f["intercept_ms"],
                           at: f["at_predict_ms"]} for k, f in sl["fits"].items()]),
            {"per layer, ms": "{:,.3f}", "intercept, ms": "{:,.2f}", at: "{:,.1f}"},
            f"Per-layer slope: least-squares line over the breakdowns at "
            f"{', '.join(map(str, sl['layers']))} layers"
            + (f" (as {Path(real['_slopes_docs'][0]['_path']).name} recorded it)" if real.get("_slopes_recorded")
               else " (computed here from the breakdowns above)"), text=("quantity",)))
    elif classified:
        display(Markdown("One layer count profiled: no per-layer slope yet (it needs two)."))
    for n, c in classified.items():
        # SGLang's attention that is the kernel's computation but not yet ours: what the plugin could serve
        theirs = {name: p["attention_ms_per_step"] - p["ours_ms_per_step"] for name, p in c["phases"].items()}
        name = max(theirs, key=theirs.get)
        if theirs[name] > 0.25 * c["step_ms"]:
            display(Markdown(
                f"At {n} layers, **{theirs[name]:,.2f} ms of the {c['step_ms']:,.1f} ms step** is SGLang's "
                f"attention in the **{name}** phase ({theirs[name] / c['step_ms']:.0%}), over the same cached "
                f"prefix the kernel reads: the computation the plugin serves elsewhere. "
                + (draft_note(merged[n]["doc"], c["phases"][name]["ours_ms_per_step"]) if name == "draft_extend"
                   else "")))

# %%
# Other configurations' breakdowns (another algorithm, draft-extend setting or kernel build), one
# line each: the step of each, side by side, never merged into the canary run's above.
others = (real or {}).get("_other_breakdowns") or []
if others and section("real-other-breakdowns", "other configurations' steps", [o["doc"] for o in others]):
    def other_row(o: dict) -> dict:
        c = o["breakdown"]["classified"]
        ph = c["phases"]
        get = lambda name, k: (ph.get(name) or {}).get(k)   # noqa: E731
        return {"configuration": findings.config_words(o["doc"]), "layers": o["layers"],
                "file": Path(o["doc"]["_path"]).name, "step, ms": c["step_ms"],
                "verify attention, ms": get("verify", "attention_ms_per_step"),
                "verify, the rest, ms": get("verify", "other_ms_per_step"),
                "draft, ms": get("draft", "ms_per_step"), "draft's attention, ms": get("draft", "attention_ms_per_step"),
                "draft extend, ms": get("draft_extend", "ms_per_step"), "outside, ms": get("outside", "ms_per_step"),
                "GPU idle, ms": c["gpu_idle_ms_per_step"],
                "verify attention per layer, ms": c["verify_attention_ms_per_layer"]}
    display(figures.table(
        pd.DataFrame([other_row(o) for o in others]),
        {"layers": "{:,.0f}", **{k: "{:,.2f}" for k in ("step, ms", "verify attention, ms", "verify, the rest, ms",
                                                          "draft, ms", "draft's attention, ms", "draft extend, ms",
                                                          "outside, ms", "GPU idle, ms")},
         "verify attention per layer, ms": "{:.3f}"},
        "The flash arm's profiled step in each other configuration, per layer count (newest file that "
        "profiled it); not merged with the canary run's breakdowns above",
        text=("configuration",), nowrap=("file",)))

# %%
ext = (real or {}).get("extend_over_prefix") or {}
if section("real-extend", "follow-up turns and the prompt's prefill (EXTEND over a cached prefix)"):
    if not ext:
        display(Markdown("No EXTEND measurement in this file (the job's canary step records it)."))
    pre = ext.get("prefill") or {}
    pre_rows = []
    for arm in ("triton", "flash"):
        got = pre.get(arm)
        for e in (got if isinstance(got, list) else [got] if got else []):
            pre_rows.append({
                "arm": arm, "group": e.get("group"), "prompt tokens": e.get("prompt_tokens"),
                "prefill, s": e.get("prefill_s"),
                "per target layer, s": (e["prefill_ms_per_layer"] / 1000
                                        if e.get("prefill_ms_per_layer") is not None else None),
                "timed from": e.get("source") if e.get("measured") else
                f"not measured: {e.get('why')}"})
    if pre_rows:
        display(figures.table(
            pd.DataFrame(pre_rows), {"prefill, s": "{:,.2f}", "per target layer, s": "{:,.3f}",
                                     "prompt tokens": "{:,.0f}"},
            f"Prefill of the {ext.get('context_tokens') or 0:,}-token prompt on a freshly started "
            f"server, {ext.get('layers')} target layers (per layer = time / target layers; the "
            "time also holds the draft model's extend)", text=("timed from",), nowrap=("group",)))
    fu, rt = ext.get("followup") or {}, ext.get("ratio_triton_over_flash") or {}
    sizes = sorted({n for a in fu.values() for n in a}, key=int)
    if sizes:
        def one(arm, n, key):
            return (fu.get(arm, {}).get(n) or {}).get(key)
        display(figures.table(pd.DataFrame([{
            "new tokens": int(n),
            "triton TTFT, ms (median)": one("triton", n, "median_ttft_ms"),
            "flash TTFT, ms (median)": one("flash", n, "median_ttft_ms"),
            "triton / flash": rt.get(n),
            "requests per arm": max(len(one(a, n, "ttft_ms") or []) for a in fu),
            # judged anew from cached_tokens (files written before the rule allowed the prompt's
            # uncached last token recorded every follow-up as a miss)
            "every one hit the cached prompt": all(prefix_hit(c, ext.get("context_tokens") or 0)
                                                   for a in fu for c in (one(a, n, "cached_tokens") or [None])),
        } for n in sizes]), {"triton TTFT, ms (median)": "{:,.1f}", "flash TTFT, ms (median)": "{:,.1f}",
                             "triton / flash": "{:,.1f}"},
            f"TTFT of a follow-up turn after the cached {ext.get('context_tokens') or 0:,}-token "
            "prompt: prompt + n fresh token ids, one token back (non-streaming, client wall time); "
            "a fresh suffix per request, the same ones on both arms"))
    g = ext.get("greedy")
    if g:
        display(Markdown(f"Greedy tokens of one more {g['suffix_tokens']}-token follow-up, "
                         f"{g['max_new_tokens']} tokens on each arm (temperature 0): "
                         + ("**equal on both arms**." if g.get("equal") else
                            f"**not compared**: {g['errors']}" if g.get("errors") else
                            f"**they differ from token {g.get('first_divergence')}**.")))
    deltas = {a: (c or {}).get("delta") for a, c in (ext.get("counters") or {}).items()}
    if any(deltas.values()):
        display(Markdown("The plugin's counters over the follow-ups: " + "; ".join(
            f"{a}: " + (", ".join(f"`{k}` +{v:g}" for k, v in d.items()) or "no change")
            for a, d in deltas.items() if isinstance(d, dict))))
    if ext.get("error"):
        display(Markdown(f"**The measurement stopped with an error**: `{ext['error']}`"))

# %%
server_args = {}
for n, g in ((real_steps.get("up") or {}).get("groups") or {}).items():
    server_args[f"{n} (triton, step up)"] = g.get("server_args") or {}
for n, b in sorted(bds.items()):
    server_args[f"breakdown server, {n} layers (flash, {bd_file[n]})"] = b.get("server_args") or {}
arg_keys = sorted({k for a in server_args.values() for k in a if k != "error"})
if section("real-args", "server arguments", real_files[:1] + [m["doc"] for m in merged.values()]) and arg_keys:
    display(figures.table(
        pd.DataFrame([{"argument": k, **{c: None if a.get(k) is None else str(a.get(k))
                                         for c, a in server_args.items()}} for k in arg_keys]),
        caption="What each server's /server_info reported (the keys the job keeps)"))

# %%
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
    record_path, "Phase 3: canary A/B at long context" + (
        " (a real-server canary; this page's own A/B on emulators)" if emulated and real_is_real
        else " (emulated)" if emulated else ""),
    sources + real_files, findings=found,
    extra={"emulated": emulated, "gate_pass": status == "pass" and not emulated,
           "real_server": None if real is None else {
               "file": Path(real["_path"]).name, "emulated": not real_is_real,
               "label": findings.real_label(real), "date": real.get("date"), "gpu": real.get("gpu"),
               "layers": real.get("layers"), "decision": found[0]["text"],
               "parts": {"planted": Path(real["_planted_doc"]["_path"]).name if real.get("_planted_doc") else None,
                         "promote": Path(real["_promote_doc"]["_path"]).name if real.get("_promote_doc") else None,
                         "breakdowns": {str(n): bd_file[n] for n in bd_file}}},
           "decision": decision,
           "endpoints": [f"{r}: {'local emulator' if started else e['url']} "
                         f"({'emulated' if e['emulated'] else 'live'}, {e['arm']})"
                         for r, e in ends.items()]})
