"""The server bundle (kernel/sglang/server_bundle.py): what it keeps of SGLang's wheel and of the
carried wheels, how it picks the packages (probe + extras, minus the GPU image's, closed over
requirements), the carry budget, the archive and its manifest (a whole build with pip's
download replaced by fake wheels), the completeness check, and the probe itself."""
import importlib.metadata
import json
import tarfile
import zipfile

import pytest

from kernel.sglang import device_bundle as db
from kernel.sglang import server_bundle as sb


def test_sglang_trim():
    keep = sb.keep_sglang_file
    for kept in ("sglang/launch_server.py", "sglang/cli/main.py", "sglang/srt/models/deepseek_v2.py",
                 "sglang/kernels/jit/csrc/elementwise/rmsnorm.cuh", "sglang/srt/rust_extensions/__init__.py",
                 "sglang/srt/mem_cache/rust_tree_core/mem_cache.cpython-312-x86_64-linux-gnu.so",
                 "sglang-0.5.23.dist-info/METADATA", "sglang-0.5.23.dist-info/entry_points.txt"):
        assert keep(kept), kept
    for dropped in ("sglang/multimodal_gen/runtime/pipelines/x.py", "sglang/test/kits/a.py",
                    "sglang/benchmark/serving.py", "sglang/srt/rust_extensions/_server.cpython-312-x86_64-linux-gnu.so",
                    "sglang/srt/rust_extensions/_bench.cpython-312-x86_64-linux-gnu.so",
                    "sglang/srt/rust_extensions/_grpc.cpython-312-x86_64-linux-gnu.so",
                    "sglang/srt/rust_extensions/_multimodal.cpython-312-x86_64-linux-gnu.so",
                    "sglang/srt/__pycache__/environ.cpython-312.pyc", "sglang-0.5.23.dist-info/RECORD", "other/x.py"):
        assert not keep(dropped), dropped


def test_tvm_ffi_keeps_its_headers_other_wheels_do_not():
    for path in ("tvm_ffi/include/tvm/ffi/c_api.h", "tvm_ffi/3rdparty/dlpack/include/dlpack/dlpack.h",
                 "tvm_ffi/lib/libtvm_ffi.so"):
        assert sb.keep_wheel_file("apache-tvm-ffi", path) and sb.keep_wheel_file("apache_tvm_ffi", path)
        assert not db.keep_carried_file(path) or path.endswith(".so")
    assert not sb.keep_wheel_file("apache-tvm-ffi", "tvm_ffi/__pycache__/core.cpython-312.pyc")
    assert not sb.keep_wheel_file("pydantic", "pydantic/include/x.h")


def test_requirement_closure_follows_installed_metadata_and_skips_the_gpu_image():
    installed = sb.installed_distributions()
    if "pydantic" not in installed:
        pytest.skip("pydantic is not installed in this venv")
    added, missing = sb.requirement_closure(["pydantic"], installed)
    assert "pydantic-core" in added and added["pydantic-core"] == installed["pydantic-core"].version
    assert "typing-extensions" not in added          # on the GPU image
    # a requirement that nothing here provides is reported, never guessed
    fake = {"x": type("D", (), {"requires": ["not-a-real-package-xyz>=1"], "metadata": {"Name": "x"}})()}
    assert sb.requirement_closure(["x"], fake) == ({}, [("not-a-real-package-xyz", "x")])


def test_carried_set_drops_the_gpu_images_and_reports_the_audit():
    found = {"distributions": {n: "1" for n in sb.AUDIT_NEEDS} | {"torch": "2", "uvloop": "1", "sglang": "0.5.23",
                                                                  "mla-verify": "0.1.0"}}
    carry, report = sb.carried_set(found, [("fastapi", "0.1")], installed={})
    assert set(sb.AUDIT_NEEDS) <= set(carry) and carry["fastapi"] == "0.1"
    assert not {"torch", "uvloop", "sglang", "mla-verify"} & set(carry)
    assert report["audit_not_carried"] == []
    carry, report = sb.carried_set({"distributions": {"fastapi": "1"}}, [], installed={})
    assert "xgrammar" in report["audit_not_carried"]


