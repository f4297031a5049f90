"""Identity through a call: a function that returns one of its parameters unchanged.

`def layer_init(layer, std): nn.init.orthogonal_(layer.weight, std); return layer` hands its
caller back the very object it was given: `self.critic = layer_init(nn.Linear(256, 1))` is
that `nn.Linear` (a module), not a value made by unread code. The interpreter asks
`returned_parameter(func)` at each call of a project function and, when it names a position,
the call's result is the argument at that position, whatever the summary of the return says.

Read from the text once per function, and only claimed when nothing else can come back:
every `return` of the function's own body (nested functions are scopes of their own) is
`return p` for the same parameter `p`, the body ends with that `return` (no fall-through to
an implicit `None`), `p` is never rebound in the body (`p = p.to(device)` makes a new
object; `p += 1` may), and the function is no generator (its call returns a generator).
"""
from __future__ import annotations

import ast
import weakref
from typing import Iterator, Optional

from .bindings import scan_bindings

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_RETURNED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_NONE = -1     # cached "returns no parameter unchanged"


def returned_parameter(func) -> Optional[int]:
    """The position of the parameter every path of `func` returns unchanged, or None."""
    found = _RETURNED.get(func)
    if found is None:
        found = _RETURNED[func] = _find_returned_parameter(func)
    return None if found == _NONE else found


def _find_returned_parameter(func) -> int:
    node = func.node
    if isinstance(node, ast.AsyncFunctionDef) or not node.body:
        return _NONE       # a coroutine's call returns a coroutine, not the argument
    last = node.body[-1]
    if not (isinstance(last, ast.Return) and isinstance(last.value, ast.Name)):
        return _NONE
    name = last.value.id
    if name not in func.params or name in scan_bindings(node.body).names:
        return _NONE
    for child in _own_nodes(node):
        if isinstance(child, (ast.Yield, ast.YieldFrom)):
            return _NONE
        if isinstance(child, ast.Return) and not (
                isinstance(child.value, ast.Name) and child.value.id == name):
            return _NONE
        if isinstance(child, ast.NamedExpr) and child.target.id == name:
            return _NONE
    return func.params.index(name)


def _own_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node of the function's body, without the bodies of nested scopes."""
    stack = list(node.body)
    while stack:
        child = stack.pop()
        yield child
        stack.extend(c for c in ast.iter_child_nodes(child) if not isinstance(c, _DEFS))
