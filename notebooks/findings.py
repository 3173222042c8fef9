"""The findings box at the top of each report and the verdict on reports/index.html.

A finding is {"id", "check", "text", "status", "anchor"}: its text is built here from the
measurement JSON (no number is typed by hand), the notebook shows it first, and the record
carries it to the index, so the index and the page can never disagree.
status: "pass" (the check holds), "fail" (it does not), "open" (not shown by any data yet),
"info" (a measured fact without a pass/fail reading).
"""
from __future__ import annotations

import html
from pathlib import Path

from kernel.sglang.real_server.environment import kv_clause, kv_words

from . import data
from .glossary import IMPL_LABELS
from .provenance import PRODUCTION_ARCH, PRODUCTION_NAME, evidence_limits

MARK = {"pass": ("&#10004;", "#1a7f37", "yes"), "fail": ("&#10008;", "#cf222e", "no"),
        "open": ("&#9675;", "#9a6700", "not shown"), "info": ("&#8226;", "#57606a", "")}


def finding(id: str, check: str, text: str, status: str, anchor: str) -> dict:
    if status not in MARK:
        raise ValueError(f"status: {status!r} is not one of {', '.join(MARK)}")
    return {"id": id, "check": check, "text": text, "status": status, "anchor": anchor}


def production(docs: list[dict], estimate: dict | None = None, measured_on: str | None = None) -> dict:
    """Whether the production GPU ran any of these files, and what was built for it; with
    `estimate` (a row of the microbench file's sm_120 model, as data.sm120_frame gives it), the
    model's time for it, labelled an estimate, next to the measured time of the GPU its model file
    names (`measured_on`, data.gpu_short of that file: required with `estimate`)."""
    if estimate is not None and not measured_on:
        raise ValueError(f"measured_on: {measured_on!r}; an estimate needs the GPU its model file measured")
    lim = evidence_limits(docs)
    gpus = ", ".join(lim["gpus"])
    if lim["production_ran"]:
        return finding("production", f"run on the production GPU ({PRODUCTION_ARCH})",
                       f"measured on {gpus}", "pass", "evidence")
    b = lim["production_build"]
    built = (f"compiled for it ({b['registers']} registers, {b['spills']} bytes spilled)"
             if b else "compiled for it")
    text = f"{built}, never run on it: all data from {gpus}"
    anchor = "evidence"
    if estimate is not None:
        text += (f"; ESTIMATE (a model, not a measurement): {estimate['sm120_estimate_us']:,.1f} "
                 f"us per layer there at S = {int(estimate['S']):,}, T = {int(estimate['T'])}, "
                 f"H = {int(estimate['H'])} ({data.tier_phrase(estimate['tier'])}), against "
                 f"{estimate['h200_us']:,.1f} us measured on the {measured_on}")
        anchor = "sm120"
    return finding("production", f"run on the production GPU ({PRODUCTION_ARCH}, "
                   f"{PRODUCTION_NAME})", text, "open", anchor)


def tiers(tab) -> dict | None:
    """The default tier against rows64 where the default picked another tier and the bench
    also timed rows64 forced (data.tier_frame); None when the bench has no such pair."""
    pairs = tab[tab["rows64_us"].notna() & (tab["tier"] != 0)] if not tab.empty else tab
    if pairs.empty:
        return None
    at = pairs[(pairs["S"] == data.CENTRE["S"]) & (pairs["batch"] == 1)]
    at = at if not at.empty else pairs
    parts = [f"T = {int(r['T'])}, H = {int(r['H'])} ({int(r['query_rows'])} query rows, "
             f"{data.tier_phrase(r['tier'])}): {r['ours_us']:,.1f} us against "
             f"{r['rows64_us']:,.1f} us with rows64 forced ({r['small_gain']:,.2f}x)"
             for _, r in at.iterrows()]
    ok = bool((pairs["small_gain"] > 1).all())
    return finding("tiers", "the default tier faster than rows64 wherever both were timed",
                   f"at S = {int(at['S'].max()):,}: " + "; ".join(parts),
                   "pass" if ok else "fail", "tiers")


