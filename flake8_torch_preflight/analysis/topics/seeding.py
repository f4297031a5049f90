"""Random number generators: which ones a file seeds, and where it draws from unseeded ones.

Generators are named `torch` (the global CPU/CUDA generators behind weight init, dropout
and loader shuffling), `torch.cuda` (CUDA-only seeding), `numpy` (the legacy global
`np.random.*` state) and `random` (Python's module-level generator). Calls are resolved
through the import table (`np.random.shuffle` -> `numpy.random.shuffle`), and a seeding
helper defined in the file is followed (`function_seeds`, transitive like
`FileAnalysis.function_does`). Everything is computed once per file from `facts.calls`.
"""
from __future__ import annotations

import ast
import os
from collections import OrderedDict
from typing import Dict, FrozenSet, Optional, Tuple

from ..project import resolution as project
from ..semantics import torchapi as api
from .epochs import argument_for
from ..core.events import CallSite, FunctionFacts
from ..core.memo import per_file
from ..core.questions import Does

TORCH, TORCH_CUDA, NUMPY, RANDOM = "torch", "torch.cuda", "numpy", "random"
ALL = frozenset({TORCH, TORCH_CUDA, NUMPY, RANDOM})
_NONE: FrozenSet[str] = frozenset()

_SEEDERS: Dict[str, FrozenSet[str]] = {
    "torch.manual_seed": frozenset({TORCH, TORCH_CUDA}),
    "torch.random.manual_seed": frozenset({TORCH, TORCH_CUDA}),
    "torch.seed": frozenset(),
    "torch.cuda.manual_seed": frozenset({TORCH_CUDA}),
    "torch.cuda.manual_seed_all": frozenset({TORCH_CUDA}),
    "numpy.random.seed": frozenset({NUMPY}),
    "random.seed": frozenset({RANDOM}),
}
# Library helpers that seed every generator (Lightning, Fabric, transformers, accelerate…).
_SEED_ALL_NAMES = frozenset({"seed_everything", "set_seed", "set_random_seed", "seed_all",
                             "set_seeds", "setup_seed", "fix_seed", "fix_seeds", "init_seeds",
                             "enable_full_determinism", "set_global_seed", "seed_torch"})
# Entry points that seed every generator by default, unless the keyword is given the value:
# Lightning's CLI (`seed_everything_default=True`: a random seed it logs), ColossalAI's
# launchers (`seed=1024`, then `set_seed(seed)` on random, numpy and torch).
_SEEDING_BY_DEFAULT: Dict[str, Tuple[str, object]] = {
    **{name: ("seed_everything_default", False)
       for name in ("lightning.pytorch.cli.LightningCLI", "lightning.pytorch.LightningCLI",
                    "pytorch_lightning.cli.LightningCLI",
                    "pytorch_lightning.utilities.cli.LightningCLI")},
    **{f"{module}.{launcher}": ("seed", None)
       for module in ("colossalai", "colossalai.initialize", "colossalai.legacy",
                      "colossalai.legacy.initialize")
       for launcher in ("launch", "launch_from_torch", "launch_from_slurm",
                        "launch_from_openmpi")},
}
# Constructing an HF Trainer seeds everything (`TrainingArguments.seed`, default 42).
_SEEDING_CONSTRUCTORS = ("transformers.Trainer", "transformers.Seq2SeqTrainer",
                         "transformers.trainer.Trainer", "trl.")

# Namespaces whose seeding functions are all listed in `_SEEDERS` (anything else there named
# `*seed*` reads or makes a seed, or seeds a generator object).
_GENERATOR_LIBS = frozenset({"torch", "numpy", "random", "jax", "sklearn", "tensorflow"})
_NOT_SEEDING_PREFIXES = ("get_", "initial_", "current_", "make_", "gen_", "generate_", "new_",
                         "derive_", "next_", "is_", "has_")
# `seed=` given to these seeds only the object they build.
_OWN_SEED_WORDS = ("sampler", "loader", "rng", "generator", "dataset", "split", "shuffle",
                   "randomstate", "seedsequence", "permutation")
_MAX_HOPS = 3   # files followed from the linted one

# Binding some arguments of a function: the partial calls the function it is given.
_PARTIALS = frozenset({"functools.partial"})
# Annotations that say a parameter holds a function (`init_fn: Callable`).
_CALLABLE_TYPES = frozenset({"typing.Callable", "collections.abc.Callable"})

