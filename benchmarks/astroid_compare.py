"""Measurement for issue 14, item 2: should astroid's inference answer our cross-file questions?

    python -m benchmarks.astroid_compare --dest /work/corpus [--repos nanoGPT,detr] [--limit N]
        [--cold-sample 8] [--cold-repeat 3] [--json /tmp/astroid-compare.json]

Needs astroid (`pip install -e .[bench]`; not a dependency of the plugin); without it, it prints
one line and exits 0. Not part of the test suite. Each file is analysed from its repository's
root as the working directory, where flake8 runs.

Training files: files that import torch and either call `.backward(` or call `.step(` inside a
`for`/`while` loop (checked on the `ast` tree). For every call in them whose callee may be a
project function, method or class in another file, it records

- ours: what our resolver reaches (`project.module_file`/`other_analysis`, the other file's
  `index.function_named`/`index.classes`, re-exports via `imports.resolve_name`, as
  `project.resolve_class` does; a method of an instance only when the instance is built from an
  `nn.Module` class of another file, the one case `instance_of` knows today);
- astroid: `astroid.util.safe_infer` of the callee, when it is one FunctionDef, BoundMethod,
  ClassDef or Instance (calling it) defined in another file of the project;

and counts calls resolved by ours only, by astroid only, by both (same or different targets), by
neither. Timing is CPU time (`time.process_time`): astroid's build and inference per file in one
process over the corpus, a cold sample in fresh processes, our resolver on the same calls, and
stock flake8 (our plugin filtered out, as in `python -m benchmarks`) on the same files.

astroid runs in a closed world: imports resolve only to files under the repository root being
measured; anything else (torch, numpy, the standard library) raises AstroidImportError and
infers as Uninferable, so no installed package is ever parsed or imported. A self-check runs
first: a booby-trapped `torch` on `sys.path` (its `__init__` raises) must never be built, and a
control run without the guard must build it (proving the check can see it).
"""
from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import gc
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from flake8_torch_preflight.analysis.project import resolution as project
from flake8_torch_preflight.analysis.file_analysis import FileAnalysis
from flake8_torch_preflight.analysis.project.index import ClassInfo

from .corpus import DEFAULT_DEST, read_source

_BUILTIN_NAMES = frozenset(dir(builtins))
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
Key = Tuple[int, int, int, int]          # a call's (line, col, end line, end col)
BUILTIN = "builtin"                      # astroid's answer is a builtin (`dict.items`)


# ------------------------------------------------------------------------------ training files

def imports_torch(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and \
                (node.module or "").split(".")[0] == "torch":
            return True
    return False


def _calls_method(tree: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == name
               for n in ast.walk(tree))


def is_training_file(tree: ast.AST) -> bool:
    """Imports torch, and calls `.backward(` or calls `.step(` inside a loop."""
    if not imports_torch(tree):
        return False
    if _calls_method(tree, "backward"):
        return True
    return any(isinstance(n, (ast.For, ast.AsyncFor, ast.While)) and _calls_method(n, "step")
               for n in ast.walk(tree))


def search_base(path: Path, repo_root: Path) -> Path:
    """The folder a file is imported from: above its packages (what pylint puts on sys.path)."""
    base = path.parent
    while base != repo_root and (base / "__init__.py").is_file():
        base = base.parent
    return base


def search_path(path: Path, repo_root: Path) -> List[str]:
    """Where astroid looks for absolute imports: the file's folder (Python puts a script's
    folder first), the folder above its packages, the repository root (where flake8 runs)."""
    found: List[str] = []
    for folder in (path.parent, search_base(path, repo_root), repo_root):
        if str(folder) not in found:
            found.append(str(folder))
    return found


def module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


# ------------------------------------------------------------------------------ targets

@dataclass(frozen=True)
class Target:
    kind: str          # function / method / class / instance-call
    path: str
    line: int          # of the `def`/`class` keyword
    name: str

    @property
    def key(self) -> Tuple[str, int]:
        return self.path, self.line

    def text(self, root: Path) -> str:
        if self.kind == BUILTIN:
            return f"builtin {self.name}"
        return f"{self.kind} {self.name} ({os.path.relpath(self.path, root)}:{self.line})"


def _real(path: str) -> str:
    return os.path.realpath(path)


def call_key(node) -> Key:
    return node.lineno, node.col_offset, node.end_lineno or 0, node.end_col_offset or 0


# ------------------------------------------------------------------------------ syntactic candidates

@dataclass
class Candidate:
    """A call and how its callee is reached, as the syntax shows it. `project`: the callee is
    a project name, or a method of a value one project call built (what we ask our resolver
    about); otherwise the call counts only when astroid finds a callee in another file."""
    shape: str
    text: str
    project: bool = False
    qualname: Optional[str] = None      # the callee's project name (`utils.train_one_epoch`)
    bound_from: Optional[str] = None    # the project call the receiver was built by
    method: Optional[str] = None        # for `receiver.method(...)`; None for `receiver(...)`
    via_library: bool = False           # the receiver is (re)bound by a library call somewhere
    unevaluated: bool = False           # in a decorator, default or annotation
    star: bool = False                  # a bare name the file may get from `from x import *`


def scope_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """Nodes of one scope's body, not descending into nested functions, classes or lambdas."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, _SCOPES):
            todo.extend(ast.iter_child_nodes(node))


def _assigned(node: ast.AST) -> Iterator[Tuple[ast.expr, ast.expr]]:
    """(target, value) of `x = v`, `x: T = v`, `with v as x`; a tuple target binds `None`."""
    pairs = []
    if isinstance(node, ast.Assign):
        pairs = [(t, node.value) for t in node.targets]
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        pairs = [(node.target, node.value)]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        pairs = [(i.optional_vars, i.context_expr) for i in node.items if i.optional_vars is not None]
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        pairs = [(node.target, None)]
    for target, value in pairs:
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                yield element, None
        else:
            yield target, value


def _binding_text(target: ast.expr) -> Optional[str]:
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and \
            target.value.id == "self":
        return f"self.{target.attr}"
    return None


class Bindings:
    """name -> values bound to it: per scope for names, per class for `self.x`."""

    def __init__(self, params: Sequence[str] = (), outer: Optional["Bindings"] = None) -> None:
        self.values: Dict[str, List[Optional[ast.expr]]] = defaultdict(list)
        self.params = set(params)
        self.outer = outer     # the module's bindings: a function sees the globals

    def owner(self, text: str) -> "Bindings":
        """The bindings that hold `text`: these, or the module's for a global."""
        if text in self.values or text in self.params or self.outer is None:
            return self
        return self.outer if text in self.outer.values else self

    def add_scope(self, scope: ast.AST, attributes: bool) -> None:
        for node in scope_nodes(scope):
            for target, value in _assigned(node):
                text = _binding_text(target)
                if text and text.startswith("self.") == attributes:
                    self.values[text].append(value)

    def via_library(self, text: str, analysis: FileAnalysis) -> bool:
        """Some binding of `text` is a library call or a method of something (`Net().to(d)`,
        `DDP(model)`, `model.cuda()`)."""
        for value in self.owner(text).values.get(text, ()):
            if isinstance(value, ast.Call):
                qual = analysis.imports.qualname(value.func)
                if qual is not None and not project.is_project_name(qual) or \
                        qual is None and isinstance(value.func, ast.Attribute):
                    return True
        return False

    def describe(self, text: str, analysis: FileAnalysis) -> Tuple[str, Optional[str]]:
        """(how `text` is bound, the project call that builds it when every binding is that
        one call)."""
        values = self.owner(text).values.get(text)
        if not values:
            return ("a parameter" if text in self.params else "a name bound elsewhere"), None
        kinds = [_bound_kind(value, analysis) for value in values]
        quals = {qual for _, qual in kinds}
        if len(quals) == 1 and None not in quals:
            qual = quals.pop()
            return ("class" if qual.rsplit(".", 1)[-1][:1].isupper() else "factory"), qual
        if len(values) == 1:
            return kinds[0][0], None
        several = "a value bound several ways"
        return (several + " (one by a project call)" if quals - {None} else several), None


def _bound_kind(value: Optional[ast.expr], analysis: FileAnalysis) -> Tuple[str, Optional[str]]:
    """(what one binding is, its project call's name or None)."""
    if not isinstance(value, ast.Call):
        return "a value bound from an expression", None
    qual = analysis.imports.qualname(value.func)
    if qual is None:
        return "a value bound from an unresolved call", None
    if not project.is_project_name(qual):
        return f"a value from a library call ({qual.split('.', 1)[0]})", None
    return "project call", qual


def _params(scope: ast.AST) -> List[str]:
    args = getattr(scope, "args", None)
    if not isinstance(args, ast.arguments):
        return []
    return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]


