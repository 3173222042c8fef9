"""What a measurement was taken on: GPU, driver, CUDA, torch, git commit, the CUDA sources'
hash, date."""
from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

import torch

from .. import build


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