# Draws from the global generators.
_NUMPY_NOT_DRAWS = frozenset({"seed", "get_state", "set_state", "default_rng", "RandomState",
                              "Generator", "SeedSequence", "PCG64", "MT19937", "Philox", "SFC64",
                              "BitGenerator"})
_RANDOM_DRAWS = frozenset({"random", "randint", "randrange", "choice", "choices", "shuffle",
                           "sample", "uniform", "gauss", "normalvariate", "lognormvariate",
                           "expovariate", "betavariate", "gammavariate", "triangular",
                           "vonmisesvariate", "paretovariate", "weibullvariate", "getrandbits",
                           "randbytes", "binomialvariate"})


def call_seeds(analysis, call: CallSite, hops: int = 0) -> FrozenSet[str]:
    """The generators this call seeds (a local helper: through its own body; a function or
    class of another project file: through that file's analysis), including through the
    functions it is given as values: `functools.partial(prepare_run, ...)` or
    `benchmark(init_fn=prepare_run)` is taken to run `prepare_run` (the receiver calls it)."""
    return _callee_seeds(analysis, call, hops) | _passed_function_seeds(analysis, call, hops)


def _callee_seeds(analysis, call: CallSite, hops: int) -> FrozenSet[str]:
    qual = call.qualname
    if qual is not None:
        if qual in _SEEDERS:
            return _SEEDERS[qual]
        if qual in _SEEDING_BY_DEFAULT:
            return frozenset() if _default_seeding_off(call, *_SEEDING_BY_DEFAULT[qual]) else ALL
        last = qual.rsplit(".", 1)[-1]
        if last in _SEED_ALL_NAMES or _seeding_constructor(qual):
            return ALL
        if qual.split(".", 1)[0] in _GENERATOR_LIBS:
            return frozenset()   # `torch.initial_seed()`, `np.random.SeedSequence(...)`
        if _seed_keyword(call):
            return ALL           # `colossalai.launch_from_torch(config={}, seed=args.seed)`
        followed = _project_seeds(analysis, qual, hops)
        if followed:
            return followed
        if _seed_helper_name(last) and (call.node.args or call.node.keywords):
            return ALL           # `utils.random_seed(args.seed, rank)`: named for it, given a seed
        return frozenset()
    if call.method == "seed_everything":
        return ALL           # `fabric.seed_everything(42)`, `L.seed_everything` via an object
    func = call.node.func
    if isinstance(func, ast.Name):
        cls = analysis.index.classes.get(func.id)
        if cls is not None:
            return class_seeds(analysis, cls, hops)   # `MyTrainer(...)` of a Trainer subclass
    return frozenset()


def _passed_function_seeds(analysis, call: CallSite, hops: int) -> FrozenSet[str]:
    """What the functions passed to `call` as arguments seed, were they called."""
    return _passed_function_seeds_of(analysis, call.node, hops)


def _passed_function_seeds_of(analysis, node: ast.Call, hops: int) -> FrozenSet[str]:
    result: FrozenSet[str] = frozenset()
    for arg in node.args:
        result |= _reference_seeds(analysis, arg.value if isinstance(arg, ast.Starred) else arg,
                                   hops)
    for kw in node.keywords:
        result |= _reference_seeds(analysis, kw.value, hops)
    return result


def _reference_seeds(analysis, expr: ast.expr, hops: int) -> FrozenSet[str]:
    """What calling the function `expr` names (not calls) would seed: a function of the
    file, a seeding function of a library (by the tables), a function or class of another
    project file, or what the calls in a lambda's body name. Anything else (a variable, a
    bound method) seeds nothing known. (Called for every argument of every call: the
    common cases are decided first.)"""
    if isinstance(expr, ast.Name):
        qual = analysis.imports.resolve_name(expr.id)
        if qual is None:
            local = analysis.index.function_named(expr.id, None)
            return function_seeds(analysis, local, hops) if local is not None else _NONE
    elif isinstance(expr, ast.Attribute):
        qual = analysis.imports.qualname(expr)
        if qual is None:
            return _NONE
    elif isinstance(expr, ast.Lambda):     # `lambda arr: decode(arr, vocab)`: its calls
        return frozenset().union(*(_reference_seeds(analysis, call.func, hops) |
                                   _passed_function_seeds_of(analysis, call, hops)
                                   for call in _lambda_calls(expr)))
    else:
        return _NONE
    if qual in _SEEDERS:
        return _SEEDERS[qual]
    if qual.rsplit(".", 1)[-1] in _SEED_ALL_NAMES:
        return ALL      # `functools.partial(set_seed, 42)`
    return _project_seeds(analysis, qual, hops)


