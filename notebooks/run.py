"""Run phase notebooks: jupytext percent script -> build/notebooks/*.ipynb -> papermill (kernel
python3, per-cell timeout, progress bar) -> reports/<name>.html without input cells -> index.

    python -m notebooks.run phase2 --measure auto   # what `make phase2` runs
    python -m notebooks.run 00_baseline -p smoke true -p data_dir /tmp/fixture --reports-dir /tmp/r
    python -m notebooks.run all                      # every phase, then the index

Exit status 0 on success, 1 on any failure, with one error line that names the notebook, the
cell and the exception. Every check (parameter names and types, measurement files) runs before
the first kernel starts, so a refused run writes nothing.
"""
from __future__ import annotations

import argparse
import html
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from . import data, index, params

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
TRACKED_REPORTS = ROOT / "reports"
# Which measurement kinds each notebook reads; checked before a kernel starts so a fresh clone
# without data gets one clear line instead of a traceback.
NEEDS = {
    "00_baseline": ("bench",),
    "01_flash_decode": ("bench",),
    "02_paged_bf16": ("validation", "bench", "sglang-integration"),
    "03_canary_ab": ("bench", "sglang-integration"),  # only when it starts emulators
}
PHASES = {f"phase{i}": name for i, name in enumerate(NEEDS)}
META = "mla-verify-report"


class RunError(RuntimeError):
    """A run cannot go on; str() is the one line the user sees."""


def to_ipynb(src: Path, build_dir: Path) -> Path:
    """Convert a jupytext percent script into build_dir/<stem>.ipynb with kernelspec python3.

    Cell ids are numbered, not random, so the HTML of an unchanged notebook on unchanged data
    is byte-identical (the ids appear in it).
    """
    import jupytext

    if not src.is_file():
        raise RunError(f"notebook: no such file: {str(src)!r}")
    nb = jupytext.read(src)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"{src.stem}-{i:02d}"
    build_dir.mkdir(parents=True, exist_ok=True)
    out = build_dir / f"{src.stem}.ipynb"
    jupytext.write(nb, out)
    return out


def parameter_defaults(ipynb: Path) -> dict:
    """{name: literal default} of the notebook's parameters cell (see notebooks.params)."""
    import nbformat

    nb = nbformat.read(ipynb, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    if not cells:
        raise RunError(f"{ipynb.stem}: no cell tagged 'parameters'")
    try:
        return params.literal_defaults(cells[0].source, ipynb.stem)
    except params.ParameterError as e:
        raise RunError(str(e)) from None


def check_parameters(ipynb: Path, raw: dict[str, str], defaults: dict) -> dict:
    """Typed values of the passed -p strings, or a RunError (unknown name, runner-only name,
    a value of the wrong type, a line papermill cannot parse)."""
    import papermill

    declared = set(papermill.inspect_notebook(str(ipynb)))
    try:
        return params.check(ipynb.stem, raw, defaults, declared)
    except params.ParameterError as e:
        raise RunError(str(e)) from None


def ipc_kernel_manager(folder: Path):
    """A Jupyter kernel manager class whose kernel talks over Unix sockets in `folder` (short: a
    socket's path must fit in 107 bytes). Over TCP the client picks five free ports, closes them and
    the kernel binds them a moment later, so a server started beside it (the test suite's other
    worker) could take one first, and the kernel died with "Address already in use" (a CI run of
    2026-12-05)."""
    from jupyter_client import AsyncKernelManager
    from traitlets import default

    class IPCKernelManager(AsyncKernelManager):
        @default("transport")
        def _transport_default(self):
            return "ipc"

        @default("connection_file")
        def _connection_file_default(self):
            return str(folder / "kernel.json")

    return IPCKernelManager


def execute(ipynb: Path, out: Path, values: dict, timeout: float, progress: bool = True) -> None:
    """papermill with kernel python3 and cwd = repo root; a failing cell becomes a RunError
    naming the cell index, the exception and the partially executed notebook."""
    import papermill

    # The kernel inherits our environment; ROOT first so `import notebooks` finds this checkout.
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([saved] if saved else []))
    try:
        with tempfile.TemporaryDirectory(prefix="mlav-kernel-") as sockets:
            papermill.execute_notebook(str(ipynb), str(out), parameters=values, kernel_name="python3",
                                       cwd=str(ROOT), progress_bar=progress, start_timeout=120,
                                       execution_timeout=timeout,
                                       kernel_manager_class=ipc_kernel_manager(Path(sockets)))
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
    meta = (f'<meta name="{META}" '
            f'content="{html.escape(json.dumps(record, sort_keys=True), quote=True)}">')
    body = body.replace("<head>", "<head>\n" + meta, 1)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(body)


@dataclass
class Prepared:
    """A notebook whose parameters passed every check: ready to execute."""
    src: Path
    ipynb: Path
    defaults: dict
    values: dict