def candidates(analysis: FileAnalysis) -> Dict[Key, Candidate]:
    """Every call of the file with how its callee is reached (see `Candidate`)."""
    found: Dict[Key, Candidate] = {}
    tree = analysis.tree
    class_of: Dict[ast.AST, ast.ClassDef] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            class_of[stmt] = cls
    attributes: Dict[ast.ClassDef, Bindings] = {}
    unevaluated = _unevaluated_calls(tree)
    star = any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)
               for n in ast.walk(tree))
    module = Bindings()
    module.add_scope(tree, attributes=False)
    for scope in [tree] + [n for n in ast.walk(tree) if isinstance(n, _SCOPES)]:
        if scope is tree:
            local = module
        else:
            local = Bindings(_params(scope), outer=module)
            local.add_scope(scope, attributes=False)
        cls = class_of.get(scope)
        if cls is not None and cls not in attributes:
            attributes[cls] = Bindings()
            for method in cls.body:
                if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    attributes[cls].add_scope(method, attributes=True)
        for node in scope_nodes(scope):
            if isinstance(node, ast.Call):
                cand = _candidate(analysis, node, local, attributes.get(cls))
                cand.unevaluated = id(node) in unevaluated
                cand.star = star and isinstance(node.func, ast.Name) and \
                    analysis.imports.qualname(node.func) is None and node.func.id not in local.values
                found[call_key(node)] = cand
    return found


def _unevaluated_calls(tree: ast.AST) -> set:
    """ids of calls in decorators, defaults, annotations and class bases."""
    roots: List[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            roots += node.decorator_list + node.args.defaults + \
                [d for d in node.args.kw_defaults if d is not None]
            roots += [a.annotation for a in node.args.args + node.args.kwonlyargs if a.annotation]
        elif isinstance(node, ast.ClassDef):
            roots += node.decorator_list + node.bases + [k.value for k in node.keywords]
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
    return {id(n) for root in roots for n in ast.walk(root) if isinstance(n, ast.Call)}


def _candidate(analysis, node: ast.Call, local: Bindings, attrs: Optional[Bindings]) -> Candidate:
    func = node.func
    text = ast.unparse(func)[:60]
    qual = analysis.imports.qualname(func)
    if qual is not None:
        return _qualified_candidate(analysis, func, qual, text)
    receiver, method = (func.value, func.attr) if isinstance(func, ast.Attribute) else (func, None)
    what = "method of" if method else "call of"
    name = _receiver_text(receiver)
    if name is None:
        return Candidate(f"{what} {_expression_kind(receiver)}", text)
    if name == "self":
        return Candidate("self.name(...): a method or an attribute holding a callable", text)
    table = attrs if name.startswith("self.") else local
    where = "self attribute" if name.startswith("self.") else "local"
    if table is None:
        return Candidate(f"{what} {where}: not in a class", text)
    how, bound = table.describe(name, analysis)
    via = table.via_library(name, analysis)
    if bound is None:
        return Candidate(f"{what} {where}: {how}", text, via_library=via)
    return Candidate(f"{what} {where} instance from {how}", text, project=True, bound_from=bound,
                     method=method, via_library=via)


def _qualified_candidate(analysis, func: ast.expr, qual: str, text: str) -> Candidate:
    if not project.is_project_name(qual):
        return Candidate(f"library-named import ({qual.split('.', 1)[0]})", text)
    if isinstance(func, ast.Name):
        return Candidate("imported name", text, project=True, qualname=qual)
    owner = qual.rsplit(".", 1)[0].rsplit(".", 1)[-1]
    shape = "attribute of an imported class" if owner[:1].isupper() else "module attribute"
    return Candidate(shape, text, project=True, qualname=qual)


def _receiver_text(expr: ast.expr) -> Optional[str]:
    if isinstance(expr, ast.Name):
        return expr.id
    return _binding_text(expr) if isinstance(expr, ast.Attribute) else None


def _expression_kind(expr: ast.expr) -> str:
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Name) and expr.func.id == "super":
            return "super()"
        return "a call's result"
    if isinstance(expr, ast.Attribute):
        return "an attribute chain"
    if isinstance(expr, ast.Subscript):
        return "a subscript"
    return "an expression"


