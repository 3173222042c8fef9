"""The rollout's record: a JSON state file and an append-only JSONL audit log, both under the
inventory's state_dir. The state is what `resume` reads; the audit log is what a person reads
afterwards (who, when, what, with which result).

Both are written durably (rollout.durable). The engine writes the audit line of a step before
the state that moves to it, so after a crash the log is never behind the state. A state file
that cannot be read is an error naming the file and the command that recovers from it; the
tool never guesses a state (a `null` file is not "no rollout").
"""
from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import socket
from pathlib import Path

from rollout.durable import append_line, write_file
from rollout.redact import scrub, scrub_obj

STATE_KEYS = ("rollout_id", "status", "order", "groups", "gates", "reference")
GROUP_KEYS = ("arm", "target", "step", "outcome", "starts", "results")


class RecordError(RuntimeError):
    """The state file exists but is not a readable rollout state."""


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def whoami() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def recovery_hint(inventory: str | Path | None) -> str:
    inv = f" -i {inventory}" if inventory else ""
    return (f"`python -m rollout recover --reason '...'{inv}` moves it aside and rebuilds the state from "
            f"what every group serves now (its /metrics and its launcher's record)")


def check_state(state, path: Path, inventory=None) -> dict:
    """The state if it has the shape the engine needs, else RecordError naming what is missing."""
    def bad(what: str):
        raise RecordError(f"{path}: {what}; {recovery_hint(inventory)}")
    if not isinstance(state, dict):
        bad(f"holds {type(state).__name__} {json.dumps(state)[:40]}, not a rollout state")
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        bad(f"not a rollout state: no {', '.join(repr(k) for k in missing)}")
    if not isinstance(state["groups"], dict) or not isinstance(state["order"], list):
        bad("'groups' must be an object and 'order' a list")
    for name in state["order"]:
        g = state["groups"].get(name)
        if not isinstance(g, dict) or any(k not in g for k in GROUP_KEYS):
            bad(f"group {name!r} is missing or lacks one of {', '.join(GROUP_KEYS)}")
    return state


class Record:
    def __init__(self, state_dir: Path, inventory: str | Path | None = None):
        self.dir = Path(state_dir)
        self.inventory = inventory
        self.state_path = self.dir / "state.json"
        self.audit_path = self.dir / "audit.jsonl"

    def load(self) -> dict | None:
        """The state, None when no rollout was ever recorded; RecordError when unreadable."""
        try:
            text = self.state_path.read_text()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise RecordError(f"{self.state_path}: cannot read: {e}; {recovery_hint(self.inventory)}") from None
        if not text.strip():
            raise RecordError(f"{self.state_path}: empty file (written by a crashed tool?); "
                              f"{recovery_hint(self.inventory)}")
        try:
            state = json.loads(text)
        except json.JSONDecodeError as e:
            raise RecordError(f"{self.state_path}: not JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                              f"{recovery_hint(self.inventory)}") from None
        return check_state(state, self.state_path, self.inventory)

    def save(self, state: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        state["updated"] = now()
        write_file(self.state_path, scrub(json.dumps(state, indent=1, default=str)))

    def audit(self, event: str, rollout_id: str | None = None, **fields) -> dict:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        line = {"time": now(), "event": event, "rollout_id": rollout_id, "who": whoami(), "pid": os.getpid(),
                **scrub_obj(fields)}
        append_line(self.audit_path, json.dumps(line, default=str))
        return line

    def audit_lines(self) -> list[dict]:
        try:
            text = self.audit_path.read_text()
        except FileNotFoundError:
            return []
        out = []
        for x in text.splitlines():
            try:
                out.append(json.loads(x))
            except json.JSONDecodeError:
                continue  # a line cut short by a crash: the lines before it still count
        return out

    def move_aside(self) -> Path | None:
        """Rename an unreadable state file out of the way (kept for a person to read)."""
        if not self.state_path.exists():
            return None
        dest = self.dir / f"state.json.unreadable-{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%dT%H%M%S%fZ')}"
        os.replace(self.state_path, dest)
        return dest
