"""TPF004 unscaled-accumulation: gradient accumulation without dividing the loss.

## What it does
Reports a loop that runs backward every iteration but steps the optimizer only under a
counter condition (`if (i + 1) % accum == 0:`, `if step % k == 0:`), when the backwarded loss
is never divided by (or multiplied by the reciprocal of) anything along its provenance: in
the loop, where it was computed, or in the helper that returned it.

## Why is this bad?
Gradients of the accumulated micro-batches are summed. With a learning rate tuned for one
(averaged) batch, k accumulated micro-batches act as a k× learning rate: training is
unstable or diverges, and changing `accum` silently changes the optimisation.

## Example
```python
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
```

## Use instead
```python
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / accum_steps
    loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
```

## Fix safety
No autofix: the divisor is the accumulation count, which the code names in its own way.

## Known limits
Quiet under `accelerator.accumulate(...)`, with `accelerator.backward` and DeepSpeed
engines (they scale the loss), when the loss is divided by any expression (`loss / accum`,
`loss * (1 / k)`, `loss /= n`, in a helper too), and when the analysis cannot see where the
loss came from (a function from another package). A division anywhere else (a log line,
`step // n`) does not count, and DDP's `no_sync()` does not scale the loss, so it does not
silence the rule. Any division of the loss counts as scaling, even by the wrong number.
"""
from __future__ import annotations

import ast
from typing import Iterator, Optional

from ..analysis import FileAnalysis
from ..analysis import values as V
from ..analysis.astutil import short
from ..findings import ERROR, Finding
from .base import Rule


class UnscaledAccumulation(Rule):
    code = "TPF004"
    name = "unscaled-accumulation"
    severity = ERROR

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for facts in analysis.all_facts():
            if analysis.framework_owned(facts.func):
                continue
            for loop in facts.loops:
                gated = self._gated_step(analysis, facts, loop)
                if gated is None:
                    continue
                step, cond = gated
                for backward in facts.backwards:
                    site = backward.site
                    if not site.loops or site.loops[-1] is not loop or site.conds_inside(loop):
                        continue
                    if backward.via in ("accelerator", "engine") or site.accumulate:
                        continue
                    value = backward.value
                    if not (value.grad or value.has(V.LOSS)) or value.has(V.DIVIDED):
                        continue
                    yield self._report(site, backward, loop, step, cond)

    @staticmethod
    def _gated_step(analysis, facts, loop):
        """(step site, counter test) when every optimizer step in `loop` is counter-gated."""
        steps = analysis.in_loop(facts, "steps", loop)
        if not steps or any(s.via == "engine" for s in steps):
            return None
        for step in steps:
            counters = [c for c in step.site.conds_inside(loop) if c.counter and not c.negated]
            if not counters:
                return None
        first = min(steps, key=lambda s: s.site.line)
        cond = [c for c in first.site.conds_inside(loop) if c.counter][0]
        return first.site, cond.test

    def _report(self, site, backward, loop, step, test) -> Finding:
        origin = backward.value.origin
        made = f"`{origin[1]}` line {origin[0]}" if origin else f"line {site.line}"
        divisor = _divisor(test)
        return self.finding(
            site,
            "gradient accumulation sums unscaled losses: the learning rate is effectively "
            f"multiplied by {f'`{divisor}`' if divisor else 'the number of accumulated steps'}",
            f"backward at line {site.line} runs every iteration of the loop at line {loop.lineno} "
            f"but the optimizer steps only when `{short(test, 50)}` (line {step.line}); the loss "
            f"from {made} is never divided",
            f"backward `loss / {divisor or 'accum_steps'}` (divide the loss by the number of "
            f"accumulated steps)")


def _divisor(test: ast.AST) -> Optional[str]:
    for node in ast.walk(test):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return short(node.right, 30)
    return None