# ------------------------------------------------------------------------------ our resolver

def ours_targets(analysis: FileAnalysis) -> Dict[Key, Target]:
    """What our own analysis resolves each call to, read from its flow facts: the function or
    method a call runs (`LocalCall`), the class a call builds, the class whose forward a module
    call runs; only targets in another file of the project."""
    here = _real(analysis.filename)
    found: Dict[Key, Target] = {}
    for facts in analysis.all_facts():
        callees: Dict[int, object] = {}
        for local in facts.local_calls:
            callees.setdefault(id(local.node), local.callee)
        for site in facts.calls:
            target = _our_target(analysis, site, callees.get(id(site.node)))
            if target is not None and target.path != here:
                found.setdefault(call_key(site.node), target)
        for forward in facts.forwards:
            cls = forward.module.cls
            if cls is not None and isinstance(forward.site.node, ast.Call):
                target = _class_target(cls, "instance-call")
                if target is not None and target.path != here:
                    found.setdefault(call_key(forward.site.node), target)
    return found


def _our_target(analysis, site, callee) -> Optional[Target]:
    node = site.node
    named = node.func.attr if isinstance(node.func, ast.Attribute) else None
    if callee is not None and (callee.name not in ("__init__", "__call__", "forward")
                               or callee.name == named):
        return _function_target(callee)
    if callee is not None and callee.name != "__init__":
        return _class_target(callee.cls, "instance-call")   # `loss_fn(...)` runs `__call__`
    cls = site.result.cls if callee is not None else None
    if cls is None and site.qualname is not None:
        found = project.resolve(analysis, site.qualname)
        if found is not None and isinstance(found[1], ClassInfo):
            cls = found[1]    # a class with no `__init__` of its own
    if cls is None and callee is not None:
        cls = callee.cls
    return _class_target(cls, "class")


def _function_target(func) -> Optional[Target]:
    home = getattr(func, "home", None)
    if home is None:
        return None
    kind = "method" if func.cls is not None else "function"
    return Target(kind, _real(home.filename), func.node.lineno, func.qualname)


def _class_target(cls, kind: str) -> Optional[Target]:
    home = getattr(cls, "home", None)
    if cls is None or home is None:
        return None
    return Target(kind, _real(home.filename), cls.node.lineno, cls.name)


# ------------------------------------------------------------------------------ astroid, closed world

def _under(path: Optional[str], root: str) -> bool:
    return bool(path) and (_real(path) + os.sep).startswith(root + os.sep)


