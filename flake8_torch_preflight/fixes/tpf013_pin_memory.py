"""TPF013 fix: add `pin_memory=True` to the DataLoader call.

Only for the findings about pinned memory (`.to(..., non_blocking=True)` from a loader that
does not pin), on a `torch.utils.data.DataLoader(...)` call that has no `pin_memory`
argument, no `**kwargs` (which could already carry it) and no `*args`. The loader is the call
on the reported line, or the one the message points to by line number.
"""
from __future__ import annotations

import ast
import re
from typing import List, Optional

import libcst as cst

from ..findings import Finding

_LINE = re.compile(r"\bline (\d+)")


def plan(ctx, finding: Finding) -> Optional[List]:
    from ._apply import Edit

    lines = [finding.line] + [int(n) for n in _LINE.findall(f"{finding.what} {finding.evidence}")]
    for line in lines:
        loaders = {id(call.node): call.node for _, call in ctx.calls_on_line(line)
                   if call.qualname and call.qualname.startswith("torch.")
                   and call.qualname.endswith(".DataLoader")}
        if len(loaders) > 1:
            return None
        if loaders:
            node = next(iter(loaders.values()))
            break
    else:
        return None
    if any(k.arg is None or k.arg == "pin_memory" for k in node.keywords):
        return None
    if len(node.args) >= 8 or any(isinstance(a, ast.Starred) for a in node.args):
        return None
    target = ctx.cst_expr(node)
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
