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

from ..core import values as V
from ..core.astutil import assigns_self_attribute
from ..core.memo import per_file
from ..project.resolution import is_project_name, resolve_class
from ..core.questions import Does
from ..semantics.torchapi import DDP_WRAPPERS, is_torch_nn_class

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


# ---------------------------------------------------------------------- train/eval mode
# `torch.nn` layers whose forward depends on `module.training`; any other layer of torch.nn
# behaves the same in both modes (Linear, Conv, ReLU, pooling, LayerNorm, embeddings…),
# except that a `dropout=` argument other than 0 makes RNNs, attention and transformer
# layers mode-dependent too (their own default is checked in `_DROPOUT_BY_DEFAULT`).
_MODE_DEPENDENT = ("Dropout", "BatchNorm", "InstanceNorm", "SyncBatchNorm", "AlphaDropout",
                   "FeatureAlphaDropout", "LazyBatchNorm", "LazyInstanceNorm")
_DROPOUT_BY_DEFAULT = frozenset({"torch.nn.Transformer", "torch.nn.TransformerEncoderLayer",
                                 "torch.nn.TransformerDecoderLayer", "torch.nn.TransformerEncoder",
                                 "torch.nn.TransformerDecoder"})
_CONTAINERS = frozenset({"torch.nn.Sequential", "torch.nn.ModuleList", "torch.nn.ModuleDict"})
# `torch.nn` classes that take other modules as arguments: an argument of any other `torch.nn`
# layer (`nn.LSTM(in_dim, hidden, n_layer)`) is a size, a rate or a flag, never a module.
_TAKE_MODULES = _CONTAINERS | _DROPOUT_BY_DEFAULT | frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.DistributedDataParallel"})


@per_file("mode_free", guard=False, key_args=1)
def mode_free(analysis, cls, depth: int = 0) -> bool:
    """`cls` is an `nn.Module` class of the project proven to behave the same in `train()`
    and `eval()` mode: its `__init__` (and its bases') builds only `torch.nn` layers that do
    not depend on the mode, or classes of the project that are mode-free themselves, and
    nothing of it reads `self.training`. Anything the analysis cannot see (a library model,
    an unresolved call stored on `self`) is not proven."""
    if cls is None or depth > 4 or not cls.is_module or cls.is_lightning:
        return False
    home = cls.home or analysis
    for base in cls.bases:
        local = next((b for b in cls.local_bases if b.name == base), None)
        if local is not None:
            if not mode_free(home, local, depth + 1):
                return False
        elif base not in ("torch.nn.Module", "torch.nn.modules.module.Module"):
            return False
    if _reads_training_flag(cls):
        return False
    init = cls.methods.get("__init__")
    if init is None:
        return True
    facts = home.facts_for(init)
    if _fills_self_containers(init.node) or any(
            call.unseen for call in facts.calls if assigns_self_attribute(call.site.stmt)):
        return False
    return all(_mode_free_stored(home, facts, init, rhs, depth)
               for rhs in _stored_on_self(init.node))


def mode_free_module(analysis, value) -> bool:
    """A module value proven to behave the same in `train()` and `eval()` mode: an object of
    a mode-free class of the project (`mode_free`), or a `torch.nn` layer or container built
    in place from mode-free layers (`nn.Sequential(nn.Linear(...), nn.ReLU(), ...)`)."""
    if value is None:
        return False
    if value.cls is not None:
        return mode_free(analysis, value.cls)
    node = value.node
    if isinstance(node, ast.Call) and (analysis.imports.qualname(node.func) or "") in \
            _TAKE_MODULES - _CONTAINERS:
        return False      # `DDP(build_model())`: the wrapped module decides, unseen here
    return value.has(V.MODULE) and _mode_free_value(analysis, value, 0)


def _stored_on_self(init: ast.AST):
    """Every value `__init__` assigns to an attribute of `self`, on any branch
    (`self.bn = None` and, under `if use_bn:`, `self.bn = nn.BatchNorm2d(c)`)."""
    for node in ast.walk(init):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
                    and len(target.elts) == len(value.elts):
                yield from (v for t, v in zip(target.elts, value.elts) if _on_self(t))
            elif _on_self(target) or isinstance(target, ast.Tuple) and any(
                    _on_self(t) for t in target.elts):
                yield value


