"""Expression statements that name an action without performing it (TPF016).

`model.eval` (no parentheses) reads the bound method and throws it away; `torch.no_grad()`
as a statement builds a context manager and throws it away. Flow does not record expression
statements as facts, so this module walks the statements once per file (module body and
each function body, never expressions) and asks flow what each receiver is
(`facts.value`). Memoised per file.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from ..semantics import torchapi as api
from ..core import values as V
from ..core.astutil import dotted
from ..core.events import FunctionFacts
from ..core.memo import per_file

# Methods that only act when called, and the receivers they belong to.
MODULE_KIND, OPTIMIZER_KIND, SCHEDULER_KIND, LOSS_KIND = "module", "optimizer", "scheduler", "loss"
OWN_METHOD_KIND = "own method"    # `self.train` in a class that defines `train()`
# What a value may be known to be that rules out every receiver above.
_OTHER_KINDS = frozenset({V.LOADER, V.SAMPLER, V.DIST_SAMPLER, V.CONTAINER, V.ACCELERATOR,
                          V.FABRIC, V.PYSCALAR, V.CUDA_DEVICE, V.SCALER})
METHOD_RECEIVERS = {
    "eval": (MODULE_KIND, OPTIMIZER_KIND),     # schedule-free optimizers switch too
    "train": (MODULE_KIND, OPTIMIZER_KIND),
    "zero_grad": (OPTIMIZER_KIND, MODULE_KIND),
    "step": (OPTIMIZER_KIND, SCHEDULER_KIND),
    "backward": (LOSS_KIND,),
}
# Context managers (and decorators) that do nothing unless entered.
CONTEXT_MANAGERS = frozenset(api.GRAD_DISABLING | {
    "torch.enable_grad", "torch.autograd.enable_grad", "torch.autocast",
    "torch.cuda.amp.autocast", "torch.amp.autocast", "torch.cpu.amp.autocast",
    "torch.amp.autocast_mode.autocast"})
_LOSS_NAME = re.compile(r"loss", re.IGNORECASE)
# Names that say "a module" (`model`, `text_encoder`, `netG`, `model_engine`, `self.teacher`).
_MODULE_NAME = re.compile(
    r"(^|_)(model|models|net|network|module|encoder|decoder|generator|discriminator|backbone"
    r"|student|teacher|classifier|policy|critic|actor|unet|vae|transformer|engine|criterion"
    r"|layer|layers|embedding|embeddings|head|heads)$"
    r"|^net[A-Z]\w*$|^(model|net)_\w+$", re.IGNORECASE)


@dataclass(frozen=True)
class BareStatement:
    facts: FunctionFacts
    stmt: ast.Expr
    kind: str                # "method" | "context"
    name: str                # `eval` / `torch.no_grad`
    receiver_text: str       # `model` (methods) or the call as written (contexts)
    receiver_kind: Optional[str] = None   # MODULE_KIND, … (methods)
    by_name: bool = False    # the receiver's kind comes from its name, not from its value


@per_file("bare_statements")
def bare_statements(analysis) -> List[BareStatement]:
    """Every bare method read and context-manager statement of the file, by line."""
    found: List[BareStatement] = []
    scopes = [(None, analysis.tree.body)] + [(f, f.node.body) for f in analysis.index.functions]
    for func, body in scopes:
        candidates = _candidate_statements(body)
        if not candidates:
            continue
        facts = analysis.module_facts if func is None else analysis.facts_for(func)
        for stmt in candidates:
            item = _classify(analysis, facts, stmt)
            if item is not None:
                found.append(item)
    return sorted(found, key=lambda b: b.stmt.lineno)


# Compound statements: the fields that hold statement lists (handlers and cases apart).
_BODIES = {ast.If: ("body", "orelse"), ast.For: ("body", "orelse"),
           ast.AsyncFor: ("body", "orelse"), ast.While: ("body", "orelse"),
           ast.With: ("body",), ast.AsyncWith: ("body",),
           ast.Try: ("body", "orelse", "finalbody")}
_TRIES = {ast.Try}
if hasattr(ast, "TryStar"):
    _BODIES[ast.TryStar] = ("body", "orelse", "finalbody")
    _TRIES.add(ast.TryStar)
_MATCH = getattr(ast, "Match", None)
_CONTEXT_LAST_NAMES = frozenset(q.rsplit(".", 1)[-1] for q in CONTEXT_MANAGERS)
_INTERESTING = frozenset(METHOD_RECEIVERS) | _CONTEXT_LAST_NAMES


def _candidate_statements(body) -> List[ast.Expr]:
    """`ast.Expr` statements of one scope that may be one of ours (`x.eval`, `no_grad()`),
    found by one pass over its statements (nested functions and classes are other scopes)."""
    found = []
    stack = [body]
    push, pop = stack.append, stack.pop
    expr_kind, call_kind, attr_kind, name_kind = ast.Expr, ast.Call, ast.Attribute, ast.Name
    if_kind, for_kind, with_kind = ast.If, ast.For, ast.With
    while stack:
        for stmt in pop():
            kind = type(stmt)
            if kind is expr_kind:
                value = stmt.value
                names = _INTERESTING
                if type(value) is call_kind:
                    value, names = value.func, _CONTEXT_LAST_NAMES   # only `no_grad()` & co
                value_kind = type(value)
                if (value_kind is attr_kind and value.attr in names) or (
                        value_kind is name_kind and value.id in _CONTEXT_LAST_NAMES):
                    found.append(stmt)
            elif kind is if_kind or kind is for_kind:
                push(stmt.body)
                if stmt.orelse:
                    push(stmt.orelse)
            elif kind is with_kind:
                push(stmt.body)
            else:
                fields = _BODIES.get(kind)
                if fields is not None:
                    for field in fields:
                        push(getattr(stmt, field))
                    if kind in _TRIES:
                        for handler in stmt.handlers:
                            push(handler.body)
                elif kind is _MATCH:
                    for case in stmt.cases:
                        push(case.body)
    return found


def _classify(analysis, facts: FunctionFacts, stmt: ast.Expr) -> Optional[BareStatement]:
    expr = stmt.value
    target = expr.func if isinstance(expr, ast.Call) else expr
    qual = analysis.imports.qualname(target)
    if qual in CONTEXT_MANAGERS and isinstance(expr, (ast.Call, ast.Attribute)):
        return BareStatement(facts, stmt, "context", qual, ast.unparse(expr))
    if not isinstance(expr, ast.Attribute) or expr.attr not in METHOD_RECEIVERS or qual is not None:
        return None
    text = dotted(expr.value) or ""
    value = facts.value(expr.value)
    if text == "self" and value.cls is not None and value.cls.method(expr.attr) is not None \
            and not value.cls.is_module:
        return BareStatement(facts, stmt, "method", expr.attr, text, OWN_METHOD_KIND)
    kind, by_name = _receiver_kind(value, text, METHOD_RECEIVERS[expr.attr])
    if kind is None:
        return None
    return BareStatement(facts, stmt, "method", expr.attr, text, kind, by_name)


def _module_like(value: V.Value) -> bool:
    return value.has(V.MODULE) or value.has(V.LOSS_FN) or (
        value.has(V.SELF) and value.cls is not None
        and (value.cls.is_module or value.cls.method("forward") is not None))


# Receiver kind -> how a value shows it is one, and how a name says it is one.
_KIND_BY_VALUE: Dict[str, Callable[[V.Value], bool]] = {
    MODULE_KIND: _module_like,
    OPTIMIZER_KIND: lambda value: value.has(V.OPTIMIZER),
    SCHEDULER_KIND: lambda value: value.has(V.SCHEDULER),
    LOSS_KIND: lambda value: bool(value.grad and not value.leaf) or value.has(V.LOSS),
}
_KIND_BY_NAME: Dict[str, Callable[[str], bool]] = {
    MODULE_KIND: lambda name: bool(api.MODEL_PARAM_RE.match(name) or _MODULE_NAME.search(name)),
    OPTIMIZER_KIND: lambda name: bool(api.OPTIMIZER_NAME_RE.search(name))
    and not api.SCHEDULER_NAME_RE.search(name),
    SCHEDULER_KIND: lambda name: bool(api.SCHEDULER_NAME_RE.search(name)),
    LOSS_KIND: lambda name: bool(_LOSS_NAME.search(name)),
}


def _receiver_kind(value: V.Value, text: str, wanted) -> tuple:
    """(kind, by_name): what the receiver is, from its value; from its name only when the
    analysis knows nothing about it; (None, False) when it is something else."""
    for kind in wanted:
        if _KIND_BY_VALUE[kind](value):
            return kind, False
    if value.tags & _OTHER_KINDS or value.grad or value.cls is not None or not text:
        return None, False     # a known object of another kind
    last = text.rsplit(".", 1)[-1]
    for kind in wanted:
        if _KIND_BY_NAME[kind](last):
            return kind, True
    return None, False
