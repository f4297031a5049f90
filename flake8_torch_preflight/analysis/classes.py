"""Classes whose base the file cannot see: is it an `nn.Module` all the same?

`class Block(MegatronModule)` with `MegatronModule` imported from elsewhere in the project is
an `nn.Module` subclass the index cannot prove. It counts as module-like when it defines
`forward`, when a base resolves to a module class of another project file
(`analysis/project.py`), or when a project base does not resolve at all, `__init__` builds a
`torch.nn` layer on `self` (`self.norm = nn.LayerNorm(d)`) and no method trains (backward or
optimizer step: a project trainer class holding a model is not a module).
"""
from __future__ import annotations

import ast
import builtins
from typing import List

from . import values as V
from .project import is_project_name, resolve_class
from .questions import Does
from .torchapi import DDP_WRAPPERS, is_torch_nn_class

_BUILTINS = frozenset(dir(builtins))


def module_like(analysis, cls) -> bool:
    """`cls` is an `nn.Module` subclass, or looks like one behind a project base."""
    if cls is None:
        return False
    if cls.is_module or cls.method("forward") is not None:
        return True
    unresolved = False
    for base in _project_bases(analysis, cls):
        resolved = resolve_class(analysis, base)
        if resolved is None:
            unresolved = True
        elif resolved[1].is_module or resolved[1].method("forward") is not None:
            return True
    init = cls.method("__init__")
    if not unresolved or init is None or _trains(analysis, cls):
        return False   # a trainer class of the project (`class Runner(BaseRunner)`) trains
    env = analysis.facts_for(init).env
    return any(name.startswith("self.") and _layer(analysis, value) for name, value in env.items())


def _trains(analysis, cls) -> bool:
    """Some method of the class runs a backward pass or an optimizer step."""
    return any(analysis.function_does(m, what) for m in cls.methods.values()
               for what in (Does.BACKWARD, Does.STEP))


def _layer(analysis, value) -> bool:
    """`nn.LayerNorm(d)`, `torch.nn.Linear(a, b)`: a layer built here, not a wrapped model."""
    node = value.node
    if not value.has(V.MODULE) or not isinstance(node, ast.Call):
        return False
    qualname = analysis.imports.qualname(node.func) or ""
    return is_torch_nn_class(qualname) and "DataParallel" not in qualname \
        and qualname not in DDP_WRAPPERS


def _project_bases(analysis, cls) -> List[str]:
    """Qualified names of the bases (of the class and its local bases) imported from the
    project rather than from a library."""
    out: List[str] = []
    seen = set()
    todo = [cls]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        todo.extend(current.local_bases)
        for base in current.bases:
            if base and base not in analysis.index.classes and base not in _BUILTINS \
                    and is_project_name(base):
                out.append(base)
    return out
