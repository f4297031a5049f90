"""Distributed data-parallel facts: DDP/FSDP wrapping, loaders, samplers, sharding by rank.

Used by TPF008 (a DDP/FSDP file whose training loader is not sharded) and TPF009 (a
shuffling `DistributedSampler` whose epoch is never set). Everything is lenient in the
direction of silence: an unknown sampler object, a dataset that mentions the rank anywhere
it is built, a loader passed through `accelerator.prepare(...)` / `fabric.setup_dataloaders`
or `**kwargs`, all count as sharded. Facts are computed once per file (memoised).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional, Set, Tuple

from ..semantics import torchapi as api
from ..core import values as V
from ..core.astutil import dotted, is_const, keyword, scope_nodes, short, target_texts
from ..core.constants import static_truth, unreachable
from .epochs import (argument_for, epoch_loops, generator_epochs, iterated_loaders,
                     loaders_per_epoch, returned_expressions)
from ..core.memo import per_file
from ..core.events import CallSite, FunctionFacts
from ..project.index import VAL_LOADER_RE

# Names (variables, attributes, keyword arguments, helpers) that say "this depends on the
# process rank": a dataset or sampler built with one of them is taken to be sharded.
RANK_TOKENS = frozenset(
    """rank global_rank local_rank node_rank world_size num_replicas get_rank get_world_size
    process_index local_process_index num_processes num_shards shard_id shard_index
    split_dataset_by_node split_by_node split_by_worker nodesplitter""".split())
RANK_ENV = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS",
                      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"})
# torch samplers that never look at the rank.
PLAIN_SAMPLERS = frozenset(
    f"torch.utils.data{mod}.{name}" for mod in ("", ".sampler")
    for name in ("RandomSampler", "SequentialSampler", "WeightedRandomSampler"))
PREPARE_METHODS = frozenset({"prepare", "prepare_data_loader", "setup_dataloaders"})


def mentions_rank(node: Optional[ast.AST], tainted: FrozenSet[str] = frozenset()) -> bool:
    """The expression reads a rank-like name, a `RANK` env variable, or a tainted name."""
    if node is None:
        return False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and (sub.id in RANK_TOKENS or sub.id in tainted):
            return True
        if isinstance(sub, ast.Attribute) and sub.attr in RANK_TOKENS:
            return True
        if isinstance(sub, ast.keyword) and sub.arg in RANK_TOKENS:
            return True
        if isinstance(sub, ast.Constant) and sub.value in RANK_ENV:
            return True
    return False


@dataclass
class Scope:
    """Assignments of one function body (or the module body): name -> right-hand sides."""

    producers: Dict[str, List[ast.expr]]
    tainted: FrozenSet[str]      # names whose value derives from the rank


@per_file("dist_scope")
def scope_of(analysis, facts: FunctionFacts) -> Scope:
    body = facts.func.node.body if facts.func is not None else analysis.tree.body
    producers: Dict[str, List[ast.expr]] = {}
    for node in scope_nodes(body):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for elt in target_texts(target):
                    producers.setdefault(elt, []).append(node.value)
    tainted: Set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, exprs in producers.items():
            if name in tainted or "device" in name or "gpu" in name:
                continue
            if any(mentions_rank(e, frozenset(tainted)) for e in exprs):
                tainted.add(name)
                changed = True
    return Scope(producers, frozenset(tainted))


# ------------------------------------------------------------------------ file facts
@per_file("dist_calls")
def all_calls(analysis) -> List[Tuple[FunctionFacts, CallSite]]:
    seen = set()
    out = []
    for facts in analysis.all_facts():
        for call in facts.calls:
            if id(call.node) not in seen:
                seen.add(id(call.node))
                out.append((facts, call))
    return out


@dataclass(frozen=True)
class Wrap:
    """Where the file makes its model data-parallel, and with what."""

    site: object          # the Site of the call in this file
    name: str             # `DistributedDataParallel(...)`, `setup_ddp()` (which calls `DDP(...)`)


def ddp_wraps(analysis) -> List[Wrap]:
    """Where the file wraps a model in DDP/FSDP/`fully_shard`, apex DDP or a DeepSpeed engine:
    directly, or through a helper (of this file or another project file) that does."""
    out = [Wrap(c.site, _wrapper_text(c.qualname)) for facts, c in all_calls(analysis)
           if (c.qualname in api.DDP_WRAPPERS or c.qualname in api.DATA_PARALLEL_ENGINES)
           and not unreachable(analysis, facts, c.site)]
    for facts in analysis.all_facts():
        for local in facts.local_calls:
            inner = _helper_wrapper(analysis, local.callee)
            if inner is not None and not unreachable(analysis, facts, local.site):
                out.append(Wrap(local.site, f"`{local.callee.name}()` (which calls {inner})"))
    return out


def _wrapper_text(qualname: str) -> str:
    parts = qualname.split(".")
    shown = parts[-1] if parts[-1][:1].isupper() else ".".join(parts[-2:])
    return f"`{shown}(...)`"


@per_file("ddp_wrapping_helpers")
def _helper_wrapper(analysis, func) -> Optional[str]:
    """How `func`, or a helper it calls, wraps a model data-parallel; None if it does not."""
    facts = analysis.facts_for(func)
    for call in facts.calls:
        if (call.qualname in api.DDP_WRAPPERS or call.qualname in api.DATA_PARALLEL_ENGINES) \
                and not unreachable(analysis, facts, call.site):
            return _wrapper_text(call.qualname)
    for local in facts.local_calls:
        inner = _helper_wrapper(analysis, local.callee)
        if inner is not None and not unreachable(analysis, facts, local.site):
            return inner
    return None


def loader_constructions(analysis) -> List[Tuple[FunctionFacts, CallSite]]:
    return [(f, c) for f, c in all_calls(analysis) if c.qualname in api.DATALOADER_NAMES]


def sampler_constructions(analysis) -> List[Tuple[FunctionFacts, CallSite]]:
    return [(f, c) for f, c in all_calls(analysis) if c.qualname in api.DISTRIBUTED_SAMPLERS]


def prepared_nodes(analysis) -> Set[int]:
    """ids of loader constructions passed to `accelerator.prepare` / `fabric.setup_dataloaders`."""
    out = set()
    for _, call in all_calls(analysis):
        if call.method in PREPARE_METHODS or (call.qualname or "").endswith("prepare_data_loader"):
            for value in call.args:
                if value.node is not None:
                    out.add(id(value.node))
    return out


@per_file("privacy_resampled")
def privacy_resampled_nodes(analysis) -> Set[int]:
    """ids of loader constructions given to an Opacus privacy engine that re-samples them by
    rank. Only asked where no training loop shows which loader trains: where one does, the
    loop iterates the engine's new loader (nothing to report) or, on a path that skips the
    engine, the plain one (`if not args.disable_dp: ... make_private(...)`)."""
    out = set()
    for facts, call in all_calls(analysis):
        if _privacy_resampling(call):
            for expr in list(call.node.args) + [kw.value for kw in call.node.keywords]:
                node = facts.value(expr).node
                if node is not None:
                    out.add(id(node))
    return out


def _privacy_resampling(call: CallSite) -> bool:
    """`privacy_engine.make_private(..., data_loader=loader)` with Poisson sampling (the
    default, or anything but a literal False): the engine draws each rank's batches itself."""
    if call.method not in api.PRIVACY_RESAMPLING_METHODS:
        return False
    poisson = keyword(call.node, "poisson_sampling")
    return poisson is None or not is_const(poisson, False)