def test_budget():
    ok = sb.check_budget(20 << 20, 15 << 20)
    assert ok["carried_bytes"] == 35 << 20 and ok["carry_limit_bytes"] == 64 << 20
    with pytest.raises(db.BundleError, match="over the 60 MiB budget"):
        sb.check_budget(30 << 20, 31 << 20)


def _wheel(path, files: dict):
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


SGLANG_FILES = {
    "sglang/__init__.py": "", "sglang/launch_server.py": "", "sglang/cli/main.py": "",
    "sglang/kernels/jit/csrc/elementwise/rmsnorm.cuh": "// jit source",
    "sglang/multimodal_gen/runtime/big.py": "x" * 1000, "sglang/test/t.py": "", "sglang/benchmark/b.py": "",
    "sglang/srt/rust_extensions/__init__.py": "", "sglang/srt/rust_extensions/_server.cpython-312-x86_64-linux-gnu.so": "so",
    "sglang/srt/__pycache__/a.cpython-312.pyc": "", "sglang-0.5.23.dist-info/METADATA": "Name: sglang\nVersion: 0.5.23\n",
    "sglang-0.5.23.dist-info/RECORD": "", "sglang-0.5.23.dist-info/entry_points.txt": "[console_scripts]\n",
}


def fake_download(names_versions, dest, python_version):
    """pip download --no-deps, for tests: a small wheel per package."""
    out = []
    for name, version in names_versions:
        mod = name.replace("-", "_")
        files = {f"{mod}-{version}.dist-info/METADATA": f"Name: {name}\nVersion: {version}\n",
                 f"{mod}/__init__.py": "", f"{mod}/tests/test_x.py": "", f"{mod}/include/x.h": ""}
        if name == "sglang":
            files = SGLANG_FILES
        elif name == "flashinfer-python":
            files = {"flashinfer_python-0.7.2.dist-info/METADATA": "Name: flashinfer-python\n", "flashinfer/__init__.py": "",
                     "flashinfer/data/include/flashinfer/sampling.cuh": "// header", "flashinfer/data/csrc/big.cu": ""}
        elif name == "apache-tvm-ffi":
            files = {"apache_tvm_ffi-0.1.11.dist-info/METADATA": "Name: apache-tvm-ffi\n", "tvm_ffi/__init__.py": "",
                     "tvm_ffi/include/tvm/ffi/c_api.h": "// header", "tvm_ffi/3rdparty/dlpack/include/dlpack.h": ""}
        out.append(_wheel(dest / f"{mod}-{version}-py3-none-any.whl", files))
    return out


def fake_kernel(stage, log=print):
    d = stage / "kernel-cache" / "abc-sm90"
    d.mkdir(parents=True)
    (d / "libmla_verify.so").write_bytes(b"\0" * 10)
    return d.name


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("server-bundle")
    found = {"distributions": {n: "1.0" for n in sb.AUDIT_NEEDS} | {"torch": "2.13", "uvloop": "0.2"},
             "torch": "2.13", "modules": ["sglang.launch_server"], "sglang_modules": ["sglang"]}
    manifest = sb.build_bundle(tmp / "out", work=tmp / "work", found=found, extras=[("fastapi", "1.0")],
                               download=fake_download, kernel=fake_kernel, tree_bytes=1000, log=lambda m: None)
    with tarfile.open(tmp / "out" / sb.ARCHIVE) as tar:
        names = set(tar.getnames())
    return tmp, manifest, names


def test_build_writes_the_archive_and_its_manifest(built):
    tmp, manifest, names = built
    on_disk = json.loads((tmp / "out" / sb.MANIFEST).read_text())
    assert on_disk == manifest
    assert manifest["sha256"] == sb.sha256(tmp / "out" / sb.ARCHIVE)
    assert manifest["archive_bytes"] == (tmp / "out" / sb.ARCHIVE).stat().st_size
    assert manifest["carried_bytes"] == manifest["archive_bytes"] + 1000
    assert manifest["kernel_cache"] == "abc-sm90" and manifest["sglang"] == "0.5.23"
    assert set(sb.AUDIT_NEEDS) <= set(manifest["carried"]) and "torch" not in manifest["carried"]
    assert "[sglang.srt.plugins]" in manifest["entry_points"]


