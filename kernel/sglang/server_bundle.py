"""Build, on a machine where pip reaches PyPI, the archive that lets the GPU machine (no SGLang,
no sgl_kernel, no network) run SGLang 0.5.23's own server with the plugin:
`python -m sglang.launch_server` (or `sglang serve`) from the unpacked folder.

    python -m kernel.sglang.server_bundle [DIR]      # default .server-bundle/; `make sglang-server-bundle`

DIR gets two files: `server-bundle.tar.xz` and `BUNDLE.json` (what is in it, how big, its
sha256). The archive holds `site/` (for PYTHONPATH) and `kernel-cache/` (for MLA_VERIFY_CACHE):
- SGLang 0.5.23's cp312 wheel unpacked --no-deps, trimmed of what a server never imports
  (SGLANG_TRIM: the diffusion runtime, tests, benchmarks, the four Rust server/bench
  extensions);
- the wheels the server's import needs that the GPU image lacks (device_bundle.GPU_HAS), at
  this venv's versions, for cp312 manylinux x86_64: found by a probe that imports the server's
  modules (SERVER_MODULES) with SGLang's CUDA import branches and the stand-ins, then closed
  over their declared requirements; apache-tvm-ffi keeps its headers (SGLang JIT-compiles its
  CUDA kernels against them with nvcc);
- the stand-ins (standins/: sgl_kernel's torch versions and placeholders, flash_mla; in server-only/,
  beside site/, flashinfer's sampling renormalizations, for the real server's PYTHONPATH only);
- a dist-info for this project whose entry points are read from pyproject.toml, so SGLang's
  load_plugins() finds the plugin (the code comes from the repository root, the working
  directory there);
- the kernel library prebuilt for every target arch when nvcc is here (the GPU machine then
  loads it by source hash instead of compiling).
More than 64 MiB unpacked, so it travels compressed; the build checks that the archive plus
the repository's working tree (what a device call carries besides it) stay under BUDGET.
Packages SGLang's server needs that this venv lacks (SERVER_EXTRAS) are resolved by pip
against this venv and installed for the probe only, into .server-bundle-build/ (never into
the venv). Shares device_bundle's download, unpack, probe and dist-info machinery.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from importlib import metadata
from pathlib import Path

from . import device_bundle as db
from .device_bundle import GPU_HAS, NOT_CARRIED, BundleError, canonical

ROOT = db.ROOT
STANDINS = db.STANDINS
STANDIN_PACKAGES = ("sgl_kernel", "flash_mla")
# Stand-ins only the real server sees (the bundle's server-only/, on its wrapper's PYTHONPATH, not
# on a gpu_run stage's), with STANDIN_ENV: flashinfer's (sampling only) would otherwise pass
# SGLang's find_spec("flashinfer") check and switch on FlashInfer paths that import the rest of it
SERVER_ONLY = STANDINS / "server_only"
SERVER_ONLY_PACKAGES = ("flashinfer",)
STANDIN_ENV = {"SGLANG_IS_FLASHINFER_AVAILABLE": "false"}
# FlashInfer's own headers, from the wheel SGLang 0.5.23 pins (flashinfer_python[cu13]==0.7.2): the
# DFLASH worker's startup JIT-compiles SGLang's tree_speculative_sampling_target_only, which includes
# <flashinfer/sampling.cuh>, and SGLang's JIT asks the flashinfer package for data/include and four
# more folders (kernels/jit/utils/deps.py: get_flashinfer_include_paths) that this kernel never
# includes from: those are carried empty, with a note (the whole data/ is ~100 MB)
FLASHINFER_WHEEL = ("flashinfer-python", "0.7.2")
FLASHINFER_HEADERS = "flashinfer/data/include/"
FLASHINFER_EMPTY = ("csrc", "cutlass/include", "cutlass/tools/util/include", "spdlog/include")
DEFAULT_DIR = ROOT / ".server-bundle"
WORK_DIR = ROOT / ".server-bundle-build"
ARCHIVE = "server-bundle.tar.xz"
MANIFEST = "BUNDLE.json"
CARRY_LIMIT = 64 * 2 ** 20        # what one device call carries: working tree + carried paths
BUDGET = 60 * 2 ** 20             # the archive + the working tree; the rest is headroom
GPU_PLATFORM_ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
                    "platform_machine": "x86_64", "platform_system": "Linux", "os_name": "posix",
                    "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}

# What SGLang's server imports beyond what the project's venv has (the audit installed these on
# the CPU machine); resolved by pip against the venv, installed for the probe only. uvloop is on
# the GPU image, so it is probed but not carried.
SERVER_EXTRAS = ("fastapi", "uvicorn>=0.51", "uvloop", "setproctitle", "python-multipart", "soundfile==0.13.1",
                 "xgrammar==0.2.7")
# The modules a server process imports on its way to serving (launcher, HTTP server, tokenizer,
# scheduler, detokenizer, the model and its NextN draft, EAGLE, the Triton backend, grammar,
# loader) and the plugin; imported by the probe with SGLang's CUDA branches.
SERVER_MODULES = (
    "sglang.launch_server", "sglang.cli.main", "sglang.cli.serve", "sglang.srt.entrypoints.http_server",
    "sglang.srt.entrypoints.engine", "sglang.srt.managers.scheduler", "sglang.srt.managers.tokenizer_manager",
    "sglang.srt.managers.detokenizer_manager", "sglang.srt.managers.data_parallel_controller",
    "sglang.srt.model_executor.model_runner", "sglang.srt.models.deepseek_v2", "sglang.srt.models.deepseek_nextn",
    "sglang.srt.speculative.eagle_worker_v2", "sglang.srt.speculative.eagle_draft_cuda_graph_runner",
    "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner", "sglang.srt.layers.attention.triton_backend",
    "sglang.srt.layers.attention.flashmla_backend", "sglang.srt.constrained.xgrammar_backend",
    "sglang.srt.model_loader.loader", "sglang.srt.layers.sampler", "sglang.srt.layers.moe.fused_moe_triton",
    "kernel.sglang.plugin",
)
# Named by the audit (../shared/reading/audit-2026-12-02/real-server.md) as missing on the GPU
# image and needed there: the build refuses a bundle without any of them.
AUDIT_NEEDS = ("fastapi", "uvicorn", "starlette", "pyzmq", "orjson", "msgspec", "pydantic", "pydantic-core",
               "xgrammar", "apache-tvm-ffi", "partial-json-parser", "setproctitle", "python-multipart", "soundfile",
               "compressed-tensors", "openai")
# Parts of SGLang's wheel no server imports: the diffusion runtime, tests, benchmarks, and the
# Rust server/bench/grpc/multimodal extensions (40 MiB; the Rust radix tree core stays, unused
# under SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python).
SGLANG_TRIM = re.compile(r"^sglang/(multimodal_gen|test|benchmark)/|/__pycache__/|"
                         r"^sglang/srt/rust_extensions/_(server|bench|grpc|multimodal)\.")
SGLANG_DIST_INFO_KEEP = ("/METADATA", "/entry_points.txt", "/top_level.txt", "/WHEEL")
# Carried whole (bar __pycache__): SGLang's JIT build reads apache-tvm-ffi's include/ and 3rdparty/.
WHOLE_DISTS = frozenset({"apache-tvm-ffi"})


def keep_sglang_file(path: str) -> bool:
    """Whether a file of SGLang's wheel goes into the server bundle."""
    if ".dist-info/" in path:
        return path.endswith(SGLANG_DIST_INFO_KEEP)
    return path.startswith("sglang/") and not SGLANG_TRIM.search(path)


