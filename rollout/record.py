"""The rollout's record: a JSON state file (rewritten atomically) and an append-only JSONL
audit log, both under the inventory's state_dir. The state is what `resume` reads; the
audit log is what a person reads afterwards (who, when, what, with which result)."""
from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import socket
from pathlib import Path


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def whoami() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


class Record:
    def __init__(self, state_dir: Path):
        self.dir = Path(state_dir)
        self.state_path = self.dir / "state.json"
        self.audit_path = self.dir / "audit.jsonl"

    def load(self) -> dict | None:
        try:
            return json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return None

    def save(self, state: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        state["updated"] = now()
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, self.state_path)  # a crash mid-write never leaves half a state file

    def audit(self, event: str, rollout_id: str | None = None, **fields) -> dict:
        self.dir.mkdir(parents=True, exist_ok=True)
        line = {"time": now(), "event": event, "rollout_id": rollout_id, "who": whoami(), "pid": os.getpid(), **fields}
        with open(self.audit_path, "a") as f:
            f.write(json.dumps(line, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return line

    def audit_lines(self) -> list[dict]:
        try:
            return [json.loads(x) for x in self.audit_path.read_text().splitlines() if x.strip()]
        except FileNotFoundError:
            return []
