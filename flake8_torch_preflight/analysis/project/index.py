"""The file's functions and classes, found once, with what their names and bases say."""
from __future__ import annotations

import ast
import re
import weakref
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ..semantics import torchapi
from .imports import ImportTable

FunctionNode = (ast.FunctionDef, ast.AsyncFunctionDef)

# Loaders whose name says they hold held-out data: `val_loader`, `valid_dl`, `test_loader`.
VAL_LOADER_RE = re.compile(
    r"^(val|valid|validation|test|eval|evaluation|dev|holdout)_?\w*?"
    r"(loader|dl|dataloader|iter|iterator|batches|ds|dataset|data|set)s?$", re.IGNORECASE)

_EVAL_NAME_PREFIXES = ("val_", "valid_", "eval_", "test_", "predict", "infer", "evaluate", "validate",
                       "validation")


class _WeakLink:
    """An attribute held weakly: `func.home`, `cls.home` (the analysis of the defining file)
    and `func.cls` (the class a method belongs to). Each points back at what owns it (the
    analysis owns its index, a class its methods); strong pointers made every analysis a set
    of reference cycles that only the garbage collector could free, and flake8's collections
    scanned them (a large share of our time). Whoever uses a function of another file keeps
    that file's analysis alive (`FileAnalysis.other_file` pins it, and the analysis its index);
    a link whose target is gone reads as None, as after `release()`."""

    def __init__(self, name: str) -> None:
        self.key = "_" + name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        ref = obj.__dict__.get(self.key)
        return ref() if ref is not None else None

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.key] = weakref.ref(value) if value is not None else None


@dataclass(eq=False)
class ClassInfo:
    node: ast.ClassDef
    name: str
    bases: List[str]                   # qualified (imports) or local class names
    methods: Dict[str, "FunctionInfo"] = field(default_factory=dict)
    local_bases: List["ClassInfo"] = field(default_factory=list)
    is_module: bool = False            # nn.Module subclass (directly or through local bases)
    is_lightning: bool = False         # LightningModule subclass
    is_hf_trainer: bool = False        # transformers Trainer subclass / TrainerCallback
    home = _WeakLink("home")           # the FileContext of the file that defines it

    def method(self, name: str) -> Optional["FunctionInfo"]:
        seen = set()
        todo = [self]
        while todo:
            cls = todo.pop(0)
            if id(cls) in seen:
                continue
            seen.add(id(cls))
            if name in cls.methods:
                return cls.methods[name]
            todo.extend(cls.local_bases)
        return None


@dataclass(eq=False)
class FunctionInfo:
    node: ast.AST
    name: str
    qualname: str                      # `Trainer.fit`, `main.<locals>.step`
    cls: Optional[ClassInfo]
    parent: Optional["FunctionInfo"]
    params: List[str]
    no_grad_decorated: bool = False    # @torch.no_grad() / @torch.inference_mode()
    home = _WeakLink("home")           # the FileContext of the file that defines it

    @property
    def is_method(self) -> bool:
        return self.cls is not None and bool(self.params) and self.params[0] in ("self", "cls")

    @property
    def grad_disabled_by_decorators(self) -> bool:
        func: Optional[FunctionInfo] = self
        while func is not None:
            if func.no_grad_decorated:
                return True
            func = func.parent
        return False

    def evaluation_by_name(self, is_test_file: bool) -> bool:
        name = self.name.lower().lstrip("_")   # a private `_eval_step` is still evaluation
        if name.startswith("test_") or name == "test":
            return not is_test_file and name != "test"
        return name.startswith(_EVAL_NAME_PREFIXES) or name in ("eval", "evaluation")


# Installed after the dataclass is made, so its generated `__init__` stores `cls` weakly too.
FunctionInfo.cls = _WeakLink("cls")  # type: ignore[assignment]