def assigned_name(call: CallSite) -> Optional[str]:
    """`train_loader` for `train_loader = DataLoader(...)` (last part of the target)."""
    stmt = call.site.stmt
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and getattr(stmt, "value", None) is call.node:
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target
        text = dotted(target)
        if text:
            return text.rsplit(".", 1)[-1]
    return None


# Words of a loader's name that say it is for evaluation (`data_loader_val`, `loader_test`).
EVALUATION_WORDS = frozenset({"val", "valid", "validation", "test", "eval", "evaluation", "dev",
                              "holdout"})


def evaluation_loader(call: CallSite) -> bool:
    """The loader is named for evaluation: by its first word (`val_loader`, `testloader`), or
    by a word of its name when no word says train (`data_loader_val`, not `train_val_loader`)."""
    name = assigned_name(call)
    if name is None:
        return False
    lowered = name.lower()
    if VAL_LOADER_RE.match(name) or lowered.startswith(("val", "valid", "test", "eval")):
        return True
    words = set(lowered.split("_"))
    return bool(words & EVALUATION_WORDS) and not any(w.startswith("train") for w in words)


@dataclass(frozen=True)
class TrainingLoader:
    facts: FunctionFacts
    call: CallSite
    loop_line: Optional[int]     # the training loop that iterates it (None: the only loader)


