"""The cost side of halving rows64d's split partials with CTA pairs (cluster_pair.cu beside it): what
today's epilogue store of every CTA's 64 KB partial costs, against clusters of two whose second CTA
hands its partial to the first through distributed shared memory for one combined store; and how
many such pairs the GPU holds at once (can pairs still fill every SM at one CTA a SM?).

    python -m kernel.bench.cluster_pair --out DIR

Compiles cluster_pair.cu with nvcc for sm_90 (run) and sm_120 (compiled only: the production GPU
must have every instruction it uses), runs it once, and writes DIR/cluster-pair-<gpu>-<stamp>.json:
microseconds a launch per mode (CUDA-graph replays, median), the differences that matter (the store
of every partial: store_all - none; the pair's hand-over, combine and half the stores: pair -
cluster_none; the cluster launch and barrier: cluster_none - none), the pairs' output check and
cudaOccupancyMaxActiveClusters at sizes 1, 2 and 4; prints a table last. Exits 1 when the pairs'
output is wrong, 2 when nvcc is missing, a build fails or the probe stops on a CUDA error.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from .env import add_commit_arg, no_gpu, record
from .race_probe import ToolMissing, find_tool

SRC = Path(__file__).resolve().parent / "cluster_pair.cu"   # beside this file: not in csrc/, whose hash names the library
MODES = ("none", "store_all", "cluster_none", "pair")          # cluster_pair.cu's MODE_NAMES, in its order
RUN_ARCH, CHECK_ARCH = "sm_90", "sm_120"


def compile_cmd(nvcc: str, out: Path, arch: str, cubin: bool = False) -> list[str]:
    return [nvcc, "-O3", "-std=c++17", f"-arch={arch}", *(["-cubin"] if cubin else []), "-o", str(out), str(SRC)]


def costs(us: dict) -> dict:
    """The probe's differences, us a launch: `us` maps MODES to microseconds a launch."""
    return {"store_all_partials_us": us["store_all"] - us["none"],
            "pair_handover_combine_store_us": us["pair"] - us["cluster_none"],
            "cluster_launch_and_barrier_us": us["cluster_none"] - us["none"]}


def table(doc: dict) -> list[str]:
    """The printed summary of a cluster-pair document."""
    mc = doc["max_active_clusters"]
    lines = [f"{doc['gpu']}: {doc['ctas']} CTAs of one a SM; pairs held at once {mc['2']} "
             f"(size 1: {mc['1']}, 4: {mc['4']}); pair output {'ok' if doc['pair_output_ok'] else 'WRONG'} "
             f"(worst abs err {doc['pair_worst_abs_err']:.1e})",
             f"{'mode':14s} {'us a launch':>11s}"]
    lines += [f"{m:14s} {doc['us_per_launch'][m]:11.2f}" for m in MODES]
    lines += [f"{k:34s} {v:6.2f} us" for k, v in doc["costs"].items()]
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for cluster-pair-<gpu>-<stamp>.json")
    add_commit_arg(ap)
    a = ap.parse_args(argv)
    try:
        nvcc = find_tool("nvcc")
    except ToolMissing as e:
        print(f"cluster_pair: {e}", file=sys.stderr)
        return 2
    if no_gpu("kernel.bench.cluster_pair"):
        return 2
    with tempfile.TemporaryDirectory(prefix="cluster-pair-") as tmp:   # the binaries stay out of --out
        exe, cubin = Path(tmp) / "cluster_pair", Path(tmp) / "cluster_pair_sm120.cubin"
        for cmd in (compile_cmd(nvcc, exe, RUN_ARCH), compile_cmd(nvcc, cubin, CHECK_ARCH, cubin=True)):
            built = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if built.returncode != 0:
                print(f"cluster_pair: nvcc failed (exit {built.returncode}): {' '.join(cmd)}\n"
                      f"{(built.stdout + built.stderr)[-4000:]}", file=sys.stderr)
                return 2
        ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    if ran.returncode == 2 or not ran.stdout.strip():
        print(f"cluster_pair: the probe stopped (exit {ran.returncode}): {ran.stderr[-2000:]}", file=sys.stderr)
        return 2
    found = json.loads(ran.stdout)
    found.pop("gpu")   # the same card's name as env_info's
    result = dict(found, kind="cluster_pair", run_arch=RUN_ARCH, compiled_for=[RUN_ARCH, CHECK_ARCH],
                  costs=costs(found["us_per_launch"]))
    doc = record(a.out, "cluster-pair", a.commit, result)
    print("\n".join(table(doc)))
    return 0 if doc["pair_output_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
