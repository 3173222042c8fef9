"""Run phase notebooks: jupytext percent script -> build/notebooks/*.ipynb -> papermill (kernel
python3, per-cell timeout, progress bar) -> reports/<name>.html without input cells -> index.

    python -m notebooks.run phase2 --measure auto   # what `make phase2` runs
    python -m notebooks.run 00_baseline -p smoke true -p data_dir /tmp/fixture
    python -m notebooks.run all                      # every phase, then the index

Exit status 0 on success, 1 on any failure, with one error line that names the notebook, the
cell and the exception (papermill only logs unknown parameters; this runner refuses them).
"""
from __future__ import annotations

import argparse
import ast
import html
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import yaml

from . import data, index

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
# Which measurement kinds each notebook reads; checked before a kernel starts so a fresh clone
# without data gets one clear line instead of a traceback.
NEEDS = {
    "00_baseline": ("bench",),
    "01_flash_decode": ("bench",),
    "02_paged_bf16": ("validation", "bench", "sglang-integration"),
    "03_canary_ab": ("bench", "sglang-integration"),  # only when it starts emulators
}
PHASES = {f"phase{i}": name for i, name in enumerate(NEEDS)}
# Reports that show kernel.gpu_run's numbers, and so say "measured anew" after it ran.
SHOWS_MEASUREMENTS = ("00_baseline", "01_flash_decode", "02_paged_bf16")
META = "mla-verify-report"


class RunError(RuntimeError):
    """A run cannot go on; str() is the one line the user sees."""


def to_ipynb(src: Path, build_dir: Path) -> Path:
    """Convert a jupytext percent script into build_dir/<stem>.ipynb with kernelspec python3."""
    import jupytext

    if not src.is_file():
        raise RunError(f"notebook: no such file: {str(src)!r}")
    nb = jupytext.read(src)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    build_dir.mkdir(parents=True, exist_ok=True)
    out = build_dir / f"{src.stem}.ipynb"
    jupytext.write(nb, out)
    return out


def check_literal_parameters(ipynb: Path) -> set[str]:
    """The 'parameters' cell must hold plain literal assignments: papermill never recomputes
    derived values there, so `b = a * 2` would silently keep its default. Returns the names."""
    import nbformat

    nb = nbformat.read(ipynb, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    if not cells:
        raise RunError(f"{ipynb.stem}: no cell tagged 'parameters'")
    names: set[str] = set()
    for node in ast.parse(cells[0].source).body:
        target = getattr(node, "targets", [getattr(node, "target", None)])
        ok = (isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
              and all(isinstance(t, ast.Name) for t in target))
        if ok:
            try:
                ast.literal_eval(node.value)
            except ValueError:
                ok = False
        if not ok:
            raise RunError(f"{ipynb.stem}: parameters cell line {node.lineno} is not "
                           f"`name = literal`: {ast.unparse(node)!r}")
        names.update(t.id for t in target)
    return names


def check_parameters(ipynb: Path, params: dict, names: set[str]) -> dict:
    """Every passed name must be declared in the notebook's parameters cell; returns them.

    names: the cell's assignments as Python parses them; papermill's own parser skips lines
    it cannot read (e.g. a comment holding '='), which would make a parameter unsettable.
    """
    import papermill

    declared = papermill.inspect_notebook(str(ipynb))
    unseen = sorted(names - set(declared))
    if unseen:
        raise RunError(f"{ipynb.stem}: papermill cannot parse the parameters line(s) of "
                       f"{', '.join(map(repr, unseen))}: it skips a line whose comment holds '='")
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise RunError(f"{ipynb.stem}: unknown parameter(s) {', '.join(map(repr, unknown))}; "
                       f"the notebook declares: {', '.join(sorted(declared))}")
    return declared


def execute(ipynb: Path, out: Path, params: dict, timeout: float, progress: bool = True) -> None:
    """papermill with kernel python3 and cwd = repo root; a failing cell becomes a RunError
    naming the cell index, the exception and the partially executed notebook."""
    import papermill

    # The kernel inherits our environment; ROOT first so `import notebooks` finds this checkout.
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([saved] if saved else []))
    try:
        papermill.execute_notebook(str(ipynb), str(out), parameters=params, kernel_name="python3",
                                   cwd=str(ROOT), progress_bar=progress, start_timeout=120,
                                   execution_timeout=timeout)
    except papermill.PapermillExecutionError as e:
        raise RunError(f"{ipynb.stem}: cell {e.cell_index} (execution count {e.exec_count}) "
                       f"raised {e.ename}: {e.evalue}\n  partially executed notebook: {out}"
                       ) from None
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def render(executed: Path, html_path: Path, record: dict) -> None:
    """HTML without input cells or prompts; the record rides along as a <meta> for the index."""
    import nbformat
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    cfg = Config()
    cfg.TagRemovePreprocessor.remove_cell_tags = ["parameters", "injected-parameters"]
    # cells tagged remove-output keep their console progress out of the report
    cfg.TagRemovePreprocessor.remove_all_outputs_tags = ["remove-output"]
    exporter = HTMLExporter(config=cfg, exclude_input=True, exclude_input_prompt=True,
                            exclude_output_prompt=True)
    nb = nbformat.read(executed, as_version=4)
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": record["title"]}})
    meta = f'<meta name="{META}" content="{html.escape(json.dumps(record), quote=True)}">'
    body = body.replace("<head>", "<head>\n" + meta, 1)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(body)