def prepare(src: Path, raw: dict[str, str], build_dir: Path) -> Prepared:
    ipynb = to_ipynb(src, build_dir)
    defaults = parameter_defaults(ipynb)
    return Prepared(src, ipynb, defaults, check_parameters(ipynb, raw, defaults))


def run_notebook(nb: Prepared, *, reports_dir: Path, build_dir: Path, timeout: float = 1800,
                 progress: bool = True) -> Path:
    """One prepared notebook end to end; returns the HTML path. Raises RunError on failure."""
    values = dict(nb.values)
    record_path = build_dir / f"{nb.src.stem}.record.json"
    record_path.unlink(missing_ok=True)
    if "record_path" in nb.defaults:
        values["record_path"] = str(record_path)
    executed = build_dir / f"{nb.src.stem}.executed.ipynb"
    execute(nb.ipynb, executed, values, timeout, progress)
    if "record_path" in nb.defaults and not record_path.is_file():
        raise RunError(f"{nb.src.stem}: finished without writing its record {record_path} "
                       "(its last cell did not run)")
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    record.setdefault("title", nb.src.stem)
    html_path = reports_dir / f"{nb.src.stem}.html"
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


def measure(data_dir: Path, cmd: list[str] | None = None) -> datetime:
    """Run the GPU script kernel.gpu_run (or cmd) into data_dir; check it wrote newer bench
    data. Returns the time it started: files dated from then on were measured by this run."""
    start = datetime.now(timezone.utc).replace(microsecond=0)
    cmd = cmd or [sys.executable, "-m", "kernel.gpu_run", "--out", str(data_dir)]
    print(f"[measure] CUDA GPU found: {' '.join(cmd)}", file=sys.stderr, flush=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    if subprocess.run(cmd, cwd=ROOT, env=env).returncode != 0:
        raise RunError(f"measure: `{' '.join(cmd)}` failed; no report rendered from stale data")
    fresh = data.newest(data_dir, "bench", allow_fixture=True)["_date"]
    if fresh < start:
        raise RunError(f"measure: kernel.gpu_run wrote no new bench file into {data_dir} "
                       f"(newest is dated {fresh.isoformat()})")
    return start


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


def check_smoke_target(nb: Prepared, reports_dir: Path) -> None:
    """A smoke render (fixture data allowed, low dpi) must never replace a tracked report."""
    if nb.values.get("smoke") and reports_dir.resolve() == TRACKED_REPORTS.resolve():
        raise RunError(f"{nb.src.stem}: -p smoke true renders fixture data at low resolution and "
                       f"may not overwrite the tracked report in {TRACKED_REPORTS}: pass "
                       "--reports-dir DIR for a smoke run")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m notebooks.run",
                                 description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("target", help="phase0..phase3, all, a notebook name, or a .py path")
    ap.add_argument("-p", "--param", nargs=2, action="append", default=[],
                    metavar=("NAME", "VALUE"),
                    help="notebook parameter; the value must have the type of its default")
    ap.add_argument("--measure", choices=("auto", "never"), default="never",
                    help="auto: on a CUDA machine run kernel.gpu_run first (default: never)")
    ap.add_argument("--reports-dir", type=Path, default=TRACKED_REPORTS)
    ap.add_argument("--build-dir", type=Path, default=ROOT / "build" / "notebooks")
    ap.add_argument("--timeout", type=float, default=1800, help="per-cell limit, s")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    try:
        raw = dict(args.param)
        srcs = resolve(args.target)
        data_dir = Path(raw.get("data_dir", ROOT / "reports" / "data")).resolve()
        plan = []  # every check before the first kernel starts: fail fast, render nothing
        for src in srcs:
            nb = prepare(src, raw, args.build_dir)
            if "data_dir" in nb.defaults:  # absolute: the kernel runs in ROOT
                nb.values["data_dir"] = str(data_dir)
            check_smoke_target(nb, args.reports_dir)
            plan.append(nb)
        measured_since = None
        if args.measure == "auto":
            if has_cuda_gpu():
                measured_since = measure(data_dir)
            else:
                print("[measure] no CUDA GPU on this machine: rendering from the newest recorded "
                      f"measurements in {data_dir}", file=sys.stderr)
        for nb in plan:
            needs = NEEDS.get(nb.src.stem, ())
            if nb.src.stem == "03_canary_ab" and nb.values.get("candidate_url") \
                    and nb.values.get("control_url"):
                needs = ()
            for kind in needs:
                data.newest(data_dir, kind, allow_fixture=bool(nb.values.get("smoke", False)))
            if measured_since is not None and "measured_since" in nb.defaults:
                nb.values["measured_since"] = measured_since.isoformat()
        for i, nb in enumerate(plan, 1):
            print(f"[{i}/{len(plan)}] {nb.src.stem}", file=sys.stderr, flush=True)
            out = run_notebook(nb, reports_dir=args.reports_dir, build_dir=args.build_dir,
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
