"""TPF003 missing-zero-grad: backward in a training loop with no gradient reset.

## What it does
Reports the backward call of a training loop that steps an optimizer every iteration but
never resets gradients inside the loop: no `optimizer.zero_grad()`, `model.zero_grad()`,
`p.grad = None`, `p.grad.zero_()`, no helper that does one of these, and no optimizer
re-created per iteration. A reset only before the loop counts as missing.

## Why is this bad?
`backward()` adds into `.grad`. Without a reset, each step applies the sum of all gradients
since the loop started: the effective learning rate grows with the step count, and training
diverges or plateaus while the loss curve still looks plausible for a while.

## Example
```python
optimizer.zero_grad()
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
```

## Use instead
```python
for x, y in loader:
    optimizer.zero_grad(set_to_none=True)
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
```

## Fix safety
No autofix: where the reset belongs (before the forward, after the step, or under an
accumulation condition) depends on intent.

## Known limits
Quiet when the reset sits under an `if` in the loop (deliberate accumulation), in
LightningModule and HF Trainer code (the framework zeroes gradients), with DeepSpeed engines
(`engine.step()` zeroes them), in `training_step`-style functions with no loop, and when the
loop's innermost backward-and-step is in a nested loop (that loop is judged instead), also
when that loop sits in a called helper (`for epoch ...: train_epoch(...)` is judged once, in
`train_epoch`). Any reset in the iteration counts, whichever optimizer it resets: a GAN loop
that zeroes the discriminator's gradients but not the generator's is not reported. A step
the analysis does not recognise (an optimizer hidden behind an unknown wrapper) makes the loop
invisible to this rule.
"""
from __future__ import annotations

from typing import Iterator

from ..analysis import Does, FileAnalysis
from ..findings import ERROR, Finding
from .base import Rule


class MissingZeroGrad(Rule):
    code = "TPF003"
    name = "missing-zero-grad"
    severity = ERROR

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for facts in analysis.all_facts():
            if analysis.framework_owned(facts.func):
                continue
            for loop in analysis.innermost_loops_doing(facts, Does.BACKWARD, Does.STEP):
                if analysis.loop_does(facts, loop, Does.RESET):
                    continue
                if _backward_only_in_helper_loops(analysis, facts, loop):
                    continue      # an epoch loop around `train_epoch()`: that loop is judged
                backward = min(analysis.loop_sites(facts, loop, Does.BACKWARD), key=lambda s: s.line)
                step = min(analysis.loop_sites(facts, loop, Does.STEP), key=lambda s: s.line)
                outside = [s.line for s in facts.resets if loop not in s.loops]
                why = (f"the only reset is outside it, at line {outside[0]}" if outside
                       else "nothing resets gradients in it")
                yield self.finding(
                    backward,
                    "gradients accumulate across steps: backward runs every iteration with no reset",
                    f"backward at line {backward.line} and optimizer step at line {step.line} in the "
                    f"loop at line {loop.lineno}; {why}, so each step applies the sum of all "
                    f"earlier gradients",
                    "call `optimizer.zero_grad(set_to_none=True)` once per iteration "
                    "(before the forward or after `optimizer.step()`)")


def _backward_only_in_helper_loops(analysis: FileAnalysis, facts, loop) -> bool:
    """Every backward of `loop` runs inside a loop of a called helper (`train_epoch()`)."""
    if any(loop in b.site.loops for b in facts.backwards):
        return False
    callees = [c.callee for c in facts.local_calls
               if loop in c.site.loops and analysis.function_does(c.callee, Does.BACKWARD)]
    return bool(callees) and all(analysis.has_training_loop(f) for f in callees)
