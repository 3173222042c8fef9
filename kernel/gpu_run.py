"""One command on a CUDA machine: build, validate, benchmark; JSON into --out, a table last.

    python -m kernel.gpu_run --out reports/data [--quick] [--stages validate,graph,stream,mma,full,parts,fixed,bench,integration]

- validate: >= 500 random configurations (every tree generator, page sizes 1/16/64,
  scattered and fragmented pools with NaN in unused slots, ragged batches, T up to 1024,
  H up to 128, up to 256 requests) against the float64 oracle, outputs poisoned with NaN
  before every call, each at its default tier and a sixth of them at each other tier;
  plus SGLang's own extend_attention_fwd on the same inputs. Then the same on SGLang's
  fp8_e4m3 pool (--fp8-cases, JSON section "fp8"): k_scale and v_scale varied (v != k too),
  both e4m3fn NaN bytes in unused slots, each case at its default tier and one other fp8
  tier (rotating), the fp8 extremes at every fp8 tier, against the oracle on the dequantized
  pool; SGLang's extend_attention_fwd on the same fp8 pool for 40 of them (its error recorded,
  not gated: it rounds q and P to e4m3). Then the production algorithm's shapes on both pools
  (JSON section "production", each case with its family): DDTree's trees padded to D = budget + 1
  (budgets 7, 16, 32, 64; sizes 1..D; topk 1 and 2) and DFLASH's causal blocks of 8, 16, 32, at
  batch 1, 8 and 48, 8 heads, every tier, SGLang's extend_attention_fwd beside each.
- graph: capture the call in a CUDA graph per tier, replay with new lengths, slots and
  trees, compare with eager; for the fp8 pool too (per fp8 tier, fixed scales).
- stream, mma, full: the ladder's microbenchmarks, each tier with stages left out
  (kernel/bench/micro.py); parts: the design D tiers' math (rows64d, rows64d_pair, rows32d)
  with the softmax, QK or PV left out, and the mma.sync ceiling at their occupancy (8 warps per
  SM). With mma, full and
  parts, the sm_120 model (kernel/bench/sm120_estimate.py) is written from them too:
  sm120-model-from-*.json, a model, not a measurement.
- probe: mma.sync with an ldmatrix.x4 every 1-8 MMAs and 1-8 accumulator chains
  (kernel/csrc/mma_ldsm_probe.cu) at 4, 8 and 16 warps per SM, each beside its prediction,
  after the built library's machine code passed kernel/bench/probe_sass.py (sm_90 and
  sm_120); JSON probe-*.json. Not default.
- fixed: the call's fixed cost, T = 1 and 8 on both pools and 16 on fp8, S = 128..262k, whole,
  without the merge and as its math alone, each as a line against the KV bytes and against the
  busiest CTA's tiles (once a call and a tile's clocks), and CUPTI's verify and merge kernel
  times at 185k (kernel/bench/fixed_cost.py).
- trace: a diagnostic build (-DMLAV_TRACE, compiled here with nvcc) timestamps every CTA's
  phases: launch, plan, prologue, loop, epilogue, merge (kernel/bench/trace.py). Not default.
- bench: read and mma.sync ceilings measured in this run, then our kernel, SGLang
  extend_attention_fwd, SGLang verify_shared_kv_fwd (chains) and naive torch, around the
  centre point S = 185k, T = 8, H = 8, page 1 scattered, batch 1; and our kernel on the fp8
  pool (rows with "kv_dtype": "fp8_e4m3", sweeps fp8_S, fp8_T, fp8_batch, fp8_layout; SGLang's
  extend_attention_fwd at the centre), each row against its own roofline (fp8 prefix bytes).
- integration: the SGLang plugin's adapter on a 61-layer Kimi-K2 shape.
- sglang-backend: SGLang's real TritonAttnBackend with the plugin through its hook, CUDA graphs
  of 61 layers, both arms, bf16 and fp8_e4m3 pools, EAGLE trees, DFLASH blocks (SGLang's
  DFlashVerifyInput) and DDTree's padded trees (pull request #29907's verify input), memcheck
  (kernel/sglang/backend_check.py).
  Not in the default stages: needs the sglang bundle on PYTHONPATH (python -m
  kernel.sglang.device_bundle).
- dcp-sim: decode context parallelism simulated on one GPU, N = 2, 4, 8 ranks at S = 185k
  (kernel/sglang/dcp_sim.py). Not in the default stages: needs the sglang bundle too.
- extend, extend-bench: EXTEND over a cached prefix (issue 26): causal new tokens, T = 1 to
  16,384 over prefixes up to 180k, both pools, against float64 and fp32 references and SGLang
  (kernel/bench/extend_validate.py); timed at T = 1..8,192 over 185k and over the chunks of a
  185k-token prefill (kernel/bench/extend_bench.py); sglang-extend: the same through SGLang's real
  backend with the plugin, both arms, eager, bf16 and fp8 pools (kernel/sglang/extend_check.py,
  needs the sglang bundle). Not in the default stages.
Timings: median over repeats of CUDA-event-timed CUDA-graph replays (slow calls: timed one
by one), after warm-up, rotating input copies so L2 does not serve repeats.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from . import build
from .bench.ceilings import mma_ceiling, read_ceiling
from .bench.env import env_info, file_name, git_commit, no_gpu, write_json
from .bench import micro
from .bench.sweeps import bench
from .bench.timing import log
from .bench.validate import FP8_KV, graph_check, validate, validate_fp8, validate_production
from .inputs import make_case
from .ops import TIERS, verify_attention



STAGES = ("validate", "graph", "stream", "mma", "full", "parts", "probe", "fixed", "trace", "bench", "integration",
          "sglang-backend", "dcp-sim", "extend", "extend-bench", "sglang-extend", "once")


# stages whose files hold SGLang's kernels beside ours (the reports compare the two)
BASELINE_STAGES = ("validate", "integration", "extend", "bench", "extend-bench")


def baseline_missing(stages: set[str], error: Exception, allowed: bool) -> str | None:
    """The error to stop on when SGLang's kernels failed to load (`error`) and a stage that
    records them beside ours is asked for, unless --no-baseline (`allowed`); None to go on."""
    need = [s for s in BASELINE_STAGES if s in stages]
    if allowed or not need:
        return None
    return (f"error: stage(s) {', '.join(need)} compare against SGLang's kernels, which did not load: {error}. "
            "Install them (`pip install --no-deps sglang==0.5.23`, or on a machine without network "
            "`make sglang-bundle` where pip works and PYTHONPATH=$PWD:$PWD/.sglang-site), or pass --no-baseline "
            "to measure without them (the files then lack the rows the reports compare against).")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="reports/data", help="folder for the JSON results")
    ap.add_argument("--commit", default=os.environ.get("MLA_VERIFY_COMMIT") or git_commit(),
                    help="recorded with the data (default: git HEAD, '+dirty' with local changes)")
    ap.add_argument("--stages", default="validate,graph,stream,mma,full,parts,fixed,bench,integration",
                    help="comma-separated: validate, graph, stream, mma, full, parts, probe, fixed, trace "
                         "(microbenchmarks), bench, integration, sglang-backend, dcp-sim, extend, extend-bench, "
                         "sglang-extend, once")
    ap.add_argument("--cases", type=int, default=500, help="random validation cases (plus the extremes)")
    ap.add_argument("--fp8-cases", type=int, default=500,
                    help="random validation cases on the fp8_e4m3 pool (plus its extremes; 0: no fp8 validation)")
    ap.add_argument("--quick", action="store_true",
                    help="a short benchmark (centre and 16k, T <= 64; bf16 and fp8 rows)")
    ap.add_argument("--tol", type=float, default=1e-2,
                    help="relative tolerance against the float64 oracle (bf16 and fp8 pools)")
    ap.add_argument("--no-baseline", action="store_true",
                    help="run stages that compare against SGLang's kernels without them (their files then "
                         "lack the baseline rows the reports compare against)")
    a = ap.parse_args(argv)
    if a.cases < 1 or a.fp8_cases < 0:
        print(f"error: --cases must be >= 1 and --fp8-cases >= 0, got {a.cases} and {a.fp8_cases}", file=sys.stderr)
        return 2
    if no_gpu("kernel.gpu_run", "measures on a GPU (make phase2 renders recorded data)"):
        return 2
    stages = set(a.stages.split(","))
    unknown = stages - set(STAGES)
    if unknown:
        print(f"error: --stages: unknown stage(s) {', '.join(sorted(unknown))}; known: {', '.join(STAGES)}",
              file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    info = env_info(a.commit)

    log(f"{info['gpu']} ({info['sms']} SMs), driver {info['driver']}, torch {info['torch']}, commit {a.commit}")
    try:   # before the build, so that a missing baseline stops the run at once
        from .sglang.baseline import load as load_sglang
        sgl = load_sglang()
    except Exception as e:
        err = baseline_missing(stages, e, a.no_baseline)
        if err:
            print(err, file=sys.stderr)
            return 2
        log(f"SGLang kernels unavailable ({e!r}): baseline rows skipped")
        sgl = None
    lib_dir = build.build()
    res = build.resources(lib_dir)
    log("built " + ", ".join(f"{r['kernel']}@{r['arch']}:{r.get('registers')}r/{r.get('spill_stores')}sp" for r in res))
    summary = []
    if "validate" in stages:
        v = validate(a.cases, a.tol, sgl)
        if a.fp8_cases:
            try:   # the bf16 results must survive a kernel that cannot read the fp8 pool
                v["fp8"] = validate_fp8(a.fp8_cases, a.tol, sgl)
            except Exception as e:
                log(f"validate fp8: FAILED {e!r}")
                v["fp8"] = {"kv_dtype": FP8_KV, "all_pass": False, "error": f"{type(e).__name__}: {e}"[:2000]}
        try:   # nor may they be lost to a failure in the production shapes
            v["production"] = validate_production(a.tol, sgl)
        except Exception as e:
            log(f"validate production: FAILED {e!r}")
            v["production"] = {"all_pass": False, "error": f"{type(e).__name__}: {e}"[:2000]}
        if "graph" in stages:
            v["graph"] = graph_check(a.tol)
            if "fp8" in v and "error" not in v["fp8"]:
                v["fp8"]["graph"] = graph_check(a.tol, kv_dtype=FP8_KV)
        v.update(info)
        write_json(out, "validation", v, info)
        sg = v["sglang"]["cases"]
        summary.append(f"validation: {v['n_cases']} cases, all_pass={v['all_pass']}, worst rel_err "
                       f"{v['worst']['rel_err']:.2e}, vs SGLang max {max((c['rel_err_vs_sglang'] for c in sg), default=float('nan')):.2e}"
                       f", graph replay pass={v.get('graph', {}).get('all_pass')}")
        f8 = v.get("fp8")
        if f8 is not None:
            sg8 = f8.get("sglang", {}).get("cases", [])
            summary.append(f"validation fp8: error {f8['error']}" if "error" in f8 else
                           f"validation fp8: {f8['n_cases']} cases, all_pass={f8['all_pass']}, worst rel_err "
                           f"{f8['worst']['rel_err']:.2e}, SGLang vs oracle max "
                           f"{max((c['sglang_rel_err'] for c in sg8), default=float('nan')):.2e}, graph replay "
                           f"pass={f8.get('graph', {}).get('all_pass')}, {f8['seconds']:.0f} s")
        pr = v["production"]
        summary.append(f"validation production: error {pr['error']}" if "error" in pr else
                       f"validation production: {pr['n_cases']} cases ({pr['n_checks']} checks), all_pass="
                       f"{pr['all_pass']}, " + ", ".join(f"{k} worst {f['worst_rel_err']:.2e}"
                                                         for k, f in pr["families"].items()) +
                       f", {pr['seconds']:.0f} s")
    if "integration" in stages:
        try:
            from .sglang.gpu_check import run as run_integration
        except ImportError as e:
            log(f"integration stage skipped: {e}")
        else:
            res_i = dict(info, **run_integration(sgl))
            write_json(out, "sglang-integration", res_i, info)
            for c in res_i["cases"]:
                summary.append(f"61 layers S={c['S']} T={c['T']} {c['tree']}: plugin {c['plugin_ms_per_step']:.2f} ms, "
                               f"triton {c['triton_ms_per_step']:.2f} ms, err {c['rel_err_plugin_vs_triton']:.1e}")
    if "sglang-backend" in stages:
        from .sglang.backend_check import run as run_backend_check
        res_b = dict(info, **run_backend_check(log=log))
        write_json(out, "sglang-backend", res_b, info)
        summary.append(f"sglang-backend: {len(res_b['cases'])} cases, all_pass={res_b['all_pass']}, "
                       f"{res_b['seconds']:.0f} s")
    if "dcp-sim" in stages:
        from .sglang.dcp_sim import run as run_dcp_sim, summary_lines
        res_d = dict(info, **run_dcp_sim(log=log))
        write_json(out, "dcp-sim", res_d, info)
        summary += summary_lines(res_d)
    if "extend" in stages:
        from .bench.extend_validate import summary_lines as extend_lines, validate_extend
        res_e = dict(info, **validate_extend(a.tol, sgl))
        write_json(out, "extend-validation", res_e, info)
        summary += extend_lines(res_e)
    if "sglang-extend" in stages:
        from .sglang.extend_check import run as run_extend_check, summary_lines as extend_check_lines
        res_x = dict(info, **run_extend_check(log=log))
        write_json(out, "sglang-extend", res_x, info)
        summary += extend_check_lines(res_x)
    if "once" in stages:   # a single centre-point call, for a profiler to attach to
        c = make_case([185000], [8], 8, tree="ddtree", layout="scattered", seed=77, device="cuda")
        for _ in range(3):
            verify_attention(*c.args(), max_draft_len=8)
        torch.cuda.synchronize()
        log("once: done")
    micro_stages = stages & {"stream", "mma", "full", "parts"}
    if "bench" in stages or "extend-bench" in stages or micro_stages:
        log("ceilings ...")
        gbps = read_ceiling()
        tfl = mma_ceiling(build.load(), info["sms"])
        log(f"read ceiling {gbps:.0f} GB/s, mma.sync bf16 ceiling {tfl:.0f} TFLOP/s")
    if micro_stages:
        m = dict(info, **micro.run(gbps, micro_stages), ceilings={"read_GBps": gbps, "mma_TFLOPs": tfl})
        if "parts" in stages:   # the tensor pipe with rows64d's occupancy: one CTA of 8 warps per SM
            m["ceilings"]["mma_TFLOPs_8_warps_per_sm"] = mma_ceiling(build.load(), info["sms"], ((1, 256),))
            log(f"mma.sync ceiling at 8 warps per SM: {m['ceilings']['mma_TFLOPs_8_warps_per_sm']:.0f} TFLOP/s")
        write_json(out, "micro", m, info)
        if {"mma", "full", "parts"} <= stages:   # the sm_120 model reads these rows (a model, not a measurement)
            from .bench import sm120_estimate
            if info["gpu"] not in sm120_estimate.SPEC_GBPS:   # the micro file stands; any other error is raised
                log(f"sm_120 model not written: no datasheet bandwidth for {info['gpu']!r} in sm120_estimate.SPEC_GBPS")
            else:
                doc = sm120_estimate.document(dict(m, kind="microbench"), None, file_name("micro", info), None)
                write_json(out, "sm120-model-from", doc, info)
                summary += sm120_estimate.summary(doc)
        for r in m["rows"]:
            extra = (f"{r['GBps']:7.0f} GB/s {r['frac_read_ceiling']:5.0%} {r['option']}" if r["stage"] == "stream"
                     else f"{r['clk_per_tile']:7.0f} clk/tile {r['part']}" if r["stage"] == "parts"
                     else f"{r['clk_per_tile']:7.0f} clk/tile" + (f", merge {r['merge_us']:.1f} us" if r["stage"] == "full" else ""))
            summary.append(f"micro {r['stage']:6s} S={r['S']:>7} T={r['T']:>3} tier {r['tier']} {r['time_us']:9.1f} us  {extra}")
    if "probe" in stages:   # does ldmatrix traffic overlap mma.sync? (csrc/mma_ldsm_probe.cu)
        from .bench import probe, probe_sass
        try:   # the machine code of the library just built, before any figure
            sass = probe_sass.check(lib_dir)
        except probe_sass.SassError as e:
            log(f"probe: SASS check could not run ({e}): figures are not citable")
            sass = [{"arch": "?", "per": None, "dep": None, "ok": False, "error": str(e)}]
        mhz = micro.sm_clock_mhz()["sm_max"] or 1980.0
        res_p = dict(info, **probe.run(build.load(), info["sms"], mhz, sass))
        write_json(out, "probe", res_p, info)
        summary += probe.table(res_p)
    if "fixed" in stages:
        from .bench.fixed_cost import run as run_fixed
        res_f = dict(info, **run_fixed())
        write_json(out, "fixed-cost", res_f, info)
        for f in res_f["fits"]:
            summary.append(f"fixed cost {f['kv_dtype']:9s} T={f['T']} tier {f['tier']} {f['of']:11s}: intercept "
                           f"{f['intercept_us']:5.1f} us, marginal {f['marginal_GBps'] or float('nan'):6.0f} GB/s")
    if "trace" in stages:
        from .bench.trace import run as run_trace
        res_t = dict(info, **run_trace())
        write_json(out, "trace", res_t, info)
        for r in res_t["rows"]:
            summary.append(f"trace {r['kv_dtype']:9s} S={r['S']:>6} T={r['T']} tier {r['tier']}: graph {r['graph_us']:6.1f} "
                           f"us, span {r.get('span_us') or float('nan'):6.1f}, plan {r['plan_us']:.1f}, loop "
                           f"{r.get('loop_min_us') or float('nan'):.1f}..{r.get('loop_max_us') or float('nan'):.1f}, "
                           f"store tail {r.get('store_tail_us') or float('nan'):.1f}, merge done "
                           f"+{r.get('merge_last_store_after_verify_us') or float('nan'):.1f}, start/store corr "
                           f"{r.get('start_store_corr') or float('nan'):.2f}, 2nd CTA per SM +"
                           f"{r.get('second_cta_loop_excess_us') or float('nan'):.1f}")
    if "bench" in stages:
        lib = build.load()
        tiers = {str(t): {"rows_per_tile": rows, "smem_bytes": lib.mla_verify_tier_smem_bytes(t)}
                 for t, rows in TIERS.items()}
        b = dict(info, kind="bench", quick=a.quick, ceilings={"read_GBps": gbps, "mma_TFLOPs": tfl},
                 resources=res, tiers=tiers, rows=[])

        def save(rows):
            b["rows"] = rows
            write_json(out, "bench", b, info)
        rows = bench(sgl, gbps, tfl, a.quick, save)
        for r in rows:
            if r["impl"].startswith("flash") or (r["sweep"] == "S" and r["S"] == 185000):
                summary.append(f"{r['sweep']:10s} S={r['S']:>7} T={r['T']:>4} H={r['H']:>3} {r['layout']:10s} t{r['tier']} "
                               f"p{r['page_size']:<2} b{r['batch']} {r['impl']:17s} {r['time_us']:11.1f} us "
                               f"{r['GBps']:7.0f} GB/s {r['TFLOPs']:6.1f} TF/s {r['frac_roofline']:6.1%}")
    if "extend-bench" in stages:
        from .bench.extend_bench import KIND as EXTEND_BENCH, bench_extend, summary_lines as extend_bench_lines
        eb = dict(info, kind=EXTEND_BENCH, ceilings={"read_GBps": gbps, "mma_TFLOPs": tfl}, rows=[])

        def save_extend(doc):
            eb.update(doc)
            write_json(out, "extend-bench", eb, info)
        save_extend(bench_extend(sgl, gbps, tfl, save_extend))
        summary += extend_bench_lines(eb)
    print("\n".join(["", "=" * 100] + summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
