"""The unsafe fixes that add one statement at the top of a loop body (`--unsafe-fixes`).

TPF009: `sampler.set_epoch(epoch)` at the top of the epoch loop; TPF007: `model.train()` at
the top of the loop whose `eval()` is never undone. The rule attaches the plan (the loop,
and the expression naming the object: the sampler's assigned name, the model's receiver)
only where the statement can be written from names the loop already sees; this module
writes it as the first statement of the loop's indented body, above any comment that leads
into the old first statement. Unsafe because it changes what the loop does (the order of
the data, the mode of the model) and the author should read it; the re-lint in `_apply`
keeps it only when the finding is gone and nothing new appears.
"""
from __future__ import annotations

import ast
from typing import List, Optional

import libcst as cst

from ..findings import FixPlan
from .edits import Context, Edit


def set_epoch_edits(ctx: Context, plan: FixPlan) -> Optional[List[Edit]]:
    loop = plan.node
    if not isinstance(loop, ast.For) or not isinstance(loop.target, ast.Name):
        return None
    return _insert_first(ctx, loop, f"{ast.unparse(plan.replacement)}.set_epoch({loop.target.id})",
                         "set_epoch")


def train_mode_edits(ctx: Context, plan: FixPlan) -> Optional[List[Edit]]:
    return _insert_first(ctx, plan.node, f"{ast.unparse(plan.replacement)}.train()", "train")


def _insert_first(ctx: Context, loop: ast.AST, text: str, kind: str) -> Optional[List[Edit]]:
    node = ctx.cst_loop(loop)
    if node is None or not isinstance(node.body, cst.IndentedBlock) or not node.body.body:
        return None   # `for x in y: stmt` on one line: no layout to copy

    def insert(statement: cst.CSTNode) -> cst.CSTNode:
        block = statement.body
        line = cst.SimpleStatementLine(body=[cst.Expr(cst.parse_expression(text))])
        return statement.with_changes(body=block.with_changes(body=[line, *block.body]))

    return [Edit(node, insert, key=(kind, id(node), text))]