def keep_wheel_file(dist: str, path: str) -> bool:
    """Whether a file of a carried wheel goes into the bundle."""
    if canonical(dist) in WHOLE_DISTS:
        return "/__pycache__/" not in f"/{path}"
    return db.keep_carried_file(path)


# -- what the server needs --------------------------------------------------------------------
def resolve_extras(specs=SERVER_EXTRAS, python: str = sys.executable) -> list[tuple[str, str]]:
    """(name, version) of what `pip install specs` would add to this venv (versions chosen by
    pip against what the venv has); nothing is installed."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        p = subprocess.run([python, "-m", "pip", "install", "--dry-run", "--quiet", "--only-binary=:all:",
                            "--disable-pip-version-check", "--report", str(report), *specs],
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0 or not report.exists():
            raise BundleError(f"pip could not resolve {list(specs)} against this venv:\n{p.stderr[-3000:]}")
        found = json.loads(report.read_text())
    return sorted((canonical(i["metadata"]["name"]), i["metadata"]["version"]) for i in found.get("install", []))


def install_probe_site(pairs, site: Path, python: str = sys.executable) -> Path:
    """Install `pairs` (name, version) --no-deps into `site` for this venv's Python, once."""
    stamp = site / ".installed.json"
    want = [f"{n}=={v}" for n, v in pairs]
    if stamp.exists() and json.loads(stamp.read_text()) == want:
        return site
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    if want:
        p = subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--only-binary=:all:",
                            "--disable-pip-version-check", "--target", str(site), *want],
                           capture_output=True, text=True, timeout=1200)
        if p.returncode != 0:
            raise BundleError(f"pip could not install {want} into {site} for the probe:\n{p.stderr[-3000:]}")
    stamp.write_text(json.dumps(want))
    return site


