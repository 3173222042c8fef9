"""The CUDA sources compile for every target (sm_80/86/89/90/120) without a GPU, with no
register spills, no stack frame, and within sm_120's 99 KB of shared memory per block."""
import ctypes

import pytest

from kernel import build


@pytest.fixture(scope="module")
def lib_dir():
    return build.build(build.ARCHS)      # nvcc is on CI's machine: a missing nvcc fails here


def test_every_kernel_built_for_every_arch(lib_dir):
    got = {(r["kernel"], r["arch"]) for r in build.resources(lib_dir)}
    for k in ("mla_verify_kernel", "mla_verify_combine", "mma_ceiling_kernel"):
        for a in build.ARCHS:
            assert (k, f"sm_{a}") in got


def test_no_spills_no_stack(lib_dir):
    for r in build.resources(lib_dir):
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r
        assert r["stack"] == 0, r


def test_shared_memory_fits_sm120(lib_dir):
    lib = ctypes.CDLL(str(lib_dir / build.LIB))   # host-only entry points: no GPU needed
    dyn = lib.mla_verify_smem_bytes()
    static = max(r["smem_static"] for r in build.resources(lib_dir) if r["kernel"] == "mla_verify_kernel")
    assert 0 < dyn + static <= build.SMEM_LIMIT


def test_cached_by_source_hash(lib_dir):
    assert build.build(build.ARCHS) == lib_dir
    assert lib_dir.name.startswith(build.source_hash(build.ARCHS, build.find_nvcc()))


def test_ptxas_report_parser():
    log = ("ptxas info    : Compiling entry function '_ZN4mlav5small23mla_verify_kernel_smallILi4EEEvNS_6ParamsE' "
           "for 'sm_120'\n"
           "ptxas info    : Function properties for x\n"
           "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 255 registers, used 16 barriers, 128 bytes smem\n")
    (r,) = build.parse_ptxas(log)
    assert r == {"kernel": "mla_verify_kernel", "arch": "sm_120", "variant": "small_nt4", "stack": 8,
                 "spill_stores": 4, "spill_loads": 4, "registers": 255, "smem_static": 128}


def test_every_tier_is_compiled_for_every_arch(lib_dir):
    """Each tier instantiation and merge shows up by name in the resource report, per arch."""
    seen = {(r["variant"], r["arch"]) for r in build.resources(lib_dir)}
    want = ["rows64", "combine_r64", "combine_r32", "combine_r8"] + \
           [f"small_nt{nt}" for nt in (1, 2, 4)]
    missing = [(v, f"sm_{a}") for v in want for a in build.ARCHS if (v, f"sm_{a}") not in seen]
    assert not missing


def test_missing_nvcc_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("NVCC", "/nonexistent/nvcc")
    monkeypatch.setenv("CUDA_HOME", "/nonexistent")
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    with pytest.raises(build.BuildError, match="nvcc not found"):
        build.find_nvcc()
