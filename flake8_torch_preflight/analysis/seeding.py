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
from typing import Dict, FrozenSet, Optional, Tuple

from . import project
from . import torchapi as api
from .events import CallSite, FunctionFacts
from .memo import per_file
from .questions import Does

TORCH, TORCH_CUDA, NUMPY, RANDOM = "torch", "torch.cuda", "numpy", "random"
ALL = frozenset({TORCH, TORCH_CUDA, NUMPY, RANDOM})

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
    class of another project file: through that file's analysis)."""
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
def file_seeds(analysis) -> Dict[str, Tuple[int, str]]:
    """generator -> (line, text) of the first call in the file that seeds it."""
    seeds: Dict[str, Tuple[int, str]] = {}
    for facts in analysis.all_facts():
        local_nodes = {id(lc.node): lc for lc in facts.local_calls}
        for call in facts.calls:
            lc = local_nodes.get(id(call.node))
            gens = call_seeds(analysis, call)     # `MyTrainer(...)`: through its bases too
            if lc is not None:
                gens |= function_seeds(analysis, lc.callee)
            for gen in gens:
                line = call.site.line
                if gen not in seeds or line < seeds[gen][0]:
                    seeds[gen] = (line, _text(call))
    # A class of the file that trains in its methods was built to run them (`main(Trainer)`
    # builds it elsewhere): its constructor's seeding (a project base's `__init__`) counts.
    for cls in analysis.index.classes.values():
        if not any(analysis.function_does(m, Does.BACKWARD) for m in cls.methods.values()):
            continue
        for gen in class_seeds(analysis, cls):
            line = cls.node.lineno
            if gen not in seeds or line < seeds[gen][0]:
                seeds[gen] = (line, f"{cls.name}.__init__(...)")
    return seeds


@per_file("random_draws")
@per_file("unseen_setup")
def unseen_setup_call(analysis) -> Optional[CallSite]:
    """A call the analysis cannot see into that may seed for the script: a function of the
    project it cannot read (a relative import, or a module that is a file or folder of the
    project, as the resolver finds them), or a library entry point named for setting a run
    up (`detectron2.engine.default_setup(cfg, args)` seeds every generator). A library call
    is otherwise judged by the seeding tables only: `gym.make`, `wandb.init` or
    `deepspeed.init_distributed` seed nothing. While one is there, "nothing is seeded" is
    not proven."""
    for facts in analysis.all_facts():
        for call in facts.calls:
            if not call.unseen or call.qualname is None:
                continue
            last = call.qualname.rsplit(".", 1)[-1].lower()
            if "setup" in last or _project_code(analysis, call.qualname):
                return call
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
