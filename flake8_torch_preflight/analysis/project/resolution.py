"""Across files of the same project: follow `from models import Net` to `models.py` beside us.

Only what the import names is followed, and only to a `.py` file that exists next to the
linted file (relative imports from the linted file's directory; absolute ones from its
directory and from each parent directory while the one below is a package). The other file
is parsed with `ast` and analysed like the linted file (`FileContext.other_file`, cached per
process by path and modification time, see `workspace.py`); it is never imported or
executed. When an import does not resolve to such a file, callers get None and stay quiet. Functions
and classes found there keep their home (`FunctionInfo.home`): the interpreter calls them
like the file's own, through their own file's analysis.
"""
from __future__ import annotations

import ast
import os
import sys
from typing import Dict, List, Optional, Tuple

from ..core.context import FileContext
from .index import ClassInfo, FunctionInfo

_MAX_HOPS = 3            # re-exports followed (`from .net import Net` in `models/__init__.py`)
_MAX_PARENTS = 4         # package directories walked up for absolute imports


def _stdlib_module_names() -> frozenset:
    """The standard library's top-level names (`sys.stdlib_module_names` from Python 3.10).

    Before 3.10 they are listed from the interpreter's own library folders (names only,
    nothing is imported or parsed); without them `import copy` would count as a project
    module, and an unresolvable `copy.deepcopy(...)` would silence rules that must prove
    absence (TPF007 on `model.train(False)`).
    """
    names = getattr(sys, "stdlib_module_names", None)
    if names is not None:
        return frozenset(names)
    import pkgutil
    import sysconfig

    folders = [sysconfig.get_path("stdlib"),
               os.path.join(sysconfig.get_path("platstdlib"), "lib-dynload")]
    found = {module.name for module in pkgutil.iter_modules(folders)}
    # `test` is CPython's own test suite, which 3.10's list leaves out as well
    return frozenset(found | set(sys.builtin_module_names)) - {"test"}


# Packages that are never the project's own: their imports are not looked up on disk.
LIBRARY_PACKAGES = frozenset(
    """torch torchvision torchaudio torchtext numpy np tqdm transformers accelerate lightning
    pytorch_lightning lightning_fabric deepspeed wandb tensorboard tensorboardX datasets timm
    sklearn scipy matplotlib PIL pandas torchmetrics einops peft diffusers apex mlflow
    comet_ml neptune evaluate yaml omegaconf hydra rich loguru cv2 albumentations trl
    bitsandbytes bnb safetensors huggingface_hub tokenizers sentencepiece torchdata
    torch_geometric dgl ogb""".split()
) | _stdlib_module_names()


# Libraries no project folder is taken for (the analysed code's own `torch/` is not ours to
# read): names under them are never looked up on disk.
_NEVER_PROJECT = frozenset({"torch", "torchvision", "torchaudio", "numpy", "np"}) | \
    _stdlib_module_names()


def is_project_name(qualname: Optional[str]) -> bool:
    """An imported name that may belong to the project itself (relative, or not a library)."""
    if not qualname:
        return False
    if qualname.startswith("."):
        return True
    return qualname.split(".", 1)[0] not in LIBRARY_PACKAGES


# (directory, module) -> path or None
_FILES: Dict[Tuple[str, str], Optional[str]] = {}
_IN_PROGRESS: set = set()
# importing file (absolute) -> {module: the file its lookup found, or None}: every lookup of
# the process, so the cache across runs can record what a file's analysis read
# (`dependencies`)
_LOOKUPS: Dict[str, Dict[str, Optional[str]]] = {}


def other_analysis(analysis: FileContext, module: str) -> Optional[FileContext]:
    """The analysis of the project file `module` names, seen from `analysis`'s file."""
    path = module_file(analysis.filename, module)
    return analysis.other_file(path) if path is not None else None


def module_file(filename: str, module: str) -> Optional[str]:
    """The `.py` file that `module` (`models`, `.model`, `pkg.nets`) names, seen from
    `filename`, or None when it is not a file of this project next to it.

    Relative imports are resolved from the file's package. Absolute ones are looked up in the
    file's folder, in each package folder above it, and then in the folders above those up
    to the project's root (the first folder holding `pyproject.toml`, `setup.py`, `setup.cfg`
    or `.git`; at most a few levels): scripts run from the repository root import its
    modules. A project folder named like a library (`datasets/` in a detection repository)
    is the project's. Only the project's folders are searched, never installed packages."""
    if not filename or filename.startswith("<") or not module.strip("."):
        return None
    absolute = os.path.abspath(filename)
    here = os.path.dirname(absolute)
    _follow_the_working_directory()
    key = (here, module)
    found = _FILES[key] if key in _FILES else _search(key)
    _LOOKUPS.setdefault(absolute, {})[module] = found
    return found


