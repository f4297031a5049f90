"""TPF001 fix: store `value.detach()` instead of the grad-bearing value.

The rule attaches the plan (the stored expression) only where it proved the value is one
tensor and nothing later needs its graph; this module only writes the edit.
"""
from __future__ import annotations

from typing import List, Optional

import libcst as cst

from ..findings import FixPlan
from .edits import Context, Edit, with_parens_if_needed


def edits(ctx: Context, plan: FixPlan) -> Optional[List[Edit]]:
    target = ctx.cst_expr(plan.node)
    if target is None:
        return None

    def detach(node: cst.BaseExpression) -> cst.BaseExpression:
        # existing parentheses stay (with their layout); new ones only where precedence needs
        return cst.Call(func=cst.Attribute(value=with_parens_if_needed(node), attr=cst.Name("detach")))

    return [Edit(target, detach, key=("detach", id(target)))]
