"""The ldmatrix/mma.sync probe (csrc/mma_ldsm_probe.cu), run with its prediction beside every
variant, after its machine code passed probe_sass.check (`gpu_run --stages probe`).

Variant <PER, DEP>: one ldmatrix.x4 per PER MMAs (0: none), DEP accumulator chains (each MMA
reads the result of the MMA DEP before it, checked in the SASS). Occupancies: 4, 8 and 16 warps
per SM (one CTA of 128 threads: rows32d on sm_120; one CTA of 256: the design D tiers; two).

Prediction, SM clocks per MMA, the largest of (every input from this run or the SASS check,
except the two latencies, which are assumptions and say so):
  pipe       the mma.sync ceiling kernel's rate at the same occupancy, measured in this run;
  latency    HMMA_LATENCY / (warps per SM x DEP): each chain has one MMA in flight;
  shared     4 / PER: an x4 moves 512 bytes, 4 wavefronts at 128 bytes per clock per SM;
  load wait  LDSM_LATENCY / (load-to-use MMAs in the SASS x warps per SM): a warp reaches the
             MMA that needs a load only after that many of its own MMAs;
  issue      the loop's instructions per MMA (SASS) / 4 schedulers.
The question it settles: kernel/NOTES.md's "one ldmatrix.x4 every 8 MMAs halves mma.sync at 8
warps per SM" came from a probe whose MMAs issued behind their producers. This model says
ldmatrix costs nothing at PER 8 and 4 (shared memory at 0.5 and 1 wavefront per MMA, under the
pipe's 1.7 clocks), 15 % at PER 2 and 58 % at PER 1 (shared memory bound), and that DEP 2 at
8 warps per SM is latency-bound at ~88 %. A measured P8/D8 rate below 0.9 x P0/D8 refutes it
and restores the NOTES line.
"""
from __future__ import annotations

import torch

from .ceilings import mma_ceiling
from .probe_sass import ARCHS, BODY, VARIANTS
from .timing import log, time_calls

HMMA_LATENCY_CLK = 31.0   # assumed: the first probe's no-load row (2 warps per scheduler, each MMA 2
                          # behind its producer per the review's SASS, 548 of 629 TFLOP/s) is latency-bound at 31
LDSM_LATENCY_CLK = 30.0   # assumed: the kernel memo's ~30 clocks for an ldmatrix to return
SMEM_WAVEFRONTS_PER_CLK = 1.0   # 128 bytes per clock per SM
SCHEDULERS = 4
# (CTAs per SM, threads per CTA)
CONFIGS = ((1, 128), (1, 256), (2, 256))
VERDICT_TOLERANCE = 0.10  # measured within 10 % of the prediction: confirmed


def predict(per: int, dep: int, warps_per_sm: int, pipe_clk: float, load_to_use: int | None,
            instr_per_mma: float) -> dict:
    """Predicted SM clocks per MMA and the bound that sets it (see the module docstring)."""
    bounds = {"pipe": pipe_clk,
              "latency": HMMA_LATENCY_CLK / (warps_per_sm * dep),
              "shared": 4.0 / (per * SMEM_WAVEFRONTS_PER_CLK) if per else 0.0,
              "load wait": LDSM_LATENCY_CLK / (max(load_to_use or 0, 1) * warps_per_sm) if per else 0.0,
              "issue": instr_per_mma / SCHEDULERS}
    bound = max(bounds, key=bounds.get)
    return {"clk_per_mma_per_sm": bounds[bound], "bound": bound, "bounds": bounds}


