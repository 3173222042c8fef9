"""The CUDA sources compile for every target (sm_80/86/89/90/120) without a GPU, with no
register spills, no stack frame, and within sm_120's 99 KB of shared memory per block; a
build is found again by source hash alone, so a prebuilt library loads without nvcc."""
import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernel import build


def test_every_kernel_built_for_every_arch(lib_dir):
    got = {(r["kernel"], r["arch"]) for r in build.resources(lib_dir)}
    assert {k for k, _ in got} == set(build.KERNELS)   # every kernel by its short name, none mangled
    for k in build.KERNELS:
        for a in build.ARCHS:
            assert (k, f"sm_{a}") in got


def test_no_spills_no_stack(lib_dir):
    for r in build.resources(lib_dir):
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r
        assert r["stack"] == 0, r


def test_every_tier_fits_sm120_shared_memory(lib_dir):
    lib = ctypes.CDLL(str(lib_dir / build.LIB))
    sizes = {t: lib.mla_verify_tier_smem_bytes(t) for t in (0, 1, 2, 4, 6, 8, 9)}
    fp8 = {t: lib.mla_verify_tier_smem_bytes_fp8(t) for t in (1, 2, 4, 6, 8)}
    assert all(0 < v <= build.SMEM_LIMIT for v in [*sizes.values(), *fp8.values()]), (sizes, fp8)
    assert max([*sizes.values(), *fp8.values()]) == lib.mla_verify_smem_bytes()
    assert lib.mla_verify_tier_smem_bytes(3) == -1
    assert lib.mla_verify_tier_smem_bytes_fp8(0) == -1   # rows64 has no fp8 copy
    assert lib.mla_verify_tier_smem_bytes_fp8(9) == -1   # nor rows64d_pair


def test_shared_memory_fits_sm120(lib_dir):
    lib = ctypes.CDLL(str(lib_dir / build.LIB))   # host-only entry points: no GPU needed
    dyn = lib.mla_verify_smem_bytes()
    static = max(r["smem_static"] for r in build.resources(lib_dir) if r["kernel"] == "mla_verify_kernel")
    assert 0 < dyn + static <= build.SMEM_LIMIT


def test_cached_by_source_hash(lib_dir):
    assert build.build(build.ARCHS) == lib_dir
    assert lib_dir.name == f"{build.source_hash(build.ARCHS)}-sm80_86_89_90_120"
    assert lib_dir.parent == build.cache_root()


ROOT = Path(__file__).resolve().parent.parent
LOAD = "from kernel import build; lib = build.load(); print(build.lib_dir(), lib.mla_verify_smem_bytes())"


def _env_without_nvcc(tmp_path, **extra):
    """The environment of a serving host without the CUDA toolkit: no nvcc on PATH, none
    under CUDA_HOME, no NVCC."""
    env = {k: v for k, v in os.environ.items() if k not in ("NVCC", "CUDA_HOME", "PATH")}
    env.update(PATH=str(tmp_path / "no-bin"), CUDA_HOME=str(tmp_path / "no-cuda"), PYTHONPATH=str(ROOT), **extra)
    return env


