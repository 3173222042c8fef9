"""One rollout at a time per service: a lock file (owner, host, pid, process start time,
time, command). It appears complete or not at all (rollout.durable.create_file), so a crash
never leaves an empty lock. A lock whose process is gone is reported as stale but still needs
`unlock --reason` (a person decides, as with Terraform's force-unlock); `unlock` refuses
while the holder is alive, or cannot be checked (another host, an unreadable lock), unless
`--force` is given with the reason."""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from rollout.durable import create_file
from rollout.record import now, whoami

LOCK_KEYS = ("owner", "host", "pid", "time", "command")


class LockHeld(RuntimeError):
    pass


class LockCorrupt(RuntimeError):
    """The lock file exists but cannot be read: its holder cannot be checked."""


def lock_path(state_dir: Path) -> Path:
    return Path(state_dir) / "lock.json"


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


def process_start(pid: int) -> str | None:
    """Start time of `pid` in clock ticks since boot (/proc stat field 22): with the pid it
    names one process, so a recycled pid is not mistaken for the holder."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def read(state_dir: Path) -> dict | None:
    path = lock_path(state_dir)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    hint = ("if no rollout is running, `python -m rollout unlock --force --reason '...'` removes it "
            "(the holder cannot be checked)")
    if not text.strip():
        raise LockCorrupt(f"rollout lock {path} is empty (left by a tool that crashed while taking it?); {hint}")
    try:
        lock = json.loads(text)
    except json.JSONDecodeError as e:
        raise LockCorrupt(f"rollout lock {path} is not JSON ({e.msg}); {hint}") from None
    if not isinstance(lock, dict) or any(k not in lock for k in LOCK_KEYS) or not isinstance(lock.get("pid"), int):
        raise LockCorrupt(f"rollout lock {path} lacks one of {', '.join(LOCK_KEYS)} (or pid is not a number); {hint}")
    return lock


def holder_alive(lock: dict) -> bool | None:
    """True/False for a holder on this host; None when it cannot be checked from here."""
    if lock.get("host") != socket.gethostname():
        return None
    if not pid_alive(lock["pid"]):
        return False
    start = lock.get("start")
    return start is None or process_start(lock["pid"]) == start


def describe(lock: dict) -> str:
    alive = holder_alive(lock)
    state = {True: "", False: " -- that process is gone (stale lock)",
             None: f" -- on host {lock.get('host')}, which this host cannot check"}[alive]
    return (f"held by {lock['owner']} pid {lock['pid']} since {lock['time']} for '{lock['command']}'{state}; "
            f"if no rollout is running, `python -m rollout unlock --reason '...'`"
            + (" --force" if alive is None else ""))


def acquire(state_dir: Path, command: str, rollout_id: str | None) -> dict:
    path = lock_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = {"owner": whoami(), "host": socket.gethostname(), "pid": os.getpid(),
            "start": process_start(os.getpid()), "time": now(), "command": command, "rollout_id": rollout_id}
    for _ in range(2):  # the holder may release between our attempt and our read
        if create_file(path, json.dumps(lock)):
            return lock
        held = read(state_dir)
        if held is not None:
            raise LockHeld(f"rollout lock {path} is {describe(held)}")
    raise LockHeld(f"rollout lock {path} keeps changing hands; try again")


def release(state_dir: Path, lock: dict) -> None:
    """Removes the lock only if it is still ours (an unlock + new rollout may own it now)."""
    try:
        held = read(state_dir)
    except LockCorrupt:
        return
    if held and held.get("pid") == lock["pid"] and held.get("time") == lock["time"]:
        lock_path(state_dir).unlink(missing_ok=True)


def check_unlock(state_dir: Path, force: bool) -> tuple[dict | None, str]:
    """(the lock as read, or None if unreadable; what is known of its holder). Raises LockHeld
    when removing it is refused: its holder is alive, or cannot be checked without --force."""
    path = lock_path(state_dir)
    try:
        held = read(state_dir)
    except LockCorrupt as e:
        if not force:
            raise LockHeld(str(e)) from None
        return None, f"unreadable lock: {e}"
    if held is None:
        return None, "no lock"
    alive = holder_alive(held)
    if alive is True and not force:
        raise LockHeld(f"refusing to unlock {path}: its holder, pid {held['pid']} on this host, is alive "
                       f"('{held['command']}'). Stop it first (`python -m rollout abort --reason '...'` "
                       f"brings every group back into service), or add --force if it is not a rollout")
    if alive is None and not force:
        raise LockHeld(f"refusing to unlock {path}: held from host {held.get('host')}, where this host cannot "
                       f"check pid {held['pid']}; if no rollout runs there, add --force")
    return held, {True: "holder alive (forced)", False: "holder gone", None: "holder not checkable (forced)"}[alive]


def remove(state_dir: Path) -> None:
    lock_path(state_dir).unlink(missing_ok=True)
