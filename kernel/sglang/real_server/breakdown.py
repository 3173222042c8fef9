"""Where a decode step's time goes on a real SGLang 0.5.23 server, from the torch-profiler trace
SGLang writes between /start_profile and /stop_profile (Chrome trace JSON, .json.gz).

SGLang names its spans with torch.profiler.record_function whenever a profiler runs
(sglang/srt/utils/nvtx_utils.py): each model forward is `step[<MODE> bs=..]` (`step[VERIFY ..`
for the target's TARGET_VERIFY, `step[DRAFT ..` for any draft forward), and EAGLE's worker wraps
its draft and draft-extend stages in spans named `draft` and `draft_extend`
(speculative/spec_utils.py spec_stage_span). Each GPU kernel (also those a CUDA graph replays)
carries the correlation id of the CPU call that launched it (cudaLaunchKernel, cuLaunchKernel,
cudaGraphLaunch); the spans open on that CPU thread at that moment give the kernel's phase:
  draft         EAGLE's draft decode (3 steps of the NextN layer, top-4), inside its `draft` span;
                DFLASH's draft forward (its worker opens no stage span: the draft model runner's
                `step[DRAFT` span, though that forward borrows the TARGET_VERIFY mode): the DFlash
                model over its block, with its OWN GQA attention over the whole context in its
                own KV cache, served by SGLang's triton MHA kernels, never by our MLA kernel
                (the kernel serves the target's verify only)
  draft_extend  EAGLE's draft model over the accepted tokens (DFLASH has none: 0)
  verify        the target model's TARGET_VERIFY forward (all target layers, lm_head)
  outside       everything else the step launches: sampling, tree build and verify, KV bookkeeping;
                for DFLASH also the projection of the target's tapped hidden states into the
                draft's KV cache (the worker runs it outside any step span)
Within each phase, kernels whose names are attention kernels (ATTENTION: ours, SGLang's
extend/decode/verify Triton kernels) are split from the rest. Per step = over the window from
the first `step[VERIFY` span's start to the last one's, divided by the steps in it. GPU idle
time in that window (the span of its kernels minus their union) is time the GPU waited on the
host: scheduling, Python, launches.
"""
from __future__ import annotations

import bisect
import gzip
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

STAGE_SPANS = ("draft_extend", "draft")
VERIFY_SPAN = re.compile(r"^step\[VERIFY\b")
DRAFT_SPAN = re.compile(r"^step\[DRAFT\b")     # any forward of a draft model runner (profile_utils.py)
PHASES = ("verify", "draft", "draft_extend", "outside")
ATTENTION = re.compile(r"mla_verify_kernel|mla_verify_combine|_fwd_kernel|_fwd_grouped_kernel|_verify_mla|"
                       r"_decode_att|_lean_attention|flash_?attn|flashmla|attention", re.I)
OURS = re.compile(r"mla_verify_kernel|mla_verify_combine")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


class TraceError(ValueError):
    pass


def load_trace(path) -> list[dict]:
    """The trace's events (a .json or .json.gz Chrome trace, or its event list)."""
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(f"{path}: no traceEvents list")
    return events


def _phase(open_spans: list[str]) -> str:
    """The phase a launch belongs to, from the names of the spans open around it."""
    for stage in STAGE_SPANS:
        if stage in open_spans:
            return stage
    if any(DRAFT_SPAN.match(n) for n in open_spans):
        return "draft"
    if any(VERIFY_SPAN.match(n) for n in open_spans):
        return "verify"
    return "outside"


