"""A one-line progress display on stderr for long `tpf check` runs.

Shown only when stderr is a terminal, not in CI (`CI` set, as every CI service sets it),
not with `-q`, and only once a run has taken longer than a moment (a quick run prints
nothing extra). The line is redrawn in place at most ten times a second and erased at the
end, so it never mixes with the report.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Optional, TextIO

_DELAY = 0.5        # seconds before the line first appears
_INTERVAL = 0.1     # seconds between redraws


def in_ci() -> bool:
    """`CI` set to anything but empty, 0, false or no (every CI service sets it): no progress
    bar, and `tpf check --baseline` never creates a missing baseline."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def wanted(stream: TextIO, quiet: int) -> bool:
    if quiet > 0 or in_ci():
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """`tpf: 120/1643 files, 37 findings` redrawn in place."""

    def __init__(self, total: int, stream: Optional[TextIO] = None, enabled: bool = True,
                 clock=time.monotonic) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = enabled and total > 1
        self.clock = clock
        self.started = clock()
        self.last_draw = 0.0
        self.done = 0
        self.findings = 0
        self.shown = False

    def advance(self, findings: int) -> None:
        self.done += 1
        self.findings += findings
        if not self.enabled:
            return
        now = self.clock()
        if now - self.started < _DELAY or now - self.last_draw < _INTERVAL:
            return
        self.last_draw = now
        self._draw(self.line())

    def line(self) -> str:
        plural = "" if self.findings == 1 else "s"
        return f"tpf: {self.done}/{self.total} files, {self.findings} finding{plural}"

    def _draw(self, text: str) -> None:
        self.stream.write("\r\033[K" + text)
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False
