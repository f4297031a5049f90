"""What a fixer works with: the parsed file in both trees, and the edits it plans.

A fixer receives a `Context` and the finding's `FixPlan` (the ast node the rule pointed at)
and returns `Edit`s on the matching LibCST nodes; `_apply.py` applies every edit of a file
in one pass. Importing this module imports LibCST.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import libcst as cst


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
