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
`train_epoch`). When every reset in the iteration names its optimizer or module
(`optD.zero_grad()`, `netD.zero_grad()`), an optimizer stepped there that none of them covers
is reported (a GAN loop that zeroes the discriminator's gradients but not the generator's); a
reset the analysis cannot tie to an object (`p.grad = None`, a helper) counts for all. A step
the analysis does not recognise (an optimizer hidden behind an unknown wrapper) makes the loop
invisible to this rule.
"""
from __future__ import annotations

import ast
from typing import Iterator, Optional, Set

from ..analysis import Does, FileAnalysis
from ..analysis import values as V
from ..analysis.astutil import dotted
from ..analysis.optimizers import call_at
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
                    unreset = _optimizer_never_reset(analysis, facts, loop)
                    if unreset is not None:
                        yield self._other_optimizer_reset(analysis, facts, loop, *unreset)
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

    def _other_optimizer_reset(self, analysis, facts, loop, step, name: str, resets) -> Finding:
        backwards = analysis.loop_sites(facts, loop, Does.BACKWARD)
        before = [s for s in backwards if s.line <= step.line]
        backward = max(before, key=lambda s: s.line) if before else min(backwards, key=lambda s: s.line)
        reset_text = ", ".join(f"`{text}.zero_grad()` (line {line})" for text, line in resets)
        return self.finding(
            backward,
            f"`{name}`'s gradients accumulate across steps: the loop resets only other gradients",
            f"`{name}.step()` at line {step.line} in the loop at line {loop.lineno}; the resets "
            f"in it are {reset_text}, which do not reset the parameters `{name}` updates, so "
            f"each of its steps applies the sum of all earlier gradients",
            f"call `{name}.zero_grad(set_to_none=True)` once per iteration, next to its step")


# ---------------------------------------------------------------------- which optimizer
def _optimizer_never_reset(analysis: FileAnalysis, facts, loop):
    """(step site, optimizer name, resets) for an optimizer stepped in `loop` whose
    parameters no reset in the loop covers: every reset names its optimizer or module, and
    none is this optimizer or the module whose parameters it was built from (a GAN loop
    that zeroes the discriminator's gradients only). None when unsure."""
    resets = []
    for site in analysis.loop_sites(facts, loop, Does.RESET):
        identity = _reset_identity(analysis, facts, site)
        if identity is None:
            return None             # `p.grad = None`, a helper, a fresh optimizer: may cover it
        resets.append(identity)
    for step in analysis.in_loop(facts, "steps", loop):
        if step.via != "optimizer":
            continue
        optimizer = _stepped(analysis, facts, step.site)
        if optimizer is None:
            return None
        name, value = optimizer
        owners = _parameter_owners(value)
        covered = False
        for text, receiver, _ in resets:
            if text == name or (receiver.node is not None and receiver.node is value.node):
                covered = True
            elif receiver.has(V.MODULE) and not receiver.has(V.OPTIMIZER):
                if owners is None:
                    return None     # `netD.zero_grad()`: whose parameters `name` has, unknown
                covered = covered or text in owners
        if not covered:
            return step.site, name, [(text, line) for text, _, line in resets]
    return None


def _reset_identity(analysis, facts, site):
    """(receiver text, receiver value, line) of `opt.zero_grad()` / `model.zero_grad()`;
    None for any other reset."""
    call = call_at(analysis, facts, site.node)
    if call is None or call.method != "zero_grad" or not isinstance(call.node.func, ast.Attribute):
        return None
    text = dotted(call.node.func.value)
    receiver = call.receiver or V.UNKNOWN
    if text is None or not (receiver.has(V.OPTIMIZER) or receiver.has(V.MODULE)):
        return None
    return text, receiver, site.line


def _stepped(analysis, facts, site):
    """(name, value) of the optimizer `opt.step()` steps, when it is a known optimizer."""
    call = call_at(analysis, facts, site.node)
    if call is None or call.method != "step" or not isinstance(call.node.func, ast.Attribute):
        return None
    text = dotted(call.node.func.value)
    receiver = call.receiver or V.UNKNOWN
    if text is None or not receiver.has(V.OPTIMIZER):
        return None
    return text, receiver


def _parameter_owners(optimizer: V.Value) -> Optional[Set[str]]:
    """The module whose `.parameters()` the optimizer was built from (`Adam(netG.parameters())`),
    or None when that is not known."""
    params = optimizer.field("params")
    node = params.node if params is not None else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in ("parameters", "named_parameters"):
        owner = dotted(node.func.value)
        return {owner} if owner else None
    return None


def _backward_only_in_helper_loops(analysis: FileAnalysis, facts, loop) -> bool:
    """Every backward of `loop` runs inside a loop of a called helper (`train_epoch()`)."""
    if any(loop in b.site.loops for b in facts.backwards):
        return False
    callees = [c.callee for c in facts.local_calls
               if loop in c.site.loops and analysis.function_does(c.callee, Does.BACKWARD)]
    return bool(callees) and all(analysis.has_training_loop(f) for f in callees)
