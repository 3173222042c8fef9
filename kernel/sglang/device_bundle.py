"""Build, on a CPU machine with the project's .venv, the folder that lets a GPU machine without
SGLang run SGLang's real attention backend (kernel/sglang/backend_check.py): put it on
PYTHONPATH there.

    python -m kernel.sglang.device_bundle [DIR]      # default .sglang-site/; `make sglang-bundle`

The GPU machine (the device tool's nvidia-h200 image, ../.library/device/KINDS.md) has
CPython 3.12, torch 2.11, triton 3.6, transformers 5.17 and many common packages, but no
SGLang, no sgl_kernel, and no network. The folder holds:
- SGLang 0.5.23's wheel for cp312, unpacked --no-deps: the modules the probe saw imported
  (and a few subtrees whole, WHOLE), not the rest (diffusion, tests, benchmarks, the Rust
  extensions, other models and hardware);
- the wheels of every package SGLang's import and the check's run pull in (measured by a
  probe, below) that the GPU image lacks, at this venv's versions, for cp312 manylinux x86_64;
- stand-ins for GPU-only imports (standins/: sgl_kernel; the check's path may call none of
  its functions, not even the torch versions the server bundle needs);
- a dist-info for this project, so SGLang's load_plugins() finds the mla_verify entry point
  (the code itself comes from the repository root, the working directory there);
- BUNDLE.json: what is in it and how big. The whole must stay under SIZE_LIMIT (a device
  call carries 64 MiB in all).
The probe runs, in a subprocess of this venv, what the GPU checks run (kernel.sglang.backend_check
and stage dcp-sim's kernel.sglang.dcp_sim, on tiny CPU cases), with torch told CUDA is present so
SGLang's CUDA-only import branches run, and the stand-ins on the path, and records every module
and distribution it imported, and any stand-in that was called (which would fail on the GPU: the
build refuses).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STANDINS = Path(__file__).resolve().parent / "standins"
DEFAULT_DIR = ROOT / ".sglang-site"
SGLANG = "0.5.23"
SIZE_LIMIT = 50 * 2 ** 20
GPU_PYTHON = "3.12"
PLATFORMS = ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64")

# Distributions on the GPU image ('cuda', read 2026-11-17; KINDS.md "Python packages already there").
GPU_HAS = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft
pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy
seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy
tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())
# Never carried: this project (from the checkout) and SGLang (unpacked separately).
NOT_CARRIED = frozenset({"mla-verify", "sglang"})
# sglang's Python is carried as the modules the probe imported, plus these subtrees whole:
# the ServerArgs resolution hooks and model configs import by argument and architecture.
WHOLE = ("sglang/srt/arg_groups/", "sglang/srt/configs/", "sglang/srt/plugins/", "sglang/srt/platforms/")
# Carried with every file: importing sglang.kernels.jit checks that its C++ sources are there.
WITH_DATA = ("sglang/kernels/jit/",)
# Parts of carried wheels no import reads: C sources and headers, vendored build systems, tests.
STRIPPED = re.compile(r"(^|/)(__pycache__|tests?|3rdparty|include|src|cmake)/|\.pyi$")


class BundleError(RuntimeError):
    pass


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# -- the probe (runs in a subprocess) ----------------------------------------------------
def _pretend_cuda() -> None:
    """Answer torch's CUDA queries as an H200 machine would, so SGLang takes its CUDA import
    branches (is_cuda() = torch.cuda.is_available() and torch.version.cuda); tensors stay on
    the CPU."""
    import types

    import torch

    props = types.SimpleNamespace(name="NVIDIA H200", multi_processor_count=132, major=9, minor=0,
                                  total_memory=140 << 30, L2_cache_size=60 << 20, gcnArchName="", uuid="probe")
    torch.version.cuda = "13.0"
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.get_device_name = lambda *a, **k: props.name
    torch.cuda.get_device_properties = lambda *a, **k: props
    torch.cuda.mem_get_info = lambda *a, **k: (130 << 30, 140 << 30)


def _cpu_torchvision_shim() -> None:
    # PyPI's torchvision registers fake kernels for ops only its CUDA build defines (see tests/conftest.py)
    import torch

    lib = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        try:
            lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        except RuntimeError:
            pass
    globals()["_TV_LIB"] = lib


def probe(out_path: str) -> None:
    """Run the GPU check's code on tiny CPU cases; write what it imported and called."""
    import types

    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    _cpu_torchvision_shim()
    _pretend_cuda()
    import torch

    from . import adapter, backend_check
    from .model_configs import write_kimi_k2

    def zeros(q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr, qo_indptr, sm_scale, *,
              out=None, lse_out=None, workspace=None, max_draft_len=None, with_lse=True):
        out.zero_()
        return out, lse_out
    adapter.use_ops(types.SimpleNamespace(get_workspace=lambda d: types.SimpleNamespace(max_bs=4096),
                                          verify_attention=zeros))
    model_dir = write_kimi_k2(tempfile.mkdtemp(prefix="mla-verify-probe-"), nextn_layers=1)
    backend_check.prepare(model_dir)
    for page in (1, 64):
        spec = backend_check.Spec(f"probe-p{page}", heads=8, draft=4, page=page, graph_bs=4, capture=(70, 3),
                                  replay=(40,), control=True, layers=2)
        backend_check.run_case(spec, model_dir, device="cpu", cuda_graph=False, timing=False)
    # the production cases' verify inputs (spec_inputs imports DFLASH's from SGLang only when asked)
    for algo, budget in (("DFLASH", None), ("DDTREE", 8)):
        spec = backend_check.Spec(f"probe-{algo.lower()}", heads=8, draft=4, page=1, graph_bs=2, capture=(40, 9),
                                  replay=(30,), control=True, layers=2, algorithm=algo, budget=budget)
        backend_check.run_case(spec, model_dir, device="cpu", cuda_graph=False, timing=False)
    backend_check.adaptive_scratch(model_dir, device="cpu", cuda_graph=False)
    # stage dcp-sim: SGLang's DCP sharding helpers (timing and the float64 oracle need no SGLang)
    from . import dcp_sim

    dcp_sim.run(S=64, T=4, heads_per_rank=2, ranks=(2,), device="cpu", ops=adapter.ops(), timing=False,
                oracle=False, log=lambda m: None)
    import sgl_kernel
    import sglang
    import triton

    tops = {m.split(".")[0] for m in list(sys.modules)}
    owners = metadata.packages_distributions()
    dists = {}
    for top in sorted(tops):
        for d in owners.get(top, []):
            dists[canonical(d)] = metadata.version(d)
    json.dump({"sglang_modules": sorted(m for m in sys.modules if m == "sglang" or m.startswith("sglang.")),
               "distributions": dists, "standins_called": sorted(set(sgl_kernel.called)),
               "standins_ran": sorted(sgl_kernel.ran),
               "torch": torch.__version__, "triton": triton.__version__, "sglang_file": sglang.__file__},
              open(out_path, "w"), indent=1)


