"""TPF007 stuck-eval-mode: the epoch loop switches the model to eval and never back.

## What it does
Reports a `model.eval()` (or `model.train(False)`) inside a training loop or an epoch loop,
made directly or through a helper of the same file (`evaluate(model, val_loader)` whose body
calls `model.eval()`), when no `model.train()` (directly or through a helper, such as a
`train_one_epoch()` that starts with `model.train()`) runs on the way from that call back to
the next iteration's backward pass. The walk follows the loop body in source order and wraps
around to the top of the loop, so `model.train()` at the top of the epoch, or at the top of
the training helper, fixes it; a `model.train()` only before the loop does not.

## Why is this bad?
`eval()` is sticky: it switches dropout off and makes batch-norm use (and stop updating) its
running statistics until `train()` is called. From the second epoch on the model trains with
no dropout and frozen normalisation statistics. Nothing crashes; the loss curve just looks
a little different, and the model generalises worse.

## Example
```python
model.train()
for epoch in range(epochs):
    for x, y in train_loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    evaluate(model, val_loader)   # calls model.eval()
```

## Use instead
```python
for epoch in range(epochs):
    model.train()
    for x, y in train_loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    evaluate(model, val_loader)
```

## Fix safety
Unsafe (`tpf fix --unsafe-fixes`): one `model.train()` line as the first statement of the
loop, when the model is a plain (dotted) name the loop sees from its first line (not
rebound inside it); the re-lint keeps it only when the finding is gone. Unsafe because it
changes the mode the loop trains in (review it: a model kept in `eval()` on purpose, such as
a frozen batch-norm backbone, must not get it). A helper that is never undone is left to a
human.

## Known limits
An error needs every premise proven: when the loop's own training forward is not visible
and the switched model is only taken for the trained one, the finding is a warning that
says so. `deepcopy(model).eval()` switches the copy, never `model`.
Quiet in Lightning modules and HF `Trainer` subclasses (the framework toggles modes), when
the `eval()` and a `train()` are chosen by the same condition (`if phase == "train": ...
else: ...`), when the `eval()` only runs on the last iteration (`if epoch == epochs - 1:`, or
followed by `break`/`return`), for models that are never trained in the loop (a frozen
teacher, an EMA copy or a VAE called under `no_grad` or frozen with `requires_grad_(False)`,
and the backbone of a linear probe whose parameters a loop sets `requires_grad = False`,
kept in `eval()` on purpose so its batch-norm statistics stay fixed; a frozen model that the
function itself switches to `train()` by that very name, such as one frozen and then partly
unfrozen for fine-tuning, is not such a backbone),
and when a function imported from the project (whose body is not visible) is called with the
model on the way back, since it may call `train()`. Receivers are matched by name and through
the arguments of file-local helpers; a helper's parameter whose name says nothing
(`predictor`) is taken for a module when every call of the helper in the file passes one.
A `train()` restores only its own receiver (and the models inside it), also inside a helper.
A model reached under two unrelated names (`net = model.module` then `net.eval()`) is not
tracked, and a model a helper keeps in a local variable is that call's own: its `eval()` is
not followed into the caller, and its `train()` counts for any model unless the helper built
it. A helper's backward after forwards of other models only (a probe fitted inside an
evaluation helper) is not the model's next training step. Calls that return the module
itself are seen through (`model.to(device).train()`), and a `train()` on a value the
analysis cannot identify (`task.get_trainable_module().train()`) inside a function that
trains counts for any model. Each `eval()` call is reported once.
Quiet when the model is proven to behave the same in both modes: a class of the project (its
`__init__` builds only `torch.nn` layers without dropout or batch-norm, and nothing reads
`self.training`), or a `torch.nn` container built in place from such layers
(`nn.Sequential(nn.Linear(...), nn.ReLU(), ...)`, in a script or a notebook cell); a model
that reaches the function as a parameter is judged by what every call of the file passes.
`eval()` left on changes nothing there. A library model (torchvision, Hugging Face) and a
wrapper (`DDP(build_model())`) are never proven so.
"""
from __future__ import annotations

import ast
import re
from typing import FrozenSet, Iterator, List, Optional, Tuple

from ..analysis import Does, FileAnalysis
from ..analysis.topics.classes import mode_free_module
from ..analysis.core.constants import unreachable
from ..analysis.topics.epochs import resolve_values
from ..analysis.topics.modes import (ModeEvent, cond_texts, exits_after, frozen_modules,
                                     function_events, last_iteration_only, loop_events,
                                     optimized_modules, related)
from ..findings import ERROR, Finding, FixPlan
from ..analysis.core.provenance import Premise, assumed, proven
from .base import Rule