def _search(key: Tuple[str, str]) -> Optional[str]:
    here, module = key
    level = len(module) - len(module.lstrip("."))
    parts = module.lstrip(".").split(".")
    roots = _relative_root(here, level) if level else _absolute_roots(here)
    found = None
    for root in roots:
        base = os.path.join(root, *parts)
        for candidate in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(candidate):
                found = candidate
                break
        if found:
            break
    _FILES[key] = found
    return found


def dependencies(filename: str) -> Tuple[List[Tuple[str, str, Optional[str]]],
                                         List[str]]:
    """(every module lookup, every file found) that the analysis of `filename` may have
    used: the lookups made from it and, breadth first, from each file they found, as far as
    imports resolve (the module summaries follow every import of the project)."""
    start = os.path.abspath(filename)
    seen = {start}
    lookups: List[Tuple[str, str, Optional[str]]] = []
    files: Dict[str, None] = {}      # in the order found
    todo = [start]
    for importer in todo:        # grows while it is walked: breadth first
        for module, found in sorted(_LOOKUPS.get(importer, {}).items()):
            lookups.append((importer, module, found))
            if found is None:
                continue
            if found not in seen:
                seen.add(found)
                todo.append(found)
            files[found] = None
    return lookups, list(files)


_MAX_ROOT_LEVELS = 3      # non-package folders walked up when no root marker is above
_MAX_MARKER_LEVELS = 16   # folders walked up looking for a root marker
_ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
_ROOTS: Dict[str, List[str]] = {}
_MARKED: Dict[str, Optional[str]] = {}


def _relative_root(here: str, level: int) -> List[str]:
    root = here
    for _ in range(level - 1):
        root = os.path.dirname(root)
    return [root]


def _absolute_roots(here: str) -> List[str]:
    """The file's folder, the package folders above it, then each folder up to the project
    root (the nearest folder with a root marker; without one, the current directory when the
    file lies under it, else a few levels): a script run from the repository root, or from
    a folder on the way, imports its modules."""
    cached = _ROOTS.get(here)
    if cached is not None:
        return cached
    roots = [here]
    root = here
    for _ in range(_MAX_PARENTS):
        if not os.path.isfile(os.path.join(root, "__init__.py")):
            break
        parent = os.path.dirname(root)
        if parent == root:
            break
        root = parent
        roots.append(root)
    top = _marked_root(root) or _working_root(root)
    for _ in range(_MAX_MARKER_LEVELS if top is not None else _MAX_ROOT_LEVELS):
        if root == top:
            break
        parent = os.path.dirname(root)
        if parent == root:
            break
        root = parent
        roots.append(root)
    _ROOTS[here] = roots
    return roots


_CWD: List[str] = []


def _follow_the_working_directory() -> None:
    """Folders found without a root marker depend on the current directory: forget them
    when it changes (a few programs, benchmarks among them, lint several projects)."""
    cwd = os.getcwd()
    if _CWD != [cwd]:
        _CWD[:] = [cwd]
        _FILES.clear()
        _ROOTS.clear()


def _working_root(folder: str) -> Optional[str]:
    """Without a root marker, the current directory is the root when `folder` lies under
    it: flake8 and `tpf` run from the repository root."""
    cwd = _CWD[0] if _CWD else os.getcwd()
    if os.path.dirname(cwd) == cwd:      # run from `/`: no project root to speak of
        return None
    return cwd if folder == cwd or folder.startswith(cwd + os.sep) else None


def _marked_root(folder: str) -> Optional[str]:
    """The nearest folder at or above `folder` holding a root marker, or None."""
    if folder in _MARKED:
        return _MARKED[folder]
    found, current = None, folder
    for _ in range(_MAX_MARKER_LEVELS):
        if any(os.path.exists(os.path.join(current, marker)) for marker in _ROOT_MARKERS):
            found = current
            break
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    _MARKED[folder] = found
    return found