@per_file("training_loaders")
def training_loaders(analysis) -> List[TrainingLoader]:
    """DataLoader constructions a training loop iterates; else the file's only training-named
    or unnamed loader. Loaders seen prepared by a framework are left out."""
    by_node = {id(c.node): (f, c) for f, c in loader_constructions(analysis)}
    prepared = prepared_nodes(analysis)
    found: Dict[int, TrainingLoader] = {}
    any_loader = False
    for facts in analysis.all_facts():
        for loop in analysis.training_loops(facts):
            for value in iterated_loaders(analysis, facts, loop):
                any_loader = True
                if value.has(V.PREPARED) or value.node is None:
                    continue
                hit = by_node.get(id(value.node))
                if hit is not None and id(value.node) not in found:
                    found[id(value.node)] = TrainingLoader(hit[0], hit[1], loop.lineno)
    if not found and not any_loader:
        resampled = privacy_resampled_nodes(analysis)
        candidates = [(f, c) for f, c in by_node.values()
                      if not evaluation_loader(c) and id(c.node) not in resampled]
        if len(candidates) == 1:
            f, c = candidates[0]
            found[id(c.node)] = TrainingLoader(f, c, None)
    return [t for key, t in found.items() if key not in prepared]


@dataclass(frozen=True)
class ForgottenSampler:
    """A loader built beside a DistributedSampler over the same dataset that nothing reads."""

    facts: FunctionFacts
    call: CallSite           # the DataLoader(...)
    sampler_line: int
    sampler_name: str


@per_file("forgotten_samplers")
def loaders_beside_unused_sampler(analysis) -> List[ForgottenSampler]:
    """Loaders (not named for evaluation) over a dataset for which the same function builds
    a `DistributedSampler` bound to a name it never reads, and that take no sampler
    themselves: the sampler that would shard the data was built and then forgotten. The
    sampler proves the code runs distributed (it asks the process group for the rank)."""
    prepared = prepared_nodes(analysis) | privacy_resampled_nodes(analysis)
    out = []
    for facts, sampler in sampler_constructions(analysis):
        name = _unread_binding(facts, sampler)
        dataset = _first_argument(sampler.node, "dataset")
        if name is None or dataset is None or dotted(dataset) is None:
            continue
        for loader_facts, loader in loader_constructions(analysis):
            node = loader.node
            if loader_facts is not facts or id(node) in prepared or evaluation_loader(loader):
                continue
            if dotted(_first_argument(node, "dataset")) != dotted(dataset):
                continue
            if sharding_reason(analysis, facts, loader) is None:
                out.append(ForgottenSampler(facts, loader, sampler.site.line, name))
    return out


def _first_argument(node: ast.Call, name: str) -> Optional[ast.expr]:
    return keyword(node, name) or (node.args[0] if node.args else None)


def _unread_binding(facts: FunctionFacts, call: CallSite) -> Optional[str]:
    """`s` for `s = DistributedSampler(ds)` (or `... if c else None`) in a function that
    (closures included) never reads `s`; None when it does, when `s` may be read some other
    way (`locals()`, `global s`), or when the target is not a plain name."""
    stmt = call.site.stmt
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1 \
            or not isinstance(stmt.targets[0], ast.Name):
        return None
    value = stmt.value
    if not (value is call.node or (isinstance(value, ast.IfExp) and call.node in (value.body, value.orelse))):
        return None
    if facts.func is None:
        return None       # a module global: another file may import it
    name = stmt.targets[0].id
    for node in ast.walk(facts.func.node):
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Store):
            return None
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("locals", "vars", "eval", "exec"):
            return None
    return name


# ------------------------------------------------------------------------ sharding
def sharding_reason(analysis, facts: FunctionFacts, call: CallSite) -> Optional[str]:
    """Why the loader built by `call` is (or may be) sharded by rank; None when it is not."""
    node = call.node
    scope = scope_of(analysis, facts)
    if any(kw.arg is None and _may_carry_sampler(facts, scope, kw.value) for kw in node.keywords):
        return "`**kwargs` may carry a sampler"
    for name in ("sampler", "batch_sampler"):
        expr = keyword(node, name)
        if expr is None and name == "sampler" and len(node.args) >= 4:
            expr = node.args[3]
        if expr is None or is_const(expr, None):
            continue
        if not _plain_sampler(analysis, facts, scope, expr):
            return f"`{name}=` is a DistributedSampler or a sampler we cannot see into"
    dataset = keyword(node, "dataset") or (node.args[0] if node.args else None)
    if dataset is None:
        return "no dataset argument"
    if _dataset_sharded(analysis, facts, scope, dataset, depth=2):
        return "the dataset is split by rank"
    if synthetic_data(analysis, scope, dataset, depth=6):
        return "the dataset is drawn at random on each rank (synthetic data)"
    return None


