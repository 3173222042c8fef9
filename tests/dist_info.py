"""Distribution metadata written into a temp folder, for subprocesses that must see entry points
the installed metadata does not have: this checkout's own `sglang.srt.plugins` entry point (an
editable install keeps the entry points of the pyproject.toml it was installed from), or a
test-only SGLang plugin. Put the folder first on the subprocess's PYTHONPATH: importlib.metadata
keeps the first distribution of a name on sys.path, so it shadows the installed one."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def project_entry_points() -> dict[str, dict[str, str]]:
    """{group: {name: "module:attr"}} of pyproject.toml's [project.entry-points] and scripts."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {g: dict(eps) for g, eps in project.get("entry-points", {}).items()}
    if project.get("scripts"):
        groups["console_scripts"] = dict(project["scripts"])
    return groups


def write_dist_info(site: Path, name: str, entry_points: dict[str, dict[str, str]], version: str = "0.1.0") -> Path:
    """site/<name>-<version>.dist-info with METADATA and entry_points.txt; returns the folder."""
    folder = Path(site) / f"{name.replace('-', '_')}-{version}.dist-info"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (folder / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n" for group, eps in entry_points.items()))
    return folder


def write_this_checkout(site: Path) -> Path:
    """The mla-verify distribution as this checkout's pyproject.toml declares it."""
    return write_dist_info(site, "mla-verify", project_entry_points())