class ClosedWorld:
    """Keeps astroid inside one project root: no module outside it is resolved, built or loaded.

    `AstroidManager.ast_from_module_name` is where every import astroid follows is resolved
    (module_denylist takes exact names only, and failed-import hooks run only for modules that
    are missing). The guard resolves the name first and refuses anything whose file or package
    folders lie outside the root (stdlib, site-packages, C extensions, a booby-trapped torch):
    astroid raises AstroidImportError, caches the failure, and the name infers as Uninferable.
    Every file astroid parses is recorded, so a run can prove it stayed inside.
    """

    def __init__(self) -> None:
        import astroid
        from astroid.builder import AstroidBuilder
        from astroid.manager import AstroidManager

        self.astroid = astroid
        self.manager = astroid.MANAGER
        self.root = ""
        self.search: List[str] = []
        self.built: List[str] = []
        self.refused: Counter = Counter()
        self._manager_cls = AstroidManager
        self._builder_cls = AstroidBuilder
        self._saved = {}
        self.enabled = True

    def install(self) -> None:
        from astroid.exceptions import AstroidImportError

        world = self
        by_name = self._manager_cls.ast_from_module_name
        by_file = self._manager_cls.ast_from_file
        file_build = self._builder_cls.file_build
        self._saved = {"by_name": by_name, "by_file": by_file, "file_build": file_build}

        def guarded_by_name(manager, modname, context_file=None, use_cache=True):
            if world.enabled and modname and not world.allows_module(manager, modname, context_file):
                world.refused[modname.split(".")[0]] += 1
                raise AstroidImportError(f"{modname!r} is outside the closed world")
            return by_name(manager, modname, context_file, use_cache)

        def guarded_by_file(manager, filepath, modname=None, fallback=True, source=False):
            if world.enabled and not _under(filepath, world.root):
                raise AstroidImportError(f"{filepath!r} is outside the closed world")
            return by_file(manager, filepath, modname, fallback, source)

        def recorded_build(builder, path, modname=None):
            world.built.append(_real(path))
            return file_build(builder, path, modname)

        self._manager_cls.ast_from_module_name = guarded_by_name
        self._manager_cls.ast_from_file = guarded_by_file
        self._builder_cls.file_build = recorded_build

    def uninstall(self) -> None:
        if self._saved:
            self._manager_cls.ast_from_module_name = self._saved["by_name"]
            self._manager_cls.ast_from_file = self._saved["by_file"]
            self._builder_cls.file_build = self._saved["file_build"]
            self._saved = {}

    def allows_module(self, manager, modname: str, context_file: Optional[str]) -> bool:
        cached = manager.astroid_cache.get(modname)
        if cached is not None:
            return cached.file is None or _under(cached.file, self.root)   # builtins, stubs
        if modname == "__main__":
            return True
        try:
            found = manager.file_from_module_name(modname, context_file)
        except self.astroid.exceptions.AstroidBuildingError:
            return True    # missing: astroid fails by itself, nothing is read
        places = [found.location] + list(found.submodule_search_locations or [])
        return all(_under(p, self.root) for p in places if p is not None) and \
            any(p is not None for p in places)

    @contextlib.contextmanager
    def importing_from(self, search: Sequence[str]):
        """sys.path as astroid searches it: the file's import folder, the repo root, then the
        interpreter's own entries (which the guard refuses); never our checkout."""
        saved = list(sys.path)
        here = {os.path.realpath(os.getcwd()), ""}
        sys.path[:] = list(search) + [p for p in saved if os.path.realpath(p) not in here and p]
        try:
            yield
        finally:
            sys.path[:] = saved

    def reset_project(self, root: str, search: Sequence[str]) -> None:
        """Forget the project's modules and every cached import resolution (they depend on
        sys.path); keep builtins and the brains, which `MANAGER.clear_cache()` would rebuild
        at 0.2-0.5 s a time."""
        from astroid import modutils
        from astroid.context import _invalidate_cache
        from astroid.inference_tip import clear_inference_tip_cache
        from astroid.interpreter._import import spec, util
        from astroid.nodes._base_nodes import LookupMixIn
        from astroid.nodes.scoped_nodes import ClassDef

        self.root, self.search = _real(root), list(search)
        cache = self.manager.astroid_cache
        for name in [n for n, m in cache.items() if m.file is not None]:
            del cache[name]
        self.manager._mod_file_cache.clear()
        clear_inference_tip_cache()
        _invalidate_cache()
        for lru in (LookupMixIn.lookup, ClassDef._metaclass_lookup_attribute, spec._find_spec,
                    spec._is_setuptools_namespace, util.is_namespace, modutils._has_init,
                    modutils._cache_normalize_path_, modutils.cached_os_path_isfile):
            lru.cache_clear()
        for finder in spec._SPEC_FINDERS:
            finder.find_module.cache_clear()

    def build(self, path: Path, modname: str):
        with self.importing_from(self.search):
            return self.manager.ast_from_file(str(path), modname)

    def infer_callee(self, call):
        """`safe_infer` of the callee (None: failed or ambiguous); any error counts as unknown."""
        from astroid.util import safe_infer

        with self.importing_from(self.search):
            try:
                return safe_infer(call.func)
            except Exception:        # noqa: BLE001 - an astroid failure is "unknown"
                return None

    def ambiguity(self, call, limit: int = 8) -> int:
        """0: the callee infers to at most one value; 2: to several project definitions;
        1: several values, fewer than two of them project definitions."""
        with self.importing_from(self.search):
            try:
                values = [v for _, v in zip(range(limit), call.func.infer())]
            except Exception:        # noqa: BLE001
                return 0
        if len(values) < 2:
            return 0
        defs = {t.key for t in (astroid_target(self, v) for v in values)
                if t is not None and t.kind != BUILTIN}
        return 2 if len(defs) > 1 else 1


def astroid_target(world: ClosedWorld, value) -> Optional[Target]:
    """A FunctionDef, BoundMethod, ClassDef or Instance defined in a project file."""
    if value is None:
        return None
    from astroid import bases, nodes

    kind = None
    while isinstance(value, bases.UnboundMethod):  # BoundMethod -> UnboundMethod -> FunctionDef
        value, kind = value._proxied, "method"
    if isinstance(value, bases.Instance) and isinstance(value._proxied, nodes.ClassDef):
        value, kind = value._proxied, "instance-call"
    if not isinstance(value, (nodes.FunctionDef, nodes.ClassDef)):
        return None
    kind = kind or ("class" if isinstance(value, nodes.ClassDef) else "function")
    path = value.root().file
    if path is None and value.root().name == "builtins":
        return Target(BUILTIN, "", 0, value.name)
    if not _under(path, world.root):
        return None
    line = value.position.lineno if value.position else value.lineno
    return Target(kind, _real(path), line, value.name)


# ------------------------------------------------------------------------------ one file

@dataclass
class FileResult:
    rel: str
    lines: int
    build_ms: float = 0.0
    infer_asked_ms: float = 0.0
    infer_rest_ms: float = 0.0
    ours_ms: float = 0.0
    stock_ms: float = 0.0
    error: str = ""
    builtin: int = 0        # project-looking calls astroid shows reach a builtin
    outside: Counter = field(default_factory=Counter)   # heads of names found nowhere in the project
    calls: List[dict] = field(default_factory=list)


def asked(analysis: FileAnalysis, node: ast.Call) -> bool:
    """A call a lazy plugin would put to astroid: not a library name, not a plain builtin."""
    qual = analysis.imports.qualname(node.func)
    if qual is not None:
        return project.is_project_name(qual)
    if isinstance(node.func, ast.Name) and node.func.id in _BUILTIN_NAMES:
        return analysis.index.function_named(node.func.id, None) is not None
    return True


def cpu(fn):
    start = time.process_time()
    result = fn()
    return result, (time.process_time() - start) * 1000


@dataclass
class FileState:
    """One training file between the passes: our answers first, then astroid's."""
    file: TrainingFile
    result: FileResult
    cands: Dict[Key, Candidate] = field(default_factory=dict)
    ours: Dict[Key, Target] = field(default_factory=dict)
    asked: set = field(default_factory=set)


def ours_pass(state: FileState) -> None:
    """Our whole analysis of the file (every function's flow facts, other project files
    followed inside it), timed; what it resolved each call to."""
    tree = state.file.parse()
    analysis = FileAnalysis(tree, str(state.file.path))
    state.ours, state.result.ours_ms = cpu(lambda: ours_targets(analysis))
    state.cands = candidates(analysis)
    state.asked = {call_key(n) for n in ast.walk(tree)
                   if isinstance(n, ast.Call) and asked(analysis, n)}


