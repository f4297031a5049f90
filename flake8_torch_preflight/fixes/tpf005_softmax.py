"""TPF005 fix: unwrap a softmax passed directly to a cross-entropy loss.

`criterion(F.softmax(logits, dim=1), y)` becomes `criterion(logits, y)`. Only when the loss is
`nn.CrossEntropyLoss` / `F.cross_entropy` (it normalises itself) and the softmax or
log_softmax call is the argument itself: function (`F.softmax`, `torch.softmax`,
`torch.log_softmax`), method (`logits.softmax(-1)`) or an `nn.Softmax`/`nn.LogSoftmax` module
call with one argument. `nll_loss` fed `softmax` needs `log_softmax` instead, not unwrapping:
left for a human.
"""
from __future__ import annotations

import ast
from typing import List, Optional

from ..analysis import values as V
from ..findings import Finding

_SOFTMAX_FUNCS = {"torch.softmax", "torch.log_softmax", "torch.nn.functional.softmax",
                  "torch.nn.functional.log_softmax", "torch.special.softmax",
                  "torch.special.log_softmax"}
_SOFTMAX_MODULES = {"torch.nn.Softmax", "torch.nn.LogSoftmax", "torch.nn.modules.activation.Softmax",
                    "torch.nn.modules.activation.LogSoftmax"}
_CE_CLASSES = {"torch.nn.CrossEntropyLoss", "torch.nn.modules.loss.CrossEntropyLoss"}


def plan(ctx, finding: Finding) -> Optional[List]:
    from ._apply import Edit

    edits = []
    for facts, call in ctx.calls_on_line(finding.line):
        if call.site.line != finding.line or not _is_cross_entropy(ctx, facts, call):
            continue
        first = _first_input(call.node)
        if first is None:
            continue
        inner = _softmax_input(ctx, facts, first)
        if inner is None:
            continue
        target, replacement = ctx.cst_expr(first), ctx.cst_expr(inner)
        if target is None or replacement is None:
            continue

        def unwrap(node, replacement=replacement):
            return replacement

        edits.append(Edit(target, unwrap, key=("unwrap", id(target))))
    return edits or None


def _is_cross_entropy(ctx, facts, call) -> bool:
    if call.qualname in ("torch.nn.functional.cross_entropy",):
        return True
    callee = facts.value(call.node.func)
    if callee.has(V.LOSS_FN) and isinstance(callee.node, ast.Call):
        return ctx.analysis.imports.qualname(callee.node.func) in _CE_CLASSES
    if isinstance(call.node.func, ast.Call):   # nn.CrossEntropyLoss()(x, y)
        return ctx.analysis.imports.qualname(call.node.func.func) in _CE_CLASSES
    return False


def _first_input(node: ast.Call) -> Optional[ast.expr]:
    if node.args and not isinstance(node.args[0], ast.Starred):
        return node.args[0]
    for keyword in node.keywords:
        if keyword.arg == "input":
            return keyword.value
    return None


def _softmax_input(ctx, facts, expr: ast.expr) -> Optional[ast.expr]:
    if not isinstance(expr, ast.Call):
        return None
    qualname = ctx.analysis.imports.qualname(expr.func)
    if qualname in _SOFTMAX_FUNCS:
        return _first_input(expr)
    func = expr.func
    if isinstance(func, ast.Attribute) and func.attr in ("softmax", "log_softmax") \
            and qualname is None and not any(isinstance(a, ast.Starred) for a in expr.args):
        return func.value
    if len(expr.args) == 1 and not expr.keywords and not isinstance(expr.args[0], ast.Starred):
        if isinstance(func, ast.Call) and ctx.analysis.imports.qualname(func.func) in _SOFTMAX_MODULES:
            return expr.args[0]
        module = facts.value(func)
        if module.has(V.ACTIVATION_MODULE) and module.activation in ("softmax", "log_softmax"):
            return expr.args[0]
    return None
