"""Which names a function binds, and which a loop body binds afresh: one statement walk.

Only statements are visited (expressions cannot bind names except through `:=`, which is
rare enough to leave out), and nested function and class bodies are skipped: they are
scopes of their own.
"""
from __future__ import annotations

import ast
from typing import Dict, List, Set

from .astutil import dotted

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def scan_bindings(body: List[ast.stmt]):
    """(names bound in `body`, loop -> names or `self.x` its body rebinds,
    loop -> what its body writes into without rebinding: `x[i] = …`, `x.a = …`, `x += …`).

    An accumulation (`acc += v`, `acc = acc + v`) does not count as a rebind: the container
    or accumulator still comes from before the loop.
    """
    names: Set[str] = set()
    rebinds: Dict[ast.AST, Set[str]] = {}
    writes: Dict[ast.AST, Set[str]] = {}
    stack: List[ast.AST] = []

    def written_into(target: ast.AST) -> None:
        """`x.a[i] = …` writes into `x.a[i]`, `x.a` and `x`."""
        texts = []
        while isinstance(target, (ast.Subscript, ast.Attribute)):
            texts.append(dotted(target))
            target = target.value
        texts.append(dotted(target))
        for loop in stack:
            writes[loop].update(t for t in texts if t is not None)

    def bound(text: str, accumulation: bool = False) -> None:
        if "." not in text:
            names.add(text)
        if not accumulation:
            for loop in stack:
                rebinds[loop].add(text)

    def visit(statements) -> None:
        for stmt in statements:
            if isinstance(stmt, _DEFS):
                bound(stmt.name)
                continue
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                    if isinstance(target, (ast.Subscript, ast.Attribute)):
                        written_into(target)
            if isinstance(stmt, ast.Assign):
                accumulates = isinstance(stmt.value, ast.BinOp)
                for target in stmt.targets:
                    for text in _target_texts(target):
                        bound(text, accumulates and _reads(stmt.value, text))
            elif isinstance(stmt, ast.AnnAssign):
                for text in _target_texts(stmt.target):
                    bound(text)
            elif isinstance(stmt, ast.AugAssign):
                written_into(stmt.target)
                for text in _target_texts(stmt.target):
                    bound(text, accumulation=True)
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for alias in stmt.names:
                    bound((alias.asname or alias.name).split(".", 1)[0])
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                for item in stmt.items:
                    if item.optional_vars is not None:
                        for text in _target_texts(item.optional_vars):
                            bound(text)
            if isinstance(stmt, _LOOPS):
                if isinstance(stmt, (ast.For, ast.AsyncFor)):
                    for text in _target_texts(stmt.target):
                        bound(text)
                rebinds[stmt] = set()
                writes[stmt] = set()
                stack.append(stmt)
                visit(stmt.body)
                stack.pop()
                visit(stmt.orelse)
                continue
            for child in _child_bodies(stmt):
                visit(child)

    visit(body)
    return names, rebinds, writes


def _child_bodies(stmt: ast.stmt):
    for field in ("body", "orelse", "finalbody"):
        child = getattr(stmt, field, None)
        if isinstance(child, list):
            yield child
    for handler in getattr(stmt, "handlers", ()):
        if handler.name:
            yield [ast.Assign(targets=[ast.Name(handler.name, ast.Store())], value=ast.Constant(None))]
        yield handler.body
    for case in getattr(stmt, "cases", ()):
        yield case.body


def _target_texts(target: ast.AST):
    if isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _target_texts(elt)
    elif isinstance(target, ast.Starred):
        yield from _target_texts(target.value)
    else:
        text = dotted(target)
        if text is not None:
            yield text


def _reads(expr: ast.AST, text: str) -> bool:
    return any(dotted(n) == text for n in ast.walk(expr) if isinstance(n, (ast.Name, ast.Attribute)))
