"""Python containers and builtins: what storing into a list/dict/set and reading it back
does to the values (a stored graph-bearing value is what TPF001 watches), and calls of
builtins by name."""
from __future__ import annotations

import ast
from typing import Optional

from . import torchapi as api
from ..core import values as V
from ..core.values import UNKNOWN, Value, derived, join, join_all
from .data import batch_of
from .registry import (OPAQUE, Access, Call, builtin, method, other_attributes, other_methods)

# container method -> how the store is named in findings (`deque.appendleft` is an append)
STORE_METHODS = {"append": "append", "extend": "extend", "insert": "insert", "add": "add",
                 "appendleft": "append", "update": "update"}
_READ_METHODS = frozenset({"pop", "popleft", "get", "values", "items", "copy", "index"})
_EMPTY_CONSTRUCTORS = frozenset({"list", "tuple", "dict", "set"})
_SAME_CONTAINER = frozenset({"list", "tuple", "sorted", "reversed", "iter", "set", "dict"})


# ---------------------------------------------------------------------- container methods
def _stored_value(call: Call) -> Value:
    stored = call.args[-1]
    if call.method in ("extend", "update") and stored.has(V.CONTAINER):
        return stored.contents()
    return stored


def _remember_contents(call: Call, stored: Value) -> None:
    """The container now also holds `stored` (for later reads: `torch.stack(xs)`)."""
    target = call.receiver_node
    call.flow.rebind(target, call.flow.filled(target, join(call.receiver, stored.as_container())))


@method(*STORE_METHODS, on=(V.CONTAINER,))
def _store(call: Call) -> Optional[Value]:
    if not call.args:
        return None
    stored = _stored_value(call)
    if stored.grad and not stored.leaf:
        call.flow.record_store(call.receiver_node, call.node, STORE_METHODS[call.method],
                               stored, call.node.args[-1])
    _remember_contents(call, stored)
    return UNKNOWN


@method(*_READ_METHODS, on=(V.CONTAINER,))
def _read(call: Call) -> Value:
    return call.receiver.contents()


@other_methods(V.CONTAINER, V.TEXT, known=True)
def _other_builtin_method(call: Call) -> Value:
    """`xs.sort()`, `d.keys()`, `"{}".format(x)`: Python's own methods."""
    return UNKNOWN


@other_methods(OPAQUE)
def _opaque_method(call: Call) -> Optional[Value]:
    """A receiver of no kind we model: an `xs.append(loss)` statement still stores (a list
    built elsewhere, `self.history`); a function parameter's `x.div(k)` / `x.mean()` keep
    what is passed in (summaries follow it)."""
    receiver = call.receiver
    if call.method in STORE_METHODS and call.args and _stores_into_unknown(call):
        stored = call.args[-1]
        call.flow.record_store(call.receiver_node, call.node, STORE_METHODS[call.method],
                               stored, call.node.args[-1])
        _remember_contents(call, stored)
        return UNKNOWN
    if call.method in ("div", "div_", "true_divide") and receiver.params:
        return derived([receiver] + list(call.args), V.DIVIDED)
    if call.method in api.GRAPH_KEEPING_METHODS and receiver.params:
        return derived([receiver])
    return None


def _stores_into_unknown(call: Call) -> bool:
    """`xs.append(loss)` as a statement (`y = t.add(u)` uses a result: arithmetic; list, set
    and dict stores return None), with a graph-bearing value and a receiver that is not a
    tensor."""
    stored, receiver, stmt = call.args[-1], call.receiver, call.flow.current_stmt
    return stored.grad and not stored.leaf and not receiver.is_tensor_like \
        and isinstance(stmt, ast.Expr) and stmt.value is call.node


@other_attributes(V.CONTAINER)
def _container_attribute(access: Access) -> Value:
    return access.base


# ---------------------------------------------------------------------- builtins
@builtin(*api.PYTHON_BREAKERS)
def _host_builtin(call: Call) -> Value:
    return Value.of(V.PYSCALAR)


@builtin("sum", "max", "min", "abs", "next", *_SAME_CONTAINER)
def _reducing_builtin(call: Call) -> Value:
    name = call.node.func.id
    if name in _EMPTY_CONSTRUCTORS and not call.args:
        return Value.of(V.CONTAINER)
    base = join_all(call.args)
    if name in _SAME_CONTAINER:
        return base
    return base.contents() if base.has(V.CONTAINER) else base


@builtin("enumerate")
def _enumerate(call: Call) -> Optional[Value]:
    if not call.args:
        return None
    return Value(tags=frozenset({V.CONTAINER}),
                 elements=(Value.of(V.PYSCALAR), iterated_item(call.args[0])))


@builtin("zip")
def _zip(call: Call) -> Optional[Value]:
    if not call.args:
        return None
    return Value(tags=frozenset({V.CONTAINER}), elements=tuple(iterated_item(a) for a in call.args))


# ---------------------------------------------------------------------- iteration
def iterated_item(value: Value) -> Value:
    """What `for x in value` binds to `x`."""
    elements = value.elements
    if elements and value.has(V.CONTAINER) and not value.grad \
            and all(e.tags == elements[0].tags for e in elements):
        return elements[0] if len(elements) == 1 else join_all(elements)
    if elements and value.has(V.CONTAINER) and elements[0].has(V.PYSCALAR) and len(elements) == 2:
        return value  # enumerate(): unpacked by `for i, batch in ...`
    if value.has(V.LOADER):
        return batch_of(value)
    if value.has(V.MODULE):
        return Value.of(V.MODULE)   # iterating a ModuleList / Sequential
    return value.contents()
