"""Does the code read a host buffer back into computation? Asked by TPF010 for a container
that a per-step sync fills (`preds[idx] = out.cpu()`, `losses.append(loss.item())`): the
sync is only "to log" when nothing in the loops around the store feeds the buffer's
contents to the model, a loss or anything the analysis cannot follow (label reuse feeds the
previous round's host predictions back as model input).

Every read of the buffer inside the given scope counts, wherever it sits in the loop body: a
read above the store sees what the previous iteration stored. A read is followed through
the calls around it (recorded by the flow analysis) and through the names it is bound to
(`preds_old = preds.clone()` makes `preds_old` a copy of the buffer), a few rounds deep.
It is fed back when it reaches a forward, a loss, a backward, a move to the device, a helper
of the project, a call the analysis cannot see into (outside host-only packages), a test the
loop branches on, or a `return`; it is not when it ends in a logging call, in `len()`, in a
write into the buffer itself, or in a value that is dropped.
"""
from __future__ import annotations

import ast
from typing import Callable, Dict, Iterator, List, Optional, Set

from ..semantics import torchapi as api
from ..core import values as V
from ..core.astutil import target_texts
from .device import encloses, is_transfer
from ..core.events import CallSite, FunctionFacts
from ..semantics.containers import STORE_METHODS

_MAX_ROUNDS = 6   # names bound from the buffer, from those, ... (label reuse needs one)
# Builtins whose result says nothing about the contents (a size is bookkeeping).
_SIZE_ONLY = frozenset({"len"})
# Tensor methods that copy their argument into the receiver (`buf.copy_(preds)`), on top of
# the container stores (`history.append(preds)`): the receiver then holds the contents.
_WRITING_METHODS = frozenset(STORE_METHODS) | {"copy_", "index_copy_", "index_put_", "put_",
                                               "scatter_", "masked_scatter_", "set_"}
# Statements whose value goes nowhere the loop could read again.
_DROPPING = (ast.Expr, ast.Assert, ast.Raise)


class _FedBack(Exception):
    """A read of the buffer reaches computation (or somewhere the analysis cannot follow)."""


def fed_back(facts: FunctionFacts, scope: ast.AST, container: str,
             logs: Callable[[CallSite], bool]) -> bool:
    """Whether `container` (a name or `self.attr`, as `buffer_name` gives it) is read back
    into computation anywhere in `scope` (the outermost loop around the store, or the body
    of a function that runs every step). `logs` says which calls only log."""
    reader = _Reader(facts, scope, logs)
    tainted = {container}
    try:
        for _ in range(_MAX_ROUNDS):
            grown = reader.follow(tainted)
            if grown <= tainted:
                return False
            tainted |= grown
    except _FedBack:
        return True
    return True   # still spreading after that many names: unknown, so assume it is used


def buffer_name(target: ast.AST) -> Optional[str]:
    """The name a store target writes into: `preds` for `preds[idx]`, `self.history` for
    `self.history[k]` (the whole `self` would be every attribute), None otherwise."""
    while isinstance(target, (ast.Subscript, ast.Attribute, ast.Starred)):
        inner = target.value
        if isinstance(target, ast.Attribute) and isinstance(inner, ast.Name) and inner.id == "self":
            return f"self.{target.attr}"
        target = inner
    return target.id if isinstance(target, ast.Name) else None


