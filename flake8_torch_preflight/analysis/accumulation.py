"""Gradient-accumulation loops: `for _ in range(args.gradient_accumulation_steps):`.

A loop whose iteration count is an accumulation count runs the micro-batches of one
optimizer step (DeepSpeed engines and Megatron-style `train_step` functions call
`engine.step()` inside it; the engine only updates at the accumulation boundary).
"""
from __future__ import annotations

import ast
import re

from .astutil import dotted

_ACCUM_NAME = re.compile(r"accum|micro_?batch|microbatch|num_micro", re.IGNORECASE)


def accumulation_loop(loop: ast.AST) -> bool:
    """`for _ in range(accum_steps)` / `range(cfg.gradient_accumulation_steps)` /
    `range(num_micro_batches)`: the count names gradient accumulation."""
    iterated = getattr(loop, "iter", None)
    if not (isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name)
            and iterated.func.id == "range" and len(iterated.args) == 1):
        return False
    names = [dotted(n) for n in ast.walk(iterated.args[0]) if isinstance(n, (ast.Name, ast.Attribute))]
    return any(name and _ACCUM_NAME.search(name.rsplit(".", 1)[-1]) for name in names)
