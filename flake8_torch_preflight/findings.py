"""A finding: one line of flake8 output, with its parts kept apart until the end."""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Optional

ERROR, WARNING, NOTE = "error", "warning", "note"
SEVERITY_ORDER = {NOTE: 0, WARNING: 1, ERROR: 2}
# A fixable rule that proves no fix at a site says why at the end of the fix text; the
# reason is read back from there (`refusal`), so it survives the cache and flake8's text.
_NOT_APPLIED = " (not applied by `tpf fix`: "


def with_refusal(fix: str, reason: str) -> str:
    return f"{fix}{_NOT_APPLIED}{reason})"


def refusal(fix: str) -> Optional[str]:
    """The reason `with_refusal` put at the end of a fix text, or None."""
    head, sep, tail = fix.rpartition(_NOT_APPLIED)
    return tail[:-1] if sep and tail.endswith(")") else None


@dataclass(frozen=True)
class FixPlan:
    """What `tpf fix` needs to fix a finding, attached by the rule when it reports: which
    edit (`kind`, a key of `fixes.FIXERS`) on which node of the parsed file, and, for edits
    that replace one expression by another, the replacement's node. A rule attaches a plan
    only when it has proven the edit safe for the code it lands on."""

    kind: str   # detach | no_grad_decorator | unwrap | pin_memory | set_epoch | train_mode
    node: ast.AST
    replacement: Optional[ast.AST] = None


@dataclass(frozen=True)
class Finding:
    line: int          # 1-based, first line of the statement
    col: int           # 0-based, as flake8 expects
    code: str          # TPF001
    severity: str      # error | warning | note
    what: str
    evidence: str
    fix: str
    # How `tpf fix` applies the fix (None: no automatic fix for this finding). Not part of
    # the finding's identity: two runs over the same file give equal findings.
    plan: Optional[FixPlan] = field(default=None, compare=False, repr=False)
    # The facts the finding rests on (`analysis.core.provenance.Premise`), each proven or
    # assumed; an error has only proven ones. Internal (tests ask for them), not cached.
    premises: tuple = field(default=(), compare=False, repr=False)

    @property
    def message(self) -> str:
        """`TPF001 [error] <what> (<evidence>); fix: <how>` — one flake8 line."""
        return f"{self.code} [{self.severity}] {self.what} ({self.evidence}); fix: {self.fix}"
