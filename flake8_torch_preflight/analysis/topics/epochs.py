"""Epoch loops and what a loop iterates: questions shared by TPF007 and TPF009.

An *epoch loop* (spec vocabulary) is a loop that contains a training loop: a nested loop of
the same function that runs a backward pass, or a call of a file-local helper that has such
a loop (`for epoch in ...: train_one_epoch(...)`). Everything here reads the per-function
facts the flow analysis computed once; answers are memoised per `FileAnalysis`.
"""
from __future__ import annotations

import ast
from typing import List, Optional, Tuple

from ..core import values as V
from ..core.astutil import dotted, iterated_expr, scope_nodes
from ..core.events import FunctionFacts
from ..core.memo import per_file
from ..core.values import Value


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
    # `obj.method(...)` and a construction `Cls(...)` (which runs `__init__`) both bind
    # `self` without an argument; the object a construction makes has no expression yet
    constructed = func.name == "__init__" and not isinstance(call.func, ast.Attribute)
    offset = 1 if func.is_method and (isinstance(call.func, ast.Attribute) or constructed) else 0
    if offset and index == 0:
        return None if constructed else call.func.value
    pos = index - offset
    if 0 <= pos < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:pos + 1]):
        return call.args[pos]
    name = func.params[index] if index < len(func.params) else None
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def constructor_argument(init, call: ast.Call, index: int) -> Optional[ast.expr]:
    """The expression a construction `Cls(...)` passes for parameter `index` of `__init__`
    (whose parameter 0, `self`, the construction does not pass)."""
    pos = index - 1
    if 0 <= pos < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:pos + 1]):
        return call.args[pos]
    name = init.params[index] if index < len(init.params) else None
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


def constructed_with(analysis, facts: FunctionFacts, expr: ast.AST) -> List[Value]:
    """What `self.x` holds, read in a method, when `__init__` stores one of its parameters
    unchanged there (`self.train_data = train_data`): the values the constructions of the
    class in this file pass for that parameter (`Trainer(model, loader, ...)`). Empty when
    the attribute is anything else, or the class is built nowhere here."""
    func = facts.func
    text = dotted(expr) if isinstance(expr, ast.Attribute) else None
    if func is None or func.cls is None or not text or not text.startswith("self."):
        return []
    init = func.cls.method("__init__")
    if init is None or init.home not in (None, analysis):
        return []
    stored = analysis.facts_for(init).env.get(text)
    if stored is None or len(stored.params) != 1 or stored.tags - {V.BY_NAME}:
        return []
    index = next(iter(stored.params))
    out: List[Value] = []
    for caller_facts, call in analysis.callers(init):
        arg = constructor_argument(init, call.node, index) if _is_construction(call.node) else None
        if arg is not None:
            out.extend(resolve_values(analysis, caller_facts, caller_facts.value(arg)))
    return out


def _is_construction(node) -> bool:
    """`Trainer(...)`, `engine.Trainer(...)`; not `super().__init__(...)`."""
    return isinstance(node, ast.Call) and not (
        isinstance(node.func, ast.Attribute) and node.func.attr == "__init__")


def container_entry(analysis, facts: FunctionFacts, expr: ast.AST) -> List[Value]:
    """What `loaders["train"]` / `loaders[0]` holds when `loaders` is a name bound once in
    this function (or at module level, read here) to a dict or list display, and every store
    into it under that key (`loaders["train"] = ...`) is seen: the value of each expression
    put there, as the flow evaluated it. Empty when the key or the container is not known,
    or something else may change it (a second binding, a store under a computed key)."""
    if not (isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name)
            and isinstance(expr.slice, ast.Constant)):
        return []
    name, key = expr.value.id, expr.slice.value
    for owner in (facts, analysis.module_facts):
        if owner is not facts and facts.func is not None and name in facts.func.params:
            break
        found = _displayed_entries(analysis, owner).get(name)
        if found is not None:
            exprs = found.get(key)
            return [owner.value(e) for e in exprs] if exprs else []
    return []


@per_file("displayed_entries")
def _displayed_entries(analysis, facts: FunctionFacts):
    """name -> {key: [value expressions]} for the names the scope binds exactly once, to a
    dict display with constant keys or a list display, whose every other store is
    `name[<constant>] = value`; a name stored any other way is left out."""
    body = facts.func.node.body if facts.func is not None else analysis.tree.body
    bound, broken = {}, set()
    for node in scope_nodes(body):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                _record_store(target, node.value, bound, broken)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.With, ast.Delete)) \
                or isinstance(node, ast.NamedExpr):
            for target in _stored_names(node):
                broken.add(target)
    return {name: entries for name, entries in bound.items() if name not in broken}


def _record_store(target, value, bound: dict, broken: set) -> None:
    if isinstance(target, ast.Name):
        entries = _display_entries(value)
        if entries is None or target.id in bound:
            broken.add(target.id)
        else:
            bound[target.id] = entries
    elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
        name = target.value.id
        if not isinstance(target.slice, ast.Constant) or name not in bound:
            broken.add(name)
        else:
            bound[name].setdefault(target.slice.value, []).append(value)
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            broken.update(n.id for n in ast.walk(elt) if isinstance(n, ast.Name))


