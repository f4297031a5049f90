"""The fix pipeline: lint, plan edits per finding, apply them in one LibCST pass, verify.

Importing this module imports LibCST; only `fixes.fix_source` does, lazily.
"""
from __future__ import annotations

import ast
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ..analysis import FileAnalysis
from ..engine import has_skip_file_comment, lint_tree
from ..findings import Finding
from . import FixResult, is_fixable, tpf001_detach, tpf002_no_grad, tpf005_softmax, tpf013_pin_memory

FIXERS = {
    "TPF001": tpf001_detach.plan,
    "TPF002": tpf002_no_grad.plan,
    "TPF005": tpf005_softmax.plan,
    "TPF013": tpf013_pin_memory.plan,
}


@dataclass
class Edit:
    """Replace `node` (an original node of the parsed module) by `transform(updated node)`."""
    node: cst.CSTNode
    transform: Callable[[cst.CSTNode], cst.CSTNode]
    key: Tuple = ()               # edits with the same key are applied once
    imports: Tuple[str, ...] = ()  # modules to `import` at the top if missing ("torch")


@dataclass
class Context:
    """What a fixer may ask: the ast analysis and the CST, with positions joining them."""
    source: str
    filename: str
    tree: ast.Module
    analysis: FileAnalysis
    module: cst.Module
    positions: Dict[cst.CSTNode, object]
    _lines: List[str] = field(default_factory=list)
    _exprs: Optional[Dict[Tuple[int, int, int, int], List[cst.CSTNode]]] = None

    def char_col(self, line: int, byte_col: int) -> int:
        """ast columns count UTF-8 bytes; LibCST columns count characters."""
        if not self._lines:
            self._lines = self.source.splitlines(True)
        if 1 <= line <= len(self._lines):
            text = self._lines[line - 1]
            if text.isascii():
                return byte_col
            return len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace"))
        return byte_col

    def cst_expr(self, node: ast.AST) -> Optional[cst.BaseExpression]:
        """The LibCST expression spanning exactly the same source as the ast node."""
        if self._exprs is None:
            self._exprs = defaultdict(list)
            for cnode, where in self.positions.items():
                if isinstance(cnode, cst.BaseExpression):
                    self._exprs[(where.start.line, where.start.column,
                                 where.end.line, where.end.column)].append(cnode)
        end_line = getattr(node, "end_lineno", None)
        if end_line is None:
            return None
        key = (node.lineno, self.char_col(node.lineno, node.col_offset),
               end_line, self.char_col(end_line, node.end_col_offset))
        found = self._exprs.get(key)
        if not found:
            return None
        # the same span can hold several expressions (rare); prefer the matching kind
        kind = _AST_TO_CST.get(type(node))
        for cnode in found:
            if kind is not None and isinstance(cnode, kind):
                return cnode
        return found[0] if len(found) == 1 else None

    def cst_function(self, node: ast.AST) -> Optional[cst.FunctionDef]:
        if not isinstance(node, ast.FunctionDef):
            return None
        for cnode, where in self.positions.items():
            if isinstance(cnode, cst.FunctionDef) and cnode.name.value == node.name:
                name_pos = self.positions.get(cnode.name)
                if name_pos is not None and name_pos.start.line == node.lineno:
                    return cnode
        return None

    def calls_on_line(self, line: int):
        for facts in self.analysis.all_facts():
            for call in facts.calls:
                if call.site.line == line or getattr(call.node, "lineno", None) == line:
                    yield facts, call


_AST_TO_CST = {ast.Name: cst.Name, ast.Attribute: cst.Attribute, ast.Call: cst.Call,
               ast.Subscript: cst.Subscript, ast.BinOp: cst.BinaryOperation,
               ast.UnaryOp: cst.UnaryOperation}


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


