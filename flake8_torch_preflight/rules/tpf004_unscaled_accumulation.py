"""TPF004 unscaled-accumulation: gradient accumulation without dividing the loss.

## What it does
Reports the backward of a gradient-accumulation window whose loss is never divided by (or
multiplied by the reciprocal of) anything along its provenance: in the loop, where it was
computed, or in the helper that returned it. A window is any of the shapes the shared
analysis (`analysis/accumulation.py`) recognises:

- a loop that backwards every iteration and steps only under a counter test
  (`if (i + 1) % accum == 0:`), a flag it updates (`if need_update:`,
  `if not is_accumulating:`) or a count it advances (`if micro == accum_steps:`), written as
  an `if` around the step or as an early `if <not yet>: continue` before it;
- a micro-batch loop (`for i in range(0, batch, micro):`, `for chunk in x.chunk(4):`,
  `for _ in range(accum_steps):`) that backwards every iteration, with `optimizer.step()`
  after it.

The backward may sit in a training-step helper called every micro-step: a loss the helper
makes itself from the model and batch it is handed is undivided when nothing the helper
reads or is given names the accumulation count (`accum`, `micro`, `args`, `cfg`, a scale).

Also reported: a `%` gate whose counter the loop advances only inside the gated block
(`if global_step % k == 0: optimizer.step(); global_step += 1`): once the test is false it
stays false, so the optimizer steps at most once and the rest of the run only accumulates.

What the summed gradients do depends on the optimizer, which the analysis traces to its
construction, and the level follows it:

- **error** for SGD-style optimizers (SGD, with or without momentum, ASGD): the step is k×
  too large;
- **warning** for Adam-style optimizers where the scale still matters: a gradient clip in
  the window or, after a micro-batch loop, before its step (it sees k× the gradient, so it
  clips far more than intended), or an L2 `weight_decay` coupled to the gradient (`Adam`,
  `RMSprop`, `Adagrad`…: k× weaker); the update direction is kept, a hyperparameter is
  silently changed;
- **warning** for an optimizer it cannot trace, with both effects spelled out;
- nothing for an Adam-style optimizer with no clip and no coupled decay. Its update
  `m / (sqrt(v) + eps)` is unchanged when every gradient is k× larger, except that `eps`
  acts k× smaller (negligible at its usual 1e-8, and nothing to fix); AdamW's, Lion's and
  Adafactor's decoupled decay (`θ -= lr·λ·θ`) never sees the gradient, so an AdamW with
  `weight_decay` is harmless too. A coupled `weight_decay` given by a variable (not a
  literal above 0) is not proven to be on, and stays quiet.

## Why is this bad?
Gradients of the accumulated micro-batches are summed. With SGD and a learning rate tuned
for one (averaged) batch, k micro-batches act as a k× learning rate: training is unstable or
diverges, and changing `accum` silently changes the optimisation. With Adam the update
itself barely changes, but `clip_grad_norm_(…, max_norm)` now compares the *sum* of k
gradients with a threshold meant for one: it clips almost every step, and the logged norms
are k× off.

## Example
```python
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
```

## Use instead
```python
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
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
Quiet where a framework scales the loss: DeepSpeed engines (`engine.backward` divides by the
accumulation count; checked in DeepSpeed's `runtime/engine.py`, `_scale_loss_by_gas`),
Accelerate's `accumulate()` and an `Accelerator(gradient_accumulation_steps=…)` (its
`backward` divides by that count; Accelerate's gradient-accumulation guide), Lightning and HF
`Trainer` code. An `Accelerator()` built without a count divides by 1, so a hand-written gate
there is reported (an accumulation count given only on the `accelerate launch` command line
is not seen); so is Lightning Fabric's `fabric.backward(loss)` (it divides nothing; an
unseen `fabric` parameter is taken to be one). Any other object's `backward(loss)` (a
ColossalAI or apex optimizer, a booster) is code the analysis cannot read and keeps it quiet.
Quiet when the loss is divided by any expression (`loss / accum`,
`loss * (1 / k)`, `loss /= n`, in a helper of this file too), even by the wrong number, and
when the analysis cannot see where the loss came from. A loss computed on the model's output
by code it cannot read (a helper in another file, a loss object built from a config) counts
as undivided when that call was given nothing that may carry the accumulation count (no
`accum…`/`micro…` name, no `args`, `cfg` or `self`): a division inside it (a mean over tokens)
is not the accumulation scaling; so does a loss returned by a function of this file that is
given no such name and reads none (in its parameters, globals, attributes, or the project
functions it calls, three deep), unless the caller changes it in place (`loss.div_(k)`);
also when the window resets gradients on every micro-step (TPF015 reports that: there is no
accumulation left to scale), and for a traced
Adam-style optimizer with no clip and no coupled L2 decay in the window. A division elsewhere
(a log line, `step // n`) does not count, and DDP's `no_sync()` does not scale the loss. A
backward inside `optimizer.step(closure)` and windows split across files are not seen.
Quiet too when the function normalises the accumulated gradients in place before its step
(`p.grad /= n`, `p.grad.mul_(s)`, `torch._foreach_mul_(grads, s)`, or a helper that does,
such as torchtune's `scale_grads(model, 1 / num_tokens)`), and when, between the last
backward and the step, a call the analysis cannot read is given the model or its parameters
(the same helper from an installed package): it may be the normalisation. Calls named for
clipping or logging, and the methods of Accelerate, Fabric, DeepSpeed and `GradScaler`, are
known not to normalise.
"""
from __future__ import annotations

