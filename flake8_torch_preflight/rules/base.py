"""The rule contract: a rule asks the shared analysis questions and yields findings.

A rule never walks the tree itself: loops, regions, provenance and summaries all come from
`FileAnalysis`. Its module docstring is its documentation (docs and `explain` are generated
from it), with the headings What it does / Why is this bad? / Example / Use instead /
Fix safety / Known limits.
"""
from __future__ import annotations

from typing import Iterator, Optional, Tuple

from ..analysis import FileAnalysis
from ..analysis.core.events import Site
from ..analysis.core.provenance import Premise, assumed_text, first_unproven
from ..findings import ERROR, WARNING, Finding, FixPlan, with_refusal


class Rule:
    code: str = ""
    name: str = ""                 # kebab-case, names the flagged pattern
    severity: str = ERROR          # the highest level the rule reports
    fix_safety: Optional[str] = None   # None | "safe" | "unsafe"
    chain: Tuple[Premise, ...] = ()    # premises of every finding, when a site adds none

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        raise NotImplementedError

    def finding(self, site: Site, what: str, evidence: str, fix: str,
                severity: Optional[str] = None, plan: Optional[FixPlan] = None,
                no_autofix: Optional[str] = None,
                premises: Tuple[Premise, ...] = ()) -> Finding:
        """A finding at `site`. A fixable rule passes the `plan` of a fix it has proven safe
        here, or says in `no_autofix` why `tpf fix` leaves this one to a human. `premises`:
        the facts of its chain; an error with an assumed premise is reported as a warning
        whose evidence names the assumption (a finding is as strong as its weakest premise)."""
        if no_autofix:
            fix = with_refusal(fix, no_autofix)
        severity = severity or self.severity
        premises = tuple(premises) or self.chain
        if severity == ERROR and first_unproven(premises) is not None:
            severity = WARNING
            evidence = f"{evidence}; {assumed_text(premises)}"
        return Finding(site.line, site.col, self.code, severity, what, evidence,
                       fix, plan, premises)