class _Reader:
    def __init__(self, facts: FunctionFacts, scope: ast.AST, logs) -> None:
        self.facts = facts
        self.logs = logs
        self.statements = [s for s in ast.walk(scope) if isinstance(s, ast.stmt)]
        self.calls: Dict[int, List[CallSite]] = {}
        for call in facts.calls:
            self.calls.setdefault(id(call.site.stmt), []).append(call)
        self.computing = {id(f.site.node) for f in facts.forwards} | \
            {id(b.site.node) for b in facts.backwards} | {id(c.node) for c in facts.local_calls}

    def follow(self, tainted: Set[str]) -> Set[str]:
        """Names that hold the buffer's contents after one pass over the scope (raises
        `_FedBack` when a read reaches computation)."""
        grown: Set[str] = set()
        for stmt in self.statements:
            for read in _reads(stmt, tainted):
                grown |= self.read(stmt, read)
        return grown

    def read(self, stmt: ast.stmt, read: ast.AST) -> Set[str]:
        """Where one read goes: the names it fills, or `_FedBack`."""
        filled = _comprehension_targets(stmt, read)
        calls = sorted((c for c in self.calls.get(id(stmt), ()) if encloses(c.node, read)),
                       key=_innermost_first)
        for call in calls:
            func = call.node.func
            if isinstance(func, ast.Attribute) and encloses(func.value, read):
                if self._computes(call) or is_transfer(self.facts, call):
                    raise _FedBack   # `preds.to(device)`, `buf_loss.backward()`
                continue             # a method of the buffer: its result carries the contents
            if isinstance(func, ast.Attribute) and call.method in _WRITING_METHODS:
                receiver = buffer_name(func.value)
                if receiver is None:
                    raise _FedBack
                return filled | {receiver}
            if self.logs(call) or (isinstance(func, ast.Name) and func.id in _SIZE_ONLY):
                return filled
            if self._computes(call) or (call.unseen and not _host_only(call)):
                raise _FedBack
        return filled | _destination(stmt)

    def _computes(self, call: CallSite) -> bool:
        """A forward, backward, loss or project helper (what it does is training work, or
        not followed here)."""
        return id(call.node) in self.computing or call.result.has(V.LOSS)


def _innermost_first(call: CallSite):
    node = call.node
    return (-node.lineno, -node.col_offset, node.end_lineno, node.end_col_offset)


def _host_only(call: CallSite) -> bool:
    """A call into a package that only computes on the host (numpy, math, statistics) or
    writes out (json, pickle): its result is followed like any value."""
    return (call.qualname or "").split(".", 1)[0] in api.NON_DIFFERENTIATING_PACKAGES


def _destination(stmt: ast.stmt) -> Set[str]:
    """The names a statement puts its value into; `_FedBack` when the value steers the loop
    or leaves the function."""
    if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return {name for t in targets for name in _bound(t)}
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return set(_bound(stmt.target))
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return {name for item in stmt.items if item.optional_vars is not None
                for name in _bound(item.optional_vars)}
    if isinstance(stmt, _DROPPING):
        return set()
    raise _FedBack   # an `if`/`while` test, a `return`, a `match`: the loop needs the value


def _bound(target: ast.AST) -> Iterator[str]:
    """`a, b` -> a, b; `buf[i]` / `graph.data["x"]` -> the buffer written into."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _bound(elt)
    elif isinstance(target, (ast.Subscript, ast.Attribute, ast.Starred)):
        name = buffer_name(target)
        if name is None:
            raise _FedBack
        yield name
    else:
        yield from target_texts(target)


def _comprehension_targets(stmt: ast.stmt, read: ast.AST) -> Set[str]:
    """`[p.sum() for p in preds]`: `p` holds the contents too."""
    names: Set[str] = set()
    for node in ast.walk(stmt):
        for gen in getattr(node, "generators", ()):
            if encloses(gen.iter, read):
                names.update(target_texts(gen.target))
    return names


def _reads(stmt: ast.stmt, tainted: Set[str]) -> Iterator[ast.AST]:
    """The loads of a tainted name in the parts of `stmt` it evaluates itself (a compound
    statement's test or iterable, not its body; an assignment's value, not its targets)."""
    for part in _evaluated(stmt):
        for node in ast.walk(part):
            if isinstance(node, ast.Name) and node.id in tainted and \
                    isinstance(node.ctx, ast.Load):
                yield node
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id == "self" and f"self.{node.attr}" in tainted and \
                    isinstance(node.ctx, ast.Load):
                yield node


# `match` statements exist from Python 3.10 on; on 3.9 nothing is an instance of this.
_MATCH = getattr(ast, "Match", ())


def _evaluated(stmt: ast.stmt) -> List[ast.AST]:
    if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        return [stmt.value] if stmt.value is not None else []
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.iter]
    if isinstance(stmt, (ast.While, ast.If)):
        return [stmt.test]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in stmt.items]
    if isinstance(stmt, _MATCH):
        return [stmt.subject]
    if isinstance(stmt, (ast.Expr, ast.Return, ast.Assert, ast.Raise)):
        return [stmt]
    return []   # bodies are statements of their own; `del buf[i]`, defs, imports read nothing