def probe(out_path: str, modules=SERVER_MODULES) -> None:
    """Import the server's modules the way a CUDA machine does; write what was imported, which
    distributions own it, what failed, and which stand-ins ran or were called."""
    import importlib

    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK"] = "1"
    db._cpu_torchvision_shim()
    db._pretend_cuda()
    errors = {}
    for m in modules:
        try:
            importlib.import_module(m)
        except BaseException as e:  # noqa: BLE001 -- a SystemExit at import is a finding too
            errors[m] = f"{type(e).__name__}: {e}"
    import sgl_kernel
    import torch

    owners = metadata.packages_distributions()
    dists = {}
    for top in sorted({m.split(".")[0] for m in list(sys.modules)}):
        for d in owners.get(top, []):
            try:
                dists[canonical(d)] = metadata.version(d)
            except metadata.PackageNotFoundError:
                pass
    json.dump({"modules": list(modules), "errors": errors, "distributions": dists,
               "sglang_modules": sorted(m for m in sys.modules if m == "sglang" or m.startswith("sglang.")),
               "standins_called": sorted(set(sgl_kernel.called)), "standins_ran": sorted(sgl_kernel.ran),
               "torch": torch.__version__}, open(out_path, "w"), indent=1)


def run_probe(extra_paths=(), modules=SERVER_MODULES, python: str = sys.executable, check: bool = True) -> dict:
    """The probe in a subprocess with the stand-ins, the repo and `extra_paths` on PYTHONPATH;
    with `check`, raises BundleError for what check_probe finds."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "probe.json")
        path = os.pathsep.join(str(p) for p in (STANDINS, SERVER_ONLY, ROOT, *extra_paths))
        env = dict(os.environ, PYTHONPATH=path, SGLANG_PLUGINS="", **STANDIN_ENV)
        env.pop("MLA_VERIFY_BACKEND", None)
        p = subprocess.run([python, "-m", "kernel.sglang.server_bundle", "--probe", out, "--modules", ",".join(modules)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        if p.returncode != 0 or not os.path.exists(out):
            raise BundleError(f"the server probe failed (exit {p.returncode}):\n{p.stderr[-4000:]}")
        found = json.load(open(out))
    return check_probe(found) if check else found


def check_probe(found: dict) -> dict:
    """Raise BundleError when a server module did not import or a placeholder was called."""
    if found["errors"]:
        raise BundleError("the server's modules do not import here (with SGLang's CUDA branches and the stand-ins): "
                          + "; ".join(f"{m}: {e}" for m, e in found["errors"].items()))
    if found["standins_called"]:
        raise BundleError(f"importing the server calls sgl_kernel placeholders: {found['standins_called']}")
    return found


def requirement_closure(names, installed: dict, env=GPU_PLATFORM_ENV, skip=GPU_HAS | NOT_CARRIED) -> tuple[dict, list]:
    """Close `names` over their declared (non-extra) requirements, as they apply to the GPU
    machine's Python (env). installed: canonical name -> importlib.metadata.Distribution.
    Returns ({added name: version}, [(missing name, required by)]): requirements neither in
    `skip` nor installed anywhere here are reported, not guessed."""
    from packaging.requirements import Requirement

    todo, seen = list(names), set(names) | set(skip)
    added, missing = {}, []
    while todo:
        dist = installed.get(todo.pop())
        if dist is None:
            continue
        for req in dist.requires or []:
            r = Requirement(req)
            if r.marker is not None and not r.marker.evaluate(env):
                continue
            name = canonical(r.name)
            if name in seen:
                continue
            seen.add(name)
            if name in installed:
                added[name] = installed[name].version
                todo.append(name)
            else:
                missing.append((name, canonical(dist.metadata["Name"])))
    return added, missing


def installed_distributions(extra_paths=()) -> dict:
    """canonical name -> Distribution for this venv and `extra_paths` (the probe site first)."""
    out = {}
    for d in metadata.distributions(path=[str(p) for p in extra_paths] + sys.path):
        out.setdefault(canonical(d.metadata["Name"]), d)
    return out


def carried_set(found: dict, extras, installed: dict) -> tuple[dict, dict]:
    """{name: version} to carry: what the probe imported and the extras, minus the GPU image's
    and this project's, closed over requirements. Second value: the report (closure additions,
    missing requirements, the audit's names not carried)."""
    extra_versions = dict(extras)
    base = {n: v for n, v in {**found["distributions"], **extra_versions}.items() if n not in GPU_HAS | NOT_CARRIED}
    added, missing = requirement_closure(sorted(base), installed)
    carry = dict(sorted({**base, **added}.items()))
    report = {"from_probe": sorted(n for n in found["distributions"] if n in carry),
              "from_extras": sorted(n for n in extra_versions if n in carry),
              "from_requirements": sorted(added), "requirements_not_installed_here": sorted(missing),
              "audit_not_carried": sorted(n for n in AUDIT_NEEDS if n not in carry),
              "carried_not_in_audit": sorted(n for n in carry if n not in AUDIT_NEEDS)}
    return carry, report