SAMPLER_KEYWORDS = frozenset({"sampler", "batch_sampler"})


def _may_carry_sampler(facts: FunctionFacts, scope: Scope, expr: ast.expr) -> bool:
    """`**kwargs` may hold a sampler (see `unpacked_may_carry`)."""
    return unpacked_may_carry(facts, scope, expr, SAMPLER_KEYWORDS)


def unpacked_may_carry(facts: FunctionFacts, scope: Scope, expr: ast.expr,
                       keywords: FrozenSet[str]) -> bool:
    """`**kwargs` may pass one of `keywords`, unless `kwargs` is a name of the function every
    assignment of which is a dict whose keys we read (`dict(batch_size=b, num_workers=4)`,
    `{"batch_size": b}`, `{...} if use_cuda else {}`), none of them one of `keywords`, and
    which is never changed in place."""
    if not isinstance(expr, ast.Name):
        return True
    producers = scope.producers.get(expr.id, [])
    if not producers:
        return True
    for rhs in producers:
        keys = _dict_keys(rhs)
        if keys is None or keys & keywords:
            return True
    return _changed_in_place(facts, expr.id)


def _dict_keys(expr: ast.expr) -> Optional[FrozenSet[str]]:
    """The keys of a dict display or a `dict(k=v, ...)` call (of either, for `a if c else
    b`); None when not all are known."""
    if isinstance(expr, ast.IfExp):
        body, orelse = _dict_keys(expr.body), _dict_keys(expr.orelse)
        return None if body is None or orelse is None else body | orelse
    if isinstance(expr, ast.Dict):
        if all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in expr.keys):
            return frozenset(k.value for k in expr.keys)
        return None       # `**other` or a computed key
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "dict" \
            and not expr.args and all(kw.arg is not None for kw in expr.keywords):
        return frozenset(kw.arg for kw in expr.keywords)
    return None


def _changed_in_place(facts: FunctionFacts, name: str) -> bool:
    """`kwargs["sampler"] = s`, `kwargs.update(...)`, or the dict handed to a call (which may
    add to it) anywhere in the function."""
    body = facts.func.node if facts.func is not None else None
    if body is None:
        return True       # module level: any function may change a global dict
    for node in ast.walk(body):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)) \
                and isinstance(node.value, ast.Name) and node.value.id == name:
            return True
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id == name and node.func.attr in DICT_MUTATORS:
                return True
            if any(isinstance(a, ast.Name) and a.id == name for a in node.args) or \
                    any(kw.arg is not None and isinstance(kw.value, ast.Name) and kw.value.id == name
                        for kw in node.keywords):
                return True
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return True
    return False


DICT_MUTATORS = frozenset({"update", "setdefault", "__setitem__", "pop", "popitem", "clear"})


def synthetic_data(analysis, scope: Scope, expr: ast.expr, depth: int) -> bool:
    """A dataset of fresh random draws (`TensorDataset(torch.randn(n, d), ...)`,
    `torchvision.datasets.FakeData`): each rank draws its own, so there is nothing to shard.
    A name counts when every assignment of it in the function is synthetic."""
    if depth < 0:
        return False
    if isinstance(expr, ast.Name):
        producers = scope.producers.get(expr.id, [])
        return bool(producers) and all(synthetic_data(analysis, scope, p, depth - 1) for p in producers)
    if not isinstance(expr, ast.Call):
        return False
    qual = analysis.imports.qualname(expr.func)
    if qual in api.FAKE_DATASETS or qual in api.TORCH_DRAWS:
        return True
    if isinstance(expr.func, ast.Attribute) and expr.func.attr in api.TENSOR_INPLACE_DRAWS:
        return True   # `torch.empty(n, dtype=torch.long).random_(classes)`
    if qual in api.TENSOR_DATASETS:
        return bool(expr.args) and all(synthetic_data(analysis, scope, a, depth - 1) for a in expr.args)
    if qual is None and isinstance(expr.func, ast.Name):
        func = analysis.index.function_named(expr.func.id, None)
        if func is not None:   # `random_dataset(n, dim)` of this file: what it returns
            returns = returned_expressions(analysis, func)
            inner = scope_of(analysis, analysis.facts_for(func))
            return bool(returns) and all(synthetic_data(analysis, inner, r, depth - 1) for r in returns)
    return False