def backend(doc: dict | None) -> dict:
    """SGLang's real TritonAttnBackend with the plugin, in CUDA graphs, and memcheck."""
    check = "inside SGLang's own backend and CUDA graphs"
    if doc is None:
        return finding("backend", check, "no sglang-backend measurement in the data directory",
                       "open", "backend")
    s = data.backend_summary(doc)
    mem = ("memcheck clean" if s["memcheck_clean"] else
           "memcheck NOT clean" if s["memcheck_ran"] else "memcheck not run")
    text = (f"through SGLang's real backend: {s['n_pass']}/{s['n_cases']} pass, {mem} (SGLang "
            f"{s['sglang']}'s TritonAttnBackend with the plugin through its hook, {s['layers']} "
            f"layers captured in CUDA graphs and replayed with new lengths; largest error "
            f"{s['max_oracle_err']:.2g} against the float64 oracle, {s['max_control_err']:.2g} "
            "against SGLang's own path)")
    ok = s["all_pass"] and s["memcheck_clean"]
    return finding("backend", check, text, "pass" if ok else "fail", "backend")


def _file(doc: dict) -> str:
    return Path(doc["_path"]).name


def fp8(val: dict, bench: dict, backend: dict | None) -> dict:
    """SGLang's fp8_e4m3 KV cache: the validation's fp8 section, ours on the fp8 pool at the
    centre (against its own roofline, our bf16 time and SGLang's fp8 path) and the fp8 cases
    through SGLang's real backend. Fails when any part measured fails (or ours is slower than
    SGLang's own kernel on the same fp8 pool); passes when the validation ran and nothing
    failed; open while there is no fp8 validation. Files without fp8 data are named."""
    check = "correct on SGLang's fp8_e4m3 KV cache"
    v = data.fp8_validation(val)
    f8 = data.fp8_bench_frame(bench)
    b = data.backend_summary(backend, data.FP8_KV) if backend is not None else None
    none = [_file(d) for d, part in ((val, v), (bench, None if f8.empty else f8), (backend, b))
            if d is not None and part is None]
    if v is None and f8.empty and b is None:
        return finding("fp8", check, "no fp8 measurement in " + ", ".join(none), "open", "fp8")
    parts, ok = [], True
    if v is None:
        parts.append(f"no fp8 validation in {_file(val)}")
    elif "error" in v:
        parts.append(f"the fp8 validation did not run ({v['error'][:160]})")
        ok = False
    else:
        clean = v["nan_cases"] == 0 and v["unwritten_total"] == 0
        parts.append(f"{v['n_pass']} of {v['n_cases']} fp8 cases pass at relative tolerance "
                     f"{v['tolerance']:g} against the float64 oracle on the dequantized pool (worst "
                     f"{v['max_rel_err']:.3g}; {v['split_scales']} with v_scale != k_scale)"
                     + ("" if clean else f", NaN in {v['nan_cases']} cases")
                     + (f"; CUDA-graph replay equals eager in {v['graph_pass']} of {v['graph_cases']}"
                        if v["graph_cases"] else ""))
        ok = ok and v["all_pass"] and clean and v["graph_pass"] == v["graph_cases"]
    c = data.centre(f8).set_index("impl") if not f8.empty else None
    if c is not None and data.OURS in c.index:
        ours = float(c.loc[data.OURS, "time_us"])
        sp = data.fp8_speed(bench)
        at = data.select(sp, **data.CENTRE)
        x_bf16 = float(at["fp8_speedup"].iloc[0]) if not at.empty else float("nan")
        text = (f"{ours:,.1f} us per layer at the centre on fp8, "
                f"{100 * float(c.loc[data.OURS, 'frac_roofline']):.0f} % of its roofline"
                + ("" if x_bf16 != x_bf16 else f", {x_bf16:,.2f}x faster than ours on bf16" if x_bf16 >= 1
                   else f", {1 / x_bf16:,.2f}x SLOWER than ours on bf16 ({x_bf16:,.2f}x its speed)"))
        if data.BASELINE in c.index:
            x = float(c.loc[data.BASELINE, "time_us"]) / ours
            text += f", {x:,.1f}x faster than {IMPL_LABELS[data.BASELINE]} on the same fp8 pool"
            ok = ok and x > 1
        parts.append(text)
    elif v is not None:
        parts.append(f"no fp8 benchmark in {_file(bench)}")
    if b is not None:
        why = "; ".join(f"{n['case']}: " + (
            f"refused ({n['refused'][:120]})" if n["refused"] else
            "every layer fell back (" + ", ".join(f"{k} x{m}" for k, m in sorted(n["fallbacks"].items())) + ")")
            for n in b["not_run"])
        parts.append(f"{b['n_pass']}/{b['n_cases']} fp8 cases pass through SGLang's real backend"
                     + (f" (NOT RUN: {why})" if why else "")
                     + (", memcheck clean" if b["memcheck_clean"] else
                        ", memcheck NOT clean" if b["memcheck_ran"] else ""))
        ok = ok and b["all_pass"] and (b["memcheck_clean"] or not b["memcheck_ran"])
    elif backend is not None:
        parts.append(f"no fp8 case in {_file(backend)}")
    status = "fail" if not ok else "pass" if v is not None and "error" not in v else "open"
    return finding("fp8", check, "; ".join(parts), status, "fp8")