def run(lib, sms: int, mhz: float, sass: list[dict]) -> dict:
    """Every variant at every occupancy: measured and predicted TFLOP/s. `sass`: probe_sass.check
    rows of this library (this device's arch among them); a variant whose check failed is
    measured but flagged not citable."""
    words, table_words, body = (lib.mma_ldsm_probe_operand_words(), lib.mma_ldsm_probe_table_words(),
                                lib.mma_ldsm_probe_body())
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    checked = {(r["per"], r["dep"]): r for r in sass if r["arch"] == arch}
    gen = torch.Generator(device="cuda").manual_seed(5)
    rows, ceilings = [], {}
    for ctas, threads in CONFIGS:
        warps = ctas * threads // 32
        blocks, iters = sms * ctas, 1024
        # pairs of bf16 in [0.5, 2): values the compiler cannot know
        ops = torch.randint(0x3c00, 0x4000, (blocks * threads * words * 2,), dtype=torch.int32, device="cuda",
                            generator=gen)
        ops = (ops[0::2] | (ops[1::2] << 16)).contiguous()
        tab = torch.randint(0x3c00, 0x4000, (table_words * 2,), dtype=torch.int32, device="cuda", generator=gen)
        tab = (tab[0::2] | (tab[1::2] << 16)).contiguous()
        out = torch.empty(blocks * threads, device="cuda")
        tfl_ceiling = mma_ceiling(lib, sms, ((ctas, threads),))
        pipe = 4096 * sms * mhz * 1e6 / (tfl_ceiling * 1e12)
        ceilings[f"{warps}_warps_per_sm"] = {"TFLOPs": tfl_ceiling, "clk_per_mma_per_sm": pipe}
        for per, dep in VARIANTS:
            c = checked.get((per, dep), {})
            ipm = c.get("instructions", 3 * body) / body
            # the stream is read inside the call: under graph capture it is the capture stream
            def launch():
                return lib.mma_ldsm_probe_launch(ops.data_ptr(), tab.data_ptr(), out.data_ptr(), iters, per, dep,
                                                 blocks, threads, torch.cuda.current_stream().cuda_stream)
            err = launch()
            if err:   # a variant the library does not dispatch, or a launch error: no figure
                raise RuntimeError(f"mma_ldsm_probe_launch(per={per}, dep={dep}) failed: cudaError {err}")
            t = time_calls([launch])
            mmas = blocks * threads / 32 * iters * body
            clk = t * 1e-3 * mhz * 1e6 / (mmas / sms)
            pred = predict(per, dep, warps, pipe, c.get("min_load_to_use"), ipm)
            tfl = mmas * 4096 / (t * 1e-3) / 1e12
            tfl_pred = 4096 * sms * mhz * 1e6 / pred["clk_per_mma_per_sm"] / 1e12
            ratio = tfl / tfl_pred
            rows.append({"ctas_per_sm": ctas, "threads": threads, "warps_per_sm": warps, "mmas_per_ldsm": per,
                         "chains": dep, "dep_distance_sass": c.get("min_dep_distance"),
                         "load_to_use_sass": c.get("min_load_to_use"), "instr_per_mma_sass": ipm,
                         "wavefronts_per_mma": 4 / per if per else 0.0,
                         "TFLOPs": tfl, "clk_per_mma_per_sm": clk, "frac_ceiling": tfl / tfl_ceiling,
                         "predicted_TFLOPs": tfl_pred, "predicted_clk_per_mma_per_sm": pred["clk_per_mma_per_sm"],
                         "predicted_bound": pred["bound"], "predicted_bounds": pred["bounds"],
                         "measured_over_predicted": ratio,
                         "verdict": "confirmed" if abs(ratio - 1) <= VERDICT_TOLERANCE else "refuted",
                         "citable": bool(c.get("ok"))})
            log(f"probe {warps:2d} warps/SM P{per} D{dep}: {tfl:6.0f} TFLOP/s (predicted {tfl_pred:6.0f}, "
                f"{pred['bound']}), {clk:.2f} clk/MMA/SM")
        del ops, tab, out
    return {"kind": "mma-ldsm-probe", "arch": arch, "clock_assumed_mhz": mhz, "body_mmas": body,
            "model": {"hmma_latency_clk": HMMA_LATENCY_CLK, "ldsm_latency_clk": LDSM_LATENCY_CLK,
                      "smem_wavefronts_per_clk": SMEM_WAVEFRONTS_PER_CLK, "tolerance": VERDICT_TOLERANCE},
            "ceilings": ceilings, "sass_check": sass, "sass_ok": all(r["ok"] for r in sass),
            "sass_archs": list(ARCHS), "rows": rows}


def prediction_table(sass: list[dict], tflops_ceiling: float, sms: int = 132, mhz: float = 1980.0,
                     arch: str = "sm_90") -> list[str]:
    """kernel/NOTES.md's table of predictions (TFLOP/s, the binding bound where it is not the
    pipe) at a given 8-warp ceiling, for every occupancy, from the SASS check's rows of `arch`."""
    pipe = 4096 * sms * mhz * 1e6 / (tflops_ceiling * 1e12)
    checked = {(r["per"], r["dep"]): r for r in sass if r["arch"] == arch}
    pers = sorted({p for p, _ in VARIANTS}, key=lambda p: (p != 0, -p))
    out = ["| warps per SM | " + " | ".join(
        f"P{p} D" + " / D".join(str(d) for q, d in VARIANTS if q == p) for p in pers) + " |",
        "| --- " * (len(pers) + 1) + "|"]
    for ctas, threads in CONFIGS:
        warps = ctas * threads // 32
        cells = []
        for p in pers:
            preds = [predict(p, d, warps, pipe, checked[(p, d)]["min_load_to_use"],
                             checked[(p, d)]["instructions"] / BODY) for q, d in VARIANTS if q == p]
            cells.append(" / ".join(f"{4096 * sms * mhz * 1e6 / x['clk_per_mma_per_sm'] / 1e12:.0f}"
                                    + ("" if x["bound"] == "pipe" else f" ({x['bound']})") for x in preds))
        out.append(f"| {warps} | " + " | ".join(cells) + " |")
    return out


def table(res: dict) -> list[str]:
    """The short summary: measured (predicted) TFLOP/s per variant, one line per occupancy."""
    out = [f"probe (csrc/mma_ldsm_probe.cu), {res['arch']}: SASS check "
           + ("passed" if res["sass_ok"] else "FAILED: figures below are NOT citable")
           + "; TFLOP/s measured (predicted), P = MMAs per ldmatrix.x4, D = chains"]
    for warps in sorted({r["warps_per_sm"] for r in res["rows"]}):
        rs = [r for r in res["rows"] if r["warps_per_sm"] == warps]
        ceil = res["ceilings"][f"{warps}_warps_per_sm"]["TFLOPs"]
        out.append(f"  {warps:2d} warps/SM, ceiling {ceil:4.0f}: " + "  ".join(
            f"P{r['mmas_per_ldsm']}D{r['chains']} {r['TFLOPs']:4.0f} ({r['predicted_TFLOPs']:4.0f})"
            + ("" if r["verdict"] == "confirmed" else "!") for r in rs))
    refuted = [r for r in res["rows"] if r["verdict"] != "confirmed"]
    out.append(f"  {len(res['rows']) - len(refuted)} of {len(res['rows'])} predictions within "
               f"{VERDICT_TOLERANCE:.0%} ('!' marks the others)")
    return out
