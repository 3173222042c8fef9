"""Durable file writes for the rollout's records: a unique temp file in the same directory,
fsync, rename over the target, fsync the directory.

A rename alone is atomic but not durable: after a power loss the directory entry may point
at a file whose data never reached the disk. A fixed temp name lets two writers (or a stale
temp left by a crash) clobber each other, so every write gets its own name.
Files are created 0600: they may hold hostnames, commands and group layouts of a service.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

PRIVATE = 0o600


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _synced_temp(path: Path, text: str, mode: int) -> Path:
    """A new temp file beside `path` holding `text`, on disk (fsynced), with `mode`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def write_file(path: Path, text: str, mode: int = PRIVATE) -> None:
    """Replace `path` with `text` so that a crash leaves the old or the new file, never half."""
    tmp = _synced_temp(Path(path), text, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(Path(path).parent)


def create_file(path: Path, text: str, mode: int = PRIVATE) -> bool:
    """Create `path` holding `text` only if it does not exist yet; False if it does.

    The content is complete before the name appears (hard link of a finished temp file), so
    no reader ever sees an empty or partial file, even after a crash between the two steps.
    """
    tmp = _synced_temp(Path(path), text, mode)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(Path(path).parent)
    return True


def append_line(path: Path, line: str, mode: int = PRIVATE) -> None:
    """Append one line and fsync it before returning (the audit log is read after crashes)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        os.write(fd, (line.rstrip("\n") + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
