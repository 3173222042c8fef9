"""The plugin's Prometheus series: which verify arm each scheduler rank runs, and how often.

Names and labels are in metric_names.py, which its one reader, `rollout/arm.py`, imports too
(data flows from the plugin to the rollout tool, never back). SGLang exports them
on `/metrics` with `--enable-metrics`: the launcher sets PROMETHEUS_MULTIPROC_DIR before it
spawns the schedulers (`sglang/srt/utils/common.py: set_prometheus_multiproc_dir`), every
process writes its samples to files there, and the HTTP server's MultiProcessCollector
merges them. prometheus_client picks its multiprocess mode when it is first imported, so
this module imports it only when a series is first touched (at backend build, in the
scheduler), never in `register()`, which also runs in the launcher before that variable
is set.

The info gauge is 'liveall': one sample per live process (a `pid` label), so a rank that
died does not count. A process that exits marks itself dead; files a killed process left
behind are swept when the next process publishes.
"""
from __future__ import annotations

import atexit
import os
import re
from pathlib import Path

from .metric_names import (ARMS, CALLS, CAPTURES, EXTEND_CALLS, EXTEND_CAPTURES, EXTEND_FALLBACKS, FALLBACKS, INFO,
                           INFO_LABELS)

_series = None
_LIVE_FILE = re.compile(r"^gauge_live[a-z]+_(\d+)\.db$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # alive, someone else's
        return True
    return True


def _sweep_dead(directory: str) -> None:
    from prometheus_client import multiprocess

    pids = {int(m.group(1)) for f in os.listdir(directory) if (m := _LIVE_FILE.match(f))}
    for pid in pids - {os.getpid()}:
        if not _pid_alive(pid):
            multiprocess.mark_process_dead(pid, directory)


def _mark_self_dead(directory: str) -> None:
    from prometheus_client import multiprocess

    if Path(directory).is_dir():
        multiprocess.mark_process_dead(os.getpid(), directory)


def series():
    """The four series of this process (created on first use; not in the default registry:
    in multiprocess mode the collector reads the files, in single-process mode nothing
    exports them)."""
    global _series
    if _series is None:
        from prometheus_client import Counter, Gauge

        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if directory and Path(directory).is_dir():
            _sweep_dead(directory)
            atexit.register(_mark_self_dead, directory)
        _series = dict(
            info=Gauge(INFO, "mla-verify: the TARGET_VERIFY attention this rank installed (1 per live rank)",
                       list(INFO_LABELS), multiprocess_mode="liveall",
                       registry=None),
            captures=Counter(CAPTURES, "mla-verify: TARGET_VERIFY CUDA-graph captures", ["backend"],
                             registry=None),
            calls=Counter(CALLS, "mla-verify: eager TARGET_VERIFY layer calls that ran the kernel",
                          registry=None),
            fallbacks=Counter(FALLBACKS, "mla-verify: TARGET_VERIFY calls handed back to SGLang's kernel",
                              ["reason"], registry=None),
        )
    return _series


def publish_backend(backend: str, device, kernel_hash: str = "") -> None:
    """This rank serves TARGET_VERIFY with `backend` ("flash" or "triton") on `device`."""
    if backend not in ARMS:
        raise ValueError(f"backend: expected one of {ARMS}, got {backend!r}")
    import sglang

    series()["info"].labels(backend=backend, kernel_hash=kernel_hash, sglang_version=sglang.__version__,
                            device=str(device)).set(1)


def count_capture(backend: str) -> None:
    series()["captures"].labels(backend=backend).inc()


def count_kernel_call() -> None:
    series()["calls"].inc()


def count_fallback(reason: str) -> None:
    series()["fallbacks"].labels(reason=reason).inc()


# EXTEND over a cached prefix (extend.py), per forward mode
_extend_series = None


def extend_series():
    """The three EXTEND counters of this process (created on first use, after `series()`, which
    sets up the multiprocess bookkeeping once)."""
    global _extend_series
    if _extend_series is None:
        series()
        from prometheus_client import Counter

        _extend_series = dict(
            calls=Counter(EXTEND_CALLS, "mla-verify: EXTEND layer calls that ran the kernel, by forward mode",
                          ["mode"], registry=None),
            fallbacks=Counter(EXTEND_FALLBACKS, "mla-verify: EXTEND layer calls handed back to SGLang's kernel",
                              ["mode", "reason"], registry=None),
            captures=Counter(EXTEND_CAPTURES, "mla-verify: EXTEND layer calls that ran the kernel inside a "
                             "CUDA-graph capture, by forward mode", ["mode"], registry=None),
        )
    return _extend_series


def count_extend_call(mode: str) -> None:
    extend_series()["calls"].labels(mode=mode).inc()


def count_extend_capture(mode: str) -> None:
    extend_series()["captures"].labels(mode=mode).inc()


def count_extend_fallback(mode: str, reason: str) -> None:
    extend_series()["fallbacks"].labels(mode=mode, reason=reason).inc()