def _mode_free_stored(analysis, facts, init, rhs: ast.expr, depth: int) -> bool:
    """A value stored on `self` cannot make the model mode-dependent: a literal, a mode-free
    layer or class, a non-module value; a parameter only when its default or annotation says
    it is a plain number, string or flag (`self.encoder = encoder` may be any module)."""
    if isinstance(rhs, ast.Constant):
        return True
    if isinstance(rhs, ast.Name) and rhs.id in init.params:
        return _plain_parameter(init.node, rhs.id) or \
            _configures_a_layer(analysis, init.node, rhs.id)
    value = facts.value(rhs)
    if isinstance(rhs, ast.Call) or value.has(V.MODULE):
        return not value.has(V.MODULE) and value.cls is None or \
            _mode_free_value(analysis, value, depth)
    return True


_PLAIN_ANNOTATIONS = frozenset({"int", "float", "bool", "str"})


def _plain_parameter(func: ast.AST, name: str) -> bool:
    args = func.args
    positional = args.posonlyargs + args.args
    defaults = dict(zip([a.arg for a in positional][len(positional) - len(args.defaults):],
                        args.defaults))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    arg = next((a for a in positional + args.kwonlyargs if a.arg == name), None)
    annotation = getattr(arg, "annotation", None)
    if isinstance(annotation, ast.Name) and annotation.id in _PLAIN_ANNOTATIONS:
        return True
    default = defaults.get(name)
    return isinstance(default, ast.Constant) and default.value is not None


def _configures_a_layer(analysis, func: ast.AST, name: str) -> bool:
    """The parameter is also an argument of a `torch.nn` layer built in the same function
    (`self.n_layer = n_layer` beside `nn.LSTM(in_dim, hidden_dim, n_layer)`): a number."""
    for node in ast.walk(func):
        if not isinstance(node, ast.Call):
            continue
        qualname = analysis.imports.qualname(node.func) or ""
        if not is_torch_nn_class(qualname) or qualname in _TAKE_MODULES:
            continue
        arguments = list(node.args) + [kw.value for kw in node.keywords]
        if any(isinstance(arg, ast.Name) and arg.id == name for arg in arguments):
            return True
    return False


def _mode_free_value(analysis, value, depth: int) -> bool:
    """A module value `__init__` stored: a mode-free layer, container or project class."""
    if value.cls is not None:
        return mode_free(analysis, value.cls, depth + 1)
    node = value.node
    if not isinstance(node, ast.Call):
        return False
    qualname = analysis.imports.qualname(node.func) or ""
    if not is_torch_nn_class(qualname):
        return False
    last = qualname.rsplit(".", 1)[-1]
    if last.startswith(_MODE_DEPENDENT) or qualname in _DROPOUT_BY_DEFAULT:
        return False
    dropout = next((kw.value for kw in node.keywords if kw.arg == "dropout"), None)
    if dropout is not None and not (isinstance(dropout, ast.Constant) and dropout.value == 0):
        return False
    if qualname in _CONTAINERS:
        return _mode_free_layers(analysis, node, depth)
    return True


def _mode_free_layers(analysis, node: ast.Call, depth: int) -> bool:
    """`nn.Sequential(nn.Linear(...), nn.ReLU())`: every layer written in it is mode-free."""
    items = list(node.args)
    for arg in node.args:
        if isinstance(arg, (ast.List, ast.Tuple)):
            items.extend(arg.elts)
    for item in items:
        if isinstance(item, (ast.List, ast.Tuple)):
            continue
        if not isinstance(item, ast.Call):
            return False
        qualname = analysis.imports.qualname(item.func) or ""
        fake = V.Value(tags=frozenset({V.MODULE}), node=item)
        if not is_torch_nn_class(qualname) or not _mode_free_value(analysis, fake, depth):
            return False
    return True


def _reads_training_flag(cls) -> bool:
    """Some method of the class reads `self.training` (`F.dropout(x, training=self.training)`)."""
    return any(isinstance(node, ast.Attribute) and node.attr == "training"
               for method in cls.methods.values() for node in ast.walk(method.node))


# `self.layers.append(Block(...))`, `self.add_module(name, layer)`, `setattr(self, name, layer)`,
# `self.heads[k] = layer`: layers added after the container was built, which the stored
# value of the attribute does not show.
_CONTAINER_FILLS = frozenset({"append", "extend", "insert", "update", "add_module",
                              "register_module", "__setitem__", "setdefault"})


def _fills_self_containers(init: ast.AST) -> bool:
    for node in ast.walk(init):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in _CONTAINER_FILLS \
                    and _on_self(func.value):
                return True
            if isinstance(func, ast.Name) and func.id == "setattr" and node.args \
                    and _on_self(node.args[0]):
                return True
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Subscript) and _on_self(t.value) for t in targets):
                return True
    return False


def _on_self(node: ast.AST) -> bool:
    """`self` or an attribute chain starting at it (`self.blocks`, `self.enc.layers`)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id == "self"
