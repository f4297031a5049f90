"""The AMP `GradScaler` protocol in a training loop: where it scales, unscales, clips, steps.

`scaler.scale(loss).backward()` leaves every gradient multiplied by the loss scale (2**16 at
the start). Until `scaler.unscale_(optimizer)` or `scaler.step(optimizer)` divides it out,
anything that reads the gradients reads scaled values. TPF014 asks three questions of each
loop that scales a loss: does a clip run before the unscale in the iteration, does an
optimizer step bypass the scaler altogether, and (with the accumulation windows of
`accumulation.py`) is `unscale_` called on every micro-step. The events come from the flow
facts (`facts.calls`); helpers of the file are summarised once each (memoised).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import FrozenSet, List, Optional, Tuple

from ..core import values as V
from ..core.astutil import is_const, keyword
from ..core.events import CallSite, FunctionFacts, Site, Step
from ..core.memo import per_file
from .optimizers import is_clip

SCALE, UNSCALE, SCALER_STEP, UPDATE, CLIP = "scale", "unscale_", "step", "update", "clip"
# The GradScaler methods of the protocol -> whether they act only when given an argument
# (`scale(loss)`, `unscale_(optimizer)`, `step(optimizer)`; `update()` takes none).
_SCALER_METHODS = {SCALE: True, UNSCALE: True, SCALER_STEP: True, UPDATE: False}


@dataclass(frozen=True)
class Event:
    what: str            # SCALE | UNSCALE | SCALER_STEP | UPDATE | CLIP
    site: Site           # the call, or the call of the helper that does it
    helper: Optional[str] = None   # the helper's name when it happens inside one
    node: Optional[ast.AST] = None  # the clip / scale call itself (for messages)


@dataclass(frozen=True)
class ScaledLoop:
    """A loop whose body scales a loss with an enabled (or possibly enabled) GradScaler."""

    facts: FunctionFacts
    loop: ast.AST
    events: Tuple[Event, ...]          # scaler and clip events anywhere in its body
    optimizer_steps: Tuple[Step, ...]  # `optimizer.step()` called directly in its body

    def of(self, *what: str) -> List[Event]:
        return [e for e in self.events if e.what in what]

    def owns(self, site: Site) -> bool:
        """`site` runs in this region itself, not in a loop nested in it."""
        return (site.loops[-1] if site.loops else None) is self.loop

    @property
    def where(self) -> str:
        if self.loop is not None:
            return f"the loop at line {self.loop.lineno}"
        func = self.facts.func
        return f"`{func.name}()`" if func is not None else "the module body"


@per_file("amp")
def scaled_loops(analysis) -> List[ScaledLoop]:
    """Every loop (outside Lightning / HF Trainer code) that scales a loss; memoised. Only
    loops around a `scaler.scale` call, or around a call of a helper that makes one, are
    looked at: in most files there is none, and nothing more is done."""
    direct = {facts: [c.site for c in facts.calls if _is_scale(c)]
              for facts in analysis.all_facts()}
    found: List[ScaledLoop] = []
    if not any(direct.values()):
        return found      # no loss is scaled anywhere in the file
    scaling = _scaling_functions(analysis, direct)
    for facts in analysis.all_facts():
        if analysis.framework_owned(facts.func):
            continue
        sites = list(direct[facts])
        if scaling:
            sites += [local.site for local in facts.local_calls if local.callee in scaling]
        loops = {loop for site in sites for loop in site.loops}
        regions = [loop for loop in facts.loops if loop in loops]
        if any(not site.loops for site in sites):
            regions.append(None)     # the step function's own body
        for loop in regions:
            scaled = _scaled_loop(analysis, facts, loop)
            if scaled is not None:
                found.append(scaled)
    return found


def _is_scale(call: CallSite) -> bool:
    return call.method == SCALE and call.receiver is not None and call.receiver.has(V.SCALER)


def _scaling_functions(analysis, direct) -> frozenset:
    """File-local functions that call `scaler.scale`, or call one that does."""
    starts = [f for f in analysis.index.functions if direct.get(analysis.facts_for(f))]
    found, todo = set(starts), list(starts)
    while todo:
        for caller_facts, _ in analysis.callers(todo.pop()):
            caller = caller_facts.func
            if caller is not None and caller not in found:
                found.add(caller)
                todo.append(caller)
    return frozenset(found)


def exclusive(a: Site, b: Site) -> bool:
    """`a` and `b` sit on opposite branches of one `if` (`if use_amp: … else: …`)."""
    mine = {id(c.test): c.negated for c in a.conds}
    return any(id(c.test) in mine and mine[id(c.test)] != c.negated for c in b.conds)


def _in_region(analysis, facts: FunctionFacts, events: str, loop: Optional[ast.AST]) -> list:
    """`facts.<events>` made in `loop`, or, for `None`, outside every loop of the function."""
    if loop is not None:
        return analysis.in_loop(facts, events, loop)
    return [r for r in getattr(facts, events) if not r.site.loops]


def _scaled_loop(analysis, facts: FunctionFacts, loop: Optional[ast.AST]) -> Optional[ScaledLoop]:
    events: List[Event] = []
    for call in _in_region(analysis, facts, "calls", loop):
        what = _scaler_event(call)
        if what is not None:
            if what != SCALE or _enabled(call.receiver):
                events.append(Event(what, call.site, node=call.node))
        elif is_clip(call):
            events.append(Event(CLIP, call.site, node=call.node))
    for local in _in_region(analysis, facts, "local_calls", loop):
        for what, node in _helper_events(analysis, local.callee):
            events.append(Event(what, local.site, helper=local.callee.name, node=node))
    if not any(e.what == SCALE for e in events):
        return None
    steps = tuple(s for s in _in_region(analysis, facts, "steps", loop) if s.via == "optimizer")
    events.sort(key=lambda e: (e.site.line, e.site.col))
    return ScaledLoop(facts, loop, tuple(events), steps)


def opaque(analysis, scaled: ScaledLoop) -> bool:
    """A call in the loop that we cannot follow receives the scaler (it may unscale or step)."""
    return _scaler_passed_away(analysis, scaled.facts, scaled.loop)


@per_file("amp_opaque")
def _scaler_passed_away(analysis, facts: FunctionFacts, loop: Optional[ast.AST]) -> bool:
    return any(_passes_scaler_away(c) for c in _in_region(analysis, facts, "calls", loop))


def _scaler_event(call: CallSite) -> Optional[str]:
    recv = call.receiver
    needs_argument = _SCALER_METHODS.get(call.method)
    if needs_argument is None or recv is None or not recv.has(V.SCALER):
        return None
    if needs_argument and not call.args:
        return None
    return call.method


def _enabled(scaler: Optional[V.Value]) -> bool:
    """False only for `GradScaler(enabled=False)` written literally (a no-op scaler)."""
    node = scaler.node if scaler is not None else None
    if not isinstance(node, ast.Call):
        return True
    return not is_const(keyword(node, "enabled"), False)


def _passes_scaler_away(call: CallSite) -> bool:
    """A call we cannot follow (another package, an unknown object) that receives the scaler:
    it may unscale or step for us."""
    if call.qualname is not None and call.qualname.startswith("torch."):
        return False
    if call.receiver is not None and call.receiver.has(V.SCALER):
        return False
    return any(a.has(V.SCALER) for a in call.args)


def _may_unscale(call: CallSite, what: Optional[str]) -> bool:
    """An `unscale_` of the scaler, or of a receiver the analysis cannot type (a scaler bound
    later in the helper's loop, one from elsewhere): a clip after it is not proven to see
    scaled gradients, so it stays quiet."""
    return what == UNSCALE or (call.method == UNSCALE and (call.receiver is None
                                                           or not call.receiver.tags))


@per_file("amp_helpers", guard=frozenset(), key_args=1)
def _helper_events(analysis, func, depth: int = 0) -> FrozenSet[Tuple[str, Optional[ast.AST]]]:
    """What a file-local helper does with the scaler or the gradients, in order-free form:
    (event, node) pairs; a clip inside a helper that unscales first is no clip on scaled
    gradients, so only clips not preceded by an unscale_ in the helper are kept. Helpers
    that call each other get nothing back from a call being computed (the memo's guard)."""
    facts = analysis.facts_for(func)
    events = []
    unscaled_at = None
    for call in sorted(facts.calls, key=lambda c: (c.site.line, c.site.col)):
        what = _scaler_event(call)
        if _may_unscale(call, what) and unscaled_at is None:
            unscaled_at = call.site.line
        if what is not None:
            events.append((what, call.node))
        elif is_clip(call) and (unscaled_at is None or call.site.line < unscaled_at):
            events.append((CLIP, call.node))
    if depth < 3:
        for local in facts.local_calls:
            events.extend(_helper_events(analysis, local.callee, depth + 1))
    return frozenset(events)