def _local_function(analysis, expr: ast.expr):
    """The module-level function of this file a bare name refers to (not an import)."""
    if not isinstance(expr, ast.Name) or analysis.imports.resolve_name(expr.id) is not None:
        return None
    return analysis.index.function_named(expr.id, None)


def _default_seeding_off(call: CallSite, keyword: str, off) -> bool:
    """`LightningCLI(..., seed_everything_default=False)`, `launch_from_torch(seed=None)`."""
    return any(kw.arg == keyword and isinstance(kw.value, ast.Constant) and kw.value.value is off
               for kw in call.node.keywords)


def _seeding_constructor(qual: str) -> bool:
    return any(qual == c or (c.endswith(".") and qual.startswith(c) and qual.endswith("Trainer"))
               for c in _SEEDING_CONSTRUCTORS)


def _seed_helper_name(last: str) -> bool:
    """`random_seed`, `init_seeds`, `seed_all`, `setup_seed`: a helper named for seeding (not a
    getter like `get_seed`/`initial_seed`, not a DataLoader `seed_worker`)."""
    name = last.lower()
    return "seed" in name and not name.startswith(_NOT_SEEDING_PREFIXES) and \
        "worker" not in name and not last[:1].isupper()


def _seed_keyword(call: CallSite) -> bool:
    """A framework launch/trainer call given `seed=<value>` (not a sampler, loader or
    generator object, which seed only themselves)."""
    last = (call.qualname or "").rsplit(".", 1)[-1].lower()
    if any(word in last for word in _OWN_SEED_WORDS):
        return False
    return any(kw.arg == "seed" and not (isinstance(kw.value, ast.Constant) and kw.value.value is None)
               for kw in call.node.keywords)


def _project_seeds(analysis, qual: str, hops: int) -> FrozenSet[str]:
    """What a function or class imported from another file of the project seeds."""
    if hops >= _MAX_HOPS or "." not in qual or qual.split(".", 1)[0] in project.LIBRARY_PACKAGES:
        return frozenset()
    module, name = qual.rsplit(".", 1)
    if name[:1].isupper():
        resolved = project.resolve_class(analysis, qual)
        return class_seeds(resolved[0], resolved[1], hops + 1) if resolved else frozenset()
    other = project.other_analysis(analysis, module)
    if other is None or other is analysis:
        return frozenset()
    func = other.index.function_named(name, None)
    if func is None:
        target = other.imports.resolve_name(name)    # re-exported helper
        return _project_seeds(other, target, hops + 1) if target else frozenset()
    return function_seeds(other, func, hops + 1)


@per_file("class_seeds", guard=frozenset(), key_args=1)
def class_seeds(analysis, cls, hops: int = 0) -> FrozenSet[str]:
    """Generators seeded by constructing `cls`: an HF/TRL Trainer base, or an `__init__`
    (its own, a local base's or a project base's in another file) that seeds."""
    result: FrozenSet[str] = frozenset()
    if any(_seeding_constructor(b) for b in cls.bases):
        result = ALL
    else:
        init = cls.methods.get("__init__")
        if init is not None:
            result = function_seeds(analysis, init, hops)
        for base in cls.local_bases:
            result |= class_seeds(analysis, base, hops)
        for base in cls.bases:
            if "." in base and hops < _MAX_HOPS:
                result |= _project_seeds(analysis, base, hops)
    return result


@per_file("function_seeds", guard=frozenset(), key_args=1)
def function_seeds(analysis, func, hops: int = 0) -> FrozenSet[str]:
    """Generators `func` seeds, directly or through the file's functions it calls."""
    facts = analysis.facts_for(func)
    result = frozenset().union(*(call_seeds(analysis, c, hops) for c in facts.calls))
    for local in facts.local_calls:
        result |= function_seeds(analysis, local.callee, hops)
    return result


