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
from typing import List, Optional

from . import torchapi as api
from . import values as V
from .astutil import dotted
from .events import FunctionFacts

# Methods that only act when called, and the receivers they belong to.
MODULE_KIND, OPTIMIZER_KIND, SCHEDULER_KIND, LOSS_KIND = "module", "optimizer", "scheduler", "loss"
METHOD_RECEIVERS = {
    "eval": (MODULE_KIND,),
    "train": (MODULE_KIND,),
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


@dataclass(frozen=True)
class BareStatement:
    facts: FunctionFacts
    stmt: ast.Expr
    kind: str                # "method" | "context"
    name: str                # `eval` / `torch.no_grad`
    receiver_text: str       # `model` (methods) or the call as written (contexts)
    receiver_kind: Optional[str] = None   # MODULE_KIND, … (methods)
    by_name: bool = False    # the receiver's kind comes from its name, not from its value


def bare_statements(analysis) -> List[BareStatement]:
    memo = analysis.memo("bare_statements")
    if "all" not in memo:
        found: List[BareStatement] = []
        scopes = [(analysis.module_facts, analysis.tree.body)] + [
            (analysis.facts_for(f), f.node.body) for f in analysis.index.functions]
        for facts, body in scopes:
            for stmt in _expression_statements(body):
                item = _classify(analysis, facts, stmt)
                if item is not None:
                    found.append(item)
        memo["all"] = found
    return memo["all"]


def _expression_statements(body):
    """`ast.Expr` statements of one scope (nested functions and classes are other scopes)."""
    todo = list(reversed(body))
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, ast.Expr):
            yield stmt
            continue
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        children = []
        for field in ("body", "orelse", "finalbody"):
            value = getattr(stmt, field, None)
            if isinstance(value, list):
                children.extend(value)
        for handler in getattr(stmt, "handlers", ()):
            children.extend(handler.body)
        for case in getattr(stmt, "cases", ()):
            children.extend(case.body)
        todo.extend(reversed(children))


def _classify(analysis, facts: FunctionFacts, stmt: ast.Expr) -> Optional[BareStatement]:
    expr = stmt.value
    target = expr.func if isinstance(expr, ast.Call) else expr
    qual = analysis.imports.qualname(target)
    if qual in CONTEXT_MANAGERS and (isinstance(expr, ast.Call) or isinstance(expr, ast.Attribute)):
        return BareStatement(facts, stmt, "context", qual, ast.unparse(expr))
    if not isinstance(expr, ast.Attribute) or expr.attr not in METHOD_RECEIVERS or qual is not None:
        return None
    text = dotted(expr.value) or ""
    kind, by_name = _receiver_kind(facts.value(expr.value), text, METHOD_RECEIVERS[expr.attr])
    if kind is None:
        return None
    return BareStatement(facts, stmt, "method", expr.attr, text, kind, by_name)


def _receiver_kind(value: V.Value, text: str, wanted) -> tuple:
    """(kind, by_name): what the receiver is, from its value; from its name only when the
    analysis knows nothing about it; (None, False) when it is something else."""
    by_value = {
        MODULE_KIND: value.has(V.MODULE) or value.has(V.SELF) and value.cls is not None
        and value.cls.is_module,
        OPTIMIZER_KIND: value.has(V.OPTIMIZER),
        SCHEDULER_KIND: value.has(V.SCHEDULER),
        LOSS_KIND: (value.grad and not value.leaf) or value.has(V.LOSS),
    }
    for kind in wanted:
        if by_value[kind]:
            return kind, False
    if value.tags or value.grad or value.cls is not None or not text:
        return None, False     # a known object of another kind
    last = text.rsplit(".", 1)[-1]
    by_name = {
        MODULE_KIND: bool(api.MODEL_PARAM_RE.match(last)),
        OPTIMIZER_KIND: bool(api.OPTIMIZER_NAME_RE.search(last)) and not api.SCHEDULER_NAME_RE.search(last),
        SCHEDULER_KIND: bool(api.SCHEDULER_NAME_RE.search(last)),
        LOSS_KIND: bool(_LOSS_NAME.search(last)),
    }
    for kind in wanted:
        if by_name[kind]:
            return kind, True
    return None, False
