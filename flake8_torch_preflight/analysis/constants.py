"""Branches that can never run: `if` tests folded over names bound once to a literal.

`world_size = 1` at the top of `main()` followed by `if world_size > 1: model = DDP(model)`
is a script that never wraps its model. Only names bound exactly once in their scope, to a
literal, and never rebound (no augmented assignment, loop target, `with ... as`, `del`,
`global`/`nonlocal` anywhere in the file) are folded; everything else is unknown, and an
unknown test is a branch that may run.

Folding is bounded: tests deeper than `_MAX_DEPTH` nodes, numbers beyond `_MAX_MAGNITUDE`
and anything but comparisons, `and`/`or`/`not` of names and literals are unknown.
"""
from __future__ import annotations

import ast
import operator
from typing import Dict, Optional, Set

from .events import FunctionFacts, Site
from .memo import per_file

_MAX_DEPTH = 12
_MAX_MAGNITUDE = 10 ** 18
_LITERAL_TYPES = (bool, int, float, str, type(None))
_COMPARE = {ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Is: operator.is_,
            ast.IsNot: operator.is_not}
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def unreachable(analysis, facts: FunctionFacts, site: Site) -> bool:
    """Some enclosing `if` of `site` folds to the branch not taken."""
    for cond in site.conds:
        truth = static_truth(analysis, facts, cond.test)
        if truth is not None and truth is cond.negated:
            return True
    return False


def static_truth(analysis, facts: FunctionFacts, test: ast.expr) -> Optional[bool]:
    """True/False when the test folds to a constant, else None."""
    value = _fold(test, literal_names(analysis, facts), _MAX_DEPTH)
    return None if value is _UNKNOWN else bool(value)


_UNKNOWN = object()


def _fold(node: ast.expr, names: Dict[str, object], budget: int):
    if budget <= 0:
        return _UNKNOWN
    if isinstance(node, ast.Constant):
        return _literal(node.value)
    if isinstance(node, ast.Name):
        return names.get(node.id, _UNKNOWN)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        value = _fold(node.operand, names, budget - 1)
        return _UNKNOWN if value is _UNKNOWN else not value
    if isinstance(node, ast.BoolOp):
        return _fold_bool(node, names, budget)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        left = _fold(node.left, names, budget - 1)
        right = _fold(node.comparators[0], names, budget - 1)
        if left is _UNKNOWN or right is _UNKNOWN:
            return _UNKNOWN
        if isinstance(node.ops[0], (ast.Is, ast.IsNot)) and not (
                _singleton(left) or _singleton(right)):
            return _UNKNOWN    # identity of equal numbers or strings is the interpreter's choice
        try:
            return _COMPARE[type(node.ops[0])](left, right)
        except TypeError:      # `"a" > 1`: the script would raise here; not ours to judge
            return _UNKNOWN
    return _UNKNOWN


def _singleton(value) -> bool:
    return value is None or value is True or value is False


def _fold_bool(node: ast.BoolOp, names, budget: int):
    """`a and b` / `a or b` as Python evaluates it: the first operand that decides (a false
    one for `and`, a true one for `or`), else the last; unknown once an operand before the
    deciding one is unknown."""
    is_and = isinstance(node.op, ast.And)
    value = _UNKNOWN
    for operand in node.values:
        value = _fold(operand, names, budget - 1)
        if value is _UNKNOWN or bool(value) is not is_and:
            return value
    return value


def _literal(value):
    if not isinstance(value, _LITERAL_TYPES):
        return _UNKNOWN
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and abs(value) > _MAX_MAGNITUDE:
        return _UNKNOWN
    if isinstance(value, str) and len(value) > 200:
        return _UNKNOWN
    return value


@per_file("literal_names", key_args=1)
def literal_names(analysis, facts: FunctionFacts) -> Dict[str, object]:
    """name -> literal, for the names of one scope bound exactly once, to a literal."""
    scope = facts.func.node if facts.func is not None else analysis.tree
    body = scope.body
    stores: Dict[str, int] = {}
    literal: Dict[str, object] = {}
    for node in _walk_scope(body):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            stores[node.id] = stores.get(node.id, 0) + 1
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Constant):
            value = _literal(node.value.value)
            if value is not _UNKNOWN:
                literal[node.targets[0].id] = value
    shared = _declared_shared(analysis)
    params = set(facts.func.params) if facts.func is not None else set()
    return {name: value for name, value in literal.items()
            if stores.get(name) == 1 and name not in shared and name not in params}


def _walk_scope(body):
    """Every node of a scope's own code (not the bodies of nested functions and classes)."""
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, _DEFS):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


@per_file("shared_names")
def _declared_shared(analysis) -> Set[str]:
    """Names some function declares `global` or `nonlocal`: any scope may rebind them."""
    return {name for node in ast.walk(analysis.tree)
            if isinstance(node, (ast.Global, ast.Nonlocal)) for name in node.names}