import ast
from typing import FrozenSet, Iterator, List, Optional, Tuple

from ..analysis import Does, FileAnalysis
from ..analysis.core import values as V
from ..analysis.topics.accumulation import (MICRO_LOOP, Window, backwarded_expr,
                                            counter_advanced_only_when_stepping, every_step_resets,
                                            helper_backwards, may_carry_accumulation_count,
                                            never_names_accumulation_count, passes_parameters_of,
                                            undivided_from_unread_code, windows)
from ..analysis.core.astutil import dotted
from ..analysis.topics.epochs import argument_for
from ..analysis.core.events import Backward, LocalCall
from ..analysis.topics.optimizers import (SCALE_INVARIANT, SGD_LIKE, OptimizerKind, clip_calls,
                                          is_clip, stepped_optimizer)
from ..findings import ERROR, WARNING, Finding
from ..analysis.core.provenance import proven
from .base import Rule


class UnscaledAccumulation(Rule):
    code = "TPF004"
    name = "unscaled-accumulation"
    severity = ERROR
    # the premises every finding of this rule rests on (each proven by the search named)
    chain = (proven("the optimizer steps once per k backwards and the loss is not divided by k",
                    "the accumulation window and the loss's divisions were followed to the backward"),)

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for window in windows(analysis):
            if window.owner is not None:
                continue
            stalled = counter_advanced_only_when_stepping(window)
            if stalled is not None and window.gated_by is None:
                yield self._stalled(window, stalled)
                continue
            if _scales_gradients(analysis, window) or _model_given_away_before_step(window):
                continue   # normalised on the gradients (`scale_grads(model, 1 / num_tokens)`)
            undivided = _undivided_backwards(analysis, window, deep=False)
            effect = None
            if not undivided:
                # the provenance walk through unread code costs more: only where it matters
                effect = _effect(analysis, window)
                if effect is None:
                    continue
                undivided = _undivided_backwards(analysis, window, deep=True)
            if not undivided or every_step_resets(analysis, window):
                continue
            effect = effect or _effect(analysis, window)
            if effect is None:
                continue
            for record, where in undivided:
                yield self._report(window, record, where, effect)

    def _stalled(self, window: Window, stalled) -> Finding:
        step = window.first_step
        where = ", ".join(str(line) for line in stalled.lines)
        return self.finding(
            step,
            f"the optimizer steps at most once: `{stalled.name}`, which the accumulation gate "
            f"tests, only advances when it steps",
            f"the step at line {step.line} runs {window.gate.describe()}, and `{stalled.name}` "
            f"changes only inside that block (line {where}); once the test is false it stays "
            f"false, so every later micro-step of the loop at line {window.loop.lineno} only "
            f"accumulates gradients",
            f"advance `{stalled.name}` on every iteration (outside the `if`), or test the loop's "
            f"own counter")

    def _report(self, window: Window, record, where: str,
                effect: Tuple[str, str, str]) -> Finding:
        what, why, level = effect
        site = record.site
        value = record.value if isinstance(record, Backward) else None
        origin = value.origin if value is not None else None
        made = f"`{origin[1]}` line {origin[0]}" if origin else where
        count = f"`{window.count}`" if window.count else "the number of micro-batches per step"
        return self.finding(
            site,
            f"gradient accumulation sums unscaled losses: {what}",
            f"backward at line {site.line} runs on every micro-step of the loop at line "
            f"{window.loop.lineno}, the optimizer steps {window.gate.describe()}, and the loss "
            f"from {made} is never divided; {why}",
            f"divide the loss by {count} before its backward", level)


