"""A finding: one line of flake8 output, with its parts kept apart until the end."""
from __future__ import annotations

from dataclasses import dataclass

ERROR, WARNING, NOTE = "error", "warning", "note"
SEVERITY_ORDER = {NOTE: 0, WARNING: 1, ERROR: 2}


@dataclass(frozen=True)
class Finding:
    line: int          # 1-based, first line of the statement
    col: int           # 0-based, as flake8 expects
    code: str          # TPF001
    severity: str      # error | warning | note
    what: str
    evidence: str
    fix: str

    @property
    def message(self) -> str:
        """`TPF001 [error] <what> (<evidence>); fix: <how>` — one flake8 line."""
        return f"{self.code} [{self.severity}] {self.what} ({self.evidence}); fix: {self.fix}"
