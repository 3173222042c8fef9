"""Build the CUDA sources once per source hash, check their resource usage, load them.

The library is plain CUDA C with an extern "C" API (no torch headers), so the same build
serves any installed torch: CI compiles it without a GPU, the GPU machine loads it next to
whatever torch it has. One build holds machine code for every target architecture.

A build lives in `<cache>/<source hash>-sm<archs>/` and is found again by that hash alone,
so loading a prebuilt library needs no CUDA toolkit: nvcc runs only when nothing matches.
The cache is MLA_VERIFY_CACHE when set, else $XDG_CACHE_HOME/mla-verify (default
~/.cache/mla-verify): user-writable, never inside the installed package.

    python -m kernel.build --all-archs --report          # what `make kernel-build` runs
    python -m kernel.build --cache-dir /opt/mla-verify   # prebuild for a serving image;
                                                         # serve with MLA_VERIFY_CACHE=/opt/mla-verify
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ARCHS = ("80", "86", "89", "90", "120")   # A100, A10/3090, L4/4090, H100/H200, RTX PRO 6000
SMEM_LIMIT = 99 * 1024                    # sm_120's per-block limit, the tightest target
CSRC = Path(__file__).resolve().parent / "csrc"
# Compiled into the one library; every csrc/*.cu and *.cuh is hashed, so a new source
# file joins the build by being added here.
SOURCES = ("mla_verify.cu", "mma_ceiling.cu", "mma_ldsm_probe.cu")
FLAGS = ("-O3", "-std=c++17", "--use_fast_math", "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v")
LIB = "libmla_verify.so"
CACHE_ENV = "MLA_VERIFY_CACHE"


class BuildError(RuntimeError):
    """nvcc is missing or the CUDA sources did not compile."""


def find_nvcc() -> str:
    for cand in (os.environ.get("NVCC"), shutil.which("nvcc"),
                 os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise BuildError("nvcc not found: install the CUDA toolkit, put nvcc on PATH, or set NVCC / CUDA_HOME")


def cache_root() -> Path:
    """Where builds live: MLA_VERIFY_CACHE, else $XDG_CACHE_HOME/mla-verify, else
    ~/.cache/mla-verify."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "mla-verify"


def gencode(archs) -> list[str]:
    out = []
    for a in archs:
        out += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
    newest = max(archs, key=int)
    out += ["-gencode", f"arch=compute_{newest},code=compute_{newest}"]  # PTX for newer GPUs
    return out


def _flags(defines=()) -> tuple[str, ...]:
    """nvcc's flags; `defines` (e.g. ("MLAV_TRACE",)) build a diagnostic variant."""
    bad = [d for d in defines if not re.fullmatch(r"[A-Z][A-Z0-9_]*(=[0-9]+)?", d)]
    if bad:
        raise ValueError(f"defines: expected macro names like 'MLAV_TRACE', got {bad!r}")
    return FLAGS + tuple(f"-D{d}" for d in defines)