def _plain_sampler(analysis, facts, scope: Scope, expr: ast.expr) -> bool:
    """The sampler expression is a torch sampler that ignores the rank (RandomSampler…)."""
    if facts.value(expr).has(V.DIST_SAMPLER):
        return False
    exprs = [expr]
    if isinstance(expr, ast.Name):
        exprs = scope.producers.get(expr.id, [])
        if not exprs:
            return False
    for e in exprs:
        if not isinstance(e, ast.Call) or analysis.imports.qualname(e.func) not in PLAIN_SAMPLERS:
            return False
        if mentions_rank(e, scope.tainted):
            return False
    return True


def _dataset_sharded(analysis, facts, scope: Scope, expr: ast.expr, depth: int) -> bool:
    if mentions_rank(expr, scope.tainted):
        return True
    value = facts.value(expr)
    if value.cls is not None and _class_reads_rank(analysis, value.cls):
        return True
    if value.has(V.PREPARED):
        return True
    text = dotted(expr)
    if text is None:
        return False
    head = text.split(".", 1)[0]
    rhss = scope.producers.get(text, []) + (scope.producers.get(head, []) if head != text else [])
    if not rhss and facts.func is not None and head not in facts.func.params:
        module = scope_of(analysis, analysis.module_facts)   # a module-level dataset
        rhss = module.producers.get(text, []) + module.producers.get(head, [])
        if any(mentions_rank(r, module.tainted) for r in rhss):
            return True
    for rhs in rhss:
        if _expr_sharded(analysis, facts, scope, rhs):
            return True
    if _sharded_in_place(facts, scope, text):
        return True
    return bool(value.params) and facts.func is not None and depth > 0 \
        and _sharded_by_callers(analysis, facts, value.params, depth)


def _sharded_in_place(facts, scope: Scope, text: str) -> bool:
    """`dataset.shard(num_shards=world_size, index=rank)` as a statement."""
    for call in facts.calls:
        func = call.node.func
        if isinstance(func, ast.Attribute) and dotted(func.value) == text and \
                mentions_rank(call.node, scope.tainted):
            return True
    return False


def _sharded_by_callers(analysis, facts, params, depth: int) -> bool:
    """The dataset is a parameter: some caller passes a sharded one (or one we cannot see)."""
    for caller_facts, local in analysis.callers(facts.func):
        for index in params:
            arg = argument_for(facts.func, local.node, index)
            if arg is None or _dataset_sharded(analysis, caller_facts,
                                               scope_of(analysis, caller_facts), arg, depth - 1):
                return True
    return False


def _expr_sharded(analysis, facts, scope: Scope, rhs: ast.expr) -> bool:
    if mentions_rank(rhs, scope.tainted):
        return True
    for sub in ast.walk(rhs):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
            cls = analysis.index.classes.get(sub.func.id)
            if cls is not None and _class_reads_rank(analysis, cls):
                return True
            func = analysis.index.function_named(sub.func.id, facts.func)
            if func is not None and mentions_rank(func.node):
                return True
    return False


@per_file("class_reads_rank", guard=False)
def _class_reads_rank(analysis, cls) -> bool:
    return mentions_rank(cls.node) or any(
        _class_reads_rank(analysis, base) for base in cls.local_bases)


# ------------------------------------------------------------------------ samplers
def shuffles(call: CallSite) -> bool:
    """The DistributedSampler shuffles: `shuffle` left out or literally True."""
    expr = _shuffle_argument(call.node)
    return expr is None or is_const(expr, True)


def _shuffle_argument(node: ast.Call) -> Optional[ast.expr]:
    expr = keyword(node, "shuffle")
    if expr is None and len(node.args) >= 4:
        expr = node.args[3]
    return expr


# Sentinel of `sampler_shuffle`: the sampler shuffles for certain.
PROVEN = ""