def _mode_free_model(analysis, facts, receiver) -> bool:
    """The model switched to eval is proven to behave the same in both modes (no dropout, no
    batch-norm): a class of the project, or a `torch.nn` container of such layers; a
    parameter is judged by what every caller of the file passes. eval() left on changes
    nothing there."""
    if receiver is None:
        return False
    value = facts.env.get(receiver) or analysis.global_env.get(receiver)
    if value is None and receiver.startswith("self.") and facts.func is not None \
            and facts.func.cls is not None:
        value = analysis.class_attr(facts.func.cls, receiver)
    if value is None:
        return False
    values = resolve_values(analysis, facts, value)
    return bool(values) and all(not v.params and mode_free_module(analysis, v) for v in values)


def _trains_another(events: List[ModeEvent], work: ModeEvent, receiver) -> bool:
    """The backward is a helper's that fits only other models (a probe classifier trained
    inside an evaluation helper): every forward with autograd on at that call is of a
    module other than the receiver, so it is not the receiver's training step."""
    if work.via is None or receiver is None:
        return False
    forwards = [e for e in events
                if e.kind == "forward" and e.site is work.site and not e.no_grad]
    return bool(forwards) and not any(
        related(e.receiver, receiver) or any(related(a, receiver) for a in e.aliases)
        for e in forwards)


def _not_switched_to_train(frozen: FrozenSet[str], events: List[ModeEvent]) -> FrozenSet[str]:
    """The frozen modules the function never switches to train mode by that very name. A
    probe's backbone is kept in eval() on purpose; a model whose parameters are frozen and
    then partly unfrozen, and that the function puts in train() itself (`model.train()` at
    the top of the epoch), is meant to train in train mode. (`model.train()` followed by
    `model.backbone.eval()`, frozen batch-norm of a detector's backbone, stays frozen.)"""
    named = {e.receiver for e in events if e.kind == "train" and e.receiver is not None}
    return frozenset(f for f in frozen if f not in named)


class StuckEvalMode(Rule):
    code = "TPF007"
    name = "stuck-eval-mode"
    severity = ERROR
    fix_safety = "unsafe"

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        reported = set()
        for facts in analysis.all_facts():
            if analysis.framework_owned(facts.func):
                continue
            loops = analysis.training_loops(facts)
            if not loops:
                continue
            frozen, optimized = frozen_modules(analysis), optimized_modules(analysis)
            frozen = _not_switched_to_train(frozen, function_events(analysis, facts))
            for loop in loops:
                if not analysis.loop_does(facts, loop, Does.STEP):
                    continue   # backward without an update: attacks, saliency maps, probes
                events = loop_events(analysis, facts, loop)
                if not any(e.kind == "eval" for e in events):
                    continue
                exits = exits_after(loop)
                for i, event in enumerate(events):
                    if event.kind != "eval":
                        continue
                    key = (event.site.line, event.site.col)
                    if key in reported:
                        continue
                    work = self._stuck(events, i, loop, exits, frozen, optimized)
                    if work is None or _mode_free_model(analysis, facts, event.receiver) \
                            or unreachable(analysis, facts, event.site):
                        continue   # changes nothing, or in a branch this program never takes
                    reported.add(key)
                    yield self._report(event, work, loop, facts,
                                       _premises(analysis, facts, event, events, optimized))

    def _stuck(self, events: List[ModeEvent], i: int, loop, exits, frozen, optimized):
        """The backward reached from eval event `i` with no train() on the way, or None."""
        ev = events[i]
        site = ev.site
        if id(site.node) in exits or last_iteration_only(site, loop):
            return None
        receiver = ev.receiver
        if receiver is not None and any(related(receiver, f) for f in frozen):
            return None
        if not self._trained(events, receiver, optimized):
            return None
        tested = cond_texts(site, loop)
        for other in events:
            if other.kind != "train" or not related(other.receiver, receiver):
                continue   # another model's train() chooses nothing for this one
            if other.site.stmt is site.stmt and other is not ev:
                return None   # `model.train() if training else model.eval()`
            if tested & cond_texts(other.site, loop):
                return None   # mode chosen per branch: `if phase == "train": ... else: ...`
        n = len(events)
        for k in range(1, n + 1):
            nxt = events[(i + k) % n]
            if nxt.kind == "train" and related(nxt.receiver, receiver):
                return None
            if nxt.kind == "maybe_train" and (receiver is None or not nxt.args or any(
                    related(a, receiver) for a in nxt.args)):
                return None
            if nxt.kind == "work" and not nxt.no_grad and \
                    not _trains_another(events, nxt, receiver):
                return nxt   # (a backward reached under no_grad never runs: not training)
        return None

    @staticmethod
    def _trained(events: List[ModeEvent], receiver, optimized: FrozenSet[str]) -> bool:
        """The receiver is a model this loop trains (not a frozen teacher or EMA copy)."""
        if receiver is None:
            return True
        forwards = [e for e in events if e.kind == "forward"]
        own = [e for e in forwards if e.receiver is not None and related(e.receiver, receiver)]
        if own and all(e.no_grad for e in own) and \
                not any(related(text, receiver) for text in optimized):
            return False  # only called under no_grad, no optimizer of it: a reference model
        if not any(not e.no_grad for e in forwards):
            return True   # the training forward is not visible: assume it is this model
        for e in forwards:
            if e.no_grad:
                continue
            if e.receiver is None or related(e.receiver, receiver) or any(
                    related(a, receiver) for a in e.aliases):
                return True
        return False

    def _report(self, event: ModeEvent, work: ModeEvent, loop, facts, premises) -> Finding:
        # An unnamed receiver (`validate(task.get_eval_model(), ...)`) is described in words,
        # never rendered as code.
        if event.receiver:
            who, train = f"`{event.receiver}`", f"`{event.receiver}.train()`"
        else:
            who, train = "the model passed to it", "`train()` call"
        if event.via:
            what = (f"`{event.via}()` switches {who} to eval mode (line {event.inner_line}) "
                    f"in the training loop at line {loop.lineno} and nothing switches it back")
        else:
            call = f"{event.receiver}.eval()" if event.receiver else "eval()"
            what = f"`{call}` in the training loop at line {loop.lineno} is never undone"
        where = f"in `{work.via}()` " if work.via else ""
        evidence = (f"the next backward {where}at line {work.inner_line} runs with no "
                    f"{train} after this call, going round the loop, so dropout and "
                    f"batch-norm stay in eval mode from the next iteration on")
        fix = (f"call {train if event.receiver else '`train()` on the trained model'} at the "
               f"top of the loop at line {loop.lineno} (or at the top of the training helper)")
        plan, why = _train_plan(event, loop, facts)
        return self.finding(event.site, what, evidence, fix, plan=plan, no_autofix=why,
                            premises=premises)