def source_hash(archs=ARCHS, defines=()) -> str:
    """Hash of every CUDA source, the flags and the target archs (not the toolkit: a
    prebuilt library must be found on a host without nvcc). 16 hex digits."""
    h = hashlib.sha256()
    for path in sorted(CSRC.glob("*.cu")) + sorted(CSRC.glob("*.cuh")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    h.update(" ".join(_flags(defines) + tuple(gencode(_archs(archs)))).encode())
    return h.hexdigest()[:16]


def _archs(archs) -> tuple[str, ...]:
    out = tuple(str(a) for a in archs)
    if not out or not all(a.isdigit() for a in out):
        raise ValueError(f"archs: expected compute capabilities like ('90', '120'), got {archs!r}")
    return out


def lib_dir(archs=ARCHS, root: Path | None = None, defines=()) -> Path:
    """The folder a build for `archs` has (or would have) under `root` (default cache_root())."""
    archs = _archs(archs)
    return Path(root or cache_root()) / f"{source_hash(archs, defines)}-sm{'_'.join(archs)}"


def _complete(d: Path) -> bool:
    return (d / LIB).is_file() and (d / "resources.json").is_file()


_ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(sm_\d+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


# a copy's Kind (verify_common.cuh) -> the name's suffix: the verify kernel, the per-part diagnostic
# copy, its math alone, the copy that reads every mode bit
_KINDS = {0: "", 1: "_diag", 2: "_math", 3: "_modes"}


def _variant(mangled: str) -> str:
    """A readable name for one instantiation: 'rows64', 'small_nt4', 'rows64d', 'rows32d_diag', 'rows64d_math',
    'rows64d_pair', 'small_nt1_fp8', 'small_nt1_math_fp8', 'rows64d_fp8', 'rows64d_math_fp8', 'rows64d_tail',
    'rows64d_math_fp8_tail', 'combine_r32', 'combine_r32_few', ..."""
    args = [int(x) for x in re.findall(r"Li(\d+)E", mangled)]
    if "mla_verify_kernel_small8" in mangled and args:   # the small tier's fp8 copy, <NT, KIND> (<NT> before the kinds)
        return f"small_nt{args[0]}" + _KINDS[args[1] if len(args) > 1 else 0] + "_fp8"
    if "mla_verify_kernel_small" in mangled and args:
        return f"small_nt{args[0]}"
    tail = "_tail" if "Lb1E" in mangled else ""   # rowsd's <HALVES, KIND, TL>: the tail kernels
    if "mla_verify_kernel_rowsd_fp8" in mangled and args:   # <HALVES, KIND> (<HALVES> before the kinds)
        return f"rows{32 * args[0]}d" + _KINDS[args[1] if len(args) > 1 else 0] + "_fp8" + tail
    if "mla_verify_kernel_rowsd" in mangled and len(args) >= 2:   # <HALVES, KIND>
        return f"rows{32 * args[0]}d" + _KINDS[args[1]] + tail
    if "mla_verify_kernel_rows64d_pair" in mangled and args:   # <DIAG>
        return "rows64d_pair" + ("_diag" if args[0] else "")
    if "mla_verify_kernel_rows64" in mangled:
        return "rows64"
    if "mla_verify_combine" in mangled and args:   # <BMR, FEW>
        return f"combine_r{args[0]}" + ("_few" if "Lb1E" in mangled else "")
    if "mma_ldsm_probe_kernel" in mangled and len(args) >= 2:   # <MMAs per ldmatrix, chains>
        return f"probe_m{args[0]}_d{args[1]}"
    return mangled


# the library's kernels by the names a build record gives them (instantiations are `variant`s)
KERNELS = ("mla_verify_kernel", "mla_verify_combine", "mma_ceiling_kernel", "mma_ldsm_probe_kernel")


def parse_ptxas(log: str) -> list[dict]:
    """Per (kernel, arch): registers, static smem, stack frame and spill bytes from -Xptxas -v."""
    rows, cur = [], None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            name = m.group(1)
            short = next((k for k in KERNELS if k in name), name)
            cur = {"kernel": short, "arch": m.group(2), "variant": _variant(name)}
            rows.append(cur)
            continue
        if cur is None:
            continue
        m = _FRAME.search(line)
        if m:
            cur.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = _USED.search(line)
        if m:
            cur.update(registers=int(m.group(1)), smem_static=int(m.group(2) or 0))
    return rows


def build(archs=ARCHS, *, verbose: bool = False, root: Path | None = None, defines=()) -> Path:
    """The folder holding the library for `archs`: a prebuilt one found by source hash
    (no nvcc needed), else compiled now into `root` (default cache_root()). `defines`: macros
    of a diagnostic variant (its own hash, so never the production library)."""
    archs = _archs(archs)
    out = lib_dir(archs, root, defines)
    if _complete(out):
        return out
    nvcc = find_nvcc()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".tmp-"))
    except OSError as e:
        raise BuildError(f"cannot write the kernel cache {out.parent} ({e.strerror}): set {CACHE_ENV} "
                         "to a writable folder, or prebuild with `python -m kernel.build --cache-dir DIR`") from None
    cmd = [nvcc, *_flags(defines), *gencode(archs), *(str(CSRC / s) for s in SOURCES), "-o", str(tmp / LIB)]
    if verbose:
        print(" ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BuildError(f"nvcc failed (exit {proc.returncode}) for archs {','.join(archs)}:\n{proc.stderr[-8000:]}")
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    (tmp / "ptxas.log").write_text(proc.stderr)
    (tmp / "build-info.json").write_text(json.dumps({"nvcc": nvcc, "nvcc_version": version[-1] if version else "",
                                                     "archs": list(archs), "sources": list(SOURCES),
                                                     "defines": list(defines)}, indent=1))
    (tmp / "resources.json").write_text(json.dumps(parse_ptxas(proc.stderr), indent=1))
    try:
        tmp.rename(out)
    except OSError:          # another process built the same hash first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def resources(lib_dir: Path) -> list[dict]:
    rows = json.loads((Path(lib_dir) / "resources.json").read_text())
    for r in rows:   # a build recorded before its kernel had a readable name kept the mangled one
        if r.get("variant", "").startswith("_Z"):
            r["variant"] = _variant(r["variant"])
        if r.get("kernel", "").startswith("_Z"):
            r["kernel"] = next((k for k in KERNELS if k in r["kernel"]), r["kernel"])
    return rows


_LIBS: dict[tuple, ctypes.CDLL] = {}


def load(archs=ARCHS, defines=()) -> ctypes.CDLL:
    """Load the library (building it first only if no build matches the source hash) with
    typed entry points; cached per process, since the op calls this on every launch."""
    key = (_archs(archs), tuple(defines))
    if key in _LIBS:
        return _LIBS[key]
    d = build(archs, defines=tuple(defines))
    lib = ctypes.CDLL(str(d / LIB))
    vp, i, ll, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_float
    lib.mla_verify_launch.argtypes = [vp, vp, ll, vp, i, vp, i, vp, ll, vp, vp, i, vp, i, i, i, i, f, vp, vp,
                                      vp, i, i, vp, i, i, i, f, f]
    lib.mla_verify_launch.restype = i
    lib.mla_verify_workspace_bytes.argtypes = [i, i]
    lib.mla_verify_workspace_bytes.restype = ll
    lib.mla_verify_rows_per_cta.argtypes = [i]
    lib.mla_verify_tier_smem_bytes.argtypes = [i]
    lib.mla_verify_tier_smem_bytes_fp8.argtypes = [i]
    lib.mla_verify_error_string.argtypes = [i]
    lib.mla_verify_error_string.restype = ctypes.c_char_p
    lib.mla_verify_num_sms.argtypes = [i]
    lib.mma_ceiling_launch.argtypes = [vp, vp, i, i, i, vp]
    lib.mma_ceiling_launch.restype = i
    lib.mma_ldsm_probe_launch.argtypes = [vp, vp, vp, i, i, i, i, i, vp]
    lib.mma_ldsm_probe_launch.restype = i
    if "MLAV_TRACE" in defines:
        lib.mla_verify_trace.argtypes = [vp, i, vp]
        lib.mla_verify_trace.restype = i
    if "MLAV_BARWAIT" in defines:
        lib.mla_verify_barwait.argtypes = [vp, i]
        lib.mla_verify_barwait.restype = i
    _LIBS[key] = lib
    return lib


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all-archs", action="store_true", help=f"build for sm_{', sm_'.join(ARCHS)} (default)")
    ap.add_argument("--arch", action="append", help="build only this arch (repeatable), e.g. --arch 90")
    ap.add_argument("--report", action="store_true", help="print registers, shared memory and spills per kernel")
    ap.add_argument("--cache-dir", type=Path, default=None,
                    help=f"build into this folder (a serving image's prebuilt kernel; serve with {CACHE_ENV}=DIR); "
                         f"default: {CACHE_ENV}, else $XDG_CACHE_HOME/mla-verify")
    a = ap.parse_args(argv)
    archs = tuple(a.arch) if a.arch else ARCHS
    try:
        d = build(archs, verbose=True, root=a.cache_dir)
    except (BuildError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(d / LIB)
    if a.report:
        for r in resources(d):
            print(f"  {r['kernel']:20s} {r['arch']:7s} regs {r.get('registers', '?'):>3}  "
                  f"stack {r.get('stack', '?')}  spills {r.get('spill_stores', '?')}/{r.get('spill_loads', '?')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