@per_file("file_seeds")
def file_seeds(analysis) -> Dict[str, Tuple[int, str, str]]:
    """generator -> (line, text, where) of the first thing in the file that seeds it: a call
    (`where` is "line 12"), or the import of a project module whose module-level code seeds
    (`where` says which line of which file, run by the import at `line`). The imported
    modules are only read while the file's own calls leave something TPF011 would say."""
    seeds: Dict[str, Tuple[int, str, str]] = {}

    def record(gens, line: int, text: str, where: str) -> None:
        for gen in gens:
            if gen not in seeds or line < seeds[gen][0]:
                seeds[gen] = (line, text, where)

    for facts in analysis.all_facts():
        for call, gens in _seeding_calls(analysis, facts):
            record(gens, call.site.line, _text(call), f"line {call.site.line}")
    # A class of the file that trains in its methods was built to run them (`main(Trainer)`
    # builds it elsewhere): its constructor's seeding (a project base's `__init__`) counts.
    for cls in analysis.index.classes.values():
        if not any(analysis.function_does(m, Does.BACKWARD) for m in cls.methods.values()):
            continue
        line = cls.node.lineno
        record(class_seeds(analysis, cls), line, f"{cls.name}.__init__(...)", f"line {line}")
    if _settled(seeds, random_draws(analysis)):
        return seeds     # what the imports run cannot change the verdict: not read (speed)
    for stmt, path in _imported_project_files(analysis):
        for gen, (line, text) in _import_time_summary(analysis, path).items():
            record({gen}, stmt.lineno, text, f"line {line} of {os.path.basename(path)}, "
                                             f"run by the import at line {stmt.lineno}")
    return seeds


# Import-time seeding is kept per module for the run as plain data (lines and texts), so
# every linted file that imports a module reuses it instead of walking the module again:
# path -> (mtime, what its own module-level statements seed, (import line, imported path)...)
_MODULES: Dict[str, Tuple[float, Dict[str, Tuple[int, str]], Tuple[Tuple[int, str], ...]]] = {}
# path -> (mtime, what importing the module seeds, its imports followed)
_SUMMARIES: "OrderedDict[str, Tuple[float, Dict[str, Tuple[int, str]]]]" = OrderedDict()
_MAX_SUMMARIES = 4096


