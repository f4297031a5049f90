"""TPF015 accumulation-undone: the step is gated for accumulation but gradients are reset every micro-step.

## What it does
Reports a gradient reset (`optimizer.zero_grad()`, `model.zero_grad()`, `p.grad = None`, a
helper that does one of these) that runs on every micro-step of a gradient-accumulation
window: the optimizer steps only at the window's end (under `if (i + 1) % k == 0:`, a flag
such as `if not is_accumulating:`, a count such as `if micro == accum_steps:`, or after a
micro-batch loop), but the reset sits outside that gate. The windows are the ones the shared
analysis finds for TPF004 (`analysis/accumulation.py`).

## Why is this bad?
`backward()` adds into `.grad`; accumulation relies on nothing clearing it between the
micro-steps. A reset on every micro-step throws the earlier micro-batches away: each step
applies only the last micro-batch's gradients (a reset before the backward, or at the end of
the iteration), or only zeros (a reset between the backward and the gated step). Training
runs with a k× smaller effective batch, or does not train at all, and nothing fails.

## Example
```python
for i, (x, y) in enumerate(loader):
    optimizer.zero_grad()
    loss = criterion(model(x), y) / accum_steps
    loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
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
No autofix: the reset has to move under the accumulation gate (after the step), and where
the gate is depends on the code.

## Known limits
Quiet where the framework makes the reset harmless or owns the window: Accelerate's
`accumulate()` (its prepared optimizer's `zero_grad()` does nothing until the boundary:
`AcceleratedOptimizer.zero_grad` in accelerate's `optimizer.py` checks
`gradient_state.sync_gradients`), an `Accelerator` built with an accumulation count,
DeepSpeed engines, Lightning and HF `Trainer` code. A reset under any test that may change
between iterations, or under any test at all (a configuration switch such as
`if args.accum_steps == 1:`), is taken as deliberate. An early `if not need_update: continue`
gates everything after it. When the loop steps several optimizers (GANs), only a reset of one
whose step is gated counts. Windows split across files are not seen.

A per-parameter hook that steps an optimizer and resets the gradients
(`p.register_post_accumulate_grad_hook(hook)`, the optimizer-in-backward recipe), registered
unconditionally in the file, undoes any accumulation: a loop that backwards every iteration
and keeps an accumulation counter (`if (i + 1) % grad_accum_steps == 0:`) is reported at its
backward, as a warning (the intent to accumulate is read from the count's name). A
registration under any test (`if optimizer_in_bwd:`) is taken as exclusive of accumulation.
"""
from __future__ import annotations

from typing import Iterator

from ..analysis import FileAnalysis
from ..analysis.topics.accumulation import (MICRO_LOOP, HookUndoes, Window,
                                            accumulation_undone_by_hooks, every_step_resets,
                                            windows)
from ..analysis.core.astutil import short
from ..analysis.core.events import Site
from ..findings import ERROR, WARNING, Finding
from ..analysis.core.provenance import proven
from .base import Rule


class AccumulationUndone(Rule):
    code = "TPF015"
    name = "accumulation-undone"
    severity = ERROR
    # the premises every finding of this rule rests on (each proven by the search named)
    chain = (proven("a reset undoes accumulated gradients before the step",
                    "the accumulation window and its resets were followed"),)

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for window in windows(analysis):
            if window.gated_by is not None:
                continue
            for reset in every_step_resets(analysis, window):
                yield self._report(window, reset)
        for undone in accumulation_undone_by_hooks(analysis):
            yield self._hook_report(undone)

    def _hook_report(self, undone: HookUndoes) -> Finding:
        hook = undone.hook
        return self.finding(
            undone.backward,
            "every backward steps and zeroes each parameter through a gradient hook: the "
            "accumulation is undone",
            f"the backward at line {undone.backward.line} runs on every iteration of the loop "
            f"at line {undone.loop.lineno}, whose test `{short(undone.gate.test, 50)}` (line "
            f"{undone.gate.line}) counts micro-steps for gradient accumulation (read from the "
            f"count's name); the hook "
            f"`{hook.func.name}` registered at line {hook.site.line} steps an optimizer and "
            f"resets the gradients as soon as each is ready, so every micro-batch is applied "
            f"on its own",
            "accumulate without optimizer-in-backward hooks (step and reset under the "
            "accumulation gate), or drop the accumulation", WARNING)

    def _report(self, window: Window, reset: Site) -> Finding:
        step = window.first_step
        backward = window.first_backward_line
        if window.gate.kind == MICRO_LOOP:
            zeroed = reset.line > backward    # after a backward of the loop, before the step after it
        else:
            zeroed = backward < reset.line < step.line
        if zeroed:
            effect = ("it runs after the backward and before the step, so the step applies "
                      "zeroed gradients and nothing trains")
        else:
            effect = "each step therefore applies only the last micro-batch's gradients"
        how = "which resets gradients, " if reset not in window.facts.resets else ""
        return self.finding(
            reset,
            "gradients are reset on every micro-step of an accumulation window: the "
            "accumulation is undone",
            f"`{short(reset.node, 40)}` at line {reset.line} {how}runs on every iteration of "
            f"the loop at line {window.loop.lineno}, while the optimizer steps "
            f"{window.gate.describe()}; {effect}",
            "move the reset under the accumulation gate, right after the optimizer step")
