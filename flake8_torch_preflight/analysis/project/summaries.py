"""Module summaries: what each function, method and class of a project module does, as plain
data that does not depend on who imports the module (issue 19).

Within a run every project module has one analysis (`workspace.py`), whoever imports it: the
interpreter calls another file's functions through that analysis's per-function facts (their
return `Value` with the parameter positions it depends on, the events they record), so nothing
is re-interpreted in the importer. `for_module(path)` renders that analysis as a
`ModuleSummary`: named tuples of strings, numbers and booleans only, so it pickles, compares
with `==`, and holds a few small tuples per function where an analysis holds the module's
tree and every fact computed on it. It is the form a cache
across runs stores (keyed by `ModuleSummary.key`: path, SHA-1 of the file's bytes and
`SUMMARY_VERSION`).

What depends on the caller is a parameter of the summary, filled in at the call:
- `ValueSummary.params`: the parameter positions a return value (or a stored attribute)
  depends on; the caller's arguments are substituted at the call (`Value.through_call`);
- `FunctionSummary.grad_mode`: "caller" when the function runs in whatever grad mode its
  caller is in (a result made under the caller's `torch.no_grad()` carries no graph: the
  interpreter drops it at the call), "off" under its own `@torch.no_grad()` decorator;
- `FunctionSummary.returns_param`: a function that returns one of its parameters unchanged
  (`def layer_init(layer): ...; return layer`) gives its caller that argument's object;
- which argument is a model: `params` says which positions reach the returned value, and the
  caller's value says what it is.

Contract of `for_module(path) -> Optional[ModuleSummary]`:
- None when the file is missing, unreadable or does not parse;
- the same summary whoever imports the module and whatever was linted before (a test lints
  in two orders); facts cut short by an import cycle are those of the module read alone;
- `functions` and `classes` are in source order, each function once (methods as
  `Class.method`, nested functions as `outer.<locals>.inner`, as `FunctionInfo.qualname`);
- memoised per process by `key`; a changed file gets a new key.
"""
from __future__ import annotations

import ast
import hashlib
from typing import Dict, NamedTuple, Optional, Tuple

from ..core import values as V
from . import workspace
from ..core.identity import returned_parameter
from ..core.questions import Does

SUMMARY_VERSION = "2"
_SYNC_METHODS = frozenset({"item", "cpu", "numpy", "tolist"})


class ValueSummary(NamedTuple):
    tags: Tuple[str, ...]       # what it is and holds (`module`, `loss`, `loader`, ...), sorted
    params: Tuple[int, ...]     # parameter positions it depends on (filled in by the caller)
    grad: bool                  # may carry an autograd graph (under the caller's grad mode)
    cls: Optional[str]          # the project class it is an instance of, if one


class FunctionSummary(NamedTuple):
    qualname: str
    line: int
    params: Tuple[str, ...]
    does: Tuple[str, ...]               # `Does` values, directly or through what it calls
    syncs_per_call: Tuple[int, ...]     # lines of host syncs outside its own loops
    syncs_per_element: Tuple[int, ...]  # lines of host syncs inside a loop of its own
    seeds: Tuple[str, ...]              # generators it seeds (TPF011 vocabulary)
    loops_over: Tuple[Tuple[int, str], ...]   # (line, parameter) of loops over a parameter
    returns: ValueSummary
    stores: Tuple[Tuple[str, ValueSummary], ...]   # `self.x` attributes it assigns, and what
    grad_mode: str                      # "caller" or "off" (see the module docstring)
    returns_param: Optional[int] = None  # the parameter every path returns unchanged (identity)


class ClassSummary(NamedTuple):
    name: str
    line: int
    bases: Tuple[str, ...]
    is_module: bool
    methods: Tuple[str, ...]
    attributes: Tuple[Tuple[str, ValueSummary], ...]   # as its methods leave `self.x`


class ModuleSummary(NamedTuple):
    key: Tuple[str, str, str]           # (path, SHA-1 of its bytes, SUMMARY_VERSION)
    functions: Tuple[FunctionSummary, ...]
    classes: Tuple[ClassSummary, ...]

    def function(self, qualname: str) -> Optional[FunctionSummary]:
        return next((f for f in self.functions if f.qualname == qualname), None)


# key -> summary: a few tuples per function, kept for the run
_SUMMARIES: Dict[Tuple[str, str, str], ModuleSummary] = {}


def module_key(path: str) -> Optional[Tuple[str, str, str]]:
    try:
        with open(path, "rb") as handle:
            digest = hashlib.sha1(handle.read()).hexdigest()
    except OSError:
        return None
    return (path, digest, SUMMARY_VERSION)


def for_module(path: str) -> Optional[ModuleSummary]:
    """The summary of the project module at `path` (see the module docstring's contract)."""
    key = module_key(path)
    if key is None:
        return None
    found = _SUMMARIES.get(key)
    if found is not None:
        return found
    from ..file_analysis import FileAnalysis    # the analysis builds on this layer's modules
    analysis = workspace.analysis_of(path, FileAnalysis)
    if analysis is None:
        return None
    summary = summarise(analysis, key)
    _SUMMARIES[key] = summary
    return summary


def summarise(analysis, key: Tuple[str, str, str]) -> ModuleSummary:
    functions = tuple(_function_summary(analysis, func) for func in analysis.index.functions)
    classes = tuple(_class_summary(analysis, cls) for cls in analysis.index.all_classes)
    return ModuleSummary(key, functions, classes)


def value_summary(value: Optional[V.Value]) -> ValueSummary:
    if value is None:
        value = V.UNKNOWN
    cls = getattr(value.cls, "name", None)
    return ValueSummary(tuple(sorted(value.tags)), tuple(sorted(value.params)), bool(value.grad),
                        cls)


def _function_summary(analysis, func) -> FunctionSummary:
    from ..topics.seeding import function_seeds      # seeding reads this layer's analyses
    facts = analysis.facts_for(func)
    does = tuple(what.value for what in Does if analysis.function_does(func, what))
    per_call, per_element = [], []
    for call in facts.calls:
        if call.qualname is None and call.method in _SYNC_METHODS and _tensor(call.receiver):
            (per_element if call.site.loops else per_call).append(call.site.line)
    loops_over = []
    for loop in facts.loops:
        expr = getattr(loop, "iter", None)
        if isinstance(expr, ast.Name) and expr.id in func.params:
            loops_over.append((loop.lineno, expr.id))
    stores = tuple((text, value_summary(facts.env.get(text)))
                   for text in sorted(analysis.bindings(func).attributes))
    return FunctionSummary(
        func.qualname, func.node.lineno, tuple(func.params), does, tuple(per_call),
        tuple(per_element), tuple(sorted(function_seeds(analysis, func))), tuple(loops_over),
        value_summary(facts.returns), stores,
        "off" if func.grad_disabled_by_decorators else "caller", returned_parameter(func))


def _class_summary(analysis, cls) -> ClassSummary:
    attributes = set()
    for method in cls.methods.values():
        attributes |= set(analysis.bindings(method).attributes)
    return ClassSummary(
        cls.name, cls.node.lineno, tuple(cls.bases), bool(cls.is_module), tuple(cls.methods),
        tuple((text, value_summary(analysis.class_attr(cls, text))) for text in sorted(attributes)))


def _tensor(value: Optional[V.Value]) -> bool:
    return value is not None and not value.has(V.MODULE) and not value.has(V.CONTAINER) and \
        not value.has(V.PYSCALAR) and (value.grad or value.has(V.TENSOR))


def clear() -> None:
    _SUMMARIES.clear()