def test_prebuilt_library_loads_without_nvcc(lib_dir, tmp_path):
    # A serving image: the library prebuilt into a folder, no toolkit at all.
    image = tmp_path / "image-cache"
    shutil.copytree(lib_dir, image / lib_dir.name)
    r = subprocess.run([sys.executable, "-c", LOAD],
                       env=_env_without_nvcc(tmp_path, MLA_VERIFY_CACHE=str(image)),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    where, smem = r.stdout.split()
    assert Path(where) == image / lib_dir.name and int(smem) > 0


def test_missing_build_without_nvcc_fails_fast_naming_the_fix(tmp_path):
    r = subprocess.run([sys.executable, "-c", LOAD], env=_env_without_nvcc(tmp_path, MLA_VERIFY_CACHE=str(tmp_path / "empty")),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "BuildError: nvcc not found" in r.stderr, r.stderr[-2000:]


def test_default_cache_is_the_users_xdg_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("MLA_VERIFY_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert build.cache_root() == tmp_path / "mla-verify"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert build.cache_root() == Path.home() / ".cache" / "mla-verify"
    package = Path(build.__file__).resolve().parent.parent
    assert package not in build.cache_root().parents   # never inside the installed package
    monkeypatch.setenv("MLA_VERIFY_CACHE", str(tmp_path / "override"))
    assert build.cache_root() == tmp_path / "override"


def test_prebuild_into_a_folder_from_the_command_line(tmp_path):
    out = tmp_path / "prebuilt"
    r = subprocess.run([sys.executable, "-m", "kernel.build", "--arch", "90", "--cache-dir", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    built = out / f"{build.source_hash(['90'])}-sm90"
    assert Path(r.stdout.split()[-1]) == built / build.LIB and (built / "resources.json").is_file()
    assert {row["arch"] for row in build.resources(built)} == {"sm_90"}


def test_unwritable_cache_names_the_variable(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(build.BuildError, match="cannot write the kernel cache .* set MLA_VERIFY_CACHE"):
        build.build(["90"], root=blocker / "cache")


def test_bad_arch_is_named():
    with pytest.raises(ValueError, match="archs: expected compute capabilities"):
        build.lib_dir(["sm_90"])


def test_ptxas_report_parser():
    log = ("ptxas info    : Compiling entry function '_ZN4mlav5small23mla_verify_kernel_smallILi4EEEvNS_6ParamsE' "
           "for 'sm_120'\n"
           "ptxas info    : Function properties for x\n"
           "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 255 registers, used 16 barriers, 128 bytes smem\n")
    (r,) = build.parse_ptxas(log)
    assert r == {"kernel": "mla_verify_kernel", "arch": "sm_120", "variant": "small_nt4", "stack": 8,
                 "spill_stores": 4, "spill_loads": 4, "registers": 255, "smem_static": 128}
    assert build._variant("_ZN4mlav5rowsd23mla_verify_kernel_rowsdILi2ELi0EEEvNS_6ParamsE") == "rows64d"
    assert build._variant("_ZN4mlav5rowsd23mla_verify_kernel_rowsdILi1ELi1EEEvNS_6ParamsE") == "rows32d_diag"
    assert build._variant("_ZN4mlav5rowsd23mla_verify_kernel_rowsdILi2ELi2EEEvNS_6ParamsE") == "rows64d_math"
    assert build._variant("_ZN4mlav5rowsd23mla_verify_kernel_rowsdILi1ELi3EEEvNS_6ParamsE") == "rows32d_modes"
    assert build._variant("_ZN4mlav5rowsd27mla_verify_kernel_rowsd_fp8ILi2ELi0EEEvNS_6ParamsE") == "rows64d_fp8"
    assert build._variant("_ZN4mlav5rowsd27mla_verify_kernel_rowsd_fp8ILi1ELi2EEEvNS_6ParamsE") == "rows32d_math_fp8"
    assert build._variant("_ZN4mlav5rowsd27mla_verify_kernel_rowsd_fp8ILi2EEEvNS_6ParamsE") == "rows64d_fp8"   # before the kinds
    assert build._variant("_ZN4mlav6small824mla_verify_kernel_small8ILi1EEEvNS_6ParamsE") == "small_nt1_fp8"
    assert build._variant("_ZN4mlav6small824mla_verify_kernel_small8ILi4ELi0EEEvNS_6ParamsE") == "small_nt4_fp8"
    assert build._variant("_ZN4mlav6small824mla_verify_kernel_small8ILi2ELi3EEEvNS_6ParamsE") == "small_nt2_modes_fp8"
    assert build._variant("_ZN4mlav18mla_verify_combineILi32ELb0EEEvNS_6ParamsE") == "combine_r32"
    assert build._variant("_ZN4mlav8rowspair30mla_verify_kernel_rows64d_pairILi1EEEvNS_6ParamsE") == "rows64d_pair_diag"
    assert build._variant("_ZN4mlav18mla_verify_combineILi8ELb1EEEvNS_6ParamsE") == "combine_r8_few"
    # rows64d's tail kernels, <HALVES, KIND, TL = true>
    assert build._variant("_ZN4mlav5rowsd23mla_verify_kernel_rowsdILi2ELi0ELb1EEEvNS_6ParamsE") == "rows64d_tail"
    assert build._variant("_ZN4mlav5rowsd27mla_verify_kernel_rowsd_fp8ILi2ELi2ELb1EEEvNS_6ParamsE") == "rows64d_math_fp8_tail"
    assert build._variant("_ZN4mlav5rowsd23mla_verify_kernel_rowsdILi2ELi0ELb0EEEvNS_6ParamsE") == "rows64d"


def test_every_tier_is_compiled_for_every_arch(lib_dir):
    """Each tier instantiation and merge shows up by name in the resource report, per arch."""
    seen = {(r["variant"], r["arch"]) for r in build.resources(lib_dir)}
    want = ["rows64", "rows64d_pair", "rows64d_pair_diag"]
    want += [f"rows{r}d{k}" for r in (32, 64) for k in ("", "_diag", "_math", "_modes", "_fp8", "_math_fp8")]
    want += [f"small_nt{nt}{k}" for nt in (1, 2, 4) for k in ("", "_fp8", "_math_fp8", "_modes_fp8")]
    want += [f"combine_r{r}{k}" for r in (8, 16, 32, 64) for k in ("", "_few")]
    missing = [(v, f"sm_{a}") for v in want for a in build.ARCHS if (v, f"sm_{a}") not in seen]
    assert not missing


def test_missing_nvcc_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("NVCC", "/nonexistent/nvcc")
    monkeypatch.setenv("CUDA_HOME", "/nonexistent")
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    with pytest.raises(build.BuildError, match="nvcc not found"):
        build.find_nvcc()
