"""Python's builtins and standard library, where they matter to the object model.

- Builtins that cannot need a graph (`print`, `repr`, `format`, `isinstance`…): known calls,
  so a fix proof never refuses because "`print(sum(losses) / len(losses))` is a call the
  analysis cannot see into". (`len`, `str`, `float`… are graph breakers in `containers.py`.)
- `copy.copy` / `copy.deepcopy`: a new object of the same kind (`FRESH`): its mode switches
  and freezes are its own, never the original's (`self.ema = deepcopy(model).eval()`).
- `functools.partial(cls, ...)`: a factory (`FACTORY`); calling it builds an object, it is
  not a forward.
"""
from __future__ import annotations

from typing import Optional

from ..core import values as V
from ..core.values import Value
from .registry import Call, builtin, qualified

# builtins that only read, print or describe what they are given: none differentiates it
GRAPH_FREE_BUILTINS = frozenset(
    "print repr format hash id type callable hasattr isinstance issubclass ascii".split())
_TEXT_RESULTS = frozenset({"repr", "format", "ascii"})
COPY_FUNCTIONS = frozenset({"copy.copy", "copy.deepcopy"})
FACTORY_FUNCTIONS = frozenset({"functools.partial"})


@builtin(*GRAPH_FREE_BUILTINS)
def _graph_free_builtin(call: Call) -> Value:
    name = call.node.func.id
    return Value.of(V.TEXT if name in _TEXT_RESULTS else V.PYSCALAR, V.DETACHED)


@qualified(*COPY_FUNCTIONS)
def _copy(call: Call) -> Optional[Value]:
    """A copy: the same kinds and class as the original, a different object, with no graph
    of its own (a deep-copied module holds new leaf parameters)."""
    if not call.args:
        return None
    original = call.first
    if not original.tags and original.cls is None:
        return V.UNKNOWN   # a copy of something unknown: unknown, but no call left unseen
    return Value(tags=(original.tags - V.ACTIVATION_TAGS - {V.LOSS, V.DIVIDED}) | {V.FRESH},
                 cls=original.cls, node=original.node, fields=original.fields)


@qualified(*FACTORY_FUNCTIONS)
def _partial(call: Call) -> Value:
    return Value.of(V.FACTORY, node=call.node)
