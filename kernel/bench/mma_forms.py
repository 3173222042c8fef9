"""mma.sync's rate by the form of its accumulation (mma_forms.cu beside this file): bf16 and f16
m16n8k16 as chains (each MMA adds into its accumulator: the ceiling kernel's form, ~640 TFLOP/s on
the H200) or fresh (each from a zero accumulator, the sum kept by FADDs: the shape of ptxas's
sm_90 emulation of e4m3 m16n8k32, which the deleted mma_kinds timed at ~990 on loop-invariant
operands), bf16 chains twice as many, and the e4m3 launch itself (397 with operands that vary: the
emulation). Which of type, accumulator input and chain latency sets the ceiling.

The machine code is checked before any figure is cited (as probe_sass does for the ldmatrix
probe): per form and arch, the loop's MMAs and what their accumulator operand is; on sm_90 the
e4m3 form must be HMMAs and F2FPs (no QMMA), on sm_120 QMMAs. A failed check marks the rows.

    python -m kernel.bench.mma_forms --out DIR      # JSON mma-forms-<gpu>-<stamp>.json, a table last
    python -m kernel.bench.mma_forms --check        # the machine-code check alone (nvcc, no GPU)
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import re
import subprocess
import sys
from pathlib import Path

from .. import build
from . import probe_sass

SRC = Path(__file__).resolve().parent / "mma_forms.cu"
MMA_SYNC = build.CSRC / "mma_sync.cuh"   # the verify kernels' mma16816, included by SRC
ARCHS = ("90", "120")                    # the measured arch and the production arch
# form -> (name, MMA in the loop, accumulator operand: "chain" (C = D) or "fresh" (C = RZ))
FORMS = {0: ("bf16_chain", "HMMA", "chain"), 1: ("f16_chain", "HMMA", "chain"), 2: ("bf16_fresh", "HMMA", "fresh"),
         3: ("f16_fresh", "HMMA", "fresh"), 4: ("bf16_chain_x2", "HMMA", "chain"), 5: ("e4m3_chain", None, None)}
CHAINS = 8
# (CTAs per SM, threads): 8 warps per SM (the verify tiers' one CTA) and 16
OCCUPANCIES = {"8_warps_per_sm": (1, 256), "16_warps_per_sm": (2, 256)}


def lib_path(root: Path | None = None) -> Path:
    """The built library for ARCHS, compiled by nvcc when no build of this source exists."""
    h = hashlib.sha256(SRC.read_bytes() + MMA_SYNC.read_bytes() + " ".join(ARCHS).encode()).hexdigest()[:16]
    out = Path(root or build.cache_root()) / f"mma-forms-{h}" / "libmma_forms.so"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [build.find_nvcc(), "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC",
               *build.gencode(ARCHS), str(SRC), "-o", str(out) + ".tmp"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise build.BuildError(f"nvcc failed on {SRC}:\n{r.stderr[-3000:]}")
        Path(str(out) + ".tmp").rename(out)
    return out


_KERNEL = re.compile(r"mma_forms_kernelILi(\d+)ELb([01])ELi(\d+)E")


def _form_of(name: str) -> int | None:
    """The form a mangled kernel name instantiates (mma_forms_kernel<KIND, FRESH, N>), or None."""
    m = _KERNEL.search(name)
    if not m:
        return None
    key = tuple(int(x) for x in m.groups())
    return {(0, 0, CHAINS): 0, (1, 0, CHAINS): 1, (0, 1, CHAINS): 2, (1, 1, CHAINS): 3,
            (0, 0, 2 * CHAINS): 4, (2, 0, CHAINS): 5}.get(key)


def check(lib: Path) -> list[dict]:
    """Per arch and form: the loop's MMA instructions by mnemonic, F2FPs, and whether every MMA
    reads the accumulator it writes (chain) or zero (fresh), against what FORMS says."""
    rows = []
    for arch in ARCHS:
        r = subprocess.run([probe_sass.find_cuobjdump(), "-sass", "-arch", f"sm_{arch}", str(lib)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise probe_sass.SassError(f"cuobjdump -sass -arch sm_{arch} {lib} failed: {r.stderr[-2000:]}")
        for fname, fn in probe_sass.parse(r.stdout).items():
            form = _form_of(fname)
            if form is None:
                continue
            name, want_op, want_acc = FORMS[form]
            try:   # the steady-state loop: the backward branch's path holding the most MMAs
                body = probe_sass.loop_body(fn, _is_mma)
            except probe_sass.SassError:
                body = []
            mma = [x for x in body if _is_mma(x)]
            ops = sorted({x.op for x in mma})
            chain = all(len(x.regs) == 4 and x.regs[3] == x.regs[0] for x in mma)
            fresh = all(len(x.regs) == 3 for x in mma)
            f2fp = sum(x.op.startswith("F2FP") for x in body)
            fadd = sum(x.op.startswith("FADD") for x in body)
            if form == 5:    # e4m3: emulated on sm_90 (f16 HMMAs after F2FP converts), native on sm_120
                ok = (all(o.startswith("HMMA") for o in ops) and f2fp > 0) if arch == "90" else \
                     (all(o.startswith("QMMA") for o in ops) and chain and f2fp == 0)
            else:
                # fresh: four FADDs per MMA, so that no MMA serves two iterations (ptxas shared one
                # among four unrolled iterations before A varied by iteration)
                ok = all(o.startswith(want_op) for o in ops) and (chain if want_acc == "chain" else fresh) \
                     and len(mma) % (2 * CHAINS if form == 4 else CHAINS) == 0 and f2fp == 0 \
                     and (want_acc == "chain" or fadd == 4 * len(mma))
            rows.append({"arch": f"sm_{arch}", "form": name, "mma_ops": ops, "mmas_per_loop": len(mma),
                         "f2fp_per_loop": f2fp, "fadd_per_loop": fadd, "accumulator": "chain" if chain else "fresh" if fresh else "mixed",
                         "instructions_per_loop": len(body), "ok": bool(ok and mma)})
    return rows


def _is_mma(x) -> bool:
    """HMMA or QMMA (sm_120's e4m3 form)."""
    return "MMA" in x.op.split(".")[0]


def run(lib: Path, commit: str | None) -> dict:
    import torch

    from .env import env_info, git_commit
    from .timing import log, time_calls

    info = env_info(commit or git_commit())
    so = ctypes.CDLL(str(lib))
    so.mma_forms_launch.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                    ctypes.c_int, ctypes.c_void_p]
    words, sms, iters = so.mma_forms_words(), info["sms"], 2048
    rows = []
    for form, (name, _, _) in FORMS.items():
        k, mmas = so.mma_forms_k(form), so.mma_forms_mmas(form)
        lo, hi, per_word = (0x30, 0x40, 4) if form == 5 else (0x3c00, 0x4000, 2)   # e4m3 [0.5, 2); f16 [1, 2)
        for occ, (per_sm, threads) in OCCUPANCIES.items():
            blocks = sms * per_sm
            n = blocks * threads * words
            v = torch.randint(lo, hi, (n, per_word), dtype=torch.int32, device="cuda")
            ops = sum(v[:, i] << (32 // per_word * i) for i in range(per_word)).contiguous()
            out = torch.empty(blocks * threads, device="cuda")
            def call():   # the stream read per call: time_calls captures the calls on a stream of its own
                return so.mma_forms_launch(form, ops.data_ptr(), out.data_ptr(), iters, blocks, threads,
                                           torch.cuda.current_stream().cuda_stream)
            if call() == -2:   # e4m3 before sm_89: no such instruction, no rate
                log(f"mma_forms {name:14s} {occ:16s}     none (no e4m3 mma.sync before sm_89)")
                rows.append({"form": name, "occupancy": occ, "ctas_per_sm": per_sm, "threads": threads,
                             "ms": None, "TFLOPs": None})
                continue

            def checked():
                err = call()
                if err:
                    raise RuntimeError(f"mma_forms_launch(form={form}) returned {err}")
            ms = time_calls([checked])
            tflops = blocks * threads / 32 * iters * mmas * (2 * 16 * 8 * k) / (ms * 1e-3) / 1e12
            if tflops > 10000:   # beyond any card: the launches were not what was timed
                raise RuntimeError(f"form {name}: {tflops:.0f} TFLOP/s; the timed graph held no launch")
            if not torch.isfinite(out).all():
                raise RuntimeError(f"form {name}: non-finite sums; the operands overflowed")
            log(f"mma_forms {name:14s} {occ:16s} {tflops:8.1f} TFLOP/s")
            rows.append({"form": name, "occupancy": occ, "ctas_per_sm": per_sm, "threads": threads,
                         "ms": ms, "TFLOPs": tflops})
    return {**info, "kind": "mma_forms", "rows": rows}


def table(doc: dict) -> list[str]:
    by = {(r["form"], r["occupancy"]): r["TFLOPs"] for r in doc["rows"]}
    cit = "" if all(r["ok"] for r in doc["sass"]) else "  NOT citable: the machine-code check failed"
    out = [f"{'form':14s} {'8 warps/SM':>11s} {'16 warps/SM':>12s}  (TFLOP/s, dense, fp32 accumulate){cit}"]
    for name, _, _ in FORMS.values():
        cells = [by.get((name, o)) for o in OCCUPANCIES]
        out.append(f"{name:14s} " + " ".join(f"{c:>11.1f}" if c is not None else f"{'none':>11s}" for c in cells))
    return out


def sass_table(rows: list[dict]) -> list[str]:
    out = [f"{'arch':7s} {'form':14s} {'MMAs':>5s} {'F2FP':>5s} {'FADD':>5s} {'instr':>6s} {'acc':6s} ok  ops"]
    for r in rows:
        out.append(f"{r['arch']:7s} {r['form']:14s} {r['mmas_per_loop']:5d} {r['f2fp_per_loop']:5d} {r['fadd_per_loop']:5d} "
                   f"{r['instructions_per_loop']:6d} {r['accumulator']:6s} {'yes' if r['ok'] else 'NO '} {' '.join(r['mma_ops'])}")
    return out


def main(argv=None) -> int:
    from .env import add_commit_arg, no_gpu, write_json

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for mma-forms-<gpu>-<stamp>.json")
    ap.add_argument("--check", action="store_true", help="the machine-code check alone (no GPU)")
    add_commit_arg(ap)
    a = ap.parse_args(argv)
    if not a.check and not a.out:
        print("error: --out: a folder is needed (or --check)", file=sys.stderr)
        return 2
    lib = lib_path()
    sass = check(lib)
    print("\n".join(sass_table(sass)))
    if a.check:
        return 0 if sass and all(r["ok"] for r in sass) else 1
    if no_gpu("kernel.bench.mma_forms", "times on a GPU (--check needs none)"):
        return 2
    doc = dict(run(lib, a.commit), sass=sass)
    print(f"wrote {write_json(a.out, 'mma-forms', doc)}")
    print("\n".join(table(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
