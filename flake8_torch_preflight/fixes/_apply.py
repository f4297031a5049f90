"""The fix pipeline: lint, collect the plans rules attached, apply their edits in one
LibCST pass, verify.

Importing this module imports LibCST; only `fixes.fix_source` does, lazily.
"""
from __future__ import annotations

import ast
import difflib
from collections import Counter, defaultdict
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import libcst as cst

from ..analysis.core.astutil import nesting_depth
from ..engine import has_skip_file_comment, lint_tree
from ..literals import elide_huge_literals
from ..findings import Finding
from . import loop_top, tpf001_detach, tpf002_no_grad, tpf005_softmax, tpf013_pin_memory
from . import applicability, not_available
from .result import NO_FIX_HERE, FixResult
from .edits import Context, CstUnavailable, Edit, ensure_import

# plan kind -> the fixer that writes its edits
FIXERS = {
    "detach": tpf001_detach.edits,
    "no_grad_decorator": tpf002_no_grad.edits,
    "unwrap": tpf005_softmax.edits,
    "pin_memory": tpf013_pin_memory.edits,
    "set_epoch": loop_top.set_epoch_edits,     # unsafe (TPF009)
    "train_mode": loop_top.train_mode_edits,   # unsafe (TPF007)
}


class _Batch(cst.CSTTransformer):
    def __init__(self, edits: Sequence[Edit]) -> None:
        super().__init__()
        self.by_node: Dict[int, List[Edit]] = defaultdict(list)
        seen = set()
        for edit in edits:
            key = edit.key or (id(edit.node), id(edit))
            if key in seen:
                continue
            seen.add(key)
            self.by_node[id(edit.node)].append(edit)

    def on_leave(self, original_node, updated_node):
        for edit in self.by_node.get(id(original_node), ()):
            updated_node = edit.transform(updated_node)
        return updated_node


Planned = List[Tuple[Finding, List[Edit]]]
# LibCST's parser takes time quadratic in how deep the code nests (measured: 0.07 s at 400
# levels, 1.6 s at 1,600, 6.6 s at 3,000 subscripts `x[0][0]...`): past this, no fix.
MAX_LIBCST_DEPTH = 400


def apply_fixes(source: str, filename: str = "<stdin>",
                keep: Optional[Callable[[Finding], bool]] = None,
                unsafe: bool = False) -> FixResult:
    if has_skip_file_comment(source.splitlines(True)):
        return FixResult(source)
    try:
        tree = ast.parse(elide_huge_literals(source), filename=filename)   # same positions
    except (SyntaxError, ValueError, RecursionError, MemoryError):   # too deep for Python too
        return FixResult(source)
    all_findings = lint_tree(tree, filename)
    result = FixResult(source)
    wanted = _wanted(all_findings, keep, unsafe, result)
    if not wanted:
        return result
    depth = nesting_depth(tree)
    if depth > MAX_LIBCST_DEPTH:
        result.skipped += [(f, f"the file nests {depth} levels deep, too deep for LibCST")
                           for f in wanted]
        return result
    sparse = _sparse_source(source, tree, wanted)
    try:
        module = cst.parse_module(sparse)
    except Exception:   # LibCST's grammar lags CPython's in rare corners; deep nesting
        module = None
    if module is None and sparse != source:
        sparse = source
        try:
            module = cst.parse_module(source)
        except Exception:
            module = None
    if module is None:
        result.skipped += [(f, "LibCST cannot parse this file") for f in wanted]
        return result
    ctx = Context(sparse, filename, tree, module)
    ctx.original = source
    planned = _plan_edits(ctx, wanted, result)
    if planned:
        _apply_confirmed(ctx, filename, Counter(f.code for f in all_findings), planned, result)
    return result


def _wanted(findings: Sequence[Finding], keep, unsafe: bool, result: FixResult) -> List[Finding]:
    """The findings to fix; the other reported findings of rules with an autofix go to
    `result.skipped` with the reason."""
    wanted = []
    for finding in findings:
        if applicability(finding.code) == "none" or (keep is not None and not keep(finding)):
            continue
        why = not_available(finding, unsafe)
        if why is None and finding.plan.kind not in FIXERS:
            why = NO_FIX_HERE
        if why is None:
            wanted.append(finding)
        else:
            result.skipped.append((finding, why))
    return wanted


_ELIDED = "# <tpf: elided line {}>\n"


