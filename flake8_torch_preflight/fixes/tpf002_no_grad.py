"""TPF002 fix: decorate an evaluation-named function with `@torch.no_grad()`.

The rule attaches the plan (the function) only where the function and its helpers ask for
no gradient. This module declines where the edit itself would not mean that: on `async def`
(the decorator would not cover the awaited body), on `@torch.jit`/`@overload` functions, on
functions already decorated with a grad-mode decorator, or when `torch` is bound to
something other than the module. Adds `import torch` after the file's leading imports when
torch is not imported as a module.
"""
from __future__ import annotations

from typing import List, Optional

import libcst as cst

from ..findings import FixPlan
from .edits import Context, Edit, torch_name

_DECLINING_DECORATORS = ("jit", "overload", "no_grad", "inference_mode")


def edits(ctx: Context, plan: FixPlan) -> Optional[List[Edit]]:
    node = ctx.cst_function(plan.node)
    if node is None or node.asynchronous is not None:
        return None
    for decorator in node.decorators:
        text = ctx.module.code_for_node(decorator.decorator)
        if any(word in text for word in _DECLINING_DECORATORS):
            return None
    torch, needs_import = torch_name(ctx.tree)
    if torch is None:
        return None

    def decorate(fn: cst.FunctionDef) -> cst.FunctionDef:
        # innermost, under any @staticmethod/@property; comments between the decorators and
        # the `def` stay above the new decorator
        decorator = cst.Decorator(decorator=cst.parse_expression(f"{torch}.no_grad()"),
                                  leading_lines=fn.lines_after_decorators)
        return fn.with_changes(decorators=[*fn.decorators, decorator], lines_after_decorators=())

    return [Edit(node, decorate, key=("no_grad", id(node)),
                 imports=("torch",) if needs_import else ())]