def _scales_gradients(analysis, window: Window) -> bool:
    """The function whose window it is scales gradients in place (itself or through a
    helper, in the window or after a micro-batch loop, before its step)."""
    facts = window.facts
    if facts.func is not None:
        return analysis.function_does(facts.func, Does.SCALE_GRADS)
    return analysis.loop_does(facts, window.loop, Does.SCALE_GRADS)


def _model_given_away_before_step(window: Window) -> bool:
    """Between the window's last backward and its step, a call the analysis cannot see into
    is given the model or its parameters (`training.scale_grads(model, 1 / num_tokens)` of an
    installed package): it may normalise the gradients, so "never divided" is not proven."""
    facts, step = window.facts, window.first_step
    last_backward = max(b.site.line for b in window.backwards)
    # a caller's step runs once the function has returned: everything after the backward
    until = step.line if window.step_facts is None else facts.func.node.end_lineno
    models = _model_texts(facts)
    for call in facts.calls:
        if not call.unseen or not last_backward < call.site.line <= until \
                or not call.site.in_loop(window.loop) or _known_not_to_scale(call):
            continue
        arguments = list(call.node.args) + [kw.value for kw in call.node.keywords]
        if any(dotted(arg) in models or passes_parameters_of(arg, models) for arg in arguments):
            return True
    return False


# Framework objects whose methods the analysis knows (none normalises gradients), and calls
# named for clipping or logging.
_FRAMEWORK_TAGS = (V.ACCELERATOR, V.FABRIC, V.ENGINE, V.SCALER)
_NOT_SCALING_WORDS = ("clip", "log", "print", "barrier", "wait", "gather", "reduce")


def _known_not_to_scale(call) -> bool:
    receiver = call.receiver
    if receiver is not None and any(receiver.has(tag) for tag in _FRAMEWORK_TAGS):
        return True
    name = (call.method or (call.qualname or "").rsplit(".", 1)[-1]).lower()
    return any(word in name for word in _NOT_SCALING_WORDS)


def _model_texts(facts) -> set:
    """What the function treats as the model: asked for its parameters (`model.parameters()`
    for a clip or the optimizer), or holding a module."""
    texts = {dotted(call.node.func.value) for call in facts.calls
             if isinstance(call.node.func, ast.Attribute)
             and call.node.func.attr in ("parameters", "named_parameters")}
    texts |= {name for name, value in facts.env.items() if value.has(V.MODULE)}
    return texts - {None}


def _effect(analysis, window: Window) -> Optional[Tuple[str, str, str]]:
    """(what the sum does, why, level) for the optimizer the window steps; None where it is
    harmless. The level follows what is proven: an SGD-style step k× too large is an error;
    under an Adam-style optimizer only a clip threshold or a coupled L2 decay sees the scale
    (a hyperparameter silently changed, the update direction kept): a warning; an optimizer
    that could not be traced may be either: a warning that says both."""
    kind = stepped_optimizer(analysis, window.stepping_facts, window.first_step)
    clips = _window_clips(analysis, window)
    clip = f"the clip at line {clips[0].site.line}" if clips else None
    k = "k×" if not window.count else f"k× (k = `{window.count}`)"
    if kind.family == SGD_LIKE:
        return (f"each {kind.name} step is {k} too large",
                f"{kind.shown} applies the summed gradient as it is: an effective learning "
                f"rate × k", ERROR)
    if kind.family == SCALE_INVARIANT:
        if clip:
            return (f"{clip} sees {k} the gradient of one batch and clips far more than its "
                    f"threshold intends", _adaptive(kind), WARNING)
        if kind.coupled_decay:
            return (f"{kind.name}'s L2 `weight_decay` is {k} weaker against the summed "
                    f"gradients", _adaptive(kind), WARNING)
        return None
    seen = f"{clip} sees" if clip else "clipping and logged norms would see"
    return (f"each step receives {k} the mean gradient",
            f"the optimizer could not be traced to its construction: under SGD the step is k× "
            f"too large; Adam-style optimizers are nearly scale-invariant, but {seen} k× the "
            f"gradient", WARNING)


