"""TPF001 fix: store `value.detach()` instead of the grad-bearing value.

Applied to `append`/`insert`/`add`/`extend` arguments, subscript and attribute assignments
and augmented assignments, when the analysis says the stored value is a tensor. Literal
containers (`xs.append((loss, out))`), dict `update`s and values that may not be tensors
(a model's dict-like output) are left for a human.
"""
from __future__ import annotations

import ast
from typing import List, Optional

import libcst as cst

from ..analysis import values as V
from ..findings import Finding

_FIXABLE_HOW = {"append", "insert", "add", "extend", "setitem", "setattr", "augassign"}
_NOT_TENSORS = (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp,
                ast.GeneratorExp, ast.Constant, ast.Starred, ast.JoinedStr, ast.Lambda)


def plan(ctx, finding: Finding) -> Optional[List]:
    from ._apply import Edit, with_parens_if_needed

    stores = [store for facts in ctx.analysis.all_facts() for store in facts.stores
              if store.site.line == finding.line and store.site.col == finding.col
              and store.value.grad and not store.value.leaf]
    exprs = {id(store.expr): store for store in stores}
    if len(exprs) != 1:
        return None
    store = stores[0]
    if store.how not in _FIXABLE_HOW or isinstance(store.expr, _NOT_TENSORS):
        return None
    if not store.value.has(V.TENSOR):
        return None
    target = ctx.cst_expr(store.expr)
    if target is None:
        return None

    def detach(node: cst.BaseExpression) -> cst.BaseExpression:
        # existing parentheses stay (with their layout); new ones only where precedence needs
        return cst.Call(func=cst.Attribute(value=with_parens_if_needed(node), attr=cst.Name("detach")))

    return [Edit(target, detach, key=("detach", id(target)))]
