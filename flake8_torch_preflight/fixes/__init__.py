"""`tpf fix`: LibCST autofixes for the rules the spec marks safe.

| code   | fix |
|--------|-----|
| TPF001 | append `.detach()` to the value stored across iterations |
| TPF002 | decorate an evaluation-named function with `@torch.no_grad()` (adds `import torch`) |
| TPF005 | unwrap a `softmax`/`log_softmax` passed directly to a cross-entropy loss |
| TPF013 | add `pin_memory=True` to the DataLoader call |

Unsafe, applied only with `--unsafe-fixes` (`fix_source(..., unsafe=True)`): they change
what the program does on purpose, and the author should read them:

| code   | fix |
|--------|-----|
| TPF007 | `model.train()` as the first statement of the loop whose `eval()` is never undone |
| TPF009 | `sampler.set_epoch(epoch)` as the first statement of the epoch loop |

A rule attaches a `FixPlan` to the findings whose fix it has proven safe there (for the two
fixes that remove gradient flow, by the premises of `analysis/fix_proof.py`) (the node to
edit and the kind of edit); `tpf fix` applies exactly those plans, never searching for the
finding again by position or reading its message.

Contract: the output differs from the input only inside the changed nodes (LibCST round-trips
every other byte), re-parses, and re-linting shows the fixed finding gone (a fix that does not
remove its finding, or adds another, is dropped); running it twice changes nothing; lines a
`# noqa` suppresses are left alone (the caller's `keep` predicate decides).

LibCST is imported only when a fix actually runs: this module itself is cheap, so the CLI can
ask `is_fixable` while checking.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional

from ..findings import Finding, refusal
from .result import NO_FIX_HERE, PIPELINE_REASONS, UNSAFE_NOT_ASKED, FixResult

__all__ = ["FixResult", "applicability", "fix_source", "is_fixable", "not_available",
           "reason_group"]

UNSAFE, NONE = "unsafe", "none"
_SAFETY: Dict[str, str] = {}


def applicability(code: str) -> str:
    """`safe`, `unsafe` or `none`: the autofix the rule documents (its `fix_safety`)."""
    if not _SAFETY:
        from ..rules import ALL_RULES
        _SAFETY.update((rule.code, rule.fix_safety or NONE) for rule in ALL_RULES)
    return _SAFETY.get(code, NONE)


def is_fixable(finding: Finding) -> bool:
    """Whether `tpf fix` will try this finding (with `--unsafe-fixes` for an unsafe one):
    its rule attached a fix plan (cheap)."""
    return finding.plan is not None


# Why a rule with an autofix attached no plan and gave no reason of its own: the shape of
# the site is one its fix does not cover (what each rule's "Fix safety" section says).
_NOT_COVERED = {
    "TPF002": "the fix here is a `with torch.no_grad():` block around the evaluation code, "
              "placed by hand; `tpf fix` only decorates a function that is evaluation code by "
              "its name",
    "TPF005": "not a softmax written inside a cross-entropy loss call's argument (an "
              "`nll_loss` needs `log_softmax`, not unwrapping)",
    "TPF013": "`pin_memory=True` is not the whole advice here, or the call may already pass "
              "it (`**kwargs`, `*args`)",
}


def not_available(finding: Finding, unsafe: bool = True) -> Optional[str]:
    """Why `tpf fix` (with `--unsafe-fixes` when `unsafe`) will not try this finding of a
    rule with an autofix; None when it will. The rule's reason when it gave one."""
    if finding.plan is None:
        return refusal(finding.fix) or _NOT_COVERED.get(finding.code, NO_FIX_HERE)
    if applicability(finding.code) == UNSAFE and not unsafe:
        return UNSAFE_NOT_ASKED
    return None


def reason_group(reason: str) -> str:
    """The summary's name for a reason: the proofs' reasons name variables and calls, so
    they are counted together; the others are few and fixed."""
    if reason == UNSAFE_NOT_ASKED:
        return "unsafe (apply with --unsafe-fixes)"
    if reason == NO_FIX_HERE or reason in _NOT_COVERED.values():
        return "no automatic fix for this shape of code"
    for known in PIPELINE_REASONS:
        if reason.startswith(known):
            return known if known != "the file nests" else "too deeply nested for LibCST"
    return "not proven safe here"


def fix_source(source: str, filename: str = "<stdin>",
               keep: Optional[Callable[[Finding], bool]] = None, noqa: bool = True,
               unsafe: bool = False) -> FixResult:
    """Apply every safe fix to `source`, and the unsafe ones too when `unsafe`.

    `keep(finding)` filters further (the CLI passes its select/ignore decision); lines a
    `# noqa` suppresses (flake8's semantics) are skipped unless `noqa=False`. The result's
    `skipped` names every other finding of a rule with an autofix, and why it was left.
    """
    from ._apply import apply_fixes   # LibCST is imported here and only here

    if noqa:
        from ..noqa import NoqaMap

        suppressions = NoqaMap(source.splitlines(True))
        if suppressions.skip_file():
            return FixResult(source)
        user_keep = keep

        def keep(finding: Finding) -> bool:   # noqa: F811
            if suppressions.suppressed(finding.line, finding.code):
                return False
            return user_keep is None or user_keep(finding)

    return apply_fixes(source, filename, keep, unsafe)
