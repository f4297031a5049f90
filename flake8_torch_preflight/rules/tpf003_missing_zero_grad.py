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
An error needs every premise proven: an optimizer known only by its parameter's name
(`def train(model, optimizer, ...)`) makes the finding a warning that names it.
Quiet when the reset sits under an `if` in the loop (deliberate accumulation), unless the
step runs every iteration and the test proves the reset does not: a test that folds to
false (`if False:`, `if config.get("is_fixed"):` over a literal dict read only by key), or
a test of the loop's counter that holds a bounded number of times (`if i == 0:`, `if step <
10:`); a flag or an accumulation counter (`i % k == 0`) may hold every time. Quiet in
LightningModule and HF Trainer code (the framework zeroes gradients), with DeepSpeed engines
(`engine.step()` zeroes them; the optimizer `deepspeed.initialize` returns does not, so
`optimizer.step()` on it is judged like any optimizer's), in `training_step`-style functions
with no loop, and when the loop's innermost backward-and-step is in a nested loop (that loop
is judged instead), also when that loop sits in a called helper (`for epoch ...:
train_epoch(...)` is judged once, in `train_epoch`). When every reset in the iteration names
its optimizer or module (`optD.zero_grad()`, `netD.zero_grad()`), an optimizer stepped there
that none of them covers is reported (a GAN loop that zeroes the discriminator's gradients
but not the generator's); `p.grad = None` in a `for p in X.parameters()` loop resets `X`
(only some of its parameters when a test other than on `p.grad` / `p.requires_grad` guards
it); a reset the analysis cannot tie to an object (a helper, `p.grad = None` over a list)
counts for all. A reset on the other branch of an `if` whose test the loop never changes
(`if use_amp:`) does not cover a step on this branch. A project class that subclasses
`torch.optim.Optimizer` makes optimizers, and `opt.step = torch.compile(opt.step)` keeps the
step. A step the analysis does not recognise (an optimizer hidden behind an unknown wrapper)
makes the loop invisible to this rule.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import FrozenSet, Iterator, Optional

from ..analysis import Does, FileAnalysis
from ..analysis.core import values as V
from ..analysis.core.astutil import dotted
from ..analysis.core.events import Site
from ..analysis.core.provenance import kind_premise, proven
from ..analysis.topics.optimizers import call_at
from ..analysis.topics.resets import (loop_invariant_test, parameter_owners,
                                      reset_not_every_iteration, tests_only_the_parameter)
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
                why = None
                if analysis.loop_does(facts, loop, Does.RESET):
                    why = _resets_skipped(analysis, facts, loop)
                    if why is None:
                        unreset = _optimizer_never_reset(analysis, facts, loop)
                        if unreset is not None:
                            yield self._other_optimizer_reset(analysis, facts, loop, *unreset)
                        continue
                if _backward_only_in_helper_loops(analysis, facts, loop):
                    continue      # an epoch loop around `train_epoch()`: that loop is judged
                backward = min(analysis.loop_sites(facts, loop, Does.BACKWARD), key=lambda s: s.line)
                step = min(analysis.loop_sites(facts, loop, Does.STEP), key=lambda s: s.line)
                outside = [s.line for s in facts.resets if loop not in s.loops]
                why = why or (f"the only reset is outside it, at line {outside[0]}" if outside
                              else "nothing resets gradients in it")
                yield self.finding(
                    backward,
                    "gradients accumulate across steps: backward runs every iteration with no reset",
                    f"backward at line {backward.line} and optimizer step at line {step.line} in the "
                    f"loop at line {loop.lineno}; {why}, so each step applies the sum of all "
                    f"earlier gradients",
                    "call `optimizer.zero_grad(set_to_none=True)` once per iteration "
                    "(before the forward or after `optimizer.step()`)",
                    premises=_premises(analysis, facts, loop, step))

    def _other_optimizer_reset(self, analysis, facts, loop, step, name: str, resets,
                               exclusive) -> Finding:
        backwards = analysis.loop_sites(facts, loop, Does.BACKWARD)
        before = [s for s in backwards if s.line <= step.line]
        backward = max(before, key=lambda s: s.line) if before else min(backwards, key=lambda s: s.line)
        reset_text = ", ".join(f"{text} (line {line})" for text, line in resets)
        stepped = _stepped(analysis, facts, step)
        premises = (proven(f"the resets in the loop at line {loop.lineno} do not reset `{name}`",
                           "each reset's optimizer and parameters were traced"),) + (
            (kind_premise(name, stepped.value, V.OPTIMIZER),) if stepped is not None
            and not stepped.value.has(V.SCALER) else ())
        if exclusive is not None:
            return self.finding(
                backward,
                f"`{name}`'s gradients accumulate across steps: its reset is on the other branch",
                f"`{name}`'s step at line {step.line} in the loop at line {loop.lineno} runs on "
                f"one branch of the `if` at line {exclusive.lineno}, whose test the loop never "
                f"changes; the resets in the loop are {reset_text}, and those of `{name}` are "
                f"on the other branch, so each of its steps applies the sum of all earlier "
                f"gradients",
                f"call `{name}.zero_grad(set_to_none=True)` on the branch that steps it too",
                premises=premises)
        return self.finding(
            backward,
            f"`{name}`'s gradients accumulate across steps: the loop resets only other gradients",
            f"`{name}`'s step at line {step.line} in the loop at line {loop.lineno}; the resets "
            f"in it are {reset_text}, which do not reset all the parameters `{name}` updates, "
            f"so each of its steps applies the sum of all earlier gradients",
            f"call `{name}.zero_grad(set_to_none=True)` once per iteration, next to its step",
            premises=premises)


# ---------------------------------------------------------------------- which optimizer
@dataclass(frozen=True)
class _Reset:
    text: str               # `optD`, `netD`, `model.classifier` (for `p.grad = None` over it)
    receiver: V.Value
    site: Site
    shown: str              # how the message names it


@dataclass(frozen=True)
class _Stepped:
    name: str
    value: V.Value
    site: Site
    owners: Optional[FrozenSet[str]]   # modules whose parameters it updates, when known


def _premises(analysis, facts, loop, step: Site):
    """The chain of a missing reset: what is stepped is an optimizer (proven when built, by
    a name only assumed), and nothing in the iteration resets (the loop and every helper it
    calls were searched; a call the analysis cannot see into would have kept it quiet)."""
    stepped = _stepped(analysis, facts, step)
    premises = [proven(f"nothing resets gradients in the loop at line {loop.lineno}",
                       "searched its body and the helpers it calls")]
    if stepped is not None and not stepped.value.has(V.SCALER):
        premises.append(kind_premise(stepped.name, stepped.value, V.OPTIMIZER))
    else:
        premises.append(proven(f"line {step.line} steps an optimizer",
                               "a step the optimizer tables know"))
    return premises


def _optimizer_never_reset(analysis: FileAnalysis, facts, loop):
    """(step site, optimizer name, resets, exclusive) for an optimizer stepped in `loop` that
    no reset on its path covers: every reset names its optimizer or module (or is a `p.grad =
    None` over one module's parameters), and none is this optimizer or a module that holds
    its parameters (a GAN loop that zeroes the discriminator's gradients only), or the only
    ones that are sit on the other branch of an `if` whose test the loop never changes
    (`exclusive`: that `if`). None when unsure."""
    resets = []
    for site in analysis.loop_sites(facts, loop, Does.RESET):
        reset = _reset_identity(analysis, facts, loop, site)
        if reset is None:
            return None             # a helper, a fresh optimizer, an engine: may cover it
        resets.append(reset)
    stepped = []
    for step in analysis.in_loop(facts, "steps", loop):
        if step.via not in ("optimizer", "scaler"):
            continue
        found = _stepped(analysis, facts, step.site)
        if found is None:
            return None
        stepped.append(found)
    for this in stepped:
        others = [o for o in stepped if o.name != this.name]
        exclusive = None
        for reset in resets:
            covers = _covers(reset, this, others)
            if covers is None:
                return None
            if not covers:
                continue
            test = _exclusive(facts, loop, reset.site, this.site)
            if test is None:
                break
            exclusive = test
        else:
            return this.site, this.name, [(r.shown, r.site.line) for r in resets], exclusive
    return None


def _covers(reset: _Reset, this: _Stepped, others) -> Optional[bool]:
    """The reset clears the gradients `this` optimizer applies: True, False (proven another
    optimizer's, or a part of its module), None (unsure)."""
    if reset.text == this.name or (reset.receiver.node is not None
                                   and reset.receiver.node is this.value.node):
        return True
    if reset.receiver.has(V.OPTIMIZER) or any(reset.text == o.name for o in others):
        return False                # another optimizer's reset (stepped in the loop too)
    owners = this.owners
    if owners is None:
        return None
    if any(owner == reset.text or owner.startswith(reset.text + ".") for owner in owners):
        return True                 # `model.zero_grad()` for `Adam(model.head.parameters())`
    if all(reset.text.startswith(owner + ".") for owner in owners):
        return False                # `p.grad = None` over `model.head` only
    # another stepped optimizer's module (`netD.zero_grad()` next to `optD.step()`)
    if any(o.owners and reset.text in o.owners for o in others):
        return False
    return None


def _exclusive(facts, loop, reset: Site, step: Site) -> Optional[ast.expr]:
    """The test of an `if` whose one branch holds `reset` and the other `step`, when the loop
    never changes what it tests (`if use_amp:`): every iteration takes the same branch."""
    for a in reset.conds_inside(loop):
        for b in step.conds_inside(loop):
            if a.test is b.test and a.negated != b.negated and loop_invariant_test(facts, loop, a.test):
                return a.test
    return None


def _reset_identity(analysis, facts, loop, site) -> Optional[_Reset]:
    """What `opt.zero_grad()` / `model.zero_grad()` resets, or the module of `p.grad = None`
    (`p.grad.zero_()`) run over every parameter of one module; None for any other reset."""
    call = call_at(analysis, facts, site.node)
    if call is None:
        return _parameter_loop_reset(facts, loop, site)
    if call.method != "zero_grad" or not isinstance(call.node.func, ast.Attribute):
        return _parameter_loop_reset(facts, loop, site) if call.method == "zero_" else None
    text = dotted(call.node.func.value)
    if text is None:
        return None
    return _Reset(text, call.receiver or V.UNKNOWN, site, f"`{text}.zero_grad()`")


def _parameter_loop_reset(facts, loop, site) -> Optional[_Reset]:
    """`for p in model.head.parameters(): p.grad = None`: a reset of `model.head`'s
    gradients; under a test other than on `p.grad` / `p.requires_grad` it resets only some
    of them, which clears no optimizer's gradients in full."""
    grad = _grad_target(site.node)
    if grad is None or not isinstance(grad.value, ast.Name):
        return None
    name = grad.value.id
    inner = site.loops[site.loops.index(loop) + 1:]
    for param_loop in reversed(inner):
        module = _parameters_iterated(param_loop, name)
        if module is None:
            continue
        depth = site.loops.index(param_loop) + 1
        tests = [c.test for c in site.conds if c.depth >= depth]
        shown = f"`{name}.grad = None` over `{module}.parameters()`"
        if all(tests_only_the_parameter(t, name) for t in tests):
            return _Reset(module, V.UNKNOWN, site, shown)
        return _Reset(module + ".<some parameters>", V.UNKNOWN, site, shown + " under a test")
    return None


def _grad_target(node) -> Optional[ast.Attribute]:
    """`p.grad` in `p.grad = None` or `p.grad.zero_()`."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        node = node.targets[0]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value
    return node if isinstance(node, ast.Attribute) and node.attr == "grad" else None


def _parameters_iterated(loop, name: str) -> Optional[str]:
    """`model.head` for `for p in model.head.parameters():` (or `for n, p in
    ....named_parameters():`) when the loop binds `name`."""
    target, it = getattr(loop, "target", None), getattr(loop, "iter", None)
    if isinstance(target, ast.Tuple) and target.elts:
        target = target.elts[-1]
    if not (isinstance(target, ast.Name) and target.id == name and isinstance(it, ast.Call)
            and isinstance(it.func, ast.Attribute)
            and it.func.attr in ("parameters", "named_parameters")):
        return None
    return dotted(it.func.value)


def _stepped(analysis, facts, site) -> Optional[_Stepped]:
    """The optimizer `opt.step()` (or `scaler.step(opt)`) steps, when it is a known one."""
    call = call_at(analysis, facts, site.node)
    if call is None or call.method != "step" or not isinstance(call.node.func, ast.Attribute):
        return None
    node, value = call.node.func.value, call.receiver or V.UNKNOWN
    scaled = value.has(V.SCALER)
    if scaled:
        if not call.node.args:
            return None
        # what `GradScaler.step` is given is an optimizer, by its contract
        node, value = call.node.args[0], call.args[0]
    text = dotted(node)
    if text is None or not (scaled or value.has(V.OPTIMIZER)):
        return None
    return _Stepped(text, value, site, parameter_owners(value.node))


def _resets_skipped(analysis: FileAnalysis, facts, loop) -> Optional[str]:
    """Why no reset of `loop` runs every iteration while a step does (one reset never runs,
    or runs only on the first iterations), or None when some reset may run every time or no
    step is unconditional."""
    steps = analysis.loop_sites(facts, loop, Does.STEP)
    if not any(not s.conds_inside(loop) for s in steps):
        return None
    reasons = []
    for site in analysis.loop_sites(facts, loop, Does.RESET):
        reason = reset_not_every_iteration(analysis, facts, loop, site)
        if reason is None:
            return None
        reasons.append(f"the reset at line {site.line}: {reason}")
    return "; ".join(reasons) or None


def _backward_only_in_helper_loops(analysis: FileAnalysis, facts, loop) -> bool:
    """Every backward of `loop` runs inside a loop of a called helper (`train_epoch()`)."""
    if any(loop in b.site.loops for b in facts.backwards):
        return False
    callees = [c.callee for c in facts.local_calls
               if loop in c.site.loops and analysis.function_does(c.callee, Does.BACKWARD)]
    return bool(callees) and all(analysis.has_training_loop(f) for f in callees)
