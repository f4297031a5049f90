"""Optimizers built before the model they train is sharded (TPF017).

A sharding wrapper that re-creates parameters leaves an optimizer built earlier holding the
old tensors: FSDP1 (`FullyShardedDataParallel`) flattens them into `FlatParameter`s unless
`use_orig_params=True`, FSDP2 (`fully_shard`) replaces them with DTensor parameters. Both
facts come from PyTorch's docs (see the rule). Within one function (order is only known
there), this module pairs each optimizer construction with the parameters it was given
(`model.parameters()`, param groups, a name bound to them, or a file-local helper that
returns an optimizer for a model it is passed) and with a later wrap of that model (directly
or through a file-local helper that wraps its argument). Memoised per file.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Dict, List, Optional, Set, Tuple

from ..semantics import torchapi as api
from ..core import values as V
from .amp import exclusive
from ..core.astutil import dotted, keyword
from .distributed import scope_of
from .epochs import argument_for
from ..core.events import CallSite, FunctionFacts, Site
from ..core.memo import per_file

FSDP1 = "FullyShardedDataParallel"
FSDP2 = "fully_shard"
# qualified name -> (family, keyword that keeps the original parameters, or None)
SHARDING_WRAPPERS: Dict[str, Tuple[str, Optional[str]]] = {
    **{q: (FSDP1, "use_orig_params") for q in (
        "torch.distributed.fsdp.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
        "torch.distributed.fsdp.FSDP")},
    **{q: (FSDP2, None) for q in (
        "torch.distributed.fsdp.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard.fully_shard")},
}
_PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})


@dataclass(frozen=True)
class Wrap:
    site: Site
    family: str             # FSDP1 | FSDP2
    wrapped: str            # the module as written (`model`, `self.model`)
    helper: Optional[str]   # the file-local helper that does it, if any


@dataclass(frozen=True)
class EarlyOptimizer:
    facts: FunctionFacts
    optimizer: CallSite     # the construction (or the helper call that returns one)
    model: str              # whose parameters it was given
    wrap: Wrap


@per_file("sharding_order")
def early_optimizers(analysis) -> List[EarlyOptimizer]:
    """Every optimizer of the file built before a later wrap shards its model."""
    found: List[EarlyOptimizer] = []
    if not analysis.imports.imports_any(*_SHARDING_MODULES):
        return found
    for facts in analysis.all_facts():
        wraps = _wraps(analysis, facts)
        if not wraps:
            continue
        constructions = _optimizer_constructions(analysis, facts)
        for call, models in constructions:
            wrap = _later_wrap(call, models, wraps)
            if wrap is None or _rebuilt_after(constructions, wrap):
                continue
            found.append(EarlyOptimizer(facts, call, _root_of(models, wrap), wrap))
    return found


# A file can only shard (itself or in its helpers) with what it imports from these.
_SHARDING_MODULES = ("torch.distributed.fsdp", "torch.distributed._composable")


# ---------------------------------------------------------------------------- optimizers
def _optimizer_constructions(analysis, facts) -> List[Tuple[CallSite, Set[str]]]:
    """(call, modules whose parameters it takes) for each optimizer built in `facts`."""
    scope = None
    out = []
    for call in facts.calls:
        models: Set[str] = set()
        if call.qualname and api.OPTIMIZER_RE.match(call.qualname):
            scope = scope or scope_of(analysis, facts)
            for arg in _param_arguments(call.node):
                models |= _parameter_owners(arg, scope.producers) or \
                    _groups_helper_owners(analysis, facts, arg)
        elif call.result.has(V.OPTIMIZER) and _local_callee(analysis, facts, call) is not None:
            models = {t for t, v in zip(_arg_texts(call.node), call.args)
                      if t and v.has(V.MODULE)} | _method_receiver(call)
        if models:
            out.append((call, models))
    return out


def _param_arguments(node: ast.Call) -> List[ast.expr]:
    args = list(node.args[:1])
    params = keyword(node, "params")
    if params is not None:
        args.append(params)
    return args


def _parameter_owners(expr: ast.expr, producers, depth: int = 0) -> Set[str]:
    """`model` for `model.parameters()`, `[{"params": model.head.parameters()}, …]`,
    `filter(lambda p: p.requires_grad, model.parameters())`, or a name bound to one."""
    owners = set()
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _PARAMETER_METHODS:
            text = dotted(node.func.value)
            if text:
                owners.add(text)
    if not owners and depth < 1:
        for name in {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}:
            for rhs in producers.get(name, []):
                owners |= _parameter_owners(rhs, producers, depth + 1)
    return owners


def _groups_helper_owners(analysis, facts, expr: ast.expr) -> Set[str]:
    """`model` for `AdamW(get_param_groups(model, wd))` or `AdamW(model.param_groups(wd))`:
    a helper of the project that builds the groups from the parameters of a module it is
    handed (`for n, p in model.named_parameters()` in its body)."""
    if not isinstance(expr, ast.Call):
        return set()
    callee = _local_callee(analysis, facts, _call_site_of(facts, expr))
    if callee is None:
        return set()
    owners = set()
    for index in _parameters_read(callee):
        arg = argument_for(callee, expr, index)
        text = dotted(arg) if arg is not None else None
        if text:
            owners.add(text)
    return owners


def _call_site_of(facts: FunctionFacts, node: ast.Call):
    return next((c for c in facts.calls if c.node is node), None)


def _parameters_read(func) -> frozenset:
    """Indices of `func`'s parameters whose `.parameters()` / `.named_parameters()` it calls."""
    params = list(func.params)
    found = set()
    for node in ast.walk(func.node):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _PARAMETER_METHODS \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in params:
            found.add(params.index(node.func.value.id))
    return frozenset(found)