class FileIndex:
    def __init__(self, tree: ast.Module, imports: ImportTable) -> None:
        self.tree = tree
        self.imports = imports
        self.functions: List[FunctionInfo] = []
        self.classes: Dict[str, ClassInfo] = {}
        # every class, also those `classes` does not name (a second class of the same name):
        # their methods point at them only weakly, so the index keeps them
        self.all_classes: List[ClassInfo] = []
        self.by_node: Dict[ast.AST, FunctionInfo] = {}
        # (enclosing FunctionInfo or None, name) -> FunctionInfo
        self._scoped: Dict[tuple, FunctionInfo] = {}
        self._collect(tree.body, None, None, "")
        self._link_classes()

    # --- collection ----------------------------------------------------------
    def _collect(self, body, parent: Optional[FunctionInfo], cls: Optional[ClassInfo], prefix: str):
        for stmt in body:
            if isinstance(stmt, FunctionNode):
                self._add_function(stmt, parent, cls, prefix)
            elif isinstance(stmt, ast.ClassDef):
                info = ClassInfo(stmt, stmt.name, [self._base_name(b) for b in stmt.bases])
                self.all_classes.append(info)
                if parent is None and cls is None:
                    self.classes.setdefault(stmt.name, info)
                else:
                    self.classes.setdefault(f"{prefix}{stmt.name}", info)
                self._collect(stmt.body, parent, info, f"{prefix}{stmt.name}.")
            else:
                for child in _nested_bodies(stmt):
                    self._collect(child, parent, cls, prefix)

    def _add_function(self, node, parent, cls, prefix):
        args = node.args
        params = [a.arg for a in getattr(args, "posonlyargs", [])] + [a.arg for a in args.args]
        params += [a.arg for a in args.kwonlyargs]
        info = FunctionInfo(node, node.name, f"{prefix}{node.name}", cls, parent, params,
                            no_grad_decorated=any(self._disables_grad(d) for d in node.decorator_list))
        self.functions.append(info)
        self.by_node[node] = info
        # the last `def` of a name is what it is bound to (`@overload` stubs come first)
        if cls is not None and parent is None:
            cls.methods[node.name] = info
        else:
            self._scoped[(parent, node.name)] = info
        self._collect(node.body, info, None, f"{prefix}{node.name}.<locals>.")

    def _base_name(self, base: ast.expr) -> str:
        if isinstance(base, ast.Subscript):
            base = base.value
        qual = self.imports.qualname(base)
        if qual:
            return qual
        if isinstance(base, ast.Name):
            return base.id
        if isinstance(base, ast.Attribute):
            return base.attr
        return ""

    def _disables_grad(self, decorator: ast.expr) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        qual = self.imports.qualname(target)
        if qual in torchapi.GRAD_DISABLING:
            return True
        if qual in torchapi.SET_GRAD_ENABLED and isinstance(decorator, ast.Call):
            return bool(decorator.args) and isinstance(decorator.args[0], ast.Constant) \
                and decorator.args[0].value is False
        # A project's own wrapper (`@smart_inference_mode()`, `@utils.no_grad_if(...)`) defined
        # where we cannot read it: its name is all we have, and guessing "records" is the
        # false positive.
        last = (qual or "").rsplit(".", 1)[-1] or getattr(target, "id", None) or \
            getattr(target, "attr", "")
        return not (qual or "").startswith("torch.") and (
            "inference_mode" in last or "no_grad" in last)

    def _link_classes(self) -> None:
        for cls in self.classes.values():
            cls.local_bases = [self.classes[b] for b in cls.bases if b in self.classes]
        for cls in self.classes.values():
            cls.is_module = self._inherits(cls, _is_module_base)
            cls.is_lightning = self._inherits(cls, lambda q: q in torchapi.LIGHTNING_MODULES)
            cls.is_hf_trainer = self._inherits(cls, lambda q: q in torchapi.HF_TRAINERS)

    def _inherits(self, cls: ClassInfo, predicate, seen=None) -> bool:
        seen = seen or set()
        if id(cls) in seen:
            return False
        seen.add(id(cls))
        if any(predicate(b) for b in cls.bases):
            return True
        return any(self._inherits(b, predicate, seen) for b in cls.local_bases)

    # --- lookups -------------------------------------------------------------
    def function_named(self, name: str, scope: Optional[FunctionInfo]) -> Optional[FunctionInfo]:
        """The function `name` visible from inside `scope` (closures, then module level)."""
        while True:
            found = self._scoped.get((scope, name))
            if found is not None:
                return found
            if scope is None:
                return None
            scope = scope.parent


def _is_module_base(qualname: str) -> bool:
    if qualname in torchapi.NN_MODULE_BASES:
        return True
    if torchapi.is_torch_nn_class(qualname):
        return True
    return qualname.startswith(("transformers.", "diffusers.")) and qualname.endswith(
        ("PreTrainedModel", "Model", "ModelMixin"))


def _nested_bodies(stmt: ast.stmt):
    for name in ("body", "orelse", "finalbody"):
        child = getattr(stmt, name, None)
        if isinstance(child, list):
            yield child
    for handler in getattr(stmt, "handlers", ()):
        yield handler.body
    for case in getattr(stmt, "cases", ()):
        yield case.body