def test_archive_holds_what_the_server_needs_and_nothing_trimmed(built):
    _, _, names = built
    for need in ("site/sglang/launch_server.py", "site/sglang/kernels/jit/csrc/elementwise/rmsnorm.cuh",
                 "site/sglang-0.5.23.dist-info/METADATA", "site/tvm_ffi/include/tvm/ffi/c_api.h",
                 "site/sgl_kernel/__init__.py", "site/sgl_kernel/_torch_ops.py", "site/flash_mla/__init__.py",
                 "server-only/flashinfer/sampling.py", "server-only/flashinfer/data/include/flashinfer/sampling.cuh",
                 "server-only/flashinfer/data/spdlog/include/NOT-CARRIED", "site/mla_verify-0.1.0.dist-info/entry_points.txt", "site/fastapi/__init__.py",
                 "kernel-cache/abc-sm90/libmla_verify.so"):
        assert need in names, need
    for gone in ("site/sglang/multimodal_gen/runtime/big.py", "site/sglang/test/t.py",
                 "site/sglang/srt/rust_extensions/_server.cpython-312-x86_64-linux-gnu.so",
                 "site/sglang-0.5.23.dist-info/RECORD", "site/fastapi/tests/test_x.py", "site/fastapi/include/x.h",
                 "server-only/flashinfer/data/csrc/big.cu"):
        assert gone not in names, gone
    assert not any("__pycache__" in n for n in names)


def test_unpack_and_check_site(built, tmp_path):
    tmp, manifest, _ = built
    sb.unpack(tmp / "out" / sb.ARCHIVE, tmp_path / "b")
    site = tmp_path / "b" / "site"
    assert sb.check_site(site, manifest["carried"]) == []
    (site / "flash_mla" / "__init__.py").unlink()
    (site.parent / "server-only" / "flashinfer" / "sampling.py").unlink()
    (site / "sglang" / "multimodal_gen").mkdir()
    problems = sb.check_site(site, [*manifest["carried"], "not-carried-pkg"])
    assert "flash_mla/__init__.py missing" in problems and "../server-only/flashinfer/sampling.py missing" in problems
    assert "no dist-info for carried package not-carried-pkg" in problems
    assert "sglang/multimodal_gen should have been trimmed" in problems
    eps = {(e.group, e.name) for d in importlib.metadata.distributions(path=[str(site)]) for e in d.entry_points}
    assert ("sglang.srt.plugins", "mla_verify") in eps


def test_build_refuses_a_bundle_over_budget(tmp_path):
    found = {"distributions": {n: "1.0" for n in sb.AUDIT_NEEDS}, "torch": "x"}
    with pytest.raises(db.BundleError, match="budget"):
        sb.build_bundle(tmp_path / "out", work=tmp_path / "work", found=found, extras=[], download=fake_download,
                        kernel=fake_kernel, tree_bytes=sb.BUDGET, log=lambda m: None)


def test_probe_imports_with_cuda_branches_and_names_what_fails():
    found = sb.run_probe(modules=("sglang.srt.layers.attention.triton_backend", "sglang.srt.no_such_module"),
                         check=False)
    assert "sglang.srt.layers.attention.triton_backend" in found["sglang_modules"]
    assert found["standins_called"] == [] and found["standins_ran"] == []
    assert "torch" in found["distributions"] and "sglang" in found["distributions"]
    assert list(found["errors"]) == ["sglang.srt.no_such_module"]
    with pytest.raises(db.BundleError, match="sglang.srt.no_such_module: ModuleNotFoundError"):
        sb.check_probe(found)
    found["errors"] = {}
    assert sb.check_probe(found) is found