def astroid_pass(world: ClosedWorld, state: FileState) -> None:
    """astroid's build and inference of the file, timed (calls a lazy plugin would ask about
    first, then the rest); each considered call compared with our answer."""
    result, path = state.result, state.file.path
    base = search_base(path, state.file.root)
    try:
        module, result.build_ms = cpu(lambda: world.build(path, module_name(path, base)))
        calls = list(module.nodes_of_class(world.astroid.nodes.Call))
    except Exception as exc:      # noqa: BLE001 - a file astroid cannot build: all unknown
        result.error = f"{type(exc).__name__}: {exc}"[:200]
        calls = []
    first = [c for c in calls if call_key(c) in state.asked]
    rest = [c for c in calls if call_key(c) not in state.asked]
    inferred_first, result.infer_asked_ms = cpu(lambda: [world.infer_callee(c) for c in first])
    inferred_rest, result.infer_rest_ms = cpu(lambda: [world.infer_callee(c) for c in rest])
    analysis = FileAnalysis(state.file.parse(), str(path))   # for the reasons (no flow)
    for call, value in zip(first + rest, inferred_first + inferred_rest):
        compare_call(world, state, analysis, call, value)


def compare_call(world: ClosedWorld, state: FileState, analysis, call, value) -> None:
    key, result = call_key(call), state.result
    cand = state.cands.get(key)
    if cand is None:
        return   # a node astroid made that the source's tree does not have
    mine, theirs = state.ours.get(key), astroid_target(world, value)
    if theirs is not None and theirs.kind == BUILTIN and mine is None:
        result.builtin += cand.project   # `reduce_dict(...).items()`: not a project callee
        return
    cross = theirs is not None and theirs.kind != BUILTIN and theirs.path != _real(str(state.file.path))
    if not (cand.project or mine or cross):
        return   # not a cross-file question
    if not cross and theirs is not None and theirs.kind != BUILTIN and mine is None:
        theirs = None   # astroid found the file's own definition: no cross-file answer
    ambiguous = world.ambiguity(call) if theirs is None and value is None else 0
    if mine is None and theirs is None and cand.project and not _in_project(analysis, cand):
        result.outside[(cand.qualname or cand.bound_from).split(".", 1)[0]] += 1
        return   # a package that is not in the project (`dgl` in dgl's examples)
    result.calls.append(record(result.rel, call.lineno, cand, mine, theirs, ambiguous,
                               state.file.root, analysis))


def outcome(mine: Optional[Target], theirs: Optional[Target]) -> str:
    if mine and theirs:
        return "both, same target" if mine.key == theirs.key else "both, different targets"
    if mine:
        return "ours only"
    if theirs:
        return "astroid only"
    return "neither"


def record(rel, line, cand: Candidate, mine, theirs, ambiguous, repo_root: Path, analysis) -> dict:
    why = ""
    if mine is None and theirs is not None:
        why = ours_miss_reason(analysis, cand, theirs)
    elif mine is not None and theirs is None:
        why = astroid_miss_reason(cand, ambiguous)
    elif mine is None and theirs is None:
        why = neither_reason(analysis, cand, ambiguous)
    return {"file": rel, "line": line, "shape": cand.shape, "callee": cand.text,
            "project": cand.project, "qualname": cand.qualname or cand.bound_from,
            "ours": mine.text(repo_root) if mine else None,
            "astroid": theirs.text(repo_root) if theirs else None,
            "outcome": outcome(mine, theirs), "ambiguous": bool(ambiguous), "why": why}


def astroid_miss_reason(cand: Candidate, ambiguous: int) -> str:
    if ambiguous > 1:
        return "astroid: several project definitions reach the call (conditional imports, " \
               "branches): ours picks one"
    if cand.via_library:
        return "astroid: the value passes through a library call (`Net().to(device)`, " \
               "`DDP(model)`), which the closed world cannot see into"
    if ambiguous:
        return "astroid: ambiguous (a project value on one path, unknown ones on others)"
    if "subscript" in cand.shape:
        return "astroid: an element of a container filled at run time (`loggers[key]`)"
    if "parameter" in cand.shape or "bound elsewhere" in cand.shape:
        return "astroid: a parameter or a global bound in another scope"
    if (cand.qualname or cand.bound_from or "").startswith("."):
        return "astroid: relative import in a folder without __init__.py (no package in the module name)"
    return "astroid: unknown"


def neither_reason(analysis, cand: Candidate, ambiguous: bool) -> str:
    if ambiguous:
        return "astroid: ambiguous"
    if cand.method is not None and cand.bound_from:
        resolved = project.resolve_class(analysis, cand.bound_from)
        if resolved is not None and resolved[1].method(cand.method) is None:
            return "a library method of a project instance (`model.to`, `model.parameters`)"
        if not cand.bound_from.rsplit(".", 1)[-1][:1].isupper():
            return "a method of a factory's result"
    if cand.qualname and "." in cand.qualname:
        other = project.other_analysis(analysis, cand.qualname.rsplit(".", 1)[0])
        if other is not None:
            return "module found, name not defined in it (e.g. a local name shadowing the import)"
    return "both unknown"


def _in_project(analysis, cand: Candidate) -> bool:
    """Some prefix of the callee's module is a file our resolver can find (relative names are
    always the project's)."""
    qual = cand.qualname or cand.bound_from or ""
    if qual.startswith("."):
        return True
    parts = qual.split(".")
    return any(project.module_file(analysis.filename, ".".join(parts[:i]))
               for i in range(len(parts) - 1, 0, -1))


def ours_miss_reason(analysis, cand: Candidate, theirs: Target) -> str:
    """Why our resolver did not reach what astroid reached."""
    reason = _shape_miss(cand, theirs)
    if reason:
        return reason
    if cand.qualname is None:
        return _instance_miss(analysis, cand)
    if cand.shape == "attribute of an imported class":
        return "ours does not look up class attributes (`Cls.method`)"
    module, name = cand.qualname.rsplit(".", 1)
    other = project.other_analysis(analysis, module)
    if other is None:
        return "module file not found next to the file (imported from the repo root, " \
               "a folder without __init__.py, or sys.path set by the script)"
    return "module found, name not defined there: " + _name_miss(other, name)


