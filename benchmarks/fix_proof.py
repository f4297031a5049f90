"""Every autofix `tpf fix` proposes, applied and checked against the proof it carries.

    python -m benchmarks.fix_proof --dest /work/corpus [--show]

For each file: lint it, apply every fix (`fixes.fix_source`), and check on the result what
the proof promised (`analysis/fix_proof.py`):
- the fixed file parses, and re-linting it shows each fixed finding gone and no new one;
- each `.detach()` landed on a value the analysis of the *fixed* file still proves a
  tensor, and nothing made from the container it is stored in reaches a backward, a loss,
  a call the analysis cannot see into, an object store or a return outside the file;
- each `@torch.no_grad()` landed on a function whose computation, in the fixed file,
  reaches no gradient consumer;
- each unsafe fix (applied here too, as `tpf fix --unsafe-fixes` does) put its one call,
  `sampler.set_epoch(epoch)` or `model.train()`, as the first statement of the loop the
  finding names (the re-lint above shows the finding gone and nothing new).
Counts: fixes applied, proposals the proof refused (findings of fixable rules whose fix
text says why `tpf fix` leaves them), and any broken premise (a failure). The tests run
the same check over the fixtures and examples (`tests/test_fix_property.py`), and over a
corpus when `TPF_CORPUS` names one.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from flake8_torch_preflight.analysis import FileAnalysis
from flake8_torch_preflight.analysis.topics.fix_proof import (container_premise, function_premise,
                                                              tensor_premise)
from flake8_torch_preflight.engine import lint_source
from flake8_torch_preflight.fixes import fix_source

FIXABLE = ("TPF001", "TPF002", "TPF005", "TPF007", "TPF009", "TPF013")
_LOOP_TOP = {"set_epoch": "set_epoch", "train_mode": "train"}
_REFUSED = "(not applied by `tpf fix`:"


@dataclass
class FileReport:
    path: str
    applied: List[str] = field(default_factory=list)    # "path:line CODE"
    refused: List[str] = field(default_factory=list)    # "path:line CODE: why"
    failures: List[str] = field(default_factory=list)   # broken premises


def _where(node: ast.AST) -> Tuple[int, int, int, int]:
    return (node.lineno, node.col_offset, getattr(node, "end_lineno", 0),
            getattr(node, "end_col_offset", 0))


def check_source(source: str, path: str) -> FileReport:
    report = FileReport(path)
    before = lint_source(source, path)
    for finding in before:
        if finding.code in FIXABLE and _REFUSED in finding.fix:
            why = finding.fix.split(_REFUSED, 1)[1].rstrip(")")
            report.refused.append(f"{path}:{finding.line} {finding.code}:{why}")
    if not any(f.plan is not None for f in before):
        return report
    result = fix_source(source, path, noqa=False, unsafe=True)
    if not result.fixed:
        return report
    report.applied = [f"{path}:{f.line} {f.code}" for f in result.fixed]
    try:
        fixed_tree = ast.parse(result.source, filename=path)
    except SyntaxError as exc:
        report.failures.append(f"{path}: the fixed file does not parse ({exc})")
        return report
    _check_relint(report, before, lint_source(result.source, path), result.fixed)
    original = FileAnalysis(ast.parse(source, filename=path), path)
    fixed = FileAnalysis(fixed_tree, path)
    try:
        for finding in result.fixed:
            _check_premises(report, finding, original, fixed)
    finally:
        original.release()
        fixed.release()
    return report


def _check_relint(report: FileReport, before, after, fixed) -> None:
    """Each fixed finding is gone and nothing new appeared (compared by code and text: the
    decorator a fix adds moves the lines below it)."""
    old = Counter(_identity(f) for f in before)
    new = Counter(_identity(f) for f in after)
    gone = Counter(_identity(f) for f in fixed)
    for key, count in new.items():
        if count > old[key] - gone[key]:
            report.failures.append(f"{report.path}: after the fix, {key[0]} '{key[1]}' is "
                                   f"reported {count} times (before: {old[key]}, fixed: {gone[key]})")


def _identity(finding) -> Tuple[str, str]:
    return finding.code, re.sub(r"\d+", "N", finding.what)


def _check_premises(report: FileReport, finding, original: FileAnalysis, fixed: FileAnalysis) -> None:
    plan = finding.plan
    where = f"{report.path}:{finding.line} {finding.code}"
    if plan.kind == "detach":
        store = _store_at(original, plan.node)
        if store is None:
            report.failures.append(f"{where}: no store of the detached expression was recorded")
            return
        values = _detached_receivers(fixed, ast.unparse(plan.node))
        if not values or any(tensor_premise(v) is not None for v in values):
            report.failures.append(f"{where}: in the fixed file the detached value is not "
                                   f"proven a tensor")
        use = container_premise(fixed, store.key, returns_freed=_freed(original, store))
        if use is not None:
            report.failures.append(f"{where}: in the fixed file what `{store.target}` holds {use}")
    elif plan.kind in _LOOP_TOP:
        _check_loop_top(report, where, plan, fixed)
    elif plan.kind == "no_grad_decorator":
        func = next((f for f in fixed.index.functions if f.qualname == _qualname(original, plan.node)), None)
        if func is None or not func.no_grad_decorated:
            report.failures.append(f"{where}: the fixed file has no `@torch.no_grad()` function there")
            return
        why = function_premise(fixed, func)
        if why is not None:
            report.failures.append(f"{where}: in the fixed file {why}")


def _check_loop_top(report: FileReport, where: str, plan, fixed: FileAnalysis) -> None:
    """A loop with the planned loop's header (other fixes move lines) now opens with the
    one call."""
    method = _LOOP_TOP[plan.kind]
    if not any(_header(n) == _header(plan.node) and _opens_with(n, plan.replacement, method)
               for n in ast.walk(fixed.tree) if isinstance(n, (ast.For, ast.While))):
        report.failures.append(f"{where}: the loop at line {plan.node.lineno} does not start "
                               f"with `{ast.unparse(plan.replacement)}.{method}(...)`")


def _header(loop: ast.AST) -> str:
    if isinstance(loop, ast.For):
        return f"for {ast.unparse(loop.target)} in {ast.unparse(loop.iter)}"
    return f"while {ast.unparse(loop.test)}"


def _opens_with(loop: ast.AST, receiver: ast.AST, method: str) -> bool:
    first = loop.body[0]
    call = first.value if isinstance(first, ast.Expr) else None
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
        and call.func.attr == method and ast.unparse(call.func.value) == ast.unparse(receiver)


def _store_at(analysis: FileAnalysis, node: ast.AST):
    wanted = _where(node)
    for facts in analysis.all_facts():
        for store in facts.stores:
            if _where(store.expr) == wanted:
                return store
    return None


def _freed(analysis: FileAnalysis, store) -> bool:
    from flake8_torch_preflight.rules.tpf001_retained_graph import _backward_in_iteration
    for facts in analysis.all_facts():
        if store in facts.stores:
            freeing = _backward_in_iteration(analysis, facts, store)
            return freeing is not None and freeing[1]
    return False


def _detached_receivers(analysis: FileAnalysis, text: str) -> List:
    """The values, in the fixed file, of every `X.detach()` receiver written as `text`."""
    found = []
    for facts in analysis.all_facts():
        scope = facts.func.node if facts.func is not None else analysis.tree
        for node in ast.walk(scope):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "detach" and not node.args \
                    and id(node.func.value) in facts.values \
                    and ast.unparse(node.func.value) == text:
                found.append(facts.values[id(node.func.value)])
    return found


def _qualname(analysis: FileAnalysis, node: ast.AST) -> Optional[str]:
    return next((f.qualname for f in analysis.index.functions if f.node is node
                 or _where(f.node) == _where(node)), None)


def python_files(roots: Iterable[Path]) -> List[Path]:
    files: List[Path] = []
    for root in roots:
        if root.is_file():
            files.append(root)
        else:
            files.extend(p for p in sorted(root.rglob("*.py")) if not p.name.endswith(".fixed.py"))
    return files


def check_files(paths: Iterable[Path]) -> Dict[str, List[str]]:
    totals: Dict[str, List[str]] = {"applied": [], "refused": [], "failures": []}
    for path in paths:
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        report = check_source(source, str(path))
        for name in totals:
            totals[name].extend(getattr(report, name))
    return totals


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fix_proof",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--dest", action="append", type=Path, required=True,
                        help="a folder or file to check (repeatable)")
    parser.add_argument("--show", action="store_true", help="list every fix and refusal")
    args = parser.parse_args(argv)
    totals = check_files(python_files(args.dest))
    print(f"fixes applied: {len(totals['applied'])}; refused by the proof: "
          f"{len(totals['refused'])}; broken premises: {len(totals['failures'])}")
    for name in ("applied", "refused", "failures") if args.show else ("failures",):
        for line in totals[name]:
            print(f"  {name}: {line}")
    return 1 if totals["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
