"""What `tpf fix` did to one source: the new text, the findings fixed, those skipped and why.
Its own module so that both the cheap package entry (`fixes.fix_source`) and the LibCST
side (`_apply`) import it without importing each other.

`skipped` holds every reported finding of a rule with an autofix that was not fixed, with the
reason: the rule's own (the proof that failed at this site, read from its fix text), an
unsafe fix not asked for, or what stopped the edit (LibCST, the re-lint)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Tuple

from ..findings import Finding

UNSAFE_NOT_ASKED = "unsafe fix; apply it with --unsafe-fixes"
NO_FIX_HERE = "no automatic fix at this site"
# the reasons the pipeline itself gives (the others are the rules' proofs)
PIPELINE_REASONS = ("LibCST cannot parse this file", "re-lint did not confirm the fix; left as is",
                    "the file nests", "fixer failed")


@dataclass
class FixResult:
    source: str
    fixed: List[Finding] = field(default_factory=list)
    skipped: List[Tuple[Finding, str]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.fixed)