def _method_receiver(call: CallSite) -> Set[str]:
    """`model` for `model.configure_optimizers(...)`: the module whose method builds it."""
    func = call.node.func
    if isinstance(func, ast.Attribute) and call.receiver is not None \
            and call.receiver.has(V.MODULE):
        text = dotted(func.value)
        return {text} if text else set()
    return set()


def _rebuilt_after(constructions, wrap: Wrap) -> bool:
    return any(call.site.line > wrap.site.line for call, _ in constructions)


# ---------------------------------------------------------------------------- wraps
def _wraps(analysis, facts: FunctionFacts) -> List[Wrap]:
    out = []
    for call in facts.calls:
        known = SHARDING_WRAPPERS.get(call.qualname) if call.qualname else None
        if known is not None and not _keeps_parameters(call.node, known[1]):
            text = _wrapped_text(call.node)
            if text:
                out.append(Wrap(call.site, known[0], text, None))
    for local in facts.local_calls:
        for index, family in _helper_wraps(analysis, local.callee):
            expr = argument_for(local.callee, local.node, index)
            text = dotted(expr) if expr is not None else None
            if text:
                out.append(Wrap(local.site, family, text, local.callee.name))
    return out


def _wrapped_text(node: ast.Call) -> Optional[str]:
    expr = keyword(node, "module") or (node.args[0] if node.args else None)
    return dotted(expr) if expr is not None else None


@per_file("sharding_helpers", guard=[])
def _helper_wraps(analysis, func) -> List[Tuple[int, str]]:
    """(parameter index, family) for each parameter the file-local helper shards."""
    facts = analysis.facts_for(func)
    out = []
    for call in facts.calls:
        known = SHARDING_WRAPPERS.get(call.qualname or "")
        if known is None or not call.args:
            continue
        family, keep = known
        if _keeps_parameters(call.node, keep):
            continue
        out.extend((index, family) for index in sorted(call.args[0].params))
    return out


def _later_wrap(call: CallSite, models: Set[str], wraps: List[Wrap]) -> Optional[Wrap]:
    for wrap in sorted(wraps, key=lambda w: w.site.line):
        if wrap.site.line <= call.site.line or exclusive(wrap.site, call.site):
            continue
        if any(_same_or_nested(m, wrap.wrapped) for m in models):
            return wrap
    return None


def _same_or_nested(model: str, wrapped: str) -> bool:
    """The wrap re-creates `model`'s parameters: the same module, a module inside the
    wrapped one (`model.head` under `FSDP(model)`), or one the wrap is part of."""
    return model == wrapped or model.startswith(wrapped + ".") or wrapped.startswith(model + ".")


def _root_of(models: Set[str], wrap: Wrap) -> str:
    return next(m for m in sorted(models) if _same_or_nested(m, wrap.wrapped))


# ---------------------------------------------------------------------------- utilities
def _local_callee(analysis, facts: FunctionFacts, call: CallSite):
    """The file-local function `call` runs, if any (indexed once per function)."""
    return _local_callees(analysis, facts).get(call.node)


@per_file("sharding_callees")
def _local_callees(analysis, facts: FunctionFacts) -> dict:
    return {local.node: local.callee for local in facts.local_calls}


def _arg_texts(node: ast.Call) -> List[Optional[str]]:
    return [dotted(a) for a in node.args]


def _keeps_parameters(node: ast.Call, keep: Optional[str]) -> bool:
    """The wrap may keep the original parameters: `use_orig_params=` anything but a literal
    False, or `**kwargs` that may carry it."""
    if keep is None:
        return False
    if any(kw.arg is None for kw in node.keywords):
        return True
    value = keyword(node, keep)
    return value is not None and not (isinstance(value, ast.Constant) and value.value is False)
