"""SGLang's real TritonAttnBackend on CUDA serving EXTEND with the plugin installed through its
real hook: the `sglang-extend` stage of `python -m kernel.gpu_run` (JSON
`sglang-extend-<gpu>-<stamp>.json`; issue 26).

What runs is what a scheduler process runs (backend_check.prepare: load_plugins(), the published
ServerArgs), then per case one ExtendHarness (extend_harness.py) whose flash backend and a
control backend (MLA_VERIFY_BACKEND=triton) share the pools. Each case runs eagerly, as SGLang
runs prefill attention, every layer's forward_extend (SGLang's KV write, then the attention):
- the flash arm's calls must all have run the kernel (mla_verify_extend_kernel_calls_total up by
  the layer count, no EXTEND fallback);
- layer 0 (the case's own rows) against the EXTEND references (kernel/bench/extend_validate.py:
  the float64 oracle where it fits, else sampled float64 rows and fp32 for all rows) at TOL;
- every layer against the control arm's output (SGLang's extend_attention_fwd) at TOL on bf16,
  FP8_CONTROL_TOL on fp8 (SGLang rounds q and P to e4m3 there);
- both arms timed per layer (median of eager forward_extend calls, CUDA events).

Then EAGLE's draft extend after each verify (DRAFT_CASES; DRAFT_EXTEND_V2 on the draft runner's
extend backend, extend.install_draft), in SGLang's draft-extend CUDA graph as
EAGLEDraftExtendCudaGraphRunner drives it (ExtendHarness.capture_draft_extend /
replay_draft_extend): captured once per arm at the case's batch on the runner's dummy batch, then
replayed with real batches of new lengths (fewer requests than the graph = padded):
- the flash arm's capture must have run the kernel (mla_verify_extend_graph_captures_total
  {mode="draft_extend_v2"} up by the layer count; its replays run no Python), no fallback;
- every replay against the float64 references at TOL, against the control arm's replay (SGLang's
  extend_attention_fwd in the same graph form) at TOL / FP8_CONTROL_TOL, and against the flash
  arm's eager DRAFT_EXTEND_V2 of the same batch;
- both arms' graph replays timed (median, CUDA events): the draft extend's attention and KV write.
"""
from __future__ import annotations

import os
import tempfile
import time

import torch

from ..fp8 import FP8
from ..inputs import make_case
from . import extend, metrics
from .backend_check import FP8_CONTROL_TOL, TOL, prepare
from .extend_harness import ExtendHarness
from .harness import publish_server_args, rel_err
from .strict import StrictFlashError

FP8_KV = "fp8_e4m3"
# name, prefix lengths, new lengths, page size, layers, pool (fp8: v_scale = k_scale * v_factor)
CASES = (
    dict(name="followup-2-185k", S=[185000], T=[2], page=1, layers=4),
    dict(name="followup-16-185k", S=[185000], T=[16], page=1, layers=4),
    dict(name="chunk-8192-over-16k-page64", S=[16384], T=[8192], page=64, layers=2),
    dict(name="ragged-empty-prefixes", S=[40000, 0, 3000, 7], T=[256, 300, 1, 2048], page=1, layers=2),
    dict(name="fp8-followup-2-185k", S=[185000], T=[2], page=1, layers=4, kv="fp8_e4m3"),
    dict(name="fp8-ragged", S=[40000, 0, 3000, 7], T=[256, 300, 1, 2048], page=16, layers=2, kv=FP8_KV,
         v_factor=0.5),
)
# EAGLE's draft extend in its CUDA graph: the graph's batch, each replay's prefix lengths (every
# request the published num_draft_tokens = 8 new tokens), page size, layers (the NextN draft has
# one), pool; fp8 with the layer's scales fixed across replays, as a server's are
DRAFT_WIDTH = 8
DRAFT_CASES = (
    dict(name="draft-extend-185k", graph_bs=1, replays=([185000], [180001]), page=1, layers=1),
    dict(name="draft-extend-bs4-padded", graph_bs=4, replays=([60000, 3000, 517], [20000, 40000, 7, 1200]), page=1,
         layers=1),
    dict(name="fp8-draft-extend-185k", graph_bs=1, replays=([185000], [180001]), page=1, layers=1, kv=FP8_KV,
         k_scale=0.05, v_scale=0.02),
)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _calls(mode: str = "extend") -> float:
    return metrics.extend_series()["calls"].labels(mode=mode)._value.get()


