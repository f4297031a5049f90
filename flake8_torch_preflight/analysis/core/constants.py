"""Branches that can never run: `if` tests folded over names bound once to a literal.

`world_size = 1` at the top of `main()` followed by `if world_size > 1: model = DDP(model)`
is a script that never wraps its model. Only names bound exactly once in their scope, to a
literal, and never rebound (no augmented assignment, loop target, `with ... as`, `del`,
`global`/`nonlocal` anywhere in the file) are folded; everything else is unknown, and an
unknown test is a branch that may run.

Attributes of `self` fold too, when the object is built in this file in one known way
(`constant_self_attributes`): `self.autobalance = autobalance` in `__init__`, the parameter's
default `False`, and no construction of the class here passing it, is `False` in every method.

Folding is bounded: tests deeper than `_MAX_DEPTH` nodes, numbers beyond `_MAX_MAGNITUDE`
and anything but comparisons, `and`/`or`/`not` of names and literals are unknown.
"""
from __future__ import annotations

import ast
import operator
from typing import Dict, List, Optional, Set, Tuple

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
    value = _fold(test, _known_names(analysis, facts), _MAX_DEPTH)
    return None if value is _UNKNOWN else bool(value)


def _known_names(analysis, facts: FunctionFacts) -> Dict[str, object]:
    """The scope's literal names, and in a method `self.x` (keyed by that text) for each
    attribute that is the same constant in every object of the class built in this file."""
    names = literal_names(analysis, facts)
    func = facts.func
    if func is None or func.cls is None or not func.params or func.name == "__init__":
        return names
    attributes = constant_self_attributes(analysis, func.cls)
    if not attributes:
        return names
    receiver = func.params[0]
    return {**names, **{f"{receiver}.{attr}": value for attr, value in attributes.items()}}


_UNKNOWN = object()


def _fold(node: ast.expr, names: Dict[str, object], budget: int):
    if budget <= 0:
        return _UNKNOWN
    if isinstance(node, ast.Constant):
        return _literal(node.value)
    if isinstance(node, ast.Name):
        return names.get(node.id, _UNKNOWN)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return names.get(f"{node.value.id}.{node.attr}", _UNKNOWN)
    if isinstance(node, (ast.Call, ast.Subscript)):
        return _fold_lookup(node, names)
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


def _fold_lookup(node, names: Dict[str, object]):
    """`config.get("is_fixed")`, `config.get("k", False)`, `config["k"]` on a name bound
    once to a literal dict that is only ever read (`literal_names`)."""
    if isinstance(node, ast.Subscript):
        base, key, default = node.value, node.slice, _UNKNOWN
    elif isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args \
            and len(node.args) <= 2 and not node.keywords:
        base, key = node.func.value, node.args[0]
        default = _literal(node.args[1].value) if len(node.args) == 2 and \
            isinstance(node.args[1], ast.Constant) else (None if len(node.args) == 1 else _UNKNOWN)
    else:
        return _UNKNOWN
    table = names.get(base.id, _UNKNOWN) if isinstance(base, ast.Name) else _UNKNOWN
    if not isinstance(table, dict) or not isinstance(key, ast.Constant):
        return _UNKNOWN
    return table.get(key.value, default)


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
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Dict):
            table = _literal_dict(node.value)
            if table is not None:
                literal[node.targets[0].id] = table
    shared = _declared_shared(analysis)
    params = set(facts.func.params) if facts.func is not None else set()
    tables = {name for name, value in literal.items() if isinstance(value, dict)}
    mutable = _used_beyond_reads(scope, tables) if tables else set()
    return {name: value for name, value in literal.items()
            if stores.get(name) == 1 and name not in shared and name not in params
            and name not in mutable}


def _literal_dict(node: ast.Dict) -> Optional[dict]:
    """`{"is_fixed": False, "lr": 0.1}`: string keys, literal values; else None."""
    table = {}
    for key, value in zip(node.keys, node.values):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)
                and isinstance(value, ast.Constant)):
            return None
        folded = _literal(value.value)
        if folded is _UNKNOWN:
            return None
        table[key.value] = folded
    return table


def _used_beyond_reads(scope: ast.AST, names: Set[str]) -> Set[str]:
    """The dict names of `names` used in any other way than `d.get("k"[, literal])` or
    `d["k"]` read anywhere in the scope, nested functions included (passed to a call,
    written, aliased: what it holds is then no longer proven)."""
    allowed: Set[int] = set()
    for node in ast.walk(scope):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "get" and isinstance(node.func.value, ast.Name) \
                and not node.keywords and 1 <= len(node.args) <= 2 \
                and all(isinstance(a, ast.Constant) for a in node.args):
            allowed.add(id(node.func.value))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                and isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Constant):
            allowed.add(id(node.value))
    return {node.id for node in ast.walk(scope)
            if isinstance(node, ast.Name) and node.id in names
            and isinstance(node.ctx, ast.Load) and id(node) not in allowed}


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


# ------------------------------------------------------- constant attributes of an object

# Attributes that code outside the class changes without storing them by name: `Module.train()`
# / `.eval()` set `training` on every submodule.
_SET_BY_FRAMEWORK = frozenset({"training"})