def sampler_shuffle(analysis, facts: FunctionFacts, call: CallSite) -> Optional[str]:
    """Whether the DistributedSampler built by `call` shuffles: None when it never does (a
    literal or folded False, or a parameter every caller of the file passes False for),
    `PROVEN` when it does (left out, True), else what the `shuffle=` value is, for a
    message that says it is taken as on (`shuffle=cfg.shuffle` from a config: the code is
    written to run with shuffling on, and `set_epoch` is harmless when it is off)."""
    expr = _shuffle_argument(call.node)
    if expr is None:
        return PROVEN
    truth = _literal_truth(analysis, facts, expr)
    if truth is not None:
        return PROVEN if truth else None
    passed = _passed_for_parameter(analysis, facts, expr)
    if passed is not None:
        known = [_literal_truth(analysis, f, e) for f, e in passed]
        if passed and all(k is False for k in known):
            return None
        if any(k is True for k in known):
            return PROVEN
        shown = ", ".join(sorted({f"`{short(e, 30)}`" for (_, e), k in zip(passed, known)
                                  if k is None}))
        return f"`shuffle={short(expr, 30)}` is not fixed here (a caller passes {shown}); " \
            f"taken as on"
    return f"`shuffle={short(expr, 30)}` is not fixed here; taken as on"


def _literal_truth(analysis, facts: FunctionFacts, expr: ast.expr) -> Optional[bool]:
    if isinstance(expr, ast.Constant):
        return bool(expr.value)
    return static_truth(analysis, facts, expr)


def _passed_for_parameter(analysis, facts: FunctionFacts, expr: ast.expr):
    """(caller facts, expression) for what each call of the file passes for the parameter
    `expr` names (its default where a call passes nothing); None when `expr` is no
    parameter, or the function is called nowhere here."""
    func = facts.func
    if func is None or not isinstance(expr, ast.Name) or expr.id not in func.params \
            or facts.value(expr).params != {func.params.index(expr.id)}:
        return None
    index = func.params.index(expr.id)
    callers = analysis.callers(func)
    if not callers:
        return None
    default = parameter_default(func, expr.id)
    out = []
    for caller_facts, call in callers:
        arg = argument_for(func, call.node, index)
        if arg is None and default is None:
            return None
        out.append((caller_facts, arg) if arg is not None else (facts, default))
    return out


def parameter_default(func, name: str) -> Optional[ast.expr]:
    """The default expression of parameter `name` of `func`, if it has one."""
    args = func.node.args
    positional = list(getattr(args, "posonlyargs", [])) + list(args.args)
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]],
                        args.defaults))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    return defaults.get(name)


@dataclass(frozen=True)
class EpochFeed:
    facts: FunctionFacts
    epoch_loop: ast.AST
    loader: V.Value


def epoch_feeds(analysis, sampler_node: ast.AST) -> List[EpochFeed]:
    """Epoch loops that train on a loader fed by the sampler built at `sampler_node`."""
    out = []
    for facts in analysis.all_facts():
        for loop in epoch_loops(analysis, facts):
            for value, _ in loaders_per_epoch(analysis, facts, loop):
                if value.has(V.PREPARED):
                    continue
                sampler = value.field("sampler")
                if sampler is not None and sampler.has(V.DIST_SAMPLER) and sampler.node is sampler_node:
                    out.append(EpochFeed(facts, loop, value))
                    break
        for gen_facts, loop, value, pulling in generator_epochs(analysis, facts):
            sampler = value.field("sampler")   # `while True: for b in loader: yield b`
            if sampler is not None and sampler.has(V.DIST_SAMPLER) and sampler.node is sampler_node \
                    and not any(sets_epoch(analysis, facts, pull, sampler_node) for pull in pulling):
                out.append(EpochFeed(gen_facts, loop, value))
    return out


def sets_epoch(analysis, facts: FunctionFacts, loop: ast.AST, sampler_node: ast.AST) -> bool:
    """Something in `loop` (directly or in a helper it calls) calls `set_epoch` on this
    sampler, its loader, or an object we cannot tell apart from them."""
    def matches(call: CallSite) -> bool:
        if call.method != "set_epoch":
            return False
        recv = call.receiver
        if recv is not None and recv.has(V.DIST_SAMPLER) and recv.node is not None:
            return recv.node is sampler_node
        return True

    if any(matches(c) for c in facts.calls if loop in c.site.loops):
        return True
    seen: Set[int] = set()
    todo = [c.callee for c in facts.local_calls if loop in c.site.loops]
    while todo:
        func = todo.pop()
        if id(func) in seen:
            continue
        seen.add(id(func))
        helper = analysis.facts_for(func)
        if any(matches(c) for c in helper.calls):
            return True
        todo.extend(c.callee for c in helper.local_calls)
    return False
