"""One rollout at a time per service: a lock file (owner, host, pid, time, command) created
with O_EXCL. Refused while it exists; a lock whose process is gone is reported as stale but
still needs `unlock --reason` (a person decides, as with Terraform's force-unlock)."""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from rollout.record import now, whoami


class LockHeld(RuntimeError):
    pass


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (a zombie answers kill(0) but runs nothing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def read(state_dir: Path) -> dict | None:
    try:
        return json.loads((Path(state_dir) / "lock.json").read_text())
    except FileNotFoundError:
        return None


def describe(lock: dict) -> str:
    stale = ""
    if lock.get("host") == socket.gethostname() and not pid_alive(lock["pid"]):
        stale = " -- that process is gone (stale lock)"
    return (f"held by {lock['owner']} pid {lock['pid']} since {lock['time']} for '{lock['command']}'{stale}; "
            f"if no rollout is running, `python -m rollout unlock --reason '...'`")


def acquire(state_dir: Path, command: str, rollout_id: str | None) -> dict:
    path = Path(state_dir) / "lock.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = {"owner": whoami(), "host": socket.gethostname(), "pid": os.getpid(), "time": now(),
            "command": command, "rollout_id": rollout_id}
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        held = read(state_dir) or {"owner": "?", "pid": -1, "time": "?", "command": "?"}
        raise LockHeld(f"rollout lock {path} is {describe(held)}") from None
    with os.fdopen(fd, "w") as f:
        json.dump(lock, f)
    return lock


def release(state_dir: Path, lock: dict) -> None:
    """Removes the lock only if it is still ours (an unlock + new rollout may own it now)."""
    held = read(state_dir)
    if held and held.get("pid") == lock["pid"] and held.get("time") == lock["time"]:
        (Path(state_dir) / "lock.json").unlink(missing_ok=True)


def force_unlock(state_dir: Path) -> dict | None:
    held = read(state_dir)
    (Path(state_dir) / "lock.json").unlink(missing_ok=True)
    return held