_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _train_plan(event: ModeEvent, loop, facts) -> Tuple[Optional[FixPlan], Optional[str]]:
    """The unsafe fix: `<receiver>.train()` as the loop's first statement, where the receiver
    is a plain (dotted) name the loop sees from its first line."""
    node = _receiver_node(event)
    if node is None:
        return None, "the model is not named by a plain name in the loop's function"
    root = event.receiver.split(".")[0]
    if root in facts.loop_rebinds.get(loop, ()):
        return None, f"`{root}` is rebound inside the loop, so its top may not see it yet"
    return FixPlan("train_mode", loop, node), None


def _receiver_node(event: ModeEvent) -> Optional[ast.AST]:
    """The expression written as the receiver at the event's call: `model` of
    `model.eval()`, or the argument `model` of `evaluate(model, loader)`."""
    call = event.site.node
    if not event.receiver or not _DOTTED.match(event.receiver) or not isinstance(call, ast.Call):
        return None
    candidates = list(call.args) + [kw.value for kw in call.keywords]
    if event.via is None and isinstance(call.func, ast.Attribute):
        candidates.insert(0, call.func.value)
    return next((c for c in candidates if isinstance(c, (ast.Name, ast.Attribute))
                 and ast.unparse(c) == event.receiver), None)


def _premises(analysis, facts, event: ModeEvent, events, optimized) -> List[Premise]:
    """The chain of a stuck eval mode: what `eval()` switches is the object the loop trains
    (proven when its own training forward is seen, assumed when the loop's forward is not
    visible and it is taken for the trained model), and nothing switches it back (the
    iteration, helpers expanded, was searched)."""
    who = f"`{event.receiver}`" if event.receiver else "the model passed to it"
    premises = [proven(f"nothing switches {who} back to training",
                       "searched the iteration, helpers included, round the loop")]
    forwards = [e for e in events if e.kind == "forward" and not e.no_grad]
    if event.receiver and any(e.receiver is not None and related(e.receiver, event.receiver)
                              or any(related(a, event.receiver) for a in e.aliases)
                              for e in forwards) or any(related(t, event.receiver or "")
                                                        for t in optimized if event.receiver):
        premises.append(proven(f"{who} is the model the loop trains",
                               "its forward with autograd on, or its optimizer, is seen"))
    else:
        premises.append(assumed(f"{who} is the model the loop trains",
                                f"{who} is taken for the trained model because the loop's "
                                f"training forward is not visible"))
    return premises
