"""What `tpf fix` did to one source: the new text, the findings fixed, those skipped and why.
Its own module so that both the cheap package entry (`fixes.fix_source`) and the LibCST
side (`_apply`) import it without importing each other."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Tuple

from ..findings import Finding


@dataclass
class FixResult:
    source: str
    fixed: List[Finding] = field(default_factory=list)
    skipped: List[Tuple[Finding, str]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.fixed)