def run_probe(python: str = sys.executable, path=(STANDINS, ROOT)) -> dict:
    """The probe in a subprocess of `python` with PYTHONPATH=`path`; its findings."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "probe.json")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in path), SGLANG_PLUGINS="")
        env.pop("MLA_VERIFY_BACKEND", None)
        p = subprocess.run([python, "-m", "kernel.sglang.device_bundle", "--probe", out], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0 or not os.path.exists(out):
            raise BundleError(f"the probe failed (exit {p.returncode}):\n{p.stderr[-4000:]}")
        result = json.load(open(out))
    if result["standins_called"]:
        raise BundleError(f"the GPU check's path calls sgl_kernel functions the stand-in cannot provide: "
                          f"{result['standins_called']}")
    if result.get("standins_ran"):
        # the torch versions exist for the real server; the backend check must measure SGLang's own kernels
        raise BundleError(f"the GPU check's path runs sgl_kernel's torch stand-ins: {result['standins_ran']}")
    return result


# -- building the folder -------------------------------------------------------------------
def module_files(modules) -> set[str]:
    """Wheel paths (sglang/...) of the imported modules and of every package above them."""
    out = set()
    for m in modules:
        parts = m.split(".")
        for i in range(1, len(parts)):
            out.add("/".join(parts[:i]) + "/__init__.py")
        out.add("/".join(parts) + ".py")
        out.add("/".join(parts) + "/__init__.py")
    return out


def keep_sglang_file(path: str, imported: set[str]) -> bool:
    """Whether a file of the sglang wheel goes into the bundle."""
    if ".dist-info/" in path:
        return path.endswith(("/METADATA", "/entry_points.txt", "/top_level.txt", "/WHEEL"))
    if not path.startswith("sglang/") or "/__pycache__/" in path:
        return False
    return path in imported or path.startswith(WITH_DATA) or (path.endswith(".py") and path.startswith(WHOLE))


def keep_carried_file(path: str) -> bool:
    """Whether a file of a carried (non-sglang) wheel goes into the bundle."""
    return not STRIPPED.search(path)


def _download(names_versions, dest: Path, python_version: str) -> list[Path]:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
           python_version, "--implementation", "cp", *[a for p in PLATFORMS for a in ("--platform", p)],
           "-d", str(dest), *[f"{n}=={v}" for n, v in names_versions], "-q", "--disable-pip-version-check"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if p.returncode != 0:
        raise BundleError(f"pip download failed for {names_versions}:\n{p.stderr[-3000:]}")
    wheels = {}
    for w in dest.glob("*.whl"):
        wheels[canonical(w.name.split("-")[0])] = w
    missing = [n for n, _ in names_versions if canonical(n) not in wheels]
    if missing:
        raise BundleError(f"no wheel downloaded for {missing}")
    return [wheels[canonical(n)] for n, _ in names_versions]


def _unpack(wheel: Path, dest: Path, keep) -> int:
    n = 0
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if info.is_dir() or not keep(info.filename):
                continue
            z.extract(info, dest)
            n += info.file_size
    return n


def write_project_dist_info(dest: Path) -> Path:
    """mla_verify's dist-info with the entry point only (no files: the code is the checkout)."""
    from tomllib import loads

    project = loads((ROOT / "pyproject.toml").read_text())["project"]
    d = dest / f"mla_verify-{project['version']}.dist-info"
    d.mkdir(parents=True, exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    eps = project["entry-points"]
    (d / "entry_points.txt").write_text("".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in items.items())
                                                for group, items in eps.items()))
    return d


