"""Stopping the tool without leaving a group out of service.

The first SIGTERM or Ctrl-C asks the rollout to stop at the next point where every group
serves: at once while a gate only talks to servers (the request is abandoned, the group keeps
serving), after the step while a group is draining or starting (a drained group is started
again on the arm it had). A second signal stops at once; the state file then says which step
was cut short, and `resume` or `abort` continues from it.
"""
from __future__ import annotations

import signal
from contextlib import contextmanager


class Interrupted(Exception):
    """The rollout stopped at a safe point because it was asked to."""


class Stop:
    def __init__(self):
        self.requested: int | None = None
        self._depth = 0
        self.holding = 0  # inside deferred(): a drain, a start, a rollback

    def request(self, signum: int = signal.SIGTERM) -> None:
        if self.requested is not None:
            raise KeyboardInterrupt  # the second signal: now, wherever it lands
        self.requested = signum
        if self._depth and not self.holding:
            raise Interrupted(f"stopped by {signal.Signals(signum).name} during a gate")

    def check(self, where: str) -> None:
        if self.requested is not None and not self.holding:
            raise Interrupted(f"stopped by {signal.Signals(self.requested).name} {where}")

    @contextmanager
    def interruptible(self):
        """A section that a signal may cut short at once (nothing in it takes a group down)."""
        self.check("before a gate")
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    @contextmanager
    def deferred(self):
        """A section a signal must not cut short (a drain, a start, a rollback): the request
        waits until it ends, even through the interruptible sections inside it."""
        self.holding += 1
        try:
            yield
        finally:
            self.holding -= 1

    def install(self) -> None:
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, lambda signum, frame: self.request(signum))
