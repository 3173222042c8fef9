"""What a measurement was taken on: GPU, driver, CUDA, torch, git commit, the CUDA sources'
hash, date."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import torch

from .. import build
from .timing import log


def git_commit() -> str:
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (head + ("+dirty" if dirty else "")) if head else "unknown"


def add_commit_arg(ap: argparse.ArgumentParser) -> None:
    """--commit, the commit a measurement records: $MLA_VERIFY_COMMIT by default (the device
    machine's copy of the work tree may lag its git checkout), else the caller's git_commit()."""
    ap.add_argument("--commit", default=os.environ.get("MLA_VERIFY_COMMIT"),
                    help="the commit measured (default: $MLA_VERIFY_COMMIT, else this checkout's HEAD)")


def env_info(commit: str) -> dict:
    prop = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        driver = "unknown"
    return {"gpu": prop.name, "sms": prop.multi_processor_count, "l2_bytes": prop.L2_cache_size,
            "driver": driver, "cuda": torch.version.cuda, "torch": torch.__version__, "commit": commit,
            # the kernel sources' hash (kernel.build.source_hash, the build folder's name): names the
            # code measured even where the machine's git checkout lags its copied work tree
            "kernel_source": build.source_hash(),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}



def gpu_word(gpu: str) -> str:
    """The word of a GPU's name that tells the card: the first with a digit that is not a memory
    size ("NVIDIA H100 80GB HBM3" -> h100, where the last word, hbm3, would name the memory),
    else the last word."""
    words = gpu.split()
    return next((w for w in words if re.search(r"\d", w) and not re.fullmatch(r"\d+GB", w, re.I)),
                words[-1] if words else "gpu").lower()


def file_name(kind: str, info: dict) -> str:
    """A result file's name: <kind>-<gpu_word>-<UTC date and hour-minute>.json, e.g.
    bench-h200-20261203T1318.json (info: env_info's record)."""
    stamp = info["date"].replace(":", "").replace("-", "")[:13]
    return f"{kind}-{gpu_word(info['gpu'])}-{stamp}.json"


def write_json(out: str | Path, kind: str, doc: dict, info: dict | None = None, keep: bool = False) -> Path:
    """doc into out/file_name(kind, info), info defaulting to doc (which then carries env_info's
    fields); out created if need be. keep: where that file exists (another run of the same minute),
    write <name>-2.json, -3, ... beside it instead of over it (gpu_run's stages rewrite their own file
    as rows come in, so they do not keep)."""
    path = Path(out) / file_name(kind, info or doc)
    base, n = path, 2
    while keep and path.exists():
        path, n = base.with_name(f"{base.stem}-{n}.json"), n + 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))
    return path


def no_gpu(prog: str, what: str = "measures on a GPU") -> bool:
    """True, after an error line on stderr naming prog, when torch sees no CUDA device: a bench's
    main returns 2 then rather than failing inside its first launch."""
    if torch.cuda.is_available():
        return False
    print(f"error: no CUDA device: {prog} {what}", file=sys.stderr)
    return True


def record(out: str | Path, kind: str, commit: str | None, result: dict) -> dict:
    """result under env_info's fields (commit: --commit, else this checkout's HEAD), written to
    out/file_name(kind, ...) (or beside an earlier run's file of the same minute), whose path is
    logged. Returns the document written."""
    doc = dict(env_info(commit or git_commit()), **result)
    log(f"wrote {write_json(out, kind, doc, keep=True)}")
    return doc