def dcp(doc: dict | None) -> dict | None:
    """Decode context parallelism simulated on one GPU: equal to the unsharded call, and
    what it does to per-layer attention time and KV memory per GPU."""
    if doc is None:
        return None
    df = data.dcp_frame(doc)
    ok = bool(doc.get("all_pass")) and bool(df["pass"].all())
    ns = "/".join(str(n) for n in df["ranks"])
    slow = df["rank_us"] + df["epilogue_us"]
    unsharded = df["unsharded_us"].median()
    verdict = ("so no attention time is saved here" if slow.min() >= unsharded else
               f"{unsharded / slow.min():.2f}x faster at best")
    text = (f"DCP with tree verify, simulated on one GPU for N = {ns}: equal to the unsharded call "
            f"within {df['err_vs_unsharded'].max():.2g}; attention per layer {slow.min():.0f}-"
            f"{slow.max():.0f} us per rank against {unsharded:.0f} us unsharded, {verdict} (every "
            f"rank computes all N x H heads over S / N tokens: the same math); KV memory per GPU "
            f"{df['kv_share'].iloc[-1]:.3g} of unsharded at N = {df['ranks'].iloc[-1]}")
    return finding("dcp", "DCP merge equals the unsharded call (simulated)", text,
                   "pass" if ok else "fail", "dcp")


def correctness(val: dict) -> dict:
    v = data.validation_summary(val)
    clean = v["nan_cases"] == 0 and v["unwritten_total"] == 0
    text = (f"{v['n_pass']} of {v['n_cases']} cases pass at relative tolerance "
            f"{v['tolerance']:g} against the float64 oracle (worst error {v['max_rel_err']:.3g}); "
            + ("NaN poison: no NaN output, no unwritten row" if clean else
               f"NaN poison: {v['nan_cases']} cases with NaN, "
               f"{v['unwritten_total']} unwritten rows"))
    by = data.validation_tiers(val)
    failing = int(by["failing"].sum()) if not by.empty else 0
    if not by.empty:
        text += (f"; {int(by['checks'].sum())} checks over {len(by)} kernel tiers, "
                 + ("none failing" if failing == 0 else f"{failing} FAILING"))
    ok = v["all_pass"] and clean and failing == 0
    return finding("correctness", "correct", text, "pass" if ok else "fail", "correctness")


