"""SGLang's real TritonAttnBackend on CUDA with the plugin installed through its real hook:
the `sglang-backend` stage of `python -m kernel.gpu_run` (JSON `sglang-backend-<gpu>-<stamp>.json`).

What runs is what a scheduler process runs: SGLang's `load_plugins()` (the entry point ->
`register()`: version check, hook targets, kernel library load), the published ServerArgs
(the strict-flash check on them), then target backends built through the hooked class, one
per arm (MLA_VERIFY_BACKEND=flash and =triton) over one model runner's pools. Each case:
- SGLang's own CUDA-graph state (`init_cuda_graph_state`, `init_forward_metadata_out_graph`
  with in_capture=True, then False on replay) around a torch.cuda.CUDAGraph of 61 layers'
  `forward_extend`, captured at batch 1, 8 or 48 with padded dummy requests;
- replayed with the captured batch and with new lengths and a new tree; each replay's layers
  compared with the float64 oracle (`kernel.reference`, three layers) and, where SGLang's
  path is affordable (small S), with the control arm's own graph (all layers);
- the flash arm's replay compared with its eager form (init_forward_metadata) on the new batch;
- the adapter must have run our kernel in every layer at capture, with no fallback.
Plus: the adaptive-backend sequence (a later, larger backend built after a capture must leave
the earlier graph's replays right and free nothing they write: the verify call passes no LSE, so
the plugin keeps no per-backend buffer a graph could outlive) and one replay under
`compute-sanitizer --tool memcheck` (a subprocess:
`python -m kernel.sglang.backend_check --sanitize OUT.json`).
The production algorithm's shapes (PRODUCTION_CASES, issue 24): DFLASH with SGLang's real
DFlashVerifyInput (a causal block of 16, no mask, its worker's metadata) and DDTree as its pull
request #29907 builds the verify input (trees padded to D = budget + 1 with all-False rows, D = 17
and 33 verified while the server's draft tokens stay at the block of 16, topk 1 and 2, a request
with no prefix), on both pools.
The same on SGLang's fp8_e4m3 pool (FP8_CASES, `--kv-cache-dtype fp8_e4m3` published, the
layers' KV scales set as SGLang's Fp8 KV-cache method sets them, k_scale != v_scale too): ours
against the oracle on the dequantized pool at TOL, against SGLang's own fp8 arm at
FP8_CONTROL_TOL; one more memcheck replay on it (`--sanitize OUT.json --kv-dtype fp8_e4m3`).
A case the plugin refuses (strict flash) or serves with SGLang's kernel (an adapter fallback)
fails, its row naming the refusal or the fallback reasons, and checks nothing further.

On the GPU machine SGLang comes from the folder `python -m kernel.sglang.device_bundle`
builds (PYTHONPATH=.sglang-site).
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass

import torch

from ..fp8 import FP8
from ..inputs import ddtree_case, dflash_case, make_case
from . import adapter
from .harness import SWITCH, Harness, publish_server_args, rel_err
from .strict import StrictFlashError

LAYERS = 61
TOL = 1e-2                      # bf16 outputs; the oracle is float64
# ours against SGLang's own arm on an fp8 pool: SGLang's kernel rounds q and P to e4m3 (unit
# roundoff 2**-4 each; kernel/FP8.md measured 0.04-0.12 from the oracle), so the two arms
# differ by SGLang's error; a misread scale or row is off by far more (O(1)). Ours is held to
# TOL against the oracle, as on bf16.
FP8_CONTROL_TOL = 0.2
FP8_KV = "fp8_e4m3"
SANITIZER_TIMEOUT_S = 300


@dataclass(frozen=True)
class Spec:
    """One captured TARGET_VERIFY shape: heads per rank, draft tokens per request, page size,
    the captured batch size, the real requests' prefix lengths at capture and at the replay
    with new lengths (fewer requests than graph_bs = padded dummies)."""
    name: str
    heads: int
    draft: int
    page: int
    graph_bs: int
    capture: tuple
    replay: tuple
    control: bool               # also run SGLang's path (the control arm), all layers
    tree: str = "ddtree"
    replay_tree: str = "random"
    layers: int = LAYERS
    kv_dtype: str = "auto"      # make_case's: "auto" (bf16 pool) or "fp8_e4m3"
    k_scale: float | None = None   # fp8: every layer's k_scale_float (SGLang's 1.0 without checkpoint scales)
    v_scale: float | None = None   # fp8: every layer's v_scale_float
    algorithm: str = "EAGLE"    # spec_inputs.ALGORITHMS: whose verify input the batches carry
    budget: int | None = None   # DDTREE: the node budget; each request verifies budget + 1 tokens
    topk: int = 2               # DDTREE: 1 (spine, a chain) or 2 (full tree)

    @property
    def width(self) -> int:
        """Tokens each request verifies: budget + 1 for DDTREE, else the draft tokens."""
        return self.budget + 1 if self.algorithm == "DDTREE" else self.draft


CASES = (
    # Kimi-K2 at TP8, the deployment's shape: 185k context, one request (S up to 185k)
    Spec("centre-185k", heads=8, draft=8, page=1, graph_bs=1, capture=(185_000,), replay=(180_001,),
         control=False),
    # DSV3 at TP8, paged cache, 5 of 8 requests real on replay
    Spec("bs8-page64", heads=16, draft=4, page=64, graph_bs=8,
         capture=(3000, 517, 1200, 64, 2048, 9, 700, 1500), replay=(2900, 33, 1600, 800, 65), control=True),
    # SGLang's EAGLE default of 48 running requests, 41 real on replay
    Spec("bs48", heads=8, draft=16, page=1, graph_bs=48, capture=tuple(300 + 37 * i for i in range(48)),
         replay=tuple(250 + 41 * i for i in range(41)), control=True, tree="random", replay_tree="star"),
    # Kimi-K2 with full DP attention (64 heads per rank), paged
    Spec("heads64-page64", heads=64, draft=8, page=64, graph_bs=8, capture=(16000, 9000, 4000, 777, 12000, 1),
         replay=(15000, 8000, 3000, 2000, 1000, 500, 100, 16384), control=True),
    # DeepSeek-V3 with full DP attention (128 heads per rank)
    Spec("heads128-64k", heads=128, draft=16, page=1, graph_bs=1, capture=(65_536,), replay=(60_000,), control=True),
)
FP8_CASES = (
    # the deployment's shape on an fp8 pool from a checkpoint without KV scales (SGLang: 1.0);
    # 64 query rows: the small tier's fp8 copy, two 32-row tiles
    Spec("fp8-centre-185k", heads=8, draft=8, page=1, graph_bs=1, capture=(185_000,), replay=(180_001,),
         control=False, kv_dtype=FP8_KV, k_scale=1.0, v_scale=1.0),
    # paged, 5 of 8 requests real on replay, separate k and v scales; 32 query rows: one 32-row tile
    Spec("fp8-bs8-page64", heads=8, draft=4, page=64, graph_bs=8,
         capture=(3000, 517, 1200, 64, 2048, 9, 700, 1500), replay=(2900, 33, 1600, 800, 65), control=True,
         kv_dtype=FP8_KV, k_scale=0.05, v_scale=0.02),
    # SGLang's EAGLE default of 48 running requests, one calibrated kv_scale for both; 128 query
    # rows per request: four 32-row tiles
    Spec("fp8-bs48", heads=8, draft=16, page=1, graph_bs=48, capture=tuple(300 + 37 * i for i in range(48)),
         replay=tuple(250 + 41 * i for i in range(41)), control=True, tree="random", replay_tree="star",
         kv_dtype=FP8_KV, k_scale=0.0625, v_scale=0.0625),
    # 8 query rows per request: the small tier
    Spec("fp8-heads2-small", heads=2, draft=4, page=16, graph_bs=4, capture=(5000, 700, 16, 2500),
         replay=(4000, 1), control=True, kv_dtype=FP8_KV, k_scale=0.125, v_scale=0.25),
)
PRODUCTION_CASES = (
    # DFLASH's block of 16 at the deployment's context, one request (128 query rows per request)
    Spec("dflash-b16-185k", heads=8, draft=16, page=1, graph_bs=1, capture=(185_000,), replay=(180_001,),
         control=False, algorithm="DFLASH"),
    # DFLASH at batch 8, 6 real on replay, against SGLang's arm
    Spec("dflash-b16-bs8", heads=8, draft=16, page=1, graph_bs=8,
         capture=(3000, 517, 1200, 64, 2048, 9, 700, 1500), replay=(2900, 33, 1600, 800, 65, 0), control=True,
         algorithm="DFLASH"),
    # DDTree, budget 32 (D = 33) on a block of 16, full trees padded, a request with no prefix
    Spec("ddtree-b32-bs4", heads=8, draft=16, page=1, graph_bs=4, capture=(2500, 0, 900, 40),
         replay=(2000, 700, 0), control=True, algorithm="DDTREE", budget=32, topk=2),
    # DDTree's spine (topk 1, D = 17) at the deployment's context
    Spec("ddtree-b16-spine-185k", heads=8, draft=16, page=1, graph_bs=1, capture=(185_000,), replay=(180_001,),
         control=False, algorithm="DDTREE", budget=16, topk=1),
    # the same shapes on SGLang's fp8_e4m3 pool, calibrated scales
    Spec("fp8-dflash-b16-bs8", heads=8, draft=16, page=1, graph_bs=8,
         capture=(3000, 517, 1200, 64, 2048, 9, 700, 1500), replay=(2900, 33, 1600, 800, 65, 0), control=True,
         algorithm="DFLASH", kv_dtype=FP8_KV, k_scale=0.0625, v_scale=0.0625),
    Spec("fp8-ddtree-b64-bs4", heads=8, draft=16, page=1, graph_bs=4, capture=(2500, 0, 900, 40),
         replay=(2000, 700, 0), control=True, algorithm="DDTREE", budget=64, topk=2, kv_dtype=FP8_KV,
         k_scale=0.05, v_scale=0.02),
)
SANITIZE = Spec("sanitize", heads=16, draft=8, page=64, graph_bs=4, capture=(2000, 130), replay=(1500, 700, 64),
                control=False, layers=2)
SANITIZE_FP8 = Spec("sanitize-fp8", heads=16, draft=8, page=64, graph_bs=4, capture=(2000, 130),
                    replay=(1500, 700, 64), control=False, layers=2, kv_dtype=FP8_KV, k_scale=0.05, v_scale=0.1)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def prepare(model_dir) -> None:
    """What a scheduler process does before it builds a backend: SGLang's load_plugins() with
    the candidate's switch, then the ServerArgs published. Fails naming what is missing."""
    os.environ[SWITCH] = "flash"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    utils = sys.modules.get("sglang.srt.utils")
    if utils is not None and getattr(utils, "__file__", None) is None:
        raise RuntimeError("sglang.srt.utils is kernel.sglang.baseline's stand-in: the full sglang import failed "
                           "(put the folder from `python -m kernel.sglang.device_bundle` on PYTHONPATH)")
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
    from sglang.srt.plugins import load_plugins

    load_plugins()
    from . import plugin

    if not plugin._registered or inspect.unwrap(TritonAttnBackend.__init__) is TritonAttnBackend.__init__:
        raise RuntimeError("load_plugins() did not run the mla_verify entry point (install the project, or put "
                           "the bundle's mla_verify dist-info on PYTHONPATH, and leave SGLANG_PLUGINS unset)")
    publish_server_args(model_dir, device="cuda")


