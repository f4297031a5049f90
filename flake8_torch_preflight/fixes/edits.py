"""What a fixer works with: the parsed file in both trees, and the edits it plans.

A fixer receives a `Context` and the finding's `FixPlan` (the ast node the rule pointed at)
and returns `Edit`s on the matching LibCST nodes; `_apply.py` applies every edit of a file
in one pass. Importing this module imports LibCST.
"""
from __future__ import annotations

import ast
import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider


@dataclass
class Edit:
    """Replace `node` (an original node of the parsed module) by `transform(updated node)`."""
    node: cst.CSTNode
    transform: Callable[[cst.CSTNode], cst.CSTNode]
    key: Tuple = ()               # edits with the same key are applied once
    imports: Tuple[str, ...] = ()  # modules to `import` at the top if missing ("torch")


class CstUnavailable(Exception):
    """LibCST could not give positions for the part of the file a fix needs."""


class _Span(NamedTuple):
    start_line: int
    start_col: int
    end_line: int
    end_col: int


@dataclass
class Context:
    """What a fixer may ask: the ast analysis and the CST, with positions joining them.

    Positions are resolved only for the top-level statements a fix looks into (LibCST's
    position pass over a whole 600 KiB module took 2.3 s): each such statement is laid out on
    its own and its lines are shifted to where it stands in the file. `opened` says which
    top-level statements those are, so the edits are applied to them alone."""
    source: str
    filename: str
    tree: ast.Module
    module: cst.Module
    opened: Dict[int, Dict[cst.CSTNode, _Span]] = field(default_factory=dict)
    _lines: List[str] = field(default_factory=list)
    _starts: List[int] = field(default_factory=list)
    _exprs: Dict[int, Dict[Tuple[int, int, int, int], List[cst.CSTNode]]] = \
        field(default_factory=dict)

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

    def _alone(self, statement: cst.CSTNode) -> cst.Module:
        """A module of one top-level statement, laid out as the whole module lays it out."""
        return self.module.with_changes(body=[statement], header=[], footer=[],
                                        has_trailing_newline=True)

    def _element_at(self, line: int) -> Optional[int]:
        """Index in `module.body` of the top-level statement whose text holds `line`. The
        statements are laid out one by one from the top, only as far as `line` needs."""
        body = self.module.body
        if not self._starts:
            self._starts.append(1 + len(self.module.header))
        try:
            while len(self._starts) <= len(body) and self._starts[-1] <= line:
                statement = body[len(self._starts) - 1]
                self._starts.append(self._starts[-1] + self._alone(statement).code.count("\n"))
        except Exception as exc:   # deep nesting: LibCST's code generation recurses
            raise CstUnavailable() from exc
        index = bisect.bisect_right(self._starts, line) - 1
        return index if 0 <= index < len(body) else None

    def positions_at(self, line: int) -> Dict[cst.CSTNode, _Span]:
        """Positions, in the file's lines, of every node of the top-level statement at `line`."""
        index = self._element_at(line)
        if index is None:
            return {}
        if index not in self.opened:
            try:
                found = MetadataWrapper(self._alone(self.module.body[index]),
                                        unsafe_skip_copy=True).resolve(PositionProvider)
            except Exception as exc:   # deep nesting: LibCST's position pass recurses
                raise CstUnavailable() from exc
            shift = self._starts[index] - 1
            self.opened[index] = {node: _Span(where.start.line + shift, where.start.column,
                                              where.end.line + shift, where.end.column)
                                  for node, where in found.items()}
        return self.opened[index]

    def cst_expr(self, node: ast.AST) -> Optional[cst.BaseExpression]:
        """The LibCST expression spanning exactly the same source as the ast node."""
        end_line = getattr(node, "end_lineno", None)
        if end_line is None:
            return None
        index = self._element_at(node.lineno)
        if index is None:
            return None
        if index not in self._exprs:
            table = self._exprs[index] = defaultdict(list)
            for cnode, where in self.positions_at(node.lineno).items():
                if isinstance(cnode, cst.BaseExpression):
                    table[where].append(cnode)
        key = _Span(node.lineno, self.char_col(node.lineno, node.col_offset),
                    end_line, self.char_col(end_line, node.end_col_offset))
        found = self._exprs[index].get(key)
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
        positions = self.positions_at(node.lineno)
        for cnode, where in positions.items():
            if isinstance(cnode, cst.FunctionDef) and cnode.name.value == node.name:
                name_pos = positions.get(cnode.name)
                if name_pos is not None and name_pos.start_line == node.lineno:
                    return cnode
        return None

    def cst_loop(self, node: ast.AST) -> Optional[cst.CSTNode]:
        """The LibCST `for`/`while` statement that starts where the ast loop starts."""
        kind = {ast.For: cst.For, ast.While: cst.While}.get(type(node))
        if kind is None:
            return None
        column = self.char_col(node.lineno, node.col_offset)
        for cnode, where in self.positions_at(node.lineno).items():
            if not isinstance(cnode, kind) or getattr(cnode, "asynchronous", None) is not None:
                continue
            if (where.start_line, where.start_col) == (node.lineno, column):
                return cnode
        return None


_AST_TO_CST = {ast.Name: cst.Name, ast.Attribute: cst.Attribute, ast.Call: cst.Call,
               ast.Subscript: cst.Subscript, ast.BinOp: cst.BinaryOperation,
               ast.UnaryOp: cst.UnaryOperation}


def ensure_import(module: cst.Module, name: str) -> cst.Module:
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