@per_file("constant_self_attributes")
def constant_self_attributes(analysis, cls) -> Dict[str, object]:
    """attribute -> literal, for the attributes of `cls`'s objects that are the same constant
    in every object this file builds.

    Proven only when: the file builds the class (`Loss(model)`) and names it nowhere else (no
    subclass, no `partial(Loss, ...)`, no class passed as a value, no `cls(...)` inside it),
    nothing in the file stores or deletes the attribute except one statement at the top level
    of `__init__`, no code stores attributes by computed name (`setattr`, `__dict__`), and
    that statement stores a literal, or an `__init__` parameter with a literal default that
    no construction here passes (no `*args`/`**kwargs` either)."""
    init = cls.methods.get("__init__")
    if cls.home not in (None, analysis):
        return {}         # a class of another file: its own file may store the attribute
    if init is None or cls.local_bases or _mutated_in_bulk(analysis):
        return {}
    constructions = _constructions(analysis, cls)
    if not constructions:
        return {}
    out: Dict[str, object] = {}
    stores = _attribute_stores(analysis)
    for stmt in init.node.body:
        found = _constant_store(init, stmt, constructions)
        if found is not None and stores.get(found[0]) == 1 \
                and found[0] not in _SET_BY_FRAMEWORK:
            out[found[0]] = found[1]
    return out


def _constant_store(init, stmt: ast.stmt, constructions):
    """(attribute, value) for `self.x = <literal>` / `self.x = <unpassed parameter>`."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return None
    target, value = stmt.targets[0], stmt.value
    if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
            and init.params and target.value.id == init.params[0]):
        return None
    if isinstance(value, ast.Constant):
        literal = _literal(value.value)
        return None if literal is _UNKNOWN else (target.attr, literal)
    if isinstance(value, ast.Name):
        literal = _unpassed_default(init, value.id, constructions)
        return None if literal is _UNKNOWN else (target.attr, literal)
    return None


def _unpassed_default(init, name: str, constructions):
    """The literal default of `__init__`'s parameter `name` when it is never rebound in
    `__init__` and no construction passes it."""
    args = init.node.args
    positional = args.posonlyargs + args.args
    index = next((i for i, a in enumerate(positional) if a.arg == name), None)
    if index is not None:
        defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]],
                            args.defaults))
    else:
        defaults = {a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None}
    default = defaults.get(name)
    if not isinstance(default, ast.Constant) or _rebinds(init.node, name):
        return _UNKNOWN
    for call in constructions:
        # the call's arguments fill `__init__`'s parameters after `self`
        if any(isinstance(a, ast.Starred) for a in call.args) or \
                any(kw.arg is None or kw.arg == name for kw in call.keywords) or \
                (index is not None and len(call.args) >= index):
            return _UNKNOWN
    return _literal(default.value)


def _rebinds(func_node: ast.AST, name: str) -> bool:
    return any(isinstance(node, ast.Name) and node.id == name
               and isinstance(node.ctx, (ast.Store, ast.Del)) for node in ast.walk(func_node))


def _constructions(analysis, cls) -> list:
    """The calls that build `cls` in this file; empty when the class is also named in any
    other way (a base, a value handed on, `cls(...)` / `type(self)(...)` in its methods)."""
    named, calls = _name_uses(analysis).get(cls.name, (0, []))
    if named != len(calls) or _builds_itself(cls):
        return []
    return calls


@per_file("name_uses")
def _name_uses(analysis) -> Dict[str, Tuple[int, List[ast.Call]]]:
    """name -> (how often it is read or written, the calls `name(...)`), one walk of the file
    for every class asked about."""
    named: Dict[str, int] = {}
    calls: Dict[str, List[ast.Call]] = {}
    for node in ast.walk(analysis.tree):
        if isinstance(node, ast.Name):
            named[node.id] = named.get(node.id, 0) + 1
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            calls.setdefault(node.func.id, []).append(node)
    return {name: (count, calls.get(name, [])) for name, count in named.items()}


def _builds_itself(cls) -> bool:
    for node in ast.walk(cls.node):
        if isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Name) and node.func.id in ("cls", "type"))
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "__class__")):
            return True
    return False


@per_file("attribute_stores")
def _attribute_stores(analysis) -> Dict[str, int]:
    """attribute name -> how many statements of the file store or delete it on any object."""
    counts: Dict[str, int] = {}
    for node in ast.walk(analysis.tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            counts[node.attr] = counts.get(node.attr, 0) + 1
    return counts


@per_file("bulk_attribute_setters")
def _mutated_in_bulk(analysis) -> bool:
    """Some code stores attributes by a computed name (`setattr(obj, k, v)`,
    `vars(o).update(d)`, `o.__dict__[k] = v`): no attribute is known constant."""
    for node in ast.walk(analysis.tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "setattr" or \
                    isinstance(func, ast.Attribute) and (
                        func.attr == "__setattr__"
                        or func.attr == "update" and _attribute_dict(func.value)):
                return True
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) \
                and _attribute_dict(node.value):
            return True
    return False


def _attribute_dict(node: ast.expr) -> bool:
    """`vars(o)` / `o.__dict__`: an object's attributes as a dict."""
    return isinstance(node, ast.Attribute) and node.attr == "__dict__" or \
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars"