def _shape_miss(cand: Candidate, theirs: Target) -> str:
    """A reason the call's position or shape gives alone, or ''."""
    if cand.unevaluated:
        return "a call in a decorator, default argument or annotation (our flow does not evaluate it)"
    if cand.star:
        return "a name from a star import (`from utils import *`)"
    if cand.shape.startswith("self.name"):
        if theirs.kind == "method":
            return "a method inherited from a base class in another file (ours: bases in the same file)"
        return "a self attribute holding a project instance or function our flow did not carry"
    head = cand.shape.rsplit("(", 1)[-1].rstrip(")")
    if "library" in cand.shape and head in project.LIBRARY_PACKAGES:
        return f"a project package named like a library we list ({head}): ours never looks"
    if not cand.project:
        return f"ours does not follow: {cand.shape}"
    return ""


def _instance_miss(analysis, cand: Candidate) -> str:
    found = project.resolve(analysis, cand.bound_from)
    if found is None:
        return "the class or factory that built the value is not resolved by ours"
    if not isinstance(found[1], ClassInfo):
        return "a factory's result: its return summary holds no project instance"
    if cand.method is not None and found[1].method(cand.method) is None:
        return "a method inherited from a base class in another file (ours: bases in the same file)"
    return "the instance is resolved, but our flow did not carry it to this call"


def _name_miss(other, name: str) -> str:
    tree = other.tree
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name
                                                for t in node.targets):
            return "a module-level assignment (`X = Y`, `X = partial(...)`)"
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return "a star import"
    target = other.imports.resolve_name(name)
    if target is not None:
        head = target.split(".", 1)[0]
        if head in project.LIBRARY_PACKAGES:
            return f"a re-export from a library-named package ({head})"
        return "a re-export ours did not follow (absolute from the repo root or > 3 hops)"
    if other.index.function_named(name, None) or name in other.index.classes:
        return "defined there, but the call was not reached by our flow"
    return "no def, class or import of that name at module level there"


# ------------------------------------------------------------------------------ the corpus

class TrainingFile(NamedTuple):
    root: Path         # the repository folder: the project root
    path: Path
    rel: str
    lines: int

    def parse(self) -> ast.Module:
        """Parsed again in each pass: keeping 900 trees alive would slow every garbage
        collection of the passes (flake8 holds one file's tree at a time)."""
        return ast.parse(read_source(self.path))


def training_files(dest: Path, repos: Optional[Sequence[str]], limit: int) -> List[TrainingFile]:
    """The training files, sorted by repository and folder (one import folder at a time)."""
    roots = sorted(p for p in dest.iterdir() if p.is_dir() and (not repos or p.name in repos))
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            source = read_source(path)
            try:
                tree = ast.parse(source)
            except (SyntaxError, ValueError, RecursionError):
                continue
            if is_training_file(tree):
                found.append(TrainingFile(root, path, path.relative_to(dest).as_posix(),
                                          source.count("\n") + 1))
    found.sort(key=lambda f: (f.root.name, str(f.path.parent), str(f.path)))
    return found[:limit] if limit else found


def stock_flake8_ms(guide, path: Path) -> float:
    return cpu(lambda: guide.check_files([str(path)]))[1]


def stock_whole_corpus(dest: Path, repos: Optional[Sequence[str]]) -> Tuple[float, int, int]:
    """(CPU ms, files, lines) of stock flake8 over every .py file of the corpus, a repository
    per `check_files` call (as `flake8 -j 1` from each root would)."""
    from .__main__ import stock_flake8_guide

    guide = stock_flake8_guide()
    total_ms, count, lines = 0.0, 0, 0
    for root in sorted(p for p in dest.iterdir() if p.is_dir() and (not repos or p.name in repos)):
        paths = sorted(str(p) for p in root.rglob("*.py") if p.is_file())
        total_ms += cpu(lambda: guide.check_files(paths))[1]
        count += len(paths)
        lines += sum(read_source(Path(p)).count("\n") + 1 for p in paths)
    return total_ms, count, lines


@contextlib.contextmanager
def working_directory(folder: Path):
    """Run from the repository root, as flake8 is (the corpus holds no `.git` or other root
    marker, so the root our module search uses is the current directory, as astroid's is
    the search path this script gives it)."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def run_corpus(files, with_flake8: bool) -> List[FileResult]:
    """Three passes over the training files, so that no one's heap slows another's garbage
    collection: stock flake8, then our analysis, then astroid."""
    states = [FileState(f, FileResult(f.rel, f.lines)) for f in files]
    if with_flake8:
        from .__main__ import stock_flake8_guide

        guide = stock_flake8_guide()
        for state in states:
            state.result.stock_ms = stock_flake8_ms(guide, state.file.path)
        gc.collect()
    for state in states:
        with working_directory(state.file.root):
            ours_pass(state)
    gc.collect()
    world = ClosedWorld()
    world.install()
    group, last_root = None, None
    try:
        for state in states:
            root = state.file.root
            search = search_path(state.file.path, root)
            if (root, search) != group:
                group = (root, search)
                world.reset_project(str(root), search)
                if root != last_root:
                    last_root = root
                    print(f"  {root.name} ...", file=sys.stderr, flush=True)
            with working_directory(root):
                astroid_pass(world, state)
    finally:
        world.uninstall()
    roots = {str(s.file.root) for s in states}
    outside = [p for p in world.built if not any(_under(p, r) for r in roots)]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process: {peak:.0f} MiB (astroid's caches are dropped per import folder)")
    print(f"closed world: astroid parsed {len(set(world.built))} files, {len(outside)} outside the "
          f"project roots; refused imports of {len(world.refused)} top-level names "
          f"(e.g. {', '.join(n for n, _ in world.refused.most_common(6))})")
    return [s.result for s in states]


# ------------------------------------------------------------------------------ cold, fresh process

def cold_one(path: Path, root: Path) -> dict:
    """In a fresh process: import astroid, build one file, infer every call."""
    start = time.process_time()
    world = ClosedWorld()
    import_ms = (time.process_time() - start) * 1000
    world.install()
    base = search_base(path, root)
    world.reset_project(str(root), search_path(path, root))
    module, build_ms = cpu(lambda: world.build(path, module_name(path, base)))
    calls = list(module.nodes_of_class(world.astroid.nodes.Call))
    _, infer_ms = cpu(lambda: [world.infer_callee(c) for c in calls])
    return {"import_ms": import_ms, "build_ms": build_ms, "infer_ms": infer_ms,
            "parsed": len(set(world.built))}


def cold_sample(files, count: int, repeat: int) -> List[dict]:
    if count <= 0 or not files:
        return []
    step = max(1, len(files) // count)
    rows = []
    for root, path, rel, lines in files[::step][:count]:
        runs = []
        for _ in range(repeat):
            out = subprocess.run([sys.executable, "-m", "benchmarks.astroid_compare", "--cold-one",
                                  str(path), "--root", str(root)], capture_output=True, text=True,
                                 cwd=Path(__file__).resolve().parent.parent)
            if out.returncode == 0:
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        if runs:
            row = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            row.update(rel=rel, lines=lines)
            rows.append(row)
    return rows


# ------------------------------------------------------------------------------ self-check

_TRAP = "raise RuntimeError('booby-trapped torch: astroid imported or built it')\n"
_TRAIN = """\
import torch
import torch.nn as nn
import numpy as np
from torch.optim import AdamW
from helpers import train_step, Logger


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)


