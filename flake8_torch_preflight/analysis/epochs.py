"""Epoch loops and what a loop iterates: questions shared by TPF007 and TPF009.

An *epoch loop* (spec vocabulary) is a loop that contains a training loop: a nested loop of
the same function that runs a backward pass, or a call of a file-local helper that has such
a loop (`for epoch in ...: train_one_epoch(...)`). Everything here reads the per-function
facts the flow analysis computed once; answers are memoised per `FileAnalysis`.
"""
from __future__ import annotations

import ast
from typing import List, Optional, Tuple

from . import values as V
from .astutil import iterated_expr
from .events import FunctionFacts
from .memo import per_file
from .values import Value


@per_file("epoch_loops")
def epoch_loops(analysis, facts: FunctionFacts) -> List[ast.AST]:
    """Loops of `facts` that contain a training loop (nested, or inside a called helper)."""
    found = set()
    for loop in analysis.training_loops(facts):
        parent = facts.loop_parents.get(loop)
        while parent is not None:
            found.add(parent)
            parent = facts.loop_parents.get(parent)
    for call in facts.local_calls:
        if call.site.loops and analysis.has_training_loop(call.callee):
            found.update(call.site.loops)
    return [loop for loop in facts.loops if loop in found]


def argument_for(func, call: ast.Call, index: int) -> Optional[ast.expr]:
    """The expression a call passes for parameter `index` of `func` (None when defaulted)."""
    offset = 1 if func.is_method and isinstance(call.func, ast.Attribute) else 0
    if offset and index == 0:
        return call.func.value
    pos = index - offset
    if 0 <= pos < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:pos + 1]):
        return call.args[pos]
    name = func.params[index] if index < len(func.params) else None
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def resolve_values(analysis, facts: FunctionFacts, value: Value, depth: int = 2) -> List[Value]:
    """`value`, or, when it is a parameter of `facts.func`, what the file's callers pass."""
    if not value.params or facts.func is None or depth <= 0 or value.has(V.LOADER):
        return [value]
    out: List[Value] = []
    func = facts.func
    for caller_facts, call in analysis.callers(func):
        for index in sorted(value.params):
            expr = argument_for(func, call.node, index)
            if expr is not None:
                out.extend(resolve_values(analysis, caller_facts, caller_facts.value(expr),
                                          depth - 1))
    return out


def iterated_loaders(analysis, facts: FunctionFacts, loop: ast.AST) -> List[Value]:
    """The DataLoader values `loop` iterates (following parameters to the file's callers)."""
    expr = iterated_expr(loop)
    if expr is None:
        return []
    return [v for v in resolve_values(analysis, facts, facts.value(expr)) if v.has(V.LOADER)]


def loaders_per_epoch(analysis, facts: FunctionFacts, loop: ast.AST) -> List[Tuple[Value, ast.AST]]:
    """(loader value, loop that iterates it) for the loaders an epoch loop trains on.

    Training loops nested in `loop`, plus, for each file-local helper called in `loop` that has
    a training loop, the loader values passed to it and the loaders its own training loops
    iterate (`self.train_loader`, module globals).
    """
    out: List[Tuple[Value, ast.AST]] = []
    for inner in analysis.training_loops(facts):
        if inner is loop or _inside(facts, inner, loop):
            for value in iterated_loaders(analysis, facts, inner):
                out.append((value, inner))
    seen = set()
    for call in facts.local_calls:
        if loop not in call.site.loops or not analysis.has_training_loop(call.callee):
            continue
        for arg in list(call.node.args) + [kw.value for kw in call.node.keywords]:
            value = facts.value(arg)
            if value.has(V.LOADER):
                out.append((value, loop))
        _helper_loaders(analysis, call.callee, loop, out, seen)
    return out


def _helper_loaders(analysis, func, loop, out, seen, depth: int = 3) -> None:
    if func in seen or depth <= 0:
        return
    seen.add(func)
    facts = analysis.facts_for(func)
    for inner in analysis.training_loops(facts):
        expr = iterated_expr(inner)
        if expr is not None:
            value = facts.value(expr)
            if value.has(V.LOADER) and value.node is not None:
                out.append((value, loop))
    for call in facts.local_calls:
        _helper_loaders(analysis, call.callee, loop, out, seen, depth - 1)


def _inside(facts: FunctionFacts, inner: ast.AST, outer: ast.AST) -> bool:
    parent = facts.loop_parents.get(inner)
    while parent is not None:
        if parent is outer:
            return True
        parent = facts.loop_parents.get(parent)
    return False