def _window_clips(analysis, window: Window) -> list:
    """Clips that see the accumulated gradient: in the loop, or, for a micro-batch loop,
    between its end and the step, at the step's own loop depth (`for micro in range(k):
    ...backward()` then `clip_grad_norm_(...)` then `optimizer.step()`)."""
    clips = clip_calls(analysis, window.facts, window.loop)
    if window.gate.kind != MICRO_LOOP:
        return clips
    end = getattr(window.loop, "end_lineno", window.loop.lineno)
    step = window.first_step
    if window.step_facts is not None:    # stepped by the caller, after this function returns
        return clips + [c for c in window.facts.calls if is_clip(c) and not c.site.loops
                        and end < c.site.line]
    return clips + [c for c in window.facts.calls if is_clip(c) and c.site.loops == step.loops
                    and end < c.site.line <= step.line]


def _adaptive(kind: OptimizerKind) -> str:
    return (f"{kind.shown} is otherwise nearly scale-invariant (the update itself barely "
            f"changes)")


def _undivided_backwards(analysis, window: Window, deep: bool) -> List[Tuple[object, str]]:
    """(record, where the backwarded loss comes from) for each backward of the window whose
    value may carry a loss and was never divided; helpers called per micro-step included;
    with `deep`, also losses made by code the analysis cannot read (see the docstring)."""
    out = []
    proofs = _backward_lines(window.facts)
    for record in window.backwards:
        if isinstance(record, Backward):
            if _undivided(record.value, proofs):
                out.append((record, f"line {record.site.line}"))
            elif deep and undivided_from_unread_code(analysis, window.facts,
                                                     backwarded_expr(record), loop=window.loop):
                # also when flow saw a division: one inside a loss helper that was never given
                # the accumulation count (a mean over tokens) is not the accumulation scaling
                out.append((record, "code the analysis cannot read, which was not given the "
                                    "accumulation count"))
        elif isinstance(record, LocalCall):
            for inner in helper_backwards(analysis, record):
                if _undivided_through(window.facts, record, inner.value):
                    out.append((record, f"the backward at line {inner.site.line} in "
                                        f"`{record.callee.name}()`"))
                    break
    return out


def _undivided(value: V.Value, proofs: FrozenSet[int] = frozenset()) -> bool:
    """A loss the window makes and never divides. A graph known only because an earlier
    backward proved it (`PROVEN_GRAPH`, keyed by that backward's line in `proofs`) is no loss
    made here: the value before that backward was not seen to be one, so whether it was
    divided is unknown."""
    if value.has(V.DIVIDED):
        return False
    proven_only = value.has(V.PROVEN_GRAPH) and value.graphs <= proofs
    return value.has(V.LOSS) or (value.grad and not proven_only)


def _backward_lines(facts) -> FrozenSet[int]:
    """Lines of the function's backward calls: the keys of graphs a backward proved."""
    return frozenset(record.site.node.lineno for record in facts.backwards)


def _undivided_through(facts, call: LocalCall, value: V.Value) -> bool:
    """A helper's backwarded value, seen at one call: when it is a parameter of the helper
    (`def backward_step(loss): loss.backward()`), what the caller passes decides; when the
    helper makes the loss itself from the model and the batch it is handed (`def
    training_step(model, batch): loss = criterion(model(x), y); loss.backward()`), it is
    undivided if nothing it reads or is given names the accumulation count."""
    if not value.params:
        return _undivided(value)
    if value.has(V.DIVIDED):
        return False
    passed = []
    for index in value.params:
        expr = argument_for(call.callee, call.node, index)
        if expr is None:
            return False
        passed.append((expr, facts.value(expr)))
    if any(v.has(V.LOSS) or v.grad or v.has(V.DIVIDED) for _, v in passed):
        return all(_undivided(v) for _, v in passed)
    return value.has(V.LOSS) and not any(may_carry_accumulation_count(expr) for expr, _ in passed) \
        and never_names_accumulation_count(call.callee)
