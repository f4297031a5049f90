"""TPF005 fix: unwrap a softmax passed directly to a cross-entropy loss.

`criterion(F.softmax(logits, dim=1), y)` becomes `criterion(logits, y)`. The rule attaches
the plan (the softmax call and the expression inside it) only for `nn.CrossEntropyLoss` /
`F.cross_entropy` (which normalise themselves) fed a softmax or log-softmax written in the
argument itself; `nll_loss` fed `softmax` needs `log_softmax` instead, not unwrapping, and
is left for a human.
"""
from __future__ import annotations

from typing import List, Optional

from ..findings import FixPlan
from .edits import Context, Edit


def edits(ctx: Context, plan: FixPlan) -> Optional[List[Edit]]:
    target, replacement = ctx.cst_expr(plan.node), ctx.cst_expr(plan.replacement)
    if target is None or replacement is None:
        return None
    return [Edit(target, lambda node: replacement, key=("unwrap", id(target)))]
