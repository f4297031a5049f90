"""Which names a function binds, and which a loop body binds afresh: one statement walk.

Only statements are visited (expressions cannot bind names except through `:=`, which is
rare enough to leave out), and nested function and class bodies are skipped: they are
scopes of their own.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Set

from .astutil import dotted, target_texts

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class Bindings:
    """What a function body binds, found by one walk of its statements."""

    names: FrozenSet[str]                      # plain names bound in the body
    attributes: FrozenSet[str]                 # `self.loader`, `self.model.head`
    rebinds: Dict[ast.AST, Set[str]]           # loop -> names or `self.x` its body rebinds
    writes: Dict[ast.AST, Set[str]]            # loop -> what it writes into without rebinding


def scan_bindings(body: List[ast.stmt]) -> Bindings:
    """The bindings of `body`: names, attribute chains, and per loop what its body rebinds
    and what it writes into without rebinding (`x[i] = …`, `x.a = …`, `x += …`).

    An accumulation (`acc += v`, `acc = acc + v`) does not count as a rebind: the container
    or accumulator still comes from before the loop.
    """
    scan = _BindingScan()
    scan.visit(body)
    return Bindings(frozenset(scan.names), frozenset(scan.attributes), scan.rebinds, scan.writes)


class _BindingScan:
    def __init__(self) -> None:
        self.names: Set[str] = set()
        self.attributes: Set[str] = set()
        self.rebinds: Dict[ast.AST, Set[str]] = {}
        self.writes: Dict[ast.AST, Set[str]] = {}
        self.loops: List[ast.AST] = []   # the loops being visited, outermost first

    def visit(self, statements) -> None:
        for stmt in statements:
            if isinstance(stmt, _DEFS):
                self.bound(stmt.name)
                continue
            self.statement(stmt)
            if isinstance(stmt, _LOOPS):
                self.loop(stmt)
                continue
            for child in _child_bodies(stmt):
                self.visit(child)

    def statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assign):
            accumulates = isinstance(stmt.value, ast.BinOp)
            for target in stmt.targets:
                self.written_into(target)
                for text in target_texts(target):
                    accumulation = accumulates and _reads(stmt.value, text)
                    self.bound(text, accumulation)
                    if accumulation:   # `x = x + v`: the same write as `x += v`
                        self.written_into(target, augmented=True)
        elif isinstance(stmt, ast.AnnAssign):
            self.written_into(stmt.target)
            for text in target_texts(stmt.target):
                self.bound(text)
        elif isinstance(stmt, ast.AugAssign):
            self.written_into(stmt.target, augmented=True)
            for text in target_texts(stmt.target):
                self.bound(text, accumulation=True)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                self.bound((alias.asname or alias.name).split(".", 1)[0])
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                if item.optional_vars is not None:
                    for text in target_texts(item.optional_vars):
                        self.bound(text)

    def loop(self, loop) -> None:
        if isinstance(loop, (ast.For, ast.AsyncFor)):
            for text in target_texts(loop.target):
                self.bound(text)
        self.rebinds[loop] = set()
        self.writes[loop] = set()
        self.loops.append(loop)
        self.visit(loop.body)
        self.loops.pop()
        self.visit(loop.orelse)

    def written_into(self, target: ast.AST, augmented: bool = False) -> None:
        """`x.a[i] = …` writes into `x.a[i]`, `x.a` and `x` (`x += …` into `x`)."""
        if not augmented and not isinstance(target, (ast.Subscript, ast.Attribute)):
            return
        texts = []
        while isinstance(target, (ast.Subscript, ast.Attribute)):
            texts.append(dotted(target))
            target = target.value
        texts.append(dotted(target))
        for loop in self.loops:
            self.writes[loop].update(t for t in texts if t is not None)

    def bound(self, text: str, accumulation: bool = False) -> None:
        if "." not in text:
            self.names.add(text)
        else:
            self.attributes.add(text)
        if not accumulation:
            for loop in self.loops:
                self.rebinds[loop].add(text)


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


def _reads(expr: ast.AST, text: str) -> bool:
    return any(dotted(n) == text for n in ast.walk(expr) if isinstance(n, (ast.Name, ast.Attribute)))