def apply_fixes(source: str, filename: str = "<stdin>",
                keep: Optional[Callable[[Finding], bool]] = None) -> FixResult:
    if has_skip_file_comment(source.splitlines(True)):
        return FixResult(source)
    try:
        tree = ast.parse(source, filename=filename)
    except (SyntaxError, ValueError):
        return FixResult(source)
    all_findings = lint_tree(tree, filename)
    wanted = [f for f in all_findings
              if f.code in FIXERS and is_fixable(f) and (keep is None or keep(f))]
    if not wanted:
        return FixResult(source)
    result = FixResult(source)
    try:
        module = cst.parse_module(source)
    except Exception:   # LibCST's grammar lags CPython's in rare corners
        result.skipped = [(f, "LibCST cannot parse this file") for f in wanted]
        return result
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    ctx = Context(source, filename, tree, FileAnalysis(tree, filename), module,
                  dict(wrapper.resolve(PositionProvider)))
    planned: List[Tuple[Finding, List[Edit]]] = []
    for finding in wanted:
        try:
            edits = FIXERS[finding.code](ctx, finding)
        except Exception as exc:  # a fixer bug must not lose the user's file
            edits = None
            result.skipped.append((finding, f"fixer failed: {type(exc).__name__}"))
            continue
        if edits:
            planned.append((finding, edits))
        else:
            result.skipped.append((finding, "no safe automatic fix at this site"))
    if not planned:
        return result
    baseline = Counter(f.code for f in all_findings)
    new = _render(module, planned)
    if new is not None and _confirmed(new, filename, baseline, planned):
        result.source, result.fixed = new, [f for f, _ in planned]
        return result
    accepted: List[Tuple[Finding, List[Edit]]] = []   # one at a time: keep the good ones
    best = source
    for item in planned:
        trial = _render(module, accepted + [item])
        if trial is not None and _confirmed(trial, filename, baseline, accepted + [item]):
            accepted.append(item)
            best = trial
        else:
            result.skipped.append((item[0], "re-lint did not confirm the fix; left as is"))
    result.source, result.fixed = best, [f for f, _ in accepted]
    return result


def _render(module: cst.Module, planned: Sequence[Tuple[Finding, List[Edit]]]) -> Optional[str]:
    edits = [edit for _, group in planned for edit in group]
    try:
        new_module = module.visit(_Batch(edits))
        needed = sorted({name for edit in edits for name in edit.imports})
        for name in needed:
            new_module = _ensure_import(new_module, name)
        return new_module.code
    except Exception:
        return None


def _confirmed(new: str, filename: str, baseline: Counter,
               planned: Sequence[Tuple[Finding, List[Edit]]]) -> bool:
    """Parses, no code got more findings, and each fixed code lost at least its fixes."""
    try:
        tree = ast.parse(new, filename=filename)
        cst.parse_module(new)
    except Exception:
        return False
    after = Counter(f.code for f in lint_tree(tree, filename))
    fixed = Counter(f.code for f, _ in planned)
    for code in set(after) | set(baseline):
        if after[code] > baseline[code] - fixed[code]:
            return False
    return True


def _ensure_import(module: cst.Module, name: str) -> cst.Module:
    """`import <name>` after the file's leading imports, unless it is already imported."""
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        dotted = _dotted(alias.name)
                        if alias.asname is None and dotted.split(".")[0] == name:
                            return module
    index, before_torch = 0, None
    for i, stmt in enumerate(module.body):
        if not isinstance(stmt, cst.SimpleStatementLine):
            break
        if all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
            index = i + 1
            if before_torch is None and _imports_from(stmt, name):
                before_torch = i
        elif i == 0 and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr) \
                and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
            index = 1   # the module docstring
        else:
            break
    statement = cst.SimpleStatementLine(body=[cst.Import(names=[cst.ImportAlias(name=cst.Name(name))])])
    body = list(module.body)
    if before_torch is not None:
        # `import torch` just above `import torch.nn as nn` / `from torch... import`, taking
        # over the comments and blank lines that led into that import
        anchor = body[before_torch]
        body[before_torch] = anchor.with_changes(leading_lines=())
        body.insert(before_torch, statement.with_changes(leading_lines=anchor.leading_lines))
    else:
        body.insert(index, statement)
    return module.with_changes(body=body)


def _imports_from(stmt: cst.SimpleStatementLine, name: str) -> bool:
    for small in stmt.body:
        if isinstance(small, cst.Import):
            if any(_dotted(a.name).split(".")[0] == name for a in small.names):
                return True
        elif isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None:
            if _dotted(small.module).split(".")[0] == name:
                return True
    return False


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def torch_name(tree: ast.Module) -> Tuple[Optional[str], bool]:
    """The module-level name torch is reachable by, and whether `import torch` is needed.

    Returns (None, False) when `torch` is bound to something else (no safe fix).
    """
    other_binding = False
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.name == "torch" and alias.asname:
                    return alias.asname, False
                if alias.asname is None and alias.name.split(".")[0] == "torch":
                    return "torch", False
                if alias.asname == "torch":
                    other_binding = True
        elif isinstance(stmt, ast.ImportFrom):
            if any((a.asname or a.name) == "torch" for a in stmt.names):
                other_binding = True
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "torch" and isinstance(node.ctx, ast.Store):
            other_binding = True
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == "torch":
            other_binding = True
    if other_binding:
        return None, False
    return "torch", True


def with_parens_if_needed(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`expr` safe as the receiver of `.method()`."""
    if expr.lpar or isinstance(expr, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