def _display_entries(value) -> Optional[dict]:
    if isinstance(value, ast.Dict) and all(isinstance(k, ast.Constant) for k in value.keys):
        return {k.value: [v] for k, v in zip(value.keys, value.values)}
    if isinstance(value, ast.List) and not any(isinstance(e, ast.Starred) for e in value.elts):
        return {i: [e] for i, e in enumerate(value.elts)}
    return None


def _stored_names(node) -> List[str]:
    targets = [getattr(node, "target", None)] + list(getattr(node, "targets", []))
    targets += [item.optional_vars for item in getattr(node, "items", [])]
    return [n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)]


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
    values = resolve_values(analysis, facts, facts.value(expr))
    if not any(v.has(V.LOADER) and v.node is not None for v in values):
        values = container_entry(analysis, facts, expr) or constructed_with(analysis, facts, expr)
    return [v for v in values if v.has(V.LOADER)]


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
            values = [value] if value.has(V.LOADER) and value.node is not None else (
                container_entry(analysis, facts, expr) or constructed_with(analysis, facts, expr))
            out.extend((v, loop) for v in values if v.has(V.LOADER) and v.node is not None)
    for call in facts.local_calls:
        _helper_loaders(analysis, call.callee, loop, out, seen, depth - 1)


def _inside(facts: FunctionFacts, inner: ast.AST, outer: ast.AST) -> bool:
    parent = facts.loop_parents.get(inner)
    while parent is not None:
        if parent is outer:
            return True
        parent = facts.loop_parents.get(parent)
    return False


# ---------------------------------------------------------------------------- generators
@per_file("generator_epochs", guard=())
def generator_epochs(analysis, facts: FunctionFacts) -> List[Tuple[FunctionFacts, ast.AST, Value,
                                                                   List[ast.AST]]]:
    """(the generator's facts, its epoch loop, the loader, the training loops of `facts` that
    pull from it) for each generator of this file
    that `facts` starts on a loader and a training loop of `facts` pulls batches from
    (`data = forever(loader)` … `x, y = next(data)`), where the generator re-iterates the
    loader inside a loop of its own (`while True: for batch in loader: yield batch`): each
    iteration of that outer loop is one epoch of the loader."""
    out = []
    starts = [call for call in facts.local_calls if _consumer_names(call)]
    training = analysis.training_loops(facts) if starts else []
    if not training:
        return out
    for call in starts:
        gen = call.callee
        consumed = _consumer_names(call)     # cheapest test first: `data = gen(...)`
        if not consumed or gen.home is not analysis or not _yields(analysis, gen):
            continue
        pulling = [loop for loop in training if _pulls_from(facts, loop, consumed)]
        if not pulling:
            continue
        gen_facts = analysis.facts_for(gen)
        for inner in gen_facts.loops:
            outer = gen_facts.loop_parents.get(inner)
            param = _iterated_parameter(gen, inner)
            if outer is None or param is None or not _yields_in(inner):
                continue
            expr = argument_for(gen, call.node, param)
            value = facts.value(expr) if expr is not None else None
            if value is not None and value.has(V.LOADER):
                out.append((gen_facts, outer, value, pulling))
    return out


def returned_expressions(analysis, func) -> List[ast.expr]:
    """The values of `func`'s own `return` statements as the flow walked them, in source
    order; empty when some `return` gives nothing or the function is a generator (what a
    call returns is then not one of them)."""
    exprs = analysis.facts_for(func).return_exprs
    if not exprs or any(e is None for e in exprs) or _yields(analysis, func):
        return []
    unique = {id(e): e for e in exprs}.values()
    return sorted(unique, key=lambda e: (e.lineno, e.col_offset))


@per_file("yields", guard=False)
def _yields(analysis, func) -> bool:
    return _yields_in(func.node)


def _yields_in(node: ast.AST) -> bool:
    """A `yield` in `node`'s own code (not in functions nested in it)."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        child = todo.pop()
        if isinstance(child, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(child))
    return False


def _iterated_parameter(func, loop: ast.AST) -> Optional[int]:
    expr = iterated_expr(loop)
    if isinstance(expr, ast.Name) and expr.id in func.params:
        return func.params.index(expr.id)
    return None


def _consumer_names(call) -> frozenset:
    """The names the generator a call starts is bound to (`data = forever(loader)`)."""
    stmt = call.site.stmt
    if isinstance(stmt, ast.Assign) and stmt.value is call.node:
        return frozenset(t.id for t in stmt.targets if isinstance(t, ast.Name))
    return frozenset()


def _pulls_from(facts: FunctionFacts, loop: ast.AST, names: frozenset) -> bool:
    """`loop` takes batches from one of `names` with `next(name)` or iterates it."""
    expr = iterated_expr(loop)
    if isinstance(expr, ast.Name) and expr.id in names:
        return True
    return any(isinstance(c.node.func, ast.Name) and c.node.func.id == "next" and c.node.args
               and isinstance(c.node.args[0], ast.Name) and c.node.args[0].id in names
               and loop in c.site.loops for c in facts.calls)
