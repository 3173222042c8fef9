"""Progress while waiting: one live line on a terminal (elapsed / deadline), a plain line
every `every_s` seconds otherwise (CI logs, pipes), and ordinary messages."""
from __future__ import annotations

import sys
import time

from rollout.redact import scrub


class Progress:
    def __init__(self, stream=None, every_s: float = 10.0):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every_s, self._last, self._live = every_s, 0.0, False

    def wait(self, label: str, elapsed: float, deadline: float) -> None:
        text = f"{label}: {elapsed:6.1f} s elapsed, deadline {deadline:.0f} s"
        if self.tty:
            self.stream.write("\r\033[K" + text)
            self._live = True
            self.stream.flush()
        elif time.monotonic() - self._last >= self.every_s:
            self._last = time.monotonic()
            self.stream.write(text + "\n")
            self.stream.flush()

    def say(self, msg: str) -> None:
        if self._live:
            self.stream.write("\r\033[K")
            self._live = False
        self._last = 0.0  # a new wait after a message shows at once
        self.stream.write(scrub(msg) + "\n")  # a known secret never reaches a terminal or a CI log
        self.stream.flush()
