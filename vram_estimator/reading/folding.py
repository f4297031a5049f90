"""Bounded constant folding of user expressions (the script reader's only evaluator).

A linter runs on untrusted files, so evaluating ``x = 10 ** 64; x = x ** 64`` or
``s = s + s`` thirty times must cost nothing.  Every result is checked *before* it is
built: integers stay within ``MAX_INT`` in magnitude, floats finite, strings within
``MAX_STR`` characters, lists/dicts within ``MAX_ITEMS`` elements; an expression deeper than
``MAX_DEPTH`` nodes is not evaluated (so recursion is bounded by a constant, never by the
input), and each :class:`Folder` has a total step budget shared by every evaluation of one
file.  Whatever exceeds a bound is simply unknown (:class:`Unknown`), like any value that
cannot be read statically.

Names, attributes and a few calls are resolved through a ``lookup(node, evaluate)`` callback
of the owner (the script reader knows its bindings); ``evaluate`` folds a sub-expression one
level deeper, so the depth bound holds through the callback too.  The folder itself knows
only Python's operators.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any, Callable, Dict, Optional, Tuple

MAX_INT = 2**63
MAX_STR = 4096
MAX_ITEMS = 1024
MAX_DEPTH = 40
STEPS_PER_FILE = 200_000


class Unknown(Exception):
    """The value cannot be read statically (or would exceed a bound)."""


Resolved = Tuple[Any, str]  # (value, how it was found: '' or e.g. 'argparse default, line 3')
Evaluate = Callable[[ast.AST], Resolved]
Lookup = Callable[[ast.AST, Evaluate], Optional[Resolved]]

_ARITH = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CASTS = {"int": int, "float": float, "str": str, "bool": bool}


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _bits(x: Any) -> float:
    """log2 of a number's magnitude (0 for 0), without building anything big."""
    if isinstance(x, int):
        return float(abs(x).bit_length())
    return math.log2(abs(x)) if x else 0.0