# -- sizes -------------------------------------------------------------------------------------
def working_tree_bytes(root: Path = ROOT) -> int:
    """Bytes of what a device call carries from the checkout: tracked files and untracked ones
    git does not ignore."""
    try:
        p = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                           capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BundleError(f"cannot list the working tree of {root} with git: {e}") from None
    if p.returncode != 0:
        raise BundleError(f"cannot list the working tree of {root} with git: {p.stderr.decode()[-500:]}")
    total = 0
    for name in p.stdout.decode().split("\0"):
        f = root / name
        if name and f.is_file():
            total += f.stat().st_size
    return total


def check_budget(archive_bytes: int, tree_bytes: int, budget: int = BUDGET) -> dict:
    """The carry arithmetic; raises BundleError when the archive and the tree exceed `budget`."""
    total = archive_bytes + tree_bytes
    out = {"archive_bytes": archive_bytes, "working_tree_bytes": tree_bytes, "carried_bytes": total,
           "budget_bytes": budget, "carry_limit_bytes": CARRY_LIMIT}
    if total > budget:
        raise BundleError(f"the archive ({archive_bytes / 2**20:.1f} MiB) and the working tree "
                          f"({tree_bytes / 2**20:.1f} MiB) make {total / 2**20:.1f} MiB, over the "
                          f"{budget / 2**20:.0f} MiB budget (a device call carries {CARRY_LIMIT / 2**20:.0f} MiB)")
    return out