def run_notebook(src: Path, params: dict, *, reports_dir: Path, build_dir: Path,
                 timeout: float = 1800, progress: bool = True) -> Path:
    """One notebook end to end; returns the HTML path. Raises RunError on any failure."""
    ipynb = to_ipynb(src, build_dir)
    declared = check_parameters(ipynb, params, check_literal_parameters(ipynb))
    params = dict(params)
    record_path = build_dir / f"{src.stem}.record.json"
    record_path.unlink(missing_ok=True)
    if "record_path" in declared:
        params["record_path"] = str(record_path)
    executed = build_dir / f"{src.stem}.executed.ipynb"
    execute(ipynb, executed, params, timeout, progress)
    if "record_path" in declared and not record_path.is_file():
        raise RunError(f"{src.stem}: finished without writing its record {record_path} "
                       "(its last cell did not run)")
    record = json.loads(record_path.read_text()) if record_path.is_file() else {"title": src.stem}
    record["rendered"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    record.setdefault("title", src.stem)
    html_path = reports_dir / f"{src.stem}.html"
    render(executed, html_path, record)
    return html_path


def has_cuda_gpu() -> bool:
    """True when nvidia-smi lists a GPU or torch sees CUDA."""
    smi = shutil.which("nvidia-smi")
    if smi:
        r = subprocess.run([smi, "-L"], capture_output=True, text=True)
        if r.returncode == 0 and "GPU" in r.stdout:
            return True
    try:
        import torch
        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def measure(data_dir: Path, cmd: list[str] | None = None) -> None:
    """Run the lead's GPU script (or cmd) into data_dir; check it wrote newer bench data."""
    start = datetime.now(timezone.utc)
    cmd = cmd or [sys.executable, "-m", "kernel.gpu_run", "--out", str(data_dir)]
    print(f"[measure] CUDA GPU found: {' '.join(cmd)}", file=sys.stderr, flush=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    if subprocess.run(cmd, cwd=ROOT, env=env).returncode != 0:
        raise RunError(f"measure: `{' '.join(cmd)}` failed; no report rendered from stale data")
    fresh = data.newest(data_dir, "bench", allow_fixture=True)["_date"]
    if fresh < start.replace(microsecond=0):
        raise RunError(f"measure: kernel.gpu_run wrote no new bench file into {data_dir} "
                       f"(newest is dated {fresh.isoformat()})")


def _value(text: str):
    """-p values are YAML scalars: 'true' -> True, '8' -> 8, 'x' -> 'x'."""
    return yaml.safe_load(text)


def resolve(target: str) -> list[Path]:
    """Notebook paths for a target: phaseN, a notebook stem, 'all', or a .py path."""
    if target == "all":
        return [NB_DIR / f"{n}.py" for n in NEEDS]
    if target in PHASES:
        return [NB_DIR / f"{PHASES[target]}.py"]
    if target in NEEDS:
        return [NB_DIR / f"{target}.py"]
    if target.endswith(".py"):
        return [Path(target).resolve()]
    raise RunError(f"target: unknown {target!r} (expected phase0..phase3, all, "
                   f"one of {', '.join(NEEDS)}, or a path to a .py notebook)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m notebooks.run", description=__doc__.split("\n")[0])
    ap.add_argument("target", help="phase0..phase3, all, a notebook name, or a .py path")
    ap.add_argument("-p", "--param", nargs=2, action="append", default=[],
                    metavar=("NAME", "VALUE"), help="notebook parameter (YAML value)")
    ap.add_argument("--measure", choices=("auto", "never"), default="never",
                    help="auto: on a CUDA machine run kernel.gpu_run first (default: never)")
    ap.add_argument("--reports-dir", type=Path, default=ROOT / "reports")
    ap.add_argument("--build-dir", type=Path, default=ROOT / "build" / "notebooks")
    ap.add_argument("--timeout", type=float, default=1800, help="per-cell limit, s")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    try:
        params = {k: _value(v) for k, v in args.param}
        srcs = resolve(args.target)
        data_dir = Path(params.get("data_dir", ROOT / "reports" / "data")).resolve()
        measured = False
        if args.measure == "auto":
            if has_cuda_gpu():
                measure(data_dir)
                measured = True
            else:
                print("[measure] no CUDA GPU on this machine: rendering from the newest recorded "
                      f"measurements in {data_dir}", file=sys.stderr)
        plan = []  # every check before the first kernel starts: fail fast, render nothing
        for src in srcs:
            p = dict(params)
            if "data_dir" in p or src.stem in NEEDS:  # absolute: the kernel runs in ROOT
                p["data_dir"] = str(data_dir)
            needs = NEEDS.get(src.stem, ())
            if src.stem == "03_canary_ab" and p.get("candidate_url") and p.get("control_url"):
                needs = ()
            for kind in needs:
                data.newest(data_dir, kind, allow_fixture=bool(p.get("smoke", False)))
            if measured and src.stem in SHOWS_MEASUREMENTS:
                p["measured_now"] = True
            plan.append((src, p))
        for i, (src, p) in enumerate(plan, 1):
            print(f"[{i}/{len(plan)}] {src.stem}", file=sys.stderr, flush=True)
            out = run_notebook(src, p, reports_dir=args.reports_dir, build_dir=args.build_dir,
                               timeout=args.timeout, progress=not args.no_progress)
            print(f"[{i}/{len(plan)}] wrote {out}", file=sys.stderr, flush=True)
        idx = index.write_index(args.reports_dir)
        print(f"wrote {idx}", file=sys.stderr)
    except (RunError, data.MeasurementError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