def main():
    model = Net()
    opt = AdamW(model.parameters())
    logger = Logger()
    for batch in logger.every(range(3)):
        loss = train_step(model, batch)
        loss.backward()
        opt.step()
"""
_HELPERS = """\
import torch


def train_step(model, batch):
    return model(torch.tensor(batch)).sum()


class Logger:
    def every(self, items):
        yield from items
"""


def closed_world_check() -> bool:
    """A trapped `torch` on sys.path is never built with the guard, and is without it."""
    with tempfile.TemporaryDirectory(prefix="tpf-astroid-") as tmp:
        trap, proj = Path(tmp, "site"), Path(tmp, "proj")
        (trap / "torch" / "nn").mkdir(parents=True)
        (trap / "torch" / "__init__.py").write_text(_TRAP)
        (trap / "torch" / "nn" / "__init__.py").write_text(_TRAP)
        proj.mkdir()
        (proj / "train.py").write_text(_TRAIN)
        (proj / "helpers.py").write_text(_HELPERS)
        guarded = _check_run(proj, trap, guard=True)
        control = _check_run(proj, trap, guard=False)
    ok = not guarded["trap_built"] and not guarded["imported"] and guarded["resolved"] == 2 \
        and control["trap_built"]
    print(f"closed-world check: {'ok' if ok else 'FAILED'} (guarded: trap built "
          f"{guarded['trap_built']}, torch imported {guarded['imported']}, project calls resolved "
          f"{guarded['resolved']}/2; control without guard: trap built {control['trap_built']})")
    return ok


def _check_run(proj: Path, trap: Path, guard: bool) -> dict:
    world = ClosedWorld()
    world.install()
    world.enabled = guard
    try:
        world.reset_project(str(proj), [str(proj), str(trap)])
        module = world.build(proj / "train.py", "train")
        values = [world.infer_callee(c) for c in module.nodes_of_class(world.astroid.nodes.Call)]
        resolved = {t.name for t in (astroid_target(world, v) for v in values)
                    if t is not None and t.path.endswith("helpers.py")}
        return {"trap_built": any(_under(p, _real(str(trap))) for p in world.built),
                "imported": "torch" in sys.modules, "resolved": len(resolved & {"train_step", "every"})}
    finally:
        world.uninstall()
        world.enabled = True
        world.reset_project(str(proj), [])


# ------------------------------------------------------------------------------ report

OUTCOMES = ("ours only", "astroid only", "both, same target", "both, different targets", "neither")


def report(results: List[FileResult], cold: List[dict], examples: int) -> str:
    calls = [c for r in results for c in r.calls]
    out = [f"training files: {len(results)} ({sum(r.lines for r in results):,} lines), "
           f"astroid build failures: {sum(1 for r in results if r.error)}",
           f"calls considered: {len(calls)} (left out: {sum(r.builtin for r in results)} "
           f"project-looking calls that astroid shows reach a builtin, e.g. `.items()` of a "
           f"helper's dict)", ""]
    outside = Counter()
    for r in results:
        outside.update(r.outside)
    out[-1:-1] = [f"left out: {sum(outside.values())} calls of names whose module is no file of "
                  f"the project for either resolver (libraries we do not list: "
                  + ", ".join(f"{h} {n}" for h, n in outside.most_common(8)) + ", ...)"]
    out += _outcome_table(calls)
    for name in ("astroid only", "ours only"):
        reasons = Counter(c["why"] for c in calls if c["outcome"] == name)
        out += ["", f"{name}, why:"] + [f"  {n:5d}  {w}" for w, n in reasons.most_common()]
    search = Counter(_cause(c["why"]) for c in calls if c["outcome"] == "astroid only")
    out += ["", "astroid only, by cause: " + "; ".join(f"{w}: {n}" for w, n in search.most_common())]
    out += [""] + _timing(results, cold)
    for name in ("astroid only", "ours only", "both, different targets"):
        out += ["", f"examples, {name}:"] + _examples(calls, name, examples)
    return "\n".join(out)


_SEARCH_REASONS = ("module file not found", "re-export", "named like a library", "star import",
                   "not resolved by ours")


def _cause(why: str) -> str:
    """Finding the module (where the import leads) or following values (what a name holds)."""
    if any(r in why for r in _SEARCH_REASONS):
        return "finding the module (search path, re-exports, library-named packages, star imports)"
    return "following values and call positions (instances, self attributes, bases, decorators)"


def _outcome_table(calls: List[dict]) -> List[str]:
    shapes = sorted({c["shape"] for c in calls}, key=lambda s: -sum(c["shape"] == s for c in calls))
    rows = ["| shape | calls | " + " | ".join(OUTCOMES) + " |",
            "|---|---:|" + "---:|" * len(OUTCOMES)]
    for shape in shapes + ["all"]:
        sel = [c for c in calls if shape in ("all", c["shape"])]
        count = Counter(c["outcome"] for c in sel)
        rows.append(f"| {shape} | {len(sel)} | " + " | ".join(str(count[o]) for o in OUTCOMES) + " |")
    neither = Counter(c["why"] or "other" for c in calls if c["outcome"] == "neither")
    rows.append("")
    rows.append("neither, why:")
    rows += [f"  {n:5d}  {w}" for w, n in neither.most_common()]
    return rows


def _ms_line(label: str, values: Sequence[float], lines: int) -> str:
    total = sum(values)
    return (f"  {label:<34} median {statistics.median(values):7.1f} ms/file  p90 "
            f"{_p90(values):7.1f}  max {max(values):8.1f}  total {total / 1000:7.1f} s  "
            f"({total / lines * 1000:6.1f} ms/1k lines)")


def _p90(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[int(0.9 * (len(ordered) - 1))]


def _timing(results: List[FileResult], cold: List[dict]) -> List[str]:
    lines = sum(r.lines for r in results)
    build = [r.build_ms for r in results]
    asked_ms = [r.build_ms + r.infer_asked_ms for r in results]
    full = [r.build_ms + r.infer_asked_ms + r.infer_rest_ms for r in results]
    rows = ["CPU time, one process over all training files (project caches kept per import folder):",
            _ms_line("astroid build", build, lines),
            _ms_line("astroid build + infer asked calls", asked_ms, lines),
            _ms_line("astroid build + infer every call", full, lines),
            _ms_line("our resolver on the same calls", [r.ours_ms for r in results], lines)]
    stock = [r.stock_ms for r in results]
    if any(stock):
        rows.append(_ms_line("stock flake8", stock, lines))
        rows.append(f"  astroid (build + asked) / stock flake8 = {sum(asked_ms) / sum(stock):.1%}; "
                    f"(build + every call) / stock = {sum(full) / sum(stock):.1%}; "
                    f"ours / stock = {sum(r.ours_ms for r in results) / sum(stock):.2%}")
    slow = sorted(results, key=lambda r: -(r.build_ms + r.infer_asked_ms + r.infer_rest_ms))[:3]
    rows.append("  slowest for astroid: " + "; ".join(
        f"{r.rel} ({r.lines} lines) build {r.build_ms:.0f} + infer "
        f"{r.infer_asked_ms + r.infer_rest_ms:.0f} ms" for r in slow))
    if cold:
        rows.append(f"cold, fresh process per file ({len(cold)} files, median of runs each):")
        for row in cold:
            rows.append(f"  {row['rel']} ({row['lines']} lines): import astroid {row['import_ms']:.0f} ms, "
                        f"build {row['build_ms']:.0f} ms, infer {row['infer_ms']:.0f} ms, "
                        f"{row['parsed']:.0f} project files parsed")
        rows.append("  median build + infer {:.0f} ms, median import {:.0f} ms".format(
            statistics.median(r["build_ms"] + r["infer_ms"] for r in cold),
            statistics.median(r["import_ms"] for r in cold)))
    return rows


def _examples(calls: List[dict], name: str, count: int) -> List[str]:
    """Up to `count` per shape, from different repositories first."""
    rows = []
    by_shape = defaultdict(list)
    for call in calls:
        if call["outcome"] == name:
            by_shape[call["shape"]].append(call)
    for shape, sel in sorted(by_shape.items(), key=lambda kv: -len(kv[1])):
        picked, repos = [], set()
        for call in sel:                      # one per repository first
            repo = call["file"].split("/", 1)[0]
            if repo not in repos and len(picked) < count:
                repos.add(repo)
                picked.append(call)
        picked += [c for c in sel if c not in picked][:count - len(picked)]
        rows.append(f"  [{shape}] {len(sel)}")
        for call in picked:
            rows.append(f"    {call['file']}:{call['line']} {call['callee']} -> ours: {call['ours']}; "
                        f"astroid: {call['astroid']}" + (f"  [{call['why']}]" if call["why"] else ""))
    return rows


# ------------------------------------------------------------------------------ main

def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.astroid_compare")
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    parser.add_argument("--repos", default="", help="comma-separated corpus folders (default all)")
    parser.add_argument("--limit", type=int, default=0, help="at most this many training files")
    parser.add_argument("--no-flake8", action="store_true", help="skip timing stock flake8")
    parser.add_argument("--cold-sample", type=int, default=8)
    parser.add_argument("--cold-repeat", type=int, default=3)
    parser.add_argument("--examples", type=int, default=5)
    parser.add_argument("--stock-all", action="store_true",
                        help="also time stock flake8 on every corpus file (a few minutes)")
    parser.add_argument("--json", type=Path, help="write every call's record here")
    parser.add_argument("--cold-one", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if importlib.util.find_spec("astroid") is None:
        print("astroid is not installed (pip install astroid): astroid comparison skipped")
        return 0
    if args.cold_one:
        print(json.dumps(cold_one(args.cold_one, args.root)))
        return 0
    if not closed_world_check():
        return 1
    files = training_files(args.dest, [r for r in args.repos.split(",") if r], args.limit)
    results = run_corpus(files, with_flake8=not args.no_flake8)
    cold = cold_sample(files, args.cold_sample, args.cold_repeat)
    print(report(results, cold, args.examples))
    if args.stock_all:
        stock_ms, count, lines = stock_whole_corpus(args.dest, [r for r in args.repos.split(",") if r])
        asked_ms = sum(r.build_ms + r.infer_asked_ms for r in results)
        print(f"stock flake8 on the whole corpus: {count} files, {lines:,} lines, "
              f"{stock_ms / 1000:.1f} s CPU ({stock_ms / lines * 1000:.1f} ms/1k lines); astroid on "
              f"the training files only (build + asked calls) = {asked_ms / stock_ms:.1%} of it")
    if args.json:
        args.json.write_text(json.dumps({"files": [r.__dict__ for r in results], "cold": cold},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
