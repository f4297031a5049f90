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

from .events import CallSite, FunctionFacts

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
# Constructing an HF Trainer seeds everything (`TrainingArguments.seed`, default 42).
_SEEDING_CONSTRUCTORS = ("transformers.Trainer", "transformers.Seq2SeqTrainer",
                         "transformers.trainer.Trainer", "trl.")

# Draws from the global generators.
_NUMPY_NOT_DRAWS = frozenset({"seed", "get_state", "set_state", "default_rng", "RandomState",
                              "Generator", "SeedSequence", "PCG64", "MT19937", "Philox", "SFC64",
                              "BitGenerator"})
_RANDOM_DRAWS = frozenset({"random", "randint", "randrange", "choice", "choices", "shuffle",
                           "sample", "uniform", "gauss", "normalvariate", "lognormvariate",
                           "expovariate", "betavariate", "gammavariate", "triangular",
                           "vonmisesvariate", "paretovariate", "weibullvariate", "getrandbits",
                           "randbytes", "binomialvariate"})
_TORCH_DRAWS = frozenset(f"torch.{n}" for n in "rand randn randint randperm rand_like randn_like "
                         "randint_like normal bernoulli multinomial poisson".split())


def call_seeds(analysis, call: CallSite) -> FrozenSet[str]:
    """The generators this call seeds (a local helper: through its own body)."""
    qual = call.qualname
    if qual is not None:
        if qual in _SEEDERS:
            return _SEEDERS[qual]
        last = qual.rsplit(".", 1)[-1]
        if last in _SEED_ALL_NAMES:
            return ALL
        if any(qual == c or (c.endswith(".") and qual.startswith(c) and qual.endswith("Trainer"))
               for c in _SEEDING_CONSTRUCTORS):
            return ALL
        return frozenset()
    if call.method == "seed_everything":
        return ALL           # `fabric.seed_everything(42)`, `L.seed_everything` via an object
    return frozenset()


def function_seeds(analysis, func) -> FrozenSet[str]:
    """Generators `func` seeds, directly or through the file's functions it calls."""
    memo: Dict[object, FrozenSet[str]] = analysis.__dict__.setdefault("_tpf_function_seeds", {})
    if func in memo:
        return memo[func]
    memo[func] = frozenset()   # recursion guard
    facts = analysis.facts_for(func)
    result = frozenset().union(*(call_seeds(analysis, c) for c in facts.calls))
    for local in facts.local_calls:
        result |= function_seeds(analysis, local.callee)
    memo[func] = result
    return result


def file_seeds(analysis) -> Dict[str, Tuple[int, str]]:
    """generator -> (line, text) of the first call in the file that seeds it."""
    cached = analysis.__dict__.get("_tpf_file_seeds")
    if cached is not None:
        return cached
    seeds: Dict[str, Tuple[int, str]] = {}
    for facts in analysis.all_facts():
        local_nodes = {id(lc.node): lc for lc in facts.local_calls}
        for call in facts.calls:
            lc = local_nodes.get(id(call.node))
            gens = function_seeds(analysis, lc.callee) if lc is not None else \
                call_seeds(analysis, call)
            for gen in gens:
                line = call.site.line
                if gen not in seeds or line < seeds[gen][0]:
                    seeds[gen] = (line, _text(call))
    analysis.__dict__["_tpf_file_seeds"] = seeds
    return seeds


def random_draws(analysis) -> Dict[str, Tuple[FunctionFacts, CallSite]]:
    """generator -> the first call that draws from its global state (numpy, random, torch)."""
    cached = analysis.__dict__.get("_tpf_random_draws")
    if cached is not None:
        return cached
    draws: Dict[str, Tuple[FunctionFacts, CallSite]] = {}
    for facts in analysis.all_facts():
        for call in facts.calls:
            gen = draw_generator(call)
            if gen is not None and (gen not in draws or call.site.line < draws[gen][1].site.line):
                draws[gen] = (facts, call)
    analysis.__dict__["_tpf_random_draws"] = draws
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
    if qual in _TORCH_DRAWS and not any(kw.arg == "generator" for kw in call.node.keywords):
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