# -- the archive -------------------------------------------------------------------------------
def write_archive(stage: Path, archive: Path) -> None:
    """stage/* into an .tar.xz, names sorted, owners and times normalized."""
    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        return info

    tmp = archive.with_name(archive.name + ".tmp")
    with tarfile.open(tmp, "w:xz") as tar:
        for top in sorted(p.name for p in stage.iterdir()):
            for path in [stage / top] + sorted((stage / top).rglob("*")):
                tar.add(path, arcname=str(path.relative_to(stage)), recursive=False, filter=clean)
    tmp.replace(archive)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def unpack(archive: Path, dest: Path) -> None:
    """Extract the archive into `dest` (replaced), refusing members outside it."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tarfile.open(archive, "r:xz") as tar:
        if sys.version_info >= (3, 12):
            tar.extractall(dest, filter="data")
        else:
            for m in tar.getmembers():
                if m.name.startswith("/") or ".." in Path(m.name).parts:
                    raise BundleError(f"{archive}: member {m.name!r} would land outside {dest}")
            tar.extractall(dest)


def prebuilt_kernel(stage: Path, log=print) -> str | None:
    """Copy the kernel library (every target arch; compiled here first if needed) into
    stage/kernel-cache; its folder name, or None without nvcc."""
    from .. import build

    try:
        lib = build.build()
    except build.BuildError as e:
        log(f"kernel: not prebuilt ({str(e).splitlines()[0]}); the GPU machine compiles it in `setup`")
        return None
    dest = stage / "kernel-cache" / lib.name
    shutil.copytree(lib, dest, ignore=shutil.ignore_patterns(".tmp-*"))
    return lib.name


def check_site(site: Path, carried=()) -> list[str]:
    """What a server would miss in an unpacked site/ (empty list: nothing): SGLang and its
    launcher, the stand-ins, the plugin's entry point, apache-tvm-ffi's headers, SGLang's JIT
    sources, a dist-info for every carried package; and no trimmed part left in."""
    site = Path(site)
    problems = [f"{rel} missing" for rel in ("sglang/__init__.py", "sglang/launch_server.py", "sglang/cli/main.py",
                                             "sgl_kernel/__init__.py", "sgl_kernel/_torch_ops.py",
                                             "flash_mla/__init__.py", "../server-only/flashinfer/sampling.py",
                                             "../server-only/flashinfer/data/include/flashinfer/sampling.cuh",
                                             "tvm_ffi/include")
                if not (site / rel).exists()]
    eps = list(site.glob("mla_verify-*.dist-info/entry_points.txt"))
    if not eps or "[sglang.srt.plugins]" not in eps[0].read_text():
        problems.append("no mla_verify dist-info with a [sglang.srt.plugins] entry point")
    if not any((site / "sglang" / "kernels" / "jit").rglob("*.cuh")):
        problems.append("sglang/kernels/jit has no .cuh sources (SGLang's JIT kernels would not build)")
    infos = {canonical(d.name.split("-")[0]) for d in site.glob("*.dist-info")}
    problems += [f"no dist-info for carried package {n}" for n in carried if canonical(n) not in infos]
    problems += [f"{rel} should have been trimmed" for rel in ("sglang/multimodal_gen", "sglang/test")
                 if (site / rel).exists()]
    return problems


# -- the build ---------------------------------------------------------------------------------
def build_bundle(dest: Path = DEFAULT_DIR, *, work: Path = WORK_DIR, python_version: str = db.GPU_PYTHON,
                 found: dict | None = None, extras: list | None = None, download=db._download,
                 kernel=prebuilt_kernel, tree_bytes: int | None = None, budget: int = BUDGET, log=print) -> dict:
    """Build dest/server-bundle.tar.xz and dest/BUNDLE.json; returns the manifest.

    found / extras / download / kernel / tree_bytes replace the probe, pip's resolution, pip's
    download, the kernel prebuild and the git listing (tests)."""
    dest, work = Path(dest), Path(work)
    t0 = time.monotonic()
    if metadata.version("sglang") != db.SGLANG:
        raise BundleError(f"this venv has sglang {metadata.version('sglang')}, the bundle carries {db.SGLANG}")
    probe_site = work / "probe-site"
    if extras is None:
        log(f"resolving what the server needs beyond this venv: {', '.join(SERVER_EXTRAS)}")
        extras = resolve_extras()
        install_probe_site(extras, probe_site)
    if found is None:
        log(f"probe: importing {len(SERVER_MODULES)} server modules with SGLang's CUDA import branches ...")
        found = run_probe(extra_paths=(probe_site,))
    carry, report = carried_set(found, extras, installed_distributions((probe_site,)))
    if report["audit_not_carried"]:
        raise BundleError(f"the audit's packages {report['audit_not_carried']} are not carried: the probe did not "
                          f"import them and nothing requires them (check SERVER_MODULES / SERVER_EXTRAS)")
    log(f"carrying {len(carry)} packages: " + ", ".join(f"{n}=={v}" for n, v in carry.items()))
    if report["requirements_not_installed_here"]:
        log(f"declared but not installed here (not carried): {report['requirements_not_installed_here']}")
    stage = work / "stage"
    if stage.exists():
        shutil.rmtree(stage)
    site = stage / "site"
    site.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        wheels = download([("sglang", db.SGLANG)] + list(carry.items()), Path(tmp), python_version)
        sizes = {"sglang": db._unpack(wheels[0], site, keep_sglang_file)}
        for name, wheel in zip(carry, wheels[1:]):
            sizes[name] = db._unpack(wheel, site, lambda p, n=name: keep_wheel_file(n, p))
    for pkg in STANDIN_PACKAGES:
        shutil.copytree(STANDINS / pkg, site / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for pkg in SERVER_ONLY_PACKAGES:
        shutil.copytree(SERVER_ONLY / pkg, stage / "server-only" / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    with tempfile.TemporaryDirectory() as tmp:
        wheel = download([FLASHINFER_WHEEL], Path(tmp), python_version)[0]
        sizes["flashinfer headers"] = db._unpack(wheel, stage / "server-only", lambda p: p.startswith(FLASHINFER_HEADERS))
    for rel in FLASHINFER_EMPTY:
        empty = stage / "server-only" / "flashinfer" / "data" / rel
        empty.mkdir(parents=True, exist_ok=True)
        (empty / "NOT-CARRIED").write_text("Carried empty by kernel/sglang/server_bundle.py: SGLang's JIT requires this "
                                          "folder to exist; the kernels the real server compiles include nothing from it.\n")
    dist_info = db.write_project_dist_info(site)
    problems = check_site(site, carry)
    if problems:
        raise BundleError(f"the staged site is incomplete: {problems}")
    kernel_dir = kernel(stage, log=log)
    unpacked = db.folder_size(stage)
    dest.mkdir(parents=True, exist_ok=True)
    archive = dest / ARCHIVE
    log(f"compressing {unpacked / 2**20:.1f} MiB into {archive} ...")
    write_archive(stage, archive)
    tree = working_tree_bytes() if tree_bytes is None else tree_bytes
    sizes_check = check_budget(archive.stat().st_size, tree, budget)
    manifest = {
        "kind": "sglang-server-bundle", "sglang": db.SGLANG, "python": python_version, "platforms": list(db.PLATFORMS),
        "archive": ARCHIVE, "sha256": sha256(archive), "unpacked_bytes": unpacked, **sizes_check,
        "carried": carry, "package_bytes": sizes, "selection": report, "standins": list(STANDIN_PACKAGES),
        "server_only": list(SERVER_ONLY_PACKAGES),
        "entry_points": (dist_info / "entry_points.txt").read_text(), "kernel_cache": kernel_dir,
        "layout": {"site": "PYTHONPATH", "kernel-cache": "MLA_VERIFY_CACHE",
                   "server-only": "PYTHONPATH of the real server only, with " + " ".join(f"{k}={v}" for k, v in STANDIN_ENV.items())},
        "probe": {"torch": found.get("torch"), "modules": found.get("modules"),
                  "sglang_modules": len(found.get("sglang_modules", []))},
        "gpu_has": "device_bundle.GPU_HAS (KINDS.md 2026-11-17)",
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "build_seconds": round(time.monotonic() - t0, 1),
    }
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1))
    log(f"{archive}: {sizes_check['archive_bytes'] / 2**20:.1f} MiB ({unpacked / 2**20:.1f} MiB unpacked); with the "
        f"working tree {sizes_check['carried_bytes'] / 2**20:.1f} MiB of the {CARRY_LIMIT / 2**20:.0f} MiB a device "
        f"call carries")
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest", nargs="?", default=str(DEFAULT_DIR), help="output folder (default .server-bundle)")
    ap.add_argument("--work", default=str(WORK_DIR), help="scratch folder: probe site, staged tree")
    ap.add_argument("--python-version", default=db.GPU_PYTHON, help="CPython of the GPU machine (default 3.12)")
    ap.add_argument("--probe", metavar="OUT_JSON", help=argparse.SUPPRESS)
    ap.add_argument("--modules", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.probe:
        probe(a.probe, tuple(a.modules.split(",")) if a.modules else SERVER_MODULES)
        return 0
    try:
        build_bundle(Path(a.dest), work=Path(a.work), python_version=a.python_version)
    except BundleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
