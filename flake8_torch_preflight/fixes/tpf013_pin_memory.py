"""TPF013 fix: add `pin_memory=True` to the DataLoader call.

The rule attaches the plan (the `DataLoader(...)` call) only when pinned memory is the whole
advice and the call has no `pin_memory` argument, no `**kwargs` (which could already carry
it) and no `*args`.
"""
from __future__ import annotations

from typing import List, Optional

import libcst as cst

from ..findings import FixPlan
from .edits import Context, Edit


def edits(ctx: Context, plan: FixPlan) -> Optional[List[Edit]]:
    target = ctx.cst_expr(plan.node)
    if not isinstance(target, cst.Call):
        return None
    return [Edit(target, _add_pin_memory, key=("pin_memory", id(target)))]


def _add_pin_memory(call: cst.Call) -> cst.Call:
    new_arg = cst.Arg(value=cst.Name("True"), keyword=cst.Name("pin_memory"),
                      equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                            whitespace_after=cst.SimpleWhitespace("")))
    args = list(call.args)
    if not args:
        return call.with_changes(args=[new_arg])
    last = args[-1]
    if isinstance(last.comma, cst.Comma):
        # trailing comma (usually one argument per line): the new argument takes the last
        # comma (whose whitespace leads to the closing paren); the old last one gets the
        # whitespace that separates arguments
        if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma):
            between = args[-2].comma.whitespace_after
        else:
            between = call.whitespace_before_args
        args[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=between))
        args.append(new_arg.with_changes(comma=last.comma))
    else:
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(new_arg)
    return call.with_changes(args=args)
