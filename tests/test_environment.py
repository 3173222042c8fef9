"""pyproject.toml, environment.yml and the lock file agree on every direct pin."""
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _pins(lines):
    out = {}
    for line in lines:
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
        if m:
            out[m.group(1).lower().replace("_", "-")] = m.group(2)
    return out


def pyproject_pins():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return _pins(data["project"]["dependencies"])


def test_every_direct_dependency_is_pinned():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    deps = data["project"]["dependencies"]
    assert deps and all("==" in d for d in deps), [d for d in deps if "==" not in d]


def test_environment_yml_matches_pyproject():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert _pins(pip_section) == pyproject_pins()


def test_lock_holds_the_same_versions():
    lock = _pins((ROOT / "requirements" / "base.lock").read_text().splitlines())
    for name, ver in pyproject_pins().items():
        assert lock.get(name) == ver, f"{name}: pyproject {ver}, base.lock {lock.get(name)}"


def test_serve_extra_pins_sglang_like_the_cpu_lock():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    serve = _pins(data["project"]["optional-dependencies"]["serve"])
    cpu = _pins((ROOT / "requirements" / "sglang-cpu.lock").read_text().splitlines())
    assert serve["sglang"] == cpu["sglang"]