def _sparse_source(source: str, tree: ast.Module, wanted: Sequence[Finding]) -> str:
    """The source LibCST parses: every line of a top-level statement no fix looks into is
    a placeholder comment (same line numbers), so LibCST's tree, which takes ~500 bytes of
    memory per byte of source (657 MB for a 1.25 MB file), is as big as the statements the
    fixes touch. Imports and the docstring stay (`ensure_import` reads them)."""
    needed = set()
    for finding in wanted:
        needed.add(finding.line)
        for node in (finding.plan.node, finding.plan.replacement):
            if node is not None and hasattr(node, "lineno"):
                needed.add(node.lineno)
    keep, elide = set(), set()
    for index, statement in enumerate(tree.body):
        first = min([statement.lineno] + [d.lineno for d in
                                          getattr(statement, "decorator_list", ())])
        lines = range(first, (statement.end_lineno or statement.lineno) + 1)
        docstring = index == 0 and isinstance(statement, ast.Expr)
        if docstring or isinstance(statement, (ast.Import, ast.ImportFrom)) \
                or any(line in lines for line in needed):
            keep.update(lines)
        else:
            elide.update(lines)
    elide -= keep
    if not elide:
        return source
    return "".join(_ELIDED.format(number) if number in elide else line
                   for number, line in enumerate(source.splitlines(True), 1))


def _restore_elided(original: str, sparse: str, new: str) -> Optional[str]:
    """`new` (written from the sparse source) with the elided lines put back; None when an
    edit reached a placeholder (then no fix is trusted)."""
    if sparse == original:
        return new
    old_lines, new_lines = sparse.splitlines(True), new.splitlines(True)
    source_lines = original.splitlines(True)
    out: List[str] = []
    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            out.extend(source_lines[a0:a1])
            continue
        if any(line.startswith("# <tpf: elided line ") for line in old_lines[a0:a1]):
            return None
        out.extend(new_lines[b0:b1])
    return "".join(out)


def _plan_edits(ctx: Context, wanted: Sequence[Finding], result: FixResult) -> Planned:
    """Each finding's edits from its fixer; a fixer that declines or fails skips it."""
    planned: Planned = []
    for finding in wanted:
        try:
            edits = FIXERS[finding.plan.kind](ctx, finding.plan)
        except CstUnavailable:
            # LibCST computes positions recursively: a deep expression (500 implicitly
            # joined strings, nested lambdas) raises RecursionError (then KeyErrors) there
            result.skipped.append((finding, "LibCST cannot parse this file"))
            continue
        except Exception as exc:  # a fixer bug must not lose the user's file
            result.skipped.append((finding, f"fixer failed: {type(exc).__name__}"))
            continue
        if edits:
            planned.append((finding, edits))
        else:
            result.skipped.append((finding, "no safe automatic fix at this site"))
    return planned


def _apply_confirmed(ctx: Context, filename: str, baseline: Counter, planned: Planned,
                     result: FixResult) -> None:
    """All edits at once when re-linting confirms them; otherwise one at a time, keeping
    the ones that are confirmed."""
    new = _render(ctx, planned)
    if new is not None and _confirmed(new, filename, baseline, planned):
        result.source, result.fixed = new, [f for f, _ in planned]
        return
    accepted: Planned = []
    for item in planned:
        trial = _render(ctx, accepted + [item])
        if trial is not None and _confirmed(trial, filename, baseline, accepted + [item]):
            accepted.append(item)
            result.source = trial
        elif trial is None:   # LibCST could not write the file back (its code generation
            result.skipped.append((item[0], "LibCST cannot parse this file"))   # recurses)
        else:
            result.skipped.append((item[0], "re-lint did not confirm the fix; left as is"))
    result.fixed = [f for f, _ in accepted]


def _render(ctx: Context, planned: Planned) -> Optional[str]:
    """The file with the edits applied: only the top-level statements the fixers looked
    into are transformed (the edits' nodes are theirs); the rest is kept as parsed."""
    edits = [edit for _, group in planned for edit in group]
    try:
        batch = _Batch(edits)
        body = list(ctx.module.body)
        for index in ctx.opened:
            body[index] = body[index].visit(batch)
        new_module = ctx.module.with_changes(body=body)
        needed = sorted({name for edit in edits for name in edit.imports})
        for name in needed:
            new_module = ensure_import(new_module, name)
        return _restore_elided(getattr(ctx, "original", ctx.source), ctx.source,
                               new_module.code)
    except Exception:
        return None


def _confirmed(new: str, filename: str, baseline: Counter, planned: Planned) -> bool:
    """Parses, no code got more findings, and each fixed code lost at least its fixes.
    (LibCST wrote `new` from a tree it validated, so Python's parser is the check.)"""
    try:
        tree = ast.parse(elide_huge_literals(new), filename=filename)
    except Exception:
        return False
    after = Counter(f.code for f in lint_tree(tree, filename))
    fixed = Counter(f.code for f, _ in planned)
    for code in set(after) | set(baseline):
        if after[code] > baseline[code] - fixed[code]:
            return False
    return True