def _union_ms(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total / 1000.0


def classify(events: list[dict], layers: int, top: int = 20) -> dict:
    """Per-step milliseconds by phase and kernel kind; see the module docstring."""
    spans = defaultdict(list)            # (pid, tid) -> [(start, end, name)]
    launches = {}                        # correlation -> (pid, tid, ts)
    gpu = []
    for e in events:
        if e.get("ph") != "X":
            continue
        cat, args = e.get("cat"), e.get("args") or {}
        if cat == "user_annotation":
            spans[(e.get("pid"), e.get("tid"))].append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)),
                                                       e.get("name", "")))
        elif cat in LAUNCH_CATS and "correlation" in args:
            launches[args["correlation"]] = (e.get("pid"), e.get("tid"), float(e["ts"]))
        elif cat in GPU_CATS:
            gpu.append(e)
    verify_starts = sorted(s for ss in spans.values() for s, _, n in ss if VERIFY_SPAN.match(n))
    if len(verify_starts) < 2:
        raise TraceError(f"{len(verify_starts)} step[VERIFY spans in the trace; need 2 or more decode steps "
                         f"(profile a longer request, and keep SGLang's record_function spans on)")
    w0, w1 = verify_starts[0], verify_starts[-1]
    steps = len(verify_starts) - 1
    starts = {k: [s for s, _, _ in sorted(v)] for k, v in spans.items()}
    ordered = {k: sorted(v) for k, v in spans.items()}

    def open_at(key, t) -> list[str]:
        ss = ordered.get(key, [])
        i = bisect.bisect_right(starts.get(key, []), t)
        return [n for s, e, n in ss[:i] if e >= t]

    per_phase = {p: {"ms": 0.0, "attention_ms": 0.0, "ours_ms": 0.0, "kernels": 0, "attention_kernels": 0}
                 for p in PHASES}
    by_name = defaultdict(lambda: [0.0, 0, set()])
    window_iv, unattributed = [], 0
    for k in gpu:
        launch = launches.get((k.get("args") or {}).get("correlation"))
        if launch is None:
            unattributed += 1
            continue
        pid, tid, t = launch
        if not w0 <= t < w1:
            continue
        phase = _phase(open_at((pid, tid), t))
        dur, name = float(k.get("dur", 0)) / 1000.0, k.get("name", "?")
        window_iv.append((float(k["ts"]), float(k["ts"]) + float(k.get("dur", 0))))
        row = per_phase[phase]
        row["ms"] += dur
        row["kernels"] += 1
        if k.get("cat") == "kernel" and ATTENTION.search(name):
            row["attention_ms"] += dur
            row["attention_kernels"] += 1
            if OURS.search(name):
                row["ours_ms"] += dur
        agg = by_name[name]
        agg[0] += dur
        agg[1] += 1
        agg[2].add(phase)
    if not window_iv:
        raise TraceError("no GPU kernel was launched between the first and the last step[VERIFY span "
                         "(the trace has no CUDA activity, or no correlation ids)")
    span_ms = (max(e for _, e in window_iv) - min(s for s, _ in window_iv)) / 1000.0
    busy_ms = _union_ms(window_iv)
    phases = {p: {"ms_per_step": r["ms"] / steps, "attention_ms_per_step": r["attention_ms"] / steps,
                  "other_ms_per_step": (r["ms"] - r["attention_ms"]) / steps, "ours_ms_per_step": r["ours_ms"] / steps,
                  "kernels_per_step": r["kernels"] / steps, "attention_kernels_per_step": r["attention_kernels"] / steps}
              for p, r in per_phase.items()}
    v = phases["verify"]
    kernels = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]
    return {
        "layers": layers, "steps": steps, "step_ms": (w1 - w0) / 1000.0 / steps,
        "gpu_span_ms_per_step": span_ms / steps, "gpu_busy_ms_per_step": busy_ms / steps,
        "gpu_idle_ms_per_step": (span_ms - busy_ms) / steps,
        "phases": phases,
        "verify_attention_ms_per_layer": v["attention_ms_per_step"] / layers,
        "verify_other_ms_per_layer_at_most": v["other_ms_per_step"] / layers,
        "top_kernels": [{"name": n[:160], "ms_per_step": a[0] / steps, "calls_per_step": a[1] / steps,
                         "phases": sorted(a[2])} for n, a in kernels],
        "unattributed_kernels": unattributed,
    }


def trace_summary(events: list[dict], top: int = 40) -> dict:
    """What a trace holds, in brief: events per category, the most frequent span names and kernel
    names (kept in the result even when classify() cannot read the trace)."""
    cats, spans, kernels = Counter(), Counter(), Counter()
    for e in events:
        cats[str(e.get("cat"))] += 1
        if e.get("cat") == "user_annotation":
            spans[re.sub(r"\d+", "N", str(e.get("name")))] += 1
        elif e.get("cat") == "kernel":
            kernels[str(e.get("name"))[:120]] += 1
    return {"events": len(events), "categories": dict(cats), "spans": dict(spans.most_common(top)),
            "kernels": dict(kernels.most_common(top))}


SLOPE_KEYS = ("step_ms", "gpu_busy_ms_per_step", "gpu_idle_ms_per_step", "phases.verify.ms_per_step",
              "phases.verify.attention_ms_per_step", "phases.verify.other_ms_per_step", "phases.draft.ms_per_step",
              "phases.draft_extend.ms_per_step", "phases.outside.ms_per_step")


def _get(d: dict, dotted: str) -> float:
    for part in dotted.split("."):
        d = d[part]
    return float(d)


def slopes(by_layers: dict[int, dict], predict_at: int = 61) -> dict | None:
    """Least-squares per-layer slope and intercept of each SLOPE_KEYS quantity over breakdowns
    at two or more layer counts, and the line's value at `predict_at` layers; None with fewer."""
    xs = sorted(by_layers)
    if len(xs) < 2:
        return None
    mx = sum(xs) / len(xs)
    sxx = sum((x - mx) ** 2 for x in xs)
    out = {"layers": xs, "predict_at": predict_at, "fits": {}}
    for key in SLOPE_KEYS:
        ys = [_get(by_layers[x], key) for x in xs]
        my = sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        icpt = my - slope * mx
        out["fits"][key] = {"per_layer_ms": slope, "intercept_ms": icpt, "at_predict_ms": icpt + slope * predict_at,
                            "values": dict(zip(xs, ys))}
    return out
