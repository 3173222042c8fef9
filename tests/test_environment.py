"""pyproject.toml, environment.yml and the lock files agree, and the `serve` extra can be
installed together with SGLang: every direct dependency's specifier leaves room for the
version SGLang's own installed metadata (importlib.metadata of the sglang in this venv)
requires, on the GPU host's platform."""
import importlib.metadata
import re
import tomllib
from pathlib import Path

import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# The GPU serving host: Linux x86-64, CPython 3.12 (markers of sglang's requirements).
GPU_HOST = dict(default_environment(), sys_platform="linux", platform_system="Linux", platform_machine="x86_64",
                python_version="3.12", python_full_version="3.12.3", implementation_name="cpython")


def _requirements(lines) -> dict[str, Requirement]:
    out = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            r = Requirement(line)
            out[canonicalize_name(r.name)] = r
    return out


def _lock(name) -> dict[str, Version]:
    reqs = _requirements((ROOT / "requirements" / name).read_text().splitlines())
    return {n: Version(str(r.specifier).removeprefix("==")) for n, r in reqs.items()}


DIRECT = _requirements(PYPROJECT["project"]["dependencies"])
SERVE = _requirements(PYPROJECT["project"]["optional-dependencies"]["serve"])


def _compatible(a: SpecifierSet, b: SpecifierSet, hints) -> Version | None:
    """A version both specifier sets admit, tried among the versions either one names
    (its bounds and pins) and `hints`; None when there is none."""
    named = {Version(s.version.removesuffix(".*")) for spec in (a, b) for s in spec if s.version}
    for v in sorted(named | set(hints), reverse=True):
        if a.contains(v, prereleases=True) and b.contains(v, prereleases=True):
            return v
    return None


def test_every_direct_dependency_is_bounded_and_the_lock_satisfies_it():
    base = _lock("base.lock")
    for name, req in DIRECT.items():
        ops = {s.operator for s in req.specifier}
        assert ops & {">=", ">", "=="} and ops & {"<", "<=", "=="}, f"{req}: needs a lower and an upper bound"
        assert name in base, f"{name}: not pinned in requirements/base.lock"
        assert req.specifier.contains(base[name]), f"{req}: base.lock pins {base[name]}"


def test_environment_yml_lists_the_same_specifiers():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert {n: str(r.specifier) for n, r in _requirements(pip_section).items()} == \
        {n: str(r.specifier) for n, r in DIRECT.items()}


def test_serve_extra_is_the_installed_and_locked_sglang():
    installed = Version(importlib.metadata.version("sglang"))
    assert SERVE["sglang"].specifier.contains(installed), (SERVE["sglang"], installed)
    assert _lock("sglang-cpu.lock")["sglang"] == installed


def _sglang_requirements() -> dict[str, Requirement]:
    out = {}
    for line in importlib.metadata.requires("sglang") or []:
        r = Requirement(line)
        if r.marker is None or r.marker.evaluate(dict(GPU_HOST, extra="")):
            out[canonicalize_name(r.name)] = r
    return out


def test_every_direct_dependency_leaves_room_for_sglangs_requirement():
    theirs = _sglang_requirements()
    shared = sorted(set(DIRECT) & set(theirs))
    # the check is not vacuous: sglang's metadata was read and names some of ours
    assert {"torch", "numpy", "requests", "tqdm"} <= set(shared), shared
    base = _lock("base.lock")
    conflicts = [f"pyproject's {DIRECT[n]} vs sglang's {theirs[n]}" for n in shared
                 if _compatible(DIRECT[n].specifier, theirs[n].specifier, [base[n]]) is None]
    assert not conflicts, "`pip install '.[serve]'` cannot resolve: " + "; ".join(conflicts)


def test_python_requirement_admits_sglangs():
    ours = SpecifierSet(PYPROJECT["project"]["requires-python"])
    theirs = SpecifierSet(importlib.metadata.metadata("sglang")["Requires-Python"] or "")
    assert _compatible(ours, theirs, [Version("3.11"), Version("3.12")]) is not None
    # the project's own floor must not admit a Python that sglang refuses (pip would fail late)
    assert not ours.contains("3.10") or theirs.contains("3.10"), (ours, theirs)


def test_compatibility_check_can_fail():
    assert _compatible(SpecifierSet("==2.13.0"), SpecifierSet("==2.14.1"), [Version("2.13.0")]) is None
    assert _compatible(SpecifierSet(">=2.11,<2.15"), SpecifierSet("==2.14.1"), []) == Version("2.14.1")
    assert _compatible(SpecifierSet(">=1.0"), SpecifierSet(""), [Version("1.2")]) == Version("1.2")


def test_lock_names_are_unique_across_the_two_locks():
    # make venv installs both with --no-deps: a package in both would be installed twice
    base, cpu = _lock("base.lock"), _lock("sglang-cpu.lock")
    both = {n for n in set(base) & set(cpu) if base[n] != cpu[n]}
    assert not both, {n: (str(base[n]), str(cpu[n])) for n in both}


def test_pins_are_plain():
    for name in ("base.lock", "sglang-cpu.lock"):
        for line in (ROOT / "requirements" / name).read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[^\s;]+", line.strip()), f"{name}: {line!r}"