def _import_time_summary(analysis, path: str) -> Dict[str, Tuple[int, str]]:
    """generator -> (line, text) of what importing the project file at `path` seeds: its own
    module-level calls, then what the modules it imports seed, depth first in import order,
    each module once (an import cycle closes on a module already read). The answer depends
    on `path` alone, never on the importer or on what was linted before, so it is kept."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return {}
    kept = _SUMMARIES.get(path)
    if kept is not None and kept[0] == mtime:
        _SUMMARIES.move_to_end(path)
        return kept[1]
    seeds: Dict[str, Tuple[int, str]] = {}
    own, imports = _module_seeds(analysis, path)
    seeds.update(own)
    seen = {path}
    for line, child in imports:
        for gen, text in _closure_seeds(analysis, child, seen):
            seeds.setdefault(gen, (line, text))
    _SUMMARIES[path] = (mtime, seeds)
    while len(_SUMMARIES) > _MAX_SUMMARIES:
        _SUMMARIES.popitem(last=False)
    return seeds


def _closure_seeds(analysis, path: str, seen: set):
    """(generator, text) seeded by importing `path`, depth first over the imports, skipping
    the modules in `seen` (which it extends)."""
    if path in seen:
        return
    seen.add(path)
    stack = [iter([(0, path)])]
    while stack:
        step = next(stack[-1], None)
        if step is None:
            stack.pop()
            continue
        module = step[1]
        if module is not path and module in seen:
            continue
        seen.add(module)
        own, imports = _module_seeds(analysis, module)
        for gen, (_, text) in own.items():
            yield gen, text
        stack.append(iter(imports))


def _module_seeds(analysis, path: str):
    """(what the module's own statements seed, its project imports), once per module."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return {}, ()
    kept = _MODULES.get(path)
    if kept is not None and kept[0] == mtime:
        return kept[1], kept[2]
    other = analysis.other_file(path)
    if other is None:
        own, imports = {}, ()
    else:
        own = import_time_seeds(other)
        imports = tuple((stmt.lineno, child) for stmt, child in _imported_project_files(other))
    _MODULES[path] = (mtime, own, imports)
    return own, imports


def _settled(seeds, draws) -> bool:
    """torch and every global generator the file draws from are seeded by the file's own
    calls: more seeding found elsewhere changes nothing TPF011 says."""
    return TORCH in seeds and all(gen in seeds for gen in draws)


def _seeding_calls(analysis, facts: FunctionFacts):
    """(call, the generators it seeds) for each call of `facts` that seeds something."""
    local_nodes = {id(lc.node): lc for lc in facts.local_calls}
    for call in facts.calls:
        gens = call_seeds(analysis, call)     # `MyTrainer(...)`: through its bases too
        lc = local_nodes.get(id(call.node))
        if lc is not None:
            gens |= function_seeds(analysis, lc.callee)
        if gens:
            yield call, gens


def import_time_seeds(analysis) -> Dict[str, Tuple[int, str]]:
    """generator -> (line, text) of the first call that seeds it when the module is
    imported, among its own module-level statements (not those under its own `__main__`
    guard); what its imports seed is added by `_import_time_summary`."""
    seeds: Dict[str, Tuple[int, str]] = {}
    guard = main_guard(analysis)
    for call, gens in _seeding_calls(analysis, analysis.module_facts):
        if guard is not None and guard.lineno <= call.site.line <= guard.end_lineno:
            continue      # runs only when the module is executed as a script
        for gen in gens:
            seeds.setdefault(gen, (call.site.line, _text(call)))
    return seeds


def _imported_project_files(analysis):
    """(import statement, path of the project module it imports) for each import of the
    file that names a project module the resolver finds (`from reading_data import X`,
    `import utils`, `from . import data`); libraries are not looked up."""
    for stmt in analysis.imports.statements:
        for module in _imported_module_names(stmt):
            if not project.is_project_name(module):
                continue
            path = project.module_file(analysis.filename, module)
            if path is not None and path != analysis.filename:
                yield stmt, path


def _imported_module_names(stmt):
    if isinstance(stmt, ast.Import):
        return [alias.name for alias in stmt.names]
    base = "." * stmt.level + (stmt.module or "")
    # `from pkg import sub` runs `pkg/__init__.py`, and `pkg/sub.py` where `sub` is a module
    names = [base] if base.strip(".") else []
    sep = "" if base.endswith(".") or not base else "."
    names.extend(f"{base}{sep}{alias.name}" for alias in stmt.names if alias.name != "*")
    return names


@per_file("unseen_setup")
def unseen_setup_call(analysis) -> Optional[CallSite]:
    """A call the analysis cannot see into that may seed for the script: a function of the
    project it cannot read (a relative import, or a module that is a file or folder of the
    project, as the resolver finds them), a library entry point named for setting a run
    up (`detectron2.engine.default_setup(cfg, args)` seeds every generator), or a call of a
    function parameter whose argument is not a function the analysis reads (see
    `_unresolved_callable_parameter`). A library call is otherwise judged by the seeding
    tables only: `gym.make`, `wandb.init` or `deepspeed.init_distributed` seed nothing.
    While one is there, "nothing is seeded" is not proven."""
    for facts in analysis.all_facts():
        for call in facts.calls:
            if not call.unseen:
                continue
            if call.qualname is None:
                if _unresolved_callable_parameter(analysis, facts.func, call.node.func):
                    return call
                continue
            last = call.qualname.rsplit(".", 1)[-1].lower()
            if "setup" in last or _project_code(analysis, call.qualname):
                return call
    return None


def _unresolved_callable_parameter(analysis, func, callee: ast.expr) -> bool:
    """`init_fn()` where `init_fn` is a parameter of `func` that holds a function (annotated
    `Callable`, or given a function, a `functools.partial` or a lambda by a caller), and
    some value it may hold is not a function the seeding search reads: no caller in the
    file, a defaulted or lambda argument, a variable. The functions the callers do pass are
    searched where they are passed (`call_seeds`); a model parameter (`model(x)`) is not a
    function parameter."""
    if func is None or not isinstance(callee, ast.Name) or callee.id not in func.params:
        return False
    index = func.params.index(callee.id)
    passed = [argument_for(func, lc.node, index) for _, lc in analysis.callers(func)]
    if not (_annotated_callable(analysis, func, index) or
            any(e is not None and _function_like(analysis, e) for e in passed)):
        return False
    return not passed or not all(e is not None and _readable_function(analysis, e)
                                 for e in passed)


def _annotated_callable(analysis, func, index: int) -> bool:
    args = func.node.args
    params = args.posonlyargs + args.args + args.kwonlyargs
    annotation = params[index].annotation if index < len(params) else None
    if isinstance(annotation, ast.Subscript):
        annotation = annotation.value         # `Callable[..., Model]`
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.split("[", 1)[0].rsplit(".", 1)[-1] == "Callable"
    return analysis.imports.qualname(annotation) in _CALLABLE_TYPES


def _function_like(analysis, expr: ast.expr) -> bool:
    """A value that is a function: a lambda, a partial, a function of the file or of another
    project file."""
    if isinstance(expr, ast.Lambda) or _partial_of(analysis, expr) is not None:
        return True
    if _local_function(analysis, expr) is not None:
        return True
    qual = analysis.imports.qualname(expr) if isinstance(expr, (ast.Name, ast.Attribute)) else None
    return qual is not None and project.is_project_name(qual) and \
        project.resolve_function(analysis, qual) is not None


def _readable_function(analysis, expr: ast.expr) -> bool:
    """A function whose seeding the search reads where it is passed: one of the file, one
    of another project file the resolver finds, a library function (judged by the tables),
    a partial of one of these, or a lambda whose calls are all such functions (or methods
    of values, judged as everywhere else)."""
    if isinstance(expr, ast.Lambda):
        return all(_readable_callee(analysis, call.func) for call in _lambda_calls(expr))
    inner = _partial_of(analysis, expr)
    if inner is not None:
        return _readable_function(analysis, inner)
    if _local_function(analysis, expr) is not None:
        return True
    qual = analysis.imports.qualname(expr) if isinstance(expr, (ast.Name, ast.Attribute)) else None
    return qual is not None and _readable_qualname(analysis, qual)


def _readable_callee(analysis, func: ast.expr) -> bool:
    if _local_function(analysis, func) is not None:
        return True
    qual = analysis.imports.qualname(func) if isinstance(func, (ast.Name, ast.Attribute)) else None
    # `x.to(device)`, `int(x)`: a method of a value or a builtin, judged as every call that
    # names no import is (no seeding)
    return qual is None or _readable_qualname(analysis, qual)


def _readable_qualname(analysis, qual: str) -> bool:
    """Not a function `unseen_setup_call` would take to maybe seed: project code the
    resolver cannot read, or a library entry point named for setting a run up."""
    if project.resolve(analysis, qual) is not None:
        return True
    return "setup" not in qual.rsplit(".", 1)[-1].lower() and not _project_code(analysis, qual)


def _lambda_calls(expr: ast.Lambda):
    return [node for node in ast.walk(expr.body) if isinstance(node, ast.Call)]


def _partial_of(analysis, expr: ast.expr) -> Optional[ast.expr]:
    """`f` in `functools.partial(f, ...)`."""
    if isinstance(expr, ast.Call) and expr.args and \
            analysis.imports.qualname(expr.func) in _PARTIALS:
        return expr.args[0]
    return None


def _project_code(analysis, qualname: str) -> bool:
    """`qualname` names code of the project: relative, or its top-level module is a file or
    package folder of the project (a package that is neither is a library)."""
    if qualname.startswith("."):
        return True
    if not project.is_project_name(qualname):
        return False
    top = qualname.split(".", 1)[0]
    return project.module_file(analysis.filename, top) is not None


@per_file("random_draws")
def random_draws(analysis) -> Dict[str, Tuple[FunctionFacts, CallSite]]:
    """generator -> the first call that draws from its global state (numpy, random, torch)."""
    draws: Dict[str, Tuple[FunctionFacts, CallSite]] = {}
    for facts in analysis.all_facts():
        for call in facts.calls:
            gen = draw_generator(call)
            if gen is not None and (gen not in draws or call.site.line < draws[gen][1].site.line):
                draws[gen] = (facts, call)
    return draws


def draw_generator(call: CallSite) -> Optional[str]:
    qual = call.qualname
    if qual is None:
        return None
    if qual.startswith("numpy.random."):
        last = qual.rsplit(".", 1)[-1]
        return NUMPY if last not in _NUMPY_NOT_DRAWS else None
    if qual.startswith("random.") and qual.count(".") == 1:
        return RANDOM if qual.split(".", 1)[1] in _RANDOM_DRAWS else None
    if qual in api.TORCH_DRAWS and not any(kw.arg == "generator" for kw in call.node.keywords):
        return TORCH
    return None


def main_guard(analysis) -> Optional[ast.If]:
    """The module's `if __name__ == "__main__":` statement (top level only), if any."""
    for stmt in analysis.tree.body:
        if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Compare):
            parts = [stmt.test.left] + list(stmt.test.comparators)
            names = {p.id for p in parts if isinstance(p, ast.Name)}
            consts = {p.value for p in parts if isinstance(p, ast.Constant)}
            if "__name__" in names and "__main__" in consts:
                return stmt
    return None


def _text(call: CallSite) -> str:
    try:
        return ast.unparse(call.node.func) + "(...)"
    except Exception:  # pragma: no cover
        return "<call>"
