"""Which stand-ins ran in this process, in memory and (when MLA_VERIFY_STANDIN_LOG names a
file) in a file that every server process appends to, so a harness can say afterwards which
stand-ins a real server used.

Two kinds: `ran` counts the torch versions (torch_ops) by name; `called` lists every
placeholder something tried to call (each of those raised). The file gets one JSON line per
(kind, name, process) the first time, never one per call: the torch versions run inside CUDA
graph capture and eager prefill, and must not do I/O on every call.
"""
from __future__ import annotations

import functools
import json
import os
from collections import Counter

LOG_ENV = "MLA_VERIFY_STANDIN_LOG"

called: list[str] = []
ran: Counter = Counter()
_logged: set[tuple[str, str]] = set()


def note(kind: str, name: str) -> None:
    """Record one use of stand-in `name`; kind 'ran' (a torch version) or 'called' (a placeholder)."""
    if kind == "ran":
        ran[name] += 1
    elif kind == "called":
        called.append(name)
    else:
        raise ValueError(f"kind: expected 'ran' or 'called', got {kind!r}")
    path = os.environ.get(LOG_ENV)
    if path and (kind, name) not in _logged:
        _logged.add((kind, name))
        try:
            with open(path, "a") as f:
                f.write(json.dumps({"kind": kind, "name": name, "pid": os.getpid()}) + "\n")
        except OSError:
            pass  # the record is a report, never a reason for the server to fail


def recorded(name: str):
    """Decorator: a torch version that notes `name` each time it runs."""
    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            note("ran", name)
            return fn(*args, **kwargs)
        return inner
    return wrap


def read_log(path) -> dict:
    """{'ran': sorted names, 'called': sorted names, 'processes': count} from a log file
    written by `note` (missing file: nothing ran)."""
    ran_names, called_names, pids = set(), set(), set()
    try:
        lines = open(path).read().splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        (ran_names if rec.get("kind") == "ran" else called_names).add(rec.get("name"))
        pids.add(rec.get("pid"))
    return {"ran": sorted(ran_names), "called": sorted(called_names), "processes": len(pids)}