def centre_speed(df) -> dict:
    """Our time at the centre against the roofline floor and against SGLang's paths."""
    c = data.centre(df).set_index("impl")
    if data.OURS not in c.index:
        raise data.MeasurementError(f"bench has no {data.OURS!r} row at the centre point")
    ours, roof = float(c.loc[data.OURS, "time_us"]), float(c.loc[data.OURS, "roofline_us"])
    n, _ = data.repeat_spread(df)
    text = (f"{ours:,.1f} us per layer at S = {data.CENTRE['S']:,}, T = {data.CENTRE['T']}, "
            f"H = {data.CENTRE['H']} (median of {n} repeats): {ours / roof:.1f}x the roofline "
            f"floor of {roof:,.1f} us ({roof / ours:.0%} of the roof)")
    x = {impl: float(c.loc[impl, "time_us"]) / ours for impl in (data.BASELINE, data.SPLIT_KV)
         if impl in c.index}
    for impl, v in x.items():
        text += f"; {v:,.1f}x faster than {IMPL_LABELS[impl]}"
    return finding("centre", "faster than what CUDA runs today", text,
                   "pass" if x.get(data.BASELINE, 0.0) > 1 else "fail", "centre")


def sglang_step(integ: dict) -> dict:
    it = data.integration_frame(integ)
    r = data.integration_headline(it)
    graph = int(it["graph_replay_matches_eager"].sum())
    text = (f"{r['triton_ms_per_step']:,.1f} ms -> {r['plugin_ms_per_step']:,.1f} ms of "
            f"attention per {integ['layers']}-layer verify step inside SGLang (S = "
            f"{int(r['S']):,}, T = {int(r['T'])}, {r['tree']} tree): {r['speedup']:,.0f}x; "
            f"CUDA-graph replay matches eager in {graph} of {len(it)} cases")
    ok = bool((it["speedup"] > 1).all()) and graph == len(it)
    return finding("step", f"{integ['layers']}-layer verify step, before -> after", text,
                   "pass" if ok else "fail", "sglang")


