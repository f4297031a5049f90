"""TPF002 fix: decorate an evaluation-named function with `@torch.no_grad()`.

Only where the rule's own fix says so (the function is evaluation code by its name), never
on `async def` (the decorator would not cover the awaited body), on `@torch.jit`/`@overload`
functions, or when `torch` is bound to something other than the module. Adds `import torch`
after the file's leading imports when torch is not imported as a module.
"""
from __future__ import annotations

import re
from typing import List, Optional

import libcst as cst

from ..findings import Finding

_NAME = re.compile(r"^decorate `([A-Za-z_][A-Za-z0-9_]*)`")


def plan(ctx, finding: Finding) -> Optional[List]:
    from ._apply import Edit, torch_name

    match = _NAME.match(finding.fix)
    if not match:
        return None
    name = match.group(1)
    funcs = {id(facts.func): facts.func for facts in ctx.analysis.all_facts()
             if facts.func is not None and facts.func.name == name
             and any(fw.site.line == finding.line and fw.site.col == finding.col
                     for fw in facts.forwards)}
    if len(funcs) != 1:
        return None
    func = next(iter(funcs.values()))
    node = ctx.cst_function(func.node)
    if node is None or node.asynchronous is not None:
        return None
    for decorator in node.decorators:
        text = ctx.module.code_for_node(decorator.decorator)
        if "jit" in text or "overload" in text or "no_grad" in text or "inference_mode" in text:
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