def checked(value: Any) -> Any:
    """``value`` if it is within the bounds, else :class:`Unknown`."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if abs(value) >= MAX_INT:
            raise Unknown()
    elif isinstance(value, float):
        if not math.isfinite(value) or abs(value) >= MAX_INT:
            raise Unknown()
    elif isinstance(value, str):
        if len(value) > MAX_STR:
            raise Unknown()
    elif isinstance(value, (list, tuple, dict)):
        if len(value) > MAX_ITEMS:
            raise Unknown()
    return value


def _arith(op: ast.operator, a: Any, b: Any) -> Any:
    """One binary operation on already-bounded operands; the result size is checked first."""
    if _is_number(a) and _is_number(b):
        if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)) and b == 0:
            raise Unknown()
        if isinstance(op, ast.Pow):
            # log2|a ** b| >= (bits(a) - 1) * b: refuse what is surely past the bound before
            # building it; what passes is at most ~128 bits, then checked like any result
            if b > 0 and (_bits(a) - 1) * b > 64:
                raise Unknown()
            if b < 0 and a == 0:
                raise Unknown()
            if isinstance(a, float) or isinstance(b, float):
                if a < 0:
                    raise Unknown()  # a complex result
        fn = _ARITH.get(type(op))
        if fn is None:
            raise Unknown()
        try:
            return checked(fn(a, b))
        except (OverflowError, ZeroDivisionError):
            raise Unknown()
    if isinstance(op, ast.Add) and isinstance(a, str) and isinstance(b, str):
        if len(a) + len(b) > MAX_STR:
            raise Unknown()
        return a + b
    if isinstance(op, ast.Add) and isinstance(a, list) and isinstance(b, list):
        if len(a) + len(b) > MAX_ITEMS:
            raise Unknown()
        return a + b
    raise Unknown()


class Folder:
    """Evaluates simple expressions within fixed bounds; one instance per file."""

    def __init__(self, lookup: Lookup, steps: int = STEPS_PER_FILE):
        self.lookup = lookup
        self.steps_left = steps

    # The public entry points -------------------------------------------------------------

    def value(self, node: Optional[ast.AST]) -> Resolved:
        """``(value, how)`` or raise :class:`Unknown`."""
        if node is None:
            raise Unknown()
        return self._ev(node, 0)

    def try_value(self, node: Optional[ast.AST]) -> Resolved:
        """``(value, how)``, or ``(None, '')`` for anything unknown."""
        try:
            return self.value(node)
        except Unknown:
            return None, ""

    # Evaluation -----------------------------------------------------------------------------

    def _tick(self, depth: int) -> None:
        self.steps_left -= 1
        if self.steps_left < 0 or depth > MAX_DEPTH:
            raise Unknown()

    def _ev(self, node: ast.AST, depth: int) -> Resolved:
        self._tick(depth)
        handler = _NODE_HANDLERS.get(type(node))
        if handler is not None:
            return handler(self, node, depth)
        found = self.lookup(node, lambda child: self._ev(child, depth + 1))
        if found is None:
            raise Unknown()
        return found

    def _constant(self, node: ast.Constant, depth: int) -> Resolved:
        value = node.value
        if isinstance(value, (bytes, complex)) or value is Ellipsis:
            raise Unknown()
        return checked(value), ""

    def _unary(self, node: ast.UnaryOp, depth: int) -> Resolved:
        value, how = self._ev(node.operand, depth + 1)
        if isinstance(node.op, ast.USub) and _is_number(value):
            return -value, how
        if isinstance(node.op, ast.UAdd) and _is_number(value):
            return value, how
        if isinstance(node.op, ast.Not):
            return (not value), how
        raise Unknown()

    def _binop(self, node: ast.BinOp, depth: int) -> Resolved:
        a, how_a = self._ev(node.left, depth + 1)
        b, how_b = self._ev(node.right, depth + 1)
        return _arith(node.op, a, b), how_a or how_b

    def _sequence(self, node: ast.AST, depth: int) -> Resolved:
        elts = node.elts  # type: ignore[attr-defined]
        if len(elts) > MAX_ITEMS:
            raise Unknown()
        return [self._ev(e, depth + 1)[0] for e in elts], ""

    def _dict(self, node: ast.Dict, depth: int) -> Resolved:
        if len(node.keys) > MAX_ITEMS:
            raise Unknown()
        out: Dict[Any, Any] = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                raise Unknown()  # **spread: the rest is not known
            try:
                key = self._ev(k, depth + 1)[0]
                out[key] = self._ev(v, depth + 1)[0]
            except (Unknown, TypeError):  # TypeError: an unhashable key
                if self.steps_left < 0:
                    raise Unknown()
                continue
        return out, ""

    def _call(self, node: ast.Call, depth: int) -> Resolved:
        func = node.func
        if isinstance(func, ast.Name) and func.id in _CASTS and len(node.args) == 1 and not node.keywords:
            value, how = self._ev(node.args[0], depth + 1)
            if func.id == "str" and not isinstance(value, (str, int, bool)):
                raise Unknown()  # str(big float / list) has no bound we check cheaply
            try:
                return checked(_CASTS[func.id](value)), how
            except (TypeError, ValueError, OverflowError):
                raise Unknown()
        if isinstance(func, ast.Name) and func.id == "dict" and not node.args:
            return {k.arg: self._ev(k.value, depth + 1)[0] for k in node.keywords if k.arg}, ""
        found = self.lookup(node, lambda child: self._ev(child, depth + 1))
        if found is None:
            raise Unknown()
        return found

    def _ifexp(self, node: ast.IfExp, depth: int) -> Resolved:
        test, how = self._ev(node.test, depth + 1)
        return self._ev(node.body if test else node.orelse, depth + 1)


_NODE_HANDLERS: Dict[type, Callable[[Folder, Any, int], Resolved]] = {
    ast.Constant: Folder._constant,
    ast.UnaryOp: Folder._unary,
    ast.BinOp: Folder._binop,
    ast.List: Folder._sequence,
    ast.Tuple: Folder._sequence,
    ast.Dict: Folder._dict,
    ast.Call: Folder._call,
    ast.IfExp: Folder._ifexp,
}