def baseline(df, bench: dict) -> list[dict]:
    """Phase 0: how slow SGLang's CUDA path is at the centre point, and what it costs."""
    read_gbps, _ = data.ceilings(bench)
    c = data.centre(df).set_index("impl")
    if data.BASELINE not in c.index:
        raise data.MeasurementError(f"{bench['_path']}: no {data.BASELINE!r} row at the centre")
    b = c.loc[data.BASELINE]
    step = data.step_ms(df, data.BASELINE)
    floor = float(b["roofline_us"]) * data.LAYERS / 1e3
    blocks = data.CENTRE["batch"] * data.CENTRE["H"] * -(-data.CENTRE["T"] // data.EXTEND_BLOCK_M)
    return [
        finding("baseline-bw", "how fast SGLang's CUDA path reads the cache",
                f"{IMPL_LABELS[data.BASELINE]} at S = {data.CENTRE['S']:,}: "
                f"{data.fmt_us(float(b['time_us']))} per layer, {b['GBps']:,.1f} GB/s = "
                f"{100 * b['GBps'] / read_gbps:.2f} % of the {read_gbps:,.0f} GB/s read ceiling",
                "info", "bandwidth"),
        finding("baseline-why", "why", f"a grid of {blocks} thread blocks for the GPU's "
                f"{int(bench['sms'])} SMs, and each of the {data.CENTRE['H']} heads reads the "
                "whole cache again", "info", "why"),
        finding("baseline-step", f"cost over {data.LAYERS} layers",
                f"{step:,.0f} ms of attention per verify step; the roofline floor of the same "
                f"work is {floor:,.2f} ms: {step / floor:,.0f}x headroom", "info", "layers"),
    ]


def contiguous(tab) -> list[dict]:
    """Phase 1: the speed-up table's longest prefix (columns as the notebook builds them)."""
    top = tab.iloc[-1]
    text = (f"at S = {int(top['S']):,}: ours {data.fmt_us(top['ours, us'])} per layer, "
            f"{top['ours, % of read ceiling']:.0f} % of the read ceiling")
    for impl in (data.NAIVE, data.BASELINE):
        col = f"speed-up over {IMPL_LABELS[impl]}"
        if col in tab:
            text += f"; {top[col]:,.1f}x faster than {IMPL_LABELS[impl]}"
    return [finding("contiguous", "contiguous cache", text, "info", "contiguous")]


# left-aligned and top-aligned whatever the page's table style (Jupyter's right-aligns cells)
CELL = "padding:2px 8px;text-align:left;vertical-align:top"


def row(f: dict, href: str = "") -> str:
    """One finding as a table row: status, check, text, and a link to its evidence
    (href + '#' + anchor; href empty: the same page)."""
    sym, colour, word = MARK[f["status"]]
    link = f'<a href="{html.escape(href)}#{html.escape(f["anchor"])}">evidence</a>'
    return (f'<tr><td style="color:{colour};white-space:nowrap;{CELL}">{sym} {word}</td>'
            f'<td style="{CELL}"><b>{html.escape(f["check"])}</b></td>'
            f'<td style="{CELL}">{html.escape(f["text"])}</td><td style="{CELL}">{link}</td></tr>')


def box(findings: list[dict], title: str, rows: str = "") -> str:
    """HTML of a findings box: a title line, then one row per finding (or the given rows)."""
    rows = rows or "".join(row(f) for f in findings)
    return (f'<div class="mla-findings" style="border:2px solid #0969da;border-radius:6px;'
            f'padding:6px 10px;margin:8px 0;background:#f6f8fa"><div style="margin-bottom:4px">'
            f'{title}</div><table style="border-collapse:collapse;font-size:95%">{rows}</table>'
            f'</div>')


def anchor(name: str) -> str:
    """An HTML anchor a finding links to; the notebooks put one before each section."""
    return f'<a id="{html.escape(name)}"></a>'


# -- phase 3: the real-server canary (kernel/sglang/real_server's merged JSON, data.real_server) --
def real_label(doc: dict) -> str:
    """What served a real-server file, from the file: "real SGLang <version> server, dummy-weight
    <N>-layer MLA model, one <GPU>", then what the flash arm did with EAGLE's draft extend
    (data.real_draft_extend), or an EMULATED label for the job's --emulate run; a run of another
    algorithm than EAGLE (the job's --algorithm DFLASH) says so, with its block."""
    # a file without "algorithm" predates --algorithm: the job ran EAGLE only
    algo = doc.get("algorithm") or "EAGLE"
    spec = "" if algo == "EAGLE" else f", {algo} speculative decoding" + (
        f" (block {doc['block_size']}, tiny DFlash draft)" if algo == "DFLASH" and doc.get("block_size") else "")
    kv = kv_clause(data.real_kv_cache_dtype(doc))
    if doc.get("emulated"):
        return ("EMULATED real-server run (rollout.emulator behind the job's launch wrapper: no SGLang, no "
                f"GPU, no kernel), {doc.get('layers')}-layer model config" + spec + kv)
    ver = (doc.get("bundle") or {}).get("sglang") or next(
        (str(s.get("server_args", {}).get("version")) for s in ((doc.get("steps") or {}).get("up") or {}).get(
            "groups", {}).values() if (s.get("server_args") or {}).get("version")), "(version not recorded)")
    gpu = str(doc.get("gpu", "GPU")).removeprefix("NVIDIA ")
    # the flash arm with EAGLE's draft extend through the kernel or left to SGLang: two configurations
    draft = data.real_draft_extend(doc)
    return (f"real SGLang {ver} server, dummy-weight {doc.get('layers')}-layer MLA model, one {gpu}" + spec
            + ("" if draft is None else ", " + DRAFT_WORDS[draft]) + kv)


DRAFT_WORDS = {True: "EAGLE's draft extend on, through the kernel",
               False: "EAGLE's draft extend off, left to SGLang"}


def config_words(doc: dict, main: dict | None = None) -> str:
    """A real-server file's configuration in words (data.real_config), or with `main` only what
    differs from main's: "EAGLE's draft extend off, left to SGLang", "kernel 1b7e0c2732557aff",
    "fp8_e4m3 KV pool". Alone, a bf16 (auto) pool goes unsaid, as every run before fp8's did."""
    emulated, gpu, algo, block, draft, kernel, kv = data.real_config(doc)
    ref = data.real_config(main) if main is not None else (None,) * 7
    words = [w for w, a, b in (
        ("EMULATED" if emulated else "real servers", emulated, ref[0]),
        (f"on {gpu}", gpu, ref[1]),
        (algo + (f" (block {block})" if block else ""), (algo, block), (ref[2], ref[3])),
        (DRAFT_WORDS.get(draft, ""), draft, ref[4]),
        (f"kernel {kernel or 'not recorded'}", kernel, ref[5]),
        (kv_words(kv) if kv != "auto" or main is not None else "", kv, ref[6]))
        if a != b and w]
    return ", ".join(words) if words else "the same configuration"


def from_file(doc: dict, main: dict) -> str:
    """"" when doc is main; else where a part came from: "from <file>, the same configuration" or
    "from <file>, run with <what differs>"."""
    if doc is main or doc.get("_path") == main.get("_path"):
        return ""
    same = data.real_config(doc) == data.real_config(main)
    return f"from {_file(doc)}, " + ("the same configuration" if same else f"run with {config_words(doc, main)}")


def _when(doc: dict) -> str:
    return f"{str(doc.get('date', ''))[:10]}, {_file(doc)}"


def planted_caught(doc: dict) -> dict | None:
    """The planted-fault run: {"ok", "gate" (the first of the canary's gates that failed), "canary",
    "after" (its arm after the rollback), "numerics"}; None when the file has no planted step."""
    p = (doc.get("steps") or {}).get("planted")
    if not p:
        return None
    canary = p.get("canary")
    failed = next((g for g in p.get("gates") or [] if g.get("group") == canary and g.get("passed") is False), None)
    return {"ok": p.get("status") == "ok", "gate": failed["gate"] if failed else None,
            "reason": failed["reason"] if failed else None, "canary": canary,
            "after": ((p.get("groups_after") or {}).get(canary) or {}).get("arm"),
            "numerics": p.get("numerics") or {}, "summary": p.get("summary")}


def live_canary(doc: dict | None, emulated_decision: str) -> dict:
    """The index's "canary on a live service" line: the real-server canary when a file of a real
    run is in the data (its date, GPU, layer count, configuration), and the planted fault's
    rollback, which data.real_server may take from another file (named, with its configuration
    where it differs); else only the emulated endpoints. PASS: the canary passed and a planted
    fault was rolled back; INCOMPLETE: either is missing."""
    check = "canary on a live service"
    if doc is None or doc.get("emulated"):
        extra = (f"; the newest real-server file is an EMULATED run ({_file(doc)}), not a real server"
                 if doc is not None else "; no real-server run in the data")
        return finding("decision", check, f"only emulated endpoints: {emulated_decision}" + extra, "open",
                       "real-server")
    steps = doc.get("steps") or {}
    c, pr = steps.get("canary"), steps.get("promote")
    p_doc = doc.get("_planted_doc", doc)
    pl = planted_caught(p_doc) if p_doc is not None else None
    parts, ok, missing = [], True, []
    if c is None:
        missing.append("canary")
    else:
        ok = ok and c.get("status") == "ok"
        parts.append("canary passed its gates" if c.get("status") == "ok" else f"canary FAILED: {c.get('summary')}")
    if pl is None:
        missing.append("planted fault (no real-server file has one)")
    else:
        ok = ok and pl["ok"]
        where = from_file(p_doc, doc)
        parts.append((f"a planted verify fault was rolled back at the {pl['gate']} gate" if pl["ok"] else
                      f"the planted verify fault was NOT handled as it should: {pl['summary']}")
                     + (f" ({where})" if where else ""))
    if pr is not None:   # only the run's own: another run's promote says nothing of this canary's
        ok = ok and pr.get("status") == "ok"
        parts.append("promote completed" if pr.get("status") == "ok" else f"promote FAILED: {pr.get('summary')}")
    if missing:
        parts.append("not run: " + ", ".join(missing))
    status = "fail" if not ok else "open" if missing else "pass"
    word = {"pass": "PASS", "fail": "FAIL", "open": "INCOMPLETE"}[status]
    return finding("decision", check, f"{word} on a {real_label(doc)} ({_when(doc)}): " + "; ".join(parts), status,
                   "real-server")


def real_speed(doc: dict) -> dict | None:
    """The real canary's speed gate (its own "ratio" finding), None without a real canary."""
    sp = ((doc.get("steps") or {}).get("canary") or {}).get("speed") if not doc.get("emulated") else None
    if not sp or sp.get("ratio") is None:
        return None
    c, k, ci = sp.get("candidate") or {}, sp.get("control") or {}, sp.get("ci") or {}
    text = (f"{sp['ratio']:.3g} (95 % CI {ci.get('low', float('nan')):.3g} to {ci.get('high', float('nan')):.3g}) on "
            f"the {real_label(doc)} at {sp.get('context_tokens', 0):,} tokens: flash {c.get('median_tok_s') or 0:,.2f} "
            f"tokens/s ({c.get('median_step_ms') or 0:,.1f} ms a step) against triton "
            f"{k.get('median_tok_s') or 0:,.2f} ({k.get('median_step_ms') or 0:,.1f} ms)")
    return finding("ratio", "candidate / control decode speed", text, "pass" if sp.get("passed") else "fail",
                   "real-speed")


def planted(doc: dict | None) -> dict:
    """The planted fault's rollback from the file data.real_server picked for it (doc's
    "_planted_doc", else doc itself), labelled with that file's configuration."""
    check = "a wrong verify kernel is caught and rolled back"
    p_doc = doc.get("_planted_doc", doc) if doc is not None else None
    pl = planted_caught(p_doc) if p_doc is not None else None
    if pl is None:
        return finding("planted", check, "no real-server run with a planted fault in the data", "open", "real-planted")
    num = pl["numerics"]
    text = ((f"caught by the {pl['gate']} gate" if pl["gate"] else "no gate failed")
            + (f" (top-1 {num['top1_agreement']:.3f}, mean |delta logprob| {num['mean_abs_logprob_diff']:.3g})"
               if pl["gate"] == "numerics" and num.get("top1_agreement") is not None else "")
            + f"; {pl['canary']} back on {pl['after']}")
    if p_doc.get("emulated"):
        return finding("planted", check, f"EMULATED only ({_file(p_doc)}): {text}", "open", "real-planted")
    return finding("planted", check, f"{text}, on the {real_label(p_doc)} ({_when(p_doc)})",
                   "pass" if pl["ok"] else "fail", "real-planted")


def extend_followups(doc: dict | None) -> dict:
    """Issue 26 on the real server: follow-up TTFT per arm and the prompt's prefill per layer."""
    check = "follow-up turns and long prompts on the real server (EXTEND over a cached prefix)"
    e = (doc or {}).get("extend_over_prefix") or {}
    if not e.get("followup") and not e.get("prefill"):
        return finding("extend", check, "no real-server measurement of it in the data", "open", "real-extend")
    parts = []
    fu, ratio = e.get("followup") or {}, e.get("ratio_triton_over_flash") or {}
    for n in sorted({n for a in fu.values() for n in a}, key=int):
        t, f = (fu.get(a, {}).get(n, {}).get("median_ttft_ms") for a in ("triton", "flash"))
        if t is not None and f is not None:
            parts.append(f"{int(n)} token{'s' if int(n) > 1 else ''} {t:,.1f} -> {f:,.1f} ms"
                         + (f" ({ratio[n]:,.1f}x)" if ratio.get(n) else ""))
    text = (f"TTFT of a follow-up after {e.get('context_tokens') or 0:,} cached tokens, triton -> flash: "
            + "; ".join(parts)) if parts else "no follow-up timed"
    pre = e.get("prefill") or {}
    if isinstance(pre.get("triton"), dict) and isinstance(pre.get("flash"), dict):
        t, f = pre["triton"], pre["flash"]
        if t.get("measured") and f.get("measured"):
            text += (f"; prefill of the prompt {t['prefill_ms_per_layer'] / 1000:,.2f} -> "
                     f"{f['prefill_ms_per_layer'] / 1000:,.2f} s per layer")
    g = e.get("greedy")
    if g:
        text += "; greedy tokens " + ("equal on both arms" if g.get("equal") else
                                      f"not compared ({'; '.join(g['errors'].values())[:160]})" if g.get("errors")
                                      else f"DIFFER from token {g.get('first_divergence')}")
    if e.get("error"):
        text += f"; error: {e['error'][:160]}"
    if doc.get("emulated"):
        return finding("extend", check, f"EMULATED only ({_file(doc)}): {text}", "open", "real-extend")
    return finding("extend", check, f"{text} ({real_label(doc)})",
                   "fail" if g and not g.get("equal") and not g.get("errors") else "info", "real-extend")


# ---- EXTEND over a cached prefix at the kernel level (issue 26; phase 2's section "extend") ----
def extend_kernel(ext: dict) -> dict | None:
    """EXTEND over a cached prefix, from notebooks.extend_data.load()'s files: the validation's
    cases, SGLang's backend's cases (a failing one named, with its cause where one is recorded),
    and ours against SGLang's kernel at the largest T on the bf16 pool. None when no file exists."""
    from . import extend_data
    if not any(ext.values()):
        return None
    check = "EXTEND over a cached prefix: correct on both pools, in the kernel and through SGLang's backend"
    parts, failed, missing = [], False, []
    if ext.get("validation") is not None:
        v = extend_data.validation_summary(ext["validation"])
        failed |= not v["all_pass"]
        parts.append(f"validation {v['n_pass']}/{v['n_cases']} cases pass ({v['n_checks']} checks, "
                     f"{', '.join(v['pools']['pool'])}; worst {v['worst']['rel_err']:.2e})")
    else:
        missing.append("validation")
    if ext.get("sglang") is not None:
        c = extend_data.sglang_cases(ext["sglang"])
        fails = extend_data.failures(ext["sglang"])
        failed |= bool(fails)
        text = f"SGLang's backend {int(c['pass'].sum())}/{len(c)} pass"
        for f in fails:
            text += f"; FAIL {f['case']}: {f['why']}"
            if f["fix"]:
                text += (" (the harness; its fix " + {True: "measured", False: "not yet measured",
                                                      None: "not known to be measured"}[f["fix_measured"]] + ")")
        parts.append(text)
    else:
        missing.append("SGLang's backend")
    if ext.get("bench") is not None:
        b = extend_data.bench_table(ext["bench"])
        if not b.empty and b["sglang_us"].notna().any():
            r = b[b["sglang_us"].notna()].iloc[-1]
            parts.append(f"T = {int(r['T']):,} over S = {int(r['S']):,}: {r['ours_us'] / 1e3:,.1f} ms against "
                         f"SGLang's {r['sglang_us'] / 1e3:,.1f} ms a layer ({r['speedup']:,.1f}x, "
                         f"{r['pct_mma']:.0f}% of the mma.sync ceiling)")
    if missing:
        parts.append("not measured here: " + ", ".join(missing))
    return finding("extend-kernel", check, "; ".join(parts),
                   "fail" if failed else "open" if missing else "pass", "extend")