def _captures(mode: str = "draft_extend_v2") -> float:
    return metrics.extend_series()["captures"].labels(mode=mode)._value.get()


def _fallbacks() -> dict:
    return {k: v._value.get() for k, v in metrics.extend_series()["fallbacks"]._metrics.items()}


def _time_layers(h, backend, case, device, reps: int = 3) -> float:
    """Median milliseconds of one layer's eager forward_extend (all layers run, divided)."""
    fb = h.load_extend(case)
    backend.init_forward_metadata(fb)
    qs, ks = h.layer_inputs(case)
    qs, ks = [q.to(device) for q in qs], [k.to(device) for k in ks]
    h._forward(backend, fb, qs, ks)           # warm-up (SGLang's Triton compiles here)
    ms = []
    for _ in range(reps):
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            h._forward(backend, fb, qs, ks)
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            h._forward(backend, fb, qs, ks)
            ms.append((time.perf_counter() - t0) * 1e3)
    return sorted(ms)[len(ms) // 2] / h.layers


def run_case(spec: dict, model_dir, *, device: str = "cuda", tol: float = TOL, timing: bool = True) -> dict:
    """One case through SGLang's backend on both arms; its result row (module docstring)."""
    from ..bench import extend_validate

    t0 = time.time()
    kv = spec.get("kv", "auto")
    fp8 = kv == FP8_KV
    S, T, P, layers = spec["S"], spec["T"], spec["page"], spec["layers"]
    row = dict(name=spec["name"], prefix_lens=S, new_lens=T, page_size=P, layers=layers, kv_dtype=kv, heads=8,
               problems=[])
    case = make_case(S, T, 8, causal=True, layout="fragmented", page_size=P, seed=26, device=device, slack=0.1,
                     kv_dtype=kv)
    if fp8:
        case.v_scale = case.k_scale * spec.get("v_factor", 1.0)
        row.update(k_scale=case.k_scale, v_scale=case.v_scale)
    N = sum(T)
    try:
        publish_server_args(model_dir, device="cuda", page_size=P, **({"kv_cache_dtype": kv} if fp8 else {}))
        h = ExtendHarness(heads=8, page_size=P, layers=layers, max_bs=len(S),
                          context=_round_up(max(s + t for s, t in zip(S, T)) + P, max(P, 256)),
                          pool_slots=_round_up(case.kv_cache.shape[0] + N + 2 * P, P), device=device, arm="flash",
                          kv_dtype=FP8 if fp8 else None)
    except StrictFlashError as e:
        row.update(problems=[f"the plugin refused the flash arm: {e}"], seconds=round(time.time() - t0, 1))
        row["pass"] = False
        return row
    if fp8:
        h.set_kv_scales(case.k_scale, case.v_scale)
    control = h.build_backend("triton")
    if not getattr(h.backend, "mla_verify_extend", False) or "forward_extend" in vars(control):
        row["problems"].append("the flash backend has no EXTEND hook, or the control backend has one")
    calls, fallbacks = _calls(), _fallbacks()
    flash = [o.clone() for o in h.run_extend(case)] if layers > 1 else [h.run_extend(case).clone()]
    served, fell = _calls() - calls, {k: v - fallbacks.get(k, 0) for k, v in _fallbacks().items()
                                      if v != fallbacks.get(k, 0)}
    row.update(kernel_calls=served, fallbacks={"/".join(k): n for k, n in fell.items()})
    if served != layers or fell:
        row["problems"].append(f"{served} of {layers} layer calls ran the kernel, fallbacks {row['fallbacks']}")
    ref = extend_validate.references(case, 26)
    i = ref["idx"]
    row.update(rel_err_float64_rows=rel_err(flash[0][i], ref["o64"]), rel_err_all=rel_err(flash[0], ref["o_all"]),
               requests_sampled=ref["requests_sampled"])
    del ref
    ctrl = [o.clone() for o in h.run_extend(case, backend=control)] if layers > 1 else \
        [h.run_extend(case, backend=control).clone()]
    control_tol = FP8_CONTROL_TOL if fp8 else tol
    row.update(rel_err_vs_control=max(rel_err(a, b) for a, b in zip(flash, ctrl)), control_tol=control_tol,
               finite=bool(all(torch.isfinite(o).all() for o in flash)))
    if timing:
        row.update(flash_ms_per_layer=_time_layers(h, h.backend, case, device),
                   control_ms_per_layer=_time_layers(h, control, case, device))
    row["pass"] = (not row["problems"] and row["finite"] and row["rel_err_float64_rows"] <= tol
                   and row["rel_err_all"] <= tol and row["rel_err_vs_control"] <= control_tol)
    row["seconds"] = round(time.time() - t0, 1)
    del h, control, case, flash, ctrl
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


def _time_graph(h, backend, device, reps: int = 5) -> float:
    """Median milliseconds of one draft-extend graph replay (all layers; the KV write included)."""
    ms = []
    for _ in range(reps + 1):
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            h.replay_draft_graph(backend)
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            h.replay_draft_graph(backend)
            ms.append((time.perf_counter() - t0) * 1e3)
    ms = ms[1:]   # the first replay after others pays for their cache state
    return sorted(ms)[len(ms) // 2]


def run_draft_case(spec: dict, model_dir, *, device: str = "cuda", tol: float = TOL, timing: bool = True,
                   cuda_graph: bool = True) -> dict:
    """EAGLE's draft extend through SGLang's draft-extend graph on both arms; its result row (module
    docstring). cuda_graph=False (the CPU tests) runs the same capture and replay code eagerly."""
    from ..bench import extend_validate

    t0 = time.time()
    kv = spec.get("kv", "auto")
    fp8 = kv == FP8_KV
    P, layers, bs, W = spec["page"], spec["layers"], spec["graph_bs"], DRAFT_WIDTH
    row = dict(name=spec["name"], kind="draft-extend", graph_bs=bs, replays=[list(r) for r in spec["replays"]],
               page_size=P, layers=layers, kv_dtype=kv, heads=8, width=W, problems=[])
    scales = dict(k_scale=spec["k_scale"], v_scale=spec["v_scale"]) if fp8 else {}
    longest = max(max(r) for r in spec["replays"])
    # each replay's pool: its prefixes plus slack (make_case's slack=0.1), and the W new slots per request
    slots = max(_round_up(int(sum(r) * 1.1) + 2 * P * (len(r) + 2), P) for r in spec["replays"])
    try:
        publish_server_args(model_dir, device="cuda", page_size=P, draft_tokens=W,
                            **({"kv_cache_dtype": kv} if fp8 else {}))
        os.environ[extend.DRAFT_ENV] = "1"   # this check is of the draft path, whatever the caller set
        h = ExtendHarness(heads=8, page_size=P, layers=layers, max_bs=bs, draft=W, draft_worker=True,
                          context=_round_up(longest + W + P, max(P, 256)),
                          pool_slots=_round_up(slots + bs * W + 2 * P, P),
                          device=device, arm="flash", kv_dtype=FP8 if fp8 else None)
    except StrictFlashError as e:
        row.update(problems=[f"the plugin refused the flash arm: {e}"], seconds=round(time.time() - t0, 1))
        row["pass"] = False
        return row
    if fp8:
        h.set_kv_scales(scales["k_scale"], scales["v_scale"])
    control = h.build_backend("triton")
    if not getattr(h.backend, "mla_verify_extend", False) or "forward_extend" in vars(control):
        row["problems"].append("the flash draft backend has no EXTEND hook, or the control backend has one")
    captures, fallbacks = _captures(), _fallbacks()
    h.capture_draft_extend(bs, cuda_graph=cuda_graph)
    h.capture_draft_extend(bs, backend=control, cuda_graph=cuda_graph)
    captured = _captures() - captures
    row["kernel_captures"] = captured
    if cuda_graph and captured != layers:
        row["problems"].append(f"{captured} of {layers} captured layer calls ran the kernel")
    replays = []
    for i, prefixes in enumerate(spec["replays"]):
        case = make_case(prefixes, [W] * len(prefixes), 8, causal=True, layout="fragmented", page_size=P,
                         seed=40 + i, device=device, slack=0.1, kv_dtype=kv, **scales)
        flash = [o.clone() for o in _listed(h.replay_draft_extend(case))]
        ref = extend_validate.references(case, 40 + i)
        r = dict(prefix_lens=list(prefixes), rel_err_float64_rows=rel_err(flash[0][ref["idx"]], ref["o64"]),
                 rel_err_all=rel_err(flash[0], ref["o_all"]))
        del ref
        ctrl = _listed(h.replay_draft_extend(case, backend=control))
        if timing and cuda_graph and i == len(spec["replays"]) - 1:
            # each graph replays the batch just copied into it (before the eager run below, which
            # refills the flash backend's indptr buffers as SGLang's eager draft extend would)
            row.update(flash_ms_per_replay=_time_graph(h, h.backend, device),
                       control_ms_per_replay=_time_graph(h, control, device))
        eager = _listed(h.run_extend(case, mode="DRAFT_EXTEND_V2"))
        r.update(rel_err_vs_control=max(rel_err(a, b) for a, b in zip(flash, ctrl)),
                 rel_err_graph_vs_eager=max(rel_err(a, b) for a, b in zip(flash, eager)),
                 graph_equals_eager=all(torch.equal(a, b) for a, b in zip(flash, eager)),
                 finite=bool(all(torch.isfinite(o).all() for o in flash)))
        replays.append(r)
        del flash, ctrl, eager, case
    fell = {"/".join(k): v - fallbacks.get(k, 0) for k, v in _fallbacks().items() if v != fallbacks.get(k, 0)}
    control_tol = FP8_CONTROL_TOL if fp8 else tol
    row.update(replay_results=replays, fallbacks=fell, control_tol=control_tol)
    if fell:
        row["problems"].append(f"fallbacks {fell}")
    row["pass"] = not row["problems"] and all(
        r["finite"] and max(r["rel_err_float64_rows"], r["rel_err_all"], r["rel_err_graph_vs_eager"]) <= tol
        and r["rel_err_vs_control"] <= control_tol for r in replays)
    row["seconds"] = round(time.time() - t0, 1)
    del h, control
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


def _listed(outs) -> list:
    return outs if isinstance(outs, list) else [outs]


def run(cases=CASES, draft_cases=DRAFT_CASES, *, device: str = "cuda", log=print) -> dict:
    """Every case; the stage's JSON body."""
    import sglang

    from .model_configs import write_kimi_k2

    t0 = time.time()
    model_dir = write_kimi_k2(tempfile.mkdtemp(prefix="mla-verify-kimi-k2-"), nextn_layers=1)
    prepare(model_dir)
    rows = []
    for spec in cases:
        rows.append(run_case(spec, model_dir, device=device))
        r = rows[-1]
        log(f"sglang-extend {spec['name']}: pass={r['pass']} float64 rows {r.get('rel_err_float64_rows')} all "
            f"{r.get('rel_err_all')} control {r.get('rel_err_vs_control')} flash {r.get('flash_ms_per_layer')} ms "
            f"triton {r.get('control_ms_per_layer')} ms a layer {r['problems']}")
    drafts = []
    for spec in draft_cases:
        drafts.append(run_draft_case(spec, model_dir, device=device))
        r = drafts[-1]
        log(f"sglang-extend {spec['name']}: pass={r['pass']} captures {r.get('kernel_captures')} replays "
            f"{r.get('replay_results')} flash {r.get('flash_ms_per_replay')} ms triton "
            f"{r.get('control_ms_per_replay')} ms a replay {r['problems']}")
    return {"kind": "sglang-extend", "sglang_version": sglang.__version__, "tol": TOL,
            "fp8_control_tol": FP8_CONTROL_TOL, "cases": rows, "draft_cases": drafts,
            "all_pass": all(r["pass"] for r in rows + drafts), "seconds": round(time.time() - t0, 1)}


def summary_lines(res: dict) -> list[str]:
    out = [f"sglang-extend {r['name']:28s} flash {r.get('flash_ms_per_layer') or float('nan'):9.3f} ms, triton "
           f"{r.get('control_ms_per_layer') or float('nan'):9.3f} ms a layer, err {r.get('rel_err_all') or float('nan'):.1e}"
           f", vs triton {r.get('rel_err_vs_control') or float('nan'):.1e}, pass={r['pass']}" for r in res["cases"]]
    for r in res.get("draft_cases", []):
        worst = max((x["rel_err_all"] for x in r.get("replay_results", [])), default=float("nan"))
        vs = max((x["rel_err_vs_control"] for x in r.get("replay_results", [])), default=float("nan"))
        flash, triton = (r.get(k) or float("nan") for k in ("flash_ms_per_replay", "control_ms_per_replay"))
        out.append(f"sglang-extend {r['name']:28s} flash {flash:9.3f} ms, triton {triton:9.3f} ms a graph replay, "
                   f"err {worst:.1e}, vs triton {vs:.1e}, pass={r['pass']}")
    n = len(res["cases"]) + len(res.get("draft_cases", []))
    return out + [f"sglang-extend: {n} cases, all_pass={res['all_pass']}, {res['seconds']:.0f} s"]