def folder_size(d: Path) -> int:
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file())


def build_bundle(dest: Path = DEFAULT_DIR, *, python_version: str = GPU_PYTHON, probe_result: dict | None = None,
                 log=print) -> dict:
    """Build the folder at `dest` (replacing it); returns the manifest (also BUNDLE.json)."""
    dest = Path(dest)
    if metadata.version("sglang") != SGLANG:
        raise BundleError(f"this venv has sglang {metadata.version('sglang')}, the bundle carries {SGLANG}")
    log("probe: running the GPU check's code on the CPU with CUDA import branches ...")
    found = probe_result or run_probe()
    carry = sorted((n, v) for n, v in found["distributions"].items()
                   if n not in GPU_HAS and n not in NOT_CARRIED)
    log(f"probe: {len(found['sglang_modules'])} sglang modules; carrying {len(carry)} packages: "
        + ", ".join(f"{n}=={v}" for n, v in carry))
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        wheels = _download([("sglang", SGLANG)] + carry, Path(tmp), python_version)
        imported = module_files(found["sglang_modules"])
        sizes = {"sglang": _unpack(wheels[0], dest, lambda p: keep_sglang_file(p, imported))}
        for (name, _), wheel in zip(carry, wheels[1:]):
            sizes[name] = _unpack(wheel, dest, keep_carried_file)
    shutil.copytree(STANDINS / "sgl_kernel", dest / "sgl_kernel", ignore=shutil.ignore_patterns("__pycache__"))
    write_project_dist_info(dest)
    total = folder_size(dest)
    manifest = {"sglang": SGLANG, "python": python_version, "platforms": list(PLATFORMS),
                "carried": {n: v for n, v in carry}, "unpacked_bytes": sizes, "total_bytes": total,
                "standins": ["sgl_kernel"], "probe_torch": found["torch"], "probe_triton": found["triton"],
                "gpu_has": "KINDS.md 2026-11-17"}
    (dest / "BUNDLE.json").write_text(json.dumps(manifest, indent=1))
    if total > SIZE_LIMIT:
        biggest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
        raise BundleError(f"{dest}: {total / 2**20:.1f} MiB exceeds {SIZE_LIMIT / 2**20:.0f} MiB; biggest: {biggest}")
    log(f"{dest}: {total / 2**20:.1f} MiB ({len(list(dest.rglob('*.py')))} .py files)")
    if python_version == f"{sys.version_info.major}.{sys.version_info.minor}":
        # this interpreter can import the bundle: the probe again, SGLang now from the folder
        again = run_probe(path=(dest, ROOT))
        if Path(again["sglang_file"]).resolve().parent.parent != dest.resolve():
            raise BundleError(f"the check imported sglang from {again['sglang_file']}, not from {dest}")
        manifest["verified_with"] = f"probe on python {python_version}, sglang from the folder"
        (dest / "BUNDLE.json").write_text(json.dumps(manifest, indent=1))
        log(f"{dest}: the probe ran with SGLang from the folder")
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest", nargs="?", default=str(DEFAULT_DIR), help="the folder to build (default .sglang-site)")
    ap.add_argument("--python-version", default=GPU_PYTHON, help="CPython of the GPU machine (default 3.12)")
    ap.add_argument("--probe", metavar="OUT_JSON", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.probe:
        probe(a.probe)
        return 0
    try:
        build_bundle(Path(a.dest), python_version=a.python_version)
    except BundleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
