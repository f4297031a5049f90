"""Naming conventions: what a function parameter holds when nothing else says (`model`,
`optimizer`, `criterion`…). The spec's "`model`-like parameter"."""
from __future__ import annotations

from typing import Callable, Tuple

from .. import torchapi as api
from .. import values as V
from ..values import Value

# (does the name say so?, the kind it holds), first match wins
PARAMETER_KINDS: Tuple[Tuple[Callable[[str], bool], str], ...] = (
    (lambda name: bool(api.MODEL_PARAM_RE.match(name)), V.MODULE),
    (lambda name: bool(api.OPTIMIZER_NAME_RE.search(name))
     and not api.SCHEDULER_NAME_RE.search(name), V.OPTIMIZER),
    (lambda name: name == "accelerator", V.ACCELERATOR),
    (lambda name: name in ("scaler", "grad_scaler"), V.SCALER),
    (lambda name: name in ("criterion", "loss_fn", "loss_fct", "loss_func"), V.LOSS_FN),
)


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
        kind = next((kind for says, kind in PARAMETER_KINDS if says(name)), None)
        if kind is not None:
            tags.add(kind)
    return Value(tags=frozenset(tags), params=frozenset({index}), cls=cls)