def star_imported(analysis: FileContext, name: str, hops: int = 0):
    """(analysis, ClassInfo or FunctionInfo) for a name the file can only have from a
    `from <project module> import *`, or None. As Python does, the star brings in what the
    module's literal `__all__` lists, else its public names, its own imports and what its
    own star imports bring in included (`models/__init__.py`: `from .net import *`)."""
    if hops > _MAX_HOPS:
        return None
    for module in analysis.imports.star_modules:
        path = module_file(analysis.filename, module)
        if path is None or path in _IN_PROGRESS:
            continue
        _IN_PROGRESS.add(path)
        try:
            other = analysis.other_file(path)
            found = _exported(other, name, hops) if other is not None else None
        finally:
            _IN_PROGRESS.discard(path)
        if found is not None:
            return found
    return None


def _exported(other: FileContext, name: str, hops: int):
    """What `from <other> import *` binds to `name`, when it is a project class or
    function."""
    listed = _dunder_all(other)
    if (name not in listed) if listed is not None else name.startswith("_"):
        return None
    return _module_attribute(other, name, hops)


def _module_attribute(other: FileContext, name: str, hops: int):
    """`other.name`: defined there, imported there, or brought in by its star imports."""
    found = other.index.classes.get(name) or other.index.function_named(name, None)
    if found is not None:
        return other, found
    # Re-exported: `from .net import Net` in `models/__init__.py`.
    target = other.imports.resolve_name(name)
    if target is not None:
        return resolve(other, target, hops + 1)
    return star_imported(other, name, hops + 1) if other.imports.star_modules else None


def _dunder_all(analysis: FileContext) -> Optional[frozenset]:
    """The names of a module-level `__all__ = [...]` of string literals, else None."""
    memo = analysis.memo("project.__all__")
    if "names" not in memo:
        names = None
        for stmt in analysis.tree.body:
            if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and \
                    stmt.target.id == "__all__":
                names = None       # `__all__ += [...]`: not a literal any more
                break
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                    for t in stmt.targets):
                value = stmt.value
                elements = value.elts if isinstance(value, (ast.List, ast.Tuple)) else None
                names = frozenset(e.value for e in elements if isinstance(e, ast.Constant)
                                  and isinstance(e.value, str)) \
                    if elements is not None and all(isinstance(e, ast.Constant) for e in elements) \
                    else None
        memo["names"] = names
    return memo["names"]


def resolve(analysis: FileContext, qualname: str, hops: int = 0):
    """(the defining file's analysis, its ClassInfo or module-level FunctionInfo) for a name
    of another project file (`models.Net`, `.engine.train_one_epoch`), following re-exports
    (`from .net import Net`, absolute `from pkg.net import Net`, star imports); None when it
    does not resolve to such a file (a library, a missing file)."""
    if hops > _MAX_HOPS or "." not in qualname or qualname.split(".", 1)[0] in _NEVER_PROJECT:
        return None
    module, name = qualname.rsplit(".", 1)
    path = module_file(analysis.filename, module)
    if path is None or path in _IN_PROGRESS:
        return None
    _IN_PROGRESS.add(path)
    try:
        other = analysis.other_file(path)
        return _module_attribute(other, name, hops) if other is not None else None
    finally:
        _IN_PROGRESS.discard(path)


def library_named_project(analysis: FileContext, qualname: Optional[str]):
    """`resolve` for a name under a listed library's name that is a module of the project
    itself (`datasets/` of a detection repository, the timm repository's own `timm/`), else
    None: there Python imports the project's module, so its definition answers, not what
    our tables say of the library."""
    if not qualname or "." not in qualname:
        return None
    head = qualname.split(".", 1)[0]
    if head not in LIBRARY_PACKAGES or head in _NEVER_PROJECT or \
            module_file(analysis.filename, qualname.rsplit(".", 1)[0]) is None:
        return None
    return resolve(analysis, qualname)


def resolve_class(analysis: FileContext, qualname: str):
    """(FileAnalysis, ClassInfo) of the project class `qualname` names, or None."""
    found = resolve(analysis, qualname)
    return found if found is not None and isinstance(found[1], ClassInfo) else None


def resolve_function(analysis: FileContext, qualname: str) -> Optional[FunctionInfo]:
    """The module-level function of another project file `qualname` names, or None."""
    found = resolve(analysis, qualname)
    return found[1] if found is not None and isinstance(found[1], FunctionInfo) else None