def _check_arms(flash, control) -> list[str]:
    problems = []
    if getattr(flash, "mla_verify_backend", None) != "flash" or \
            inspect.unwrap(flash.verify_shared_kv_fwd) is not adapter.verify_fwd:
        problems.append("the flash backend's verify slot is not the adapter")
    if control is not None and (control.use_verify_shared_kv or hasattr(control, "mla_verify_backend")):
        problems.append("the control backend was changed by the plugin")
    return problems


def _outputs(outs) -> list[torch.Tensor]:
    return [o.clone() for o in (outs if isinstance(outs, list) else [outs])]


def _oracle_errors(h, case, outs, seed, layers) -> float:
    return max(rel_err(outs[i], h.oracle(case, i, seed)) for i in layers if i < len(outs))


def _replay_ms(h, backend, reps: int = 5) -> float:
    """Median milliseconds of one graph replay (all layers)."""
    ms = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        h.replay_graph(backend)
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    return sorted(ms)[len(ms) // 2]


def _not_run(row: dict, t0: float, problem: str, **why) -> dict:
    """A case that stopped before ours could be checked: failing, naming why (`why`: refused=
    the plugin's one line, or fallbacks= the adapter's reason kinds and counts)."""
    row.update(why, oracle_layers=[], rel_err_oracle_capture=None, rel_err_oracle_replay=None,
               rel_err_graph_vs_eager=None, graph_equals_eager=None, rel_err_vs_control=None,
               flash_replay_ms=None, control_replay_ms=None, finite=None,
               problems=row.get("problems", []) + [problem], seconds=round(time.time() - t0, 1))
    row["pass"] = False
    return row


def _spec_case(spec: Spec, prefixes, tree: str, layout: str, seed: int, device, scales: dict):
    """The batch of one capture or replay: the algorithm's shape (kernel.inputs)."""
    kw = dict(layout=layout, page_size=spec.page, seed=seed, device=device, slack=0.1, kv_dtype=spec.kv_dtype,
              **scales)
    if spec.algorithm == "DFLASH":
        return dflash_case(list(prefixes), spec.draft, spec.heads, **kw)
    if spec.algorithm == "DDTREE":
        return ddtree_case(list(prefixes), spec.budget, spec.heads, topk=spec.topk, **kw)
    return make_case(list(prefixes), [spec.draft] * len(prefixes), spec.heads, tree=tree, **kw)


def run_case(spec: Spec, model_dir, *, device="cuda", cuda_graph: bool = True, tol: float = TOL,
             timing: bool = True) -> dict:
    """One Spec through SGLang's backend on both arms; the result row (see module docstring)."""
    t0 = time.time()
    fp8 = spec.kv_dtype == FP8_KV
    T, H, P = spec.width, spec.heads, spec.page
    control_tol = FP8_CONTROL_TOL if fp8 else tol
    row = dict(asdict(spec), kind="graph", capture_bs=len(spec.capture), replay_bs=len(spec.replay),
               S_max=max(spec.capture + spec.replay), control_tol=control_tol, refused=None, fallbacks={})
    scales = dict(k_scale=spec.k_scale, v_scale=spec.v_scale) if fp8 else {}
    cap, rep = (_spec_case(spec, prefixes, tree, layout, seed, device, scales) for prefixes, tree, layout, seed in
                ((spec.capture, spec.tree, "scattered", 11), (spec.replay, spec.replay_tree, "fragmented", 12)))
    slots = max(cap.kv_cache.shape[0], rep.kv_cache.shape[0])
    # SGLang sizes its graph mask buffer by the server's draft tokens x (context + them): a DDTree
    # request's D x (S + D) cells need a context D / draft times longer (the pull request's graph
    # runner reserves D itself)
    context = _round_up((max(spec.capture + spec.replay) + 2 * T) * -(-T // spec.draft), max(P, 256))
    try:   # the plugin's strict mode refuses, at server args or backend build, what it cannot serve
        publish_server_args(model_dir, device="cuda", draft_tokens=spec.draft, page_size=spec.page,
                            **({"kv_cache_dtype": spec.kv_dtype} if fp8 else {}))
        h = Harness(heads=H, page_size=P, layers=spec.layers, draft=spec.draft, max_bs=spec.graph_bs,
                    context=context, pool_slots=_round_up(slots + spec.graph_bs * T + 2 * P, P), device=device,
                    arm="flash", kv_dtype=FP8 if fp8 else None, algorithm=spec.algorithm, verify_width=T)
    except StrictFlashError as e:
        return _not_run(row, t0, f"the plugin refused the flash arm: {e}", refused=str(e))
    if fp8:
        h.set_kv_scales(spec.k_scale, spec.v_scale)   # before any pool is filled or graph captured
    control = h.build_backend("triton") if spec.control else None
    problems = _check_arms(h.backend, control)
    layers = sorted({0, spec.layers // 2, spec.layers - 1})   # checked against the oracle; all against control

    before = Counter(adapter.calls)
    h.capture(cap, spec.graph_bs, cuda_graph=cuda_graph, seed=1)
    captured = Counter(adapter.calls) - before
    runs = spec.layers * (2 if cuda_graph else 1)   # a warm-up run precedes a real capture
    if captured != Counter(flash=runs):
        problems.append(f"the adapter's outcomes at capture were {dict(captured)}, expected {runs} kernel runs")
    fallbacks = {k: n for k, n in captured.items() if k != "flash"}
    row["fallbacks"] = fallbacks
    if fallbacks and not captured["flash"]:   # both arms are SGLang's kernel now: nothing of ours to check
        del h, control
        return _not_run(dict(row, problems=problems), t0, "every layer fell back to SGLang's kernel (reason: "
                        + ", ".join(f"{k} x{n}" for k, n in sorted(fallbacks.items())) + ")")
    out_cap = _outputs(h.replay(cap, seed=1))
    err_cap = _oracle_errors(h, cap, out_cap, 1, layers)
    out_rep = _outputs(h.replay(rep, seed=2))
    err_rep = _oracle_errors(h, rep, out_rep, 2, layers)
    finite = all(bool(torch.isfinite(o).all()) for o in out_cap + out_rep)
    flash_ms = _replay_ms(h, h.backend) if timing and cuda_graph else None
    eager = _outputs(h.run_eager(rep, seed=2))
    graph_vs_eager = max(rel_err(a, b) for a, b in zip(out_rep, eager))
    bitwise = all(torch.equal(a, b) for a, b in zip(out_rep, eager))

    err_control = control_ms = None
    if control is not None:
        calls = Counter(adapter.calls)
        h.capture(cap, spec.graph_bs, backend=control, cuda_graph=cuda_graph, seed=1)
        ctl = _outputs(h.replay(rep, backend=control, seed=2))
        if Counter(adapter.calls) != calls:
            problems.append("the control arm's TARGET_VERIFY reached the adapter")
        err_control = max(rel_err(a, b) for a, b in zip(out_rep, ctl))
        control_ms = _replay_ms(h, control, reps=3) if timing and cuda_graph else None
    del h, control
    if device != "cpu" and torch.cuda.is_available():
        torch.cuda.empty_cache()
    errs = [err_cap, err_rep, graph_vs_eager]
    row.update(oracle_layers=layers, rel_err_oracle_capture=err_cap, rel_err_oracle_replay=err_rep,
               rel_err_graph_vs_eager=graph_vs_eager, graph_equals_eager=bitwise, rel_err_vs_control=err_control,
               flash_replay_ms=flash_ms, control_replay_ms=control_ms, finite=finite, problems=problems,
               seconds=round(time.time() - t0, 1))
    row["pass"] = finite and not problems and all(e < tol for e in errs) and \
        (err_control is None or err_control < control_tol)
    return row


def adaptive_scratch(model_dir, *, device="cuda", cuda_graph: bool = True, tol: float = TOL) -> dict:
    """--speculative-adaptive's sequence: a graph captured on a 4-token backend, then a 16-token
    backend built, then memory allocated, then the first graph replayed: it must still match the
    oracle, and its writes must land in memory it owns (the new tensor, as large as the LSE
    scratch the plugin once kept for the first backend, keeps its sentinel)."""
    publish_server_args(model_dir, device="cuda", draft_tokens=4)
    cap = make_case([900, 40], [4, 4], 8, tree="random", seed=21, device=device)
    h = Harness(heads=8, layers=2, draft=4, max_bs=4, context=2048, pool_slots=4096, device=device, arm="flash")
    h.capture(cap, 4, cuda_graph=cuda_graph, seed=3)
    old_size = h.max_bs * 4 * h.heads
    publish_server_args(model_dir, device="cuda", draft_tokens=16)
    h.runner.decode_num_tokens_per_req = lambda: 16
    h.build_backend("flash")
    sentinel = torch.full((old_size,), 7.0, dtype=torch.float32, device=device)  # the freed block, if freed
    out = _outputs(h.replay(cap, seed=3))
    if device != "cpu":
        torch.cuda.synchronize()
    intact = bool((sentinel == 7.0).all())
    err = _oracle_errors(h, cap, out, 3, (0, 1))
    return dict(name="adaptive-scratch", kind="adaptive", sentinel_intact=intact, rel_err_oracle=err,
                **{"pass": intact and err < tol})


def sanitize(model_dir, out_path, kv_dtype: str = "auto") -> None:
    """The body of the compute-sanitizer subprocess: one small case (SANITIZE, or SANITIZE_FP8
    for kv_dtype "fp8_e4m3"), capture + replays."""
    prepare(model_dir)
    row = run_case(SANITIZE_FP8 if kv_dtype == FP8_KV else SANITIZE, model_dir, timing=False)
    with open(out_path, "w") as f:
        json.dump(row, f)


def run_sanitizer(timeout_s: int = SANITIZER_TIMEOUT_S, kv_dtype: str = "auto") -> dict:
    """One capture and replay under compute-sanitizer's memcheck, in a subprocess; the row
    "memcheck" (bf16 pool) or "memcheck-fp8" (kv_dtype "fp8_e4m3")."""
    tool = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    fp8 = kv_dtype == FP8_KV
    row = dict(name="memcheck-fp8" if fp8 else "memcheck", kind="sanitizer", tool=tool, kv_dtype=kv_dtype)
    if not os.path.exists(tool):
        return dict(row, error="compute-sanitizer not found", **{"pass": False})
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "row.json")
        cmd = [tool, "--tool", "memcheck", "--error-exitcode", "3", sys.executable, "-m", "kernel.sglang.backend_check",
               "--sanitize", out] + (["--kv-dtype", kv_dtype] if fp8 else [])
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=dict(os.environ))
        except subprocess.TimeoutExpired:
            return dict(row, error=f"timed out after {timeout_s} s", **{"pass": False})
        summary = [line for line in p.stdout.splitlines() if "ERROR SUMMARY" in line]
        inner = json.load(open(out)) if os.path.exists(out) else None
        row.update(returncode=p.returncode, summary=summary[-1] if summary else None, seconds=round(time.time() - t0, 1),
                   case=inner, tail=None if p.returncode == 0 else (p.stdout + p.stderr)[-3000:])
        row["pass"] = p.returncode == 0 and bool(summary) and "0 errors" in summary[-1] and bool(inner and inner["pass"])
    return row


def run(cases=CASES + FP8_CASES + PRODUCTION_CASES, *, sanitizer: bool = True, device="cuda", cuda_graph: bool = True,
        log=print) -> dict:
    """Every case, the adaptive sequence and the memcheck replays (bf16, and fp8 when a case
    is fp8); the stage's JSON body."""
    import sglang
    import triton

    from .model_configs import write_kimi_k2

    t0 = time.time()
    model_dir = write_kimi_k2(tempfile.mkdtemp(prefix="mla-verify-kimi-k2-"), nextn_layers=1)
    prepare(model_dir)
    rows = []
    for spec in cases:
        rows.append(run_case(spec, model_dir, device=device, cuda_graph=cuda_graph, timing=cuda_graph))
        r = rows[-1]
        log(f"sglang-backend {spec.name}: pass={r['pass']} oracle {r['rel_err_oracle_replay']} "
            f"control {r['rel_err_vs_control']} {r['seconds']} s {r['problems']}")
    rows.append(adaptive_scratch(model_dir, device=device, cuda_graph=cuda_graph))
    log(f"sglang-backend adaptive-scratch: {rows[-1]}")
    if sanitizer:
        for kv in ["auto"] + ([FP8_KV] if any(c.kv_dtype == FP8_KV for c in cases) else []):
            rows.append(run_sanitizer(kv_dtype=kv))
            log(f"sglang-backend {rows[-1]['name']}: pass={rows[-1]['pass']} "
                f"{rows[-1].get('summary') or rows[-1].get('error')}")
    return {"kind": "sglang-backend", "sglang_version": sglang.__version__, "triton_version": triton.__version__,
            "layers": LAYERS, "tol": TOL, "fp8_control_tol": FP8_CONTROL_TOL, "cases": rows,
            "all_pass": all(r["pass"] for r in rows), "seconds": round(time.time() - t0, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sanitize", metavar="OUT_JSON", help="run the small memcheck case, write its row")
    ap.add_argument("--kv-dtype", choices=("auto", FP8_KV), default="auto",
                    help="with --sanitize: the case's KV pool (auto = bf16)")
    a = ap.parse_args(argv)
    if a.sanitize:
        from .model_configs import write_kimi_k2

        sanitize(write_kimi_k2(tempfile.mkdtemp(prefix="mla-verify-kimi-k2-"), nextn_layers=1), a.sanitize,
                 kv_dtype=a.kv_dtype)
        return 0
    print(json.dumps(run(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
