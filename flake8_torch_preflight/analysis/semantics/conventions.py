"""Naming conventions: what a function parameter holds when nothing else says (`model`,
`optimizer`, `criterion`…). The spec's "`model`-like parameter".

Names break ties, they never decide: a parameter the callers of this file all fill with a
class or a factory (`make_stack(Block, …)`, `build(functools.partial(Block, dim=8))`) holds
a constructor whatever it is called, and calling it builds an object instead of running a
forward. A kind taken from the name alone is marked `BY_NAME`, so that what such an object
returns is never taken as proven (a fix that calls a tensor method on it is not applied).
"""
from __future__ import annotations

import ast
from typing import Callable, Dict, List, Optional, Tuple

from . import torchapi as api
from ..core import values as V
from ..core.values import Value

# (does the name say so?, the kind it holds), first match wins
PARAMETER_KINDS: Tuple[Tuple[Callable[[str], bool], str], ...] = (
    (lambda name: bool(api.MODEL_PARAM_RE.match(name)), V.MODULE),
    (lambda name: bool(api.OPTIMIZER_NAME_RE.search(name))
     and not api.SCHEDULER_NAME_RE.search(name), V.OPTIMIZER),
    (lambda name: name == "accelerator", V.ACCELERATOR),
    (lambda name: name in ("scaler", "grad_scaler"), V.SCALER),
    (lambda name: name in ("criterion", "loss_fn", "loss_fct", "loss_func"), V.LOSS_FN),
)
# Kinds whose objects are called (a forward, a loss): a constructor passed for them is called too.
_CALLED_KINDS = frozenset({V.MODULE, V.LOSS_FN})
_PARTIAL = frozenset({"functools.partial"})


def parameter_value(func, index: int, name: str) -> Value:
    """The value parameter `index` (`name`) of `func` starts with in its summary."""
    tags = set()
    cls = None
    if index == 0 and func.cls is not None and name == "self":
        tags.add(V.SELF)
        cls = func.cls
        if func.cls.is_module:
            tags.add(V.MODULE)
    else:
        if _annotated_module(func, name):
            tags.add(V.MODULE)    # `teacher: nn.Module`: declared, not guessed
        else:
            kind = next((kind for says, kind in PARAMETER_KINDS if says(name)), None)
            if kind is not None and not (kind in _CALLED_KINDS and _callers_pass_factories(func, index)):
                tags |= {kind, V.BY_NAME}
    return Value(tags=frozenset(tags), params=frozenset({index}), cls=cls)


def _annotated_module(func, name: str) -> bool:
    """The parameter is annotated with `nn.Module`, a `torch.nn` layer class, or an
    `nn.Module` class of its file (`unet: TinyUNet`): declared by the author, not guessed."""
    home = func.home
    args = getattr(func.node, "args", None)
    if home is None or args is None:
        return False
    for arg in args.posonlyargs + args.args + args.kwonlyargs:
        if arg.arg == name and arg.annotation is not None:
            annotation = arg.annotation
            if isinstance(annotation, ast.Name) and annotation.id in home.index.classes:
                return home.index.classes[annotation.id].is_module
            qual = home.imports.qualname(annotation) or ""
            return qual == "torch.nn.Module" or api.is_torch_nn_class(qual)
    return False


def _callers_pass_factories(func, index: int) -> bool:
    """Every call of `func` in its file (by its name: calls of a namesake count too) passes a
    class, a `functools.partial` or a lambda for parameter `index`; at least one call."""
    home = func.home
    if home is None:
        return False
    calls = _calls_by_name(home).get(func.name, ())
    passed = [_argument(func, call, index) for call in calls]
    return bool(passed) and all(expr is not None and _is_factory(home, expr) for expr in passed)


def _calls_by_name(home) -> Dict[str, List[ast.Call]]:
    """Callee name (`f` in `f(...)` and `obj.f(...)`) -> the calls of the file."""
    return _file_index(home)["calls"]


def _factory_names(home) -> frozenset:
    """Names every binding of which in the file is a factory (`knn = partial(KnnModule,
    k=20)`, a lambda, a class): passing the name passes a constructor. A name bound any
    other way anywhere (a loop target, a parameter, another value) is not one."""
    return _file_index(home)["factories"]


def _file_index(home) -> Dict[str, object]:
    """One walk of the file for both questions above, built once per file."""
    table = home.memo("conventions_file_index")
    if table:
        return table
    calls: Dict[str, List[ast.Call]] = {}
    made: Dict[str, int] = {}
    stores: Dict[str, int] = {}
    for node in ast.walk(home.tree):
        if isinstance(node, ast.Call):
            callee = node.func
            name = callee.id if isinstance(callee, ast.Name) else \
                callee.attr if isinstance(callee, ast.Attribute) else None
            if name is not None:
                calls.setdefault(name, []).append(node)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and _makes_factory(home, node.value):
            made[node.targets[0].id] = made.get(node.targets[0].id, 0) + 1
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            stores[node.id] = stores.get(node.id, 0) + 1
        elif isinstance(node, ast.arg):
            stores[node.arg] = stores.get(node.arg, 0) + 2   # never a factory name
    table["calls"] = calls
    table["factories"] = frozenset(name for name, n in made.items() if stores.get(name) == n)
    return table


def _makes_factory(home, value: ast.expr) -> bool:
    if isinstance(value, ast.Lambda):
        return True
    if isinstance(value, ast.Name):
        return value.id in home.index.classes
    return isinstance(value, ast.Call) and home.imports.qualname(value.func) in _PARTIAL


def _argument(func, call: ast.Call, index: int) -> Optional[ast.expr]:
    """What `call` passes for parameter `index` (None: defaulted, or behind `*`/`**`)."""
    offset = 1 if func.is_method and isinstance(call.func, ast.Attribute) else 0
    position = index - offset
    if position < 0:
        return None
    if any(isinstance(a, ast.Starred) for a in call.args[:position + 1]):
        return None
    if position < len(call.args):
        return call.args[position]
    for keyword in call.keywords:
        if keyword.arg == func.params[index]:
            return keyword.value
    return None


def _is_factory(home, expr: ast.expr) -> bool:
    """A class (of this file, of `torch.nn`, or an imported CapWords name) passed uncalled,
    a `functools.partial(...)`, or a lambda."""
    if isinstance(expr, ast.Lambda):
        return True
    if isinstance(expr, ast.Call):
        return home.imports.qualname(expr.func) in _PARTIAL
    if isinstance(expr, ast.Name) and (expr.id in home.index.classes
                                       or expr.id in _factory_names(home)):
        return True
    qual = home.imports.qualname(expr) if isinstance(expr, (ast.Name, ast.Attribute)) else None
    if qual is None:
        return False
    last = qual.rsplit(".", 1)[-1]
    return api.is_torch_nn_class(qual) or (last[:1].isupper() and not last.isupper())
