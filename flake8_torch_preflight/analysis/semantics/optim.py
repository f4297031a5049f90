"""Optimizers, LR schedulers and the AMP gradient scaler: what builds them and what their
`step()` means."""
from __future__ import annotations

from typing import Optional

from . import torchapi as api
from ..core import values as V
from ..core.values import UNKNOWN, Value
from .registry import Call, method, qualified, qualified_matching


@qualified(*api.SCALER_NAMES)
def _grad_scaler(call: Call) -> Value:
    return Value.of(V.SCALER, node=call.node)


@qualified_matching(lambda qual: bool(api.SCHEDULER_RE.match(qual)), order=20)
def _scheduler(call: Call) -> Value:
    return Value.of(V.SCHEDULER, node=call.node)


@qualified_matching(lambda qual: bool(api.OPTIMIZER_RE.match(qual)
                                      or api.OPTIMIZER_FACTORY_RE.match(qual)), order=30)
def _optimizer(call: Call) -> Value:
    """An optimizer, remembering what it was given to update (`Adam(netG.parameters())`)."""
    if call.flow.in_loop:
        call.flow.record_reset(call.node)   # a fresh optimizer per iteration: clean gradients
    params = call.kwargs.get("params") or call.first
    return Value(tags=frozenset({V.OPTIMIZER}), node=call.node, fields=(("params", params),))


def optimizer_class(cls) -> bool:
    """A project class that subclasses an optimizer (`class BertAdam(torch.optim.Optimizer)`,
    through the file's own classes too): its instances are optimizers."""
    seen, todo = set(), [cls]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if any(api.OPTIMIZER_RE.match(base) for base in current.bases):
            return True
        todo.extend(current.local_bases)
    return False


def step_kind(receiver: Value, text: str, has_args: bool) -> Optional[str]:
    """What `<text>.step(...)` steps: "engine" (DeepSpeed), "scaler" (`scaler.step(opt)`),
    "optimizer", or None (a scheduler's step, or an object we do not know)."""
    if receiver.has(V.SCHEDULER) or api.SCHEDULER_NAME_RE.search(text.lower()):
        return None
    if receiver.has(V.ENGINE):
        return "engine"
    if receiver.has(V.SCALER) and has_args:
        return "scaler"
    if receiver.has(V.OPTIMIZER) or api.OPTIMIZER_NAME_RE.search(text.split(".")[-1].lower()):
        return "optimizer"
    return None


@method("step")
def _step(call: Call) -> Value:
    via = step_kind(call.receiver, call.receiver_text, bool(call.args))
    if via is not None:
        call.flow.record_step(call.node, via)
        if via == "engine":
            call.flow.record_reset(call.node)   # DeepSpeed zeroes gradients in step()
    return UNKNOWN


@method("scale", on=(V.SCALER,))
def _scale(call: Call) -> Optional[Value]:
    """`scaler.scale(loss)` is the loss, scaled: what is backwarded through it."""
    return call.args[0] if call.args else None


@method("unscale_", on=(V.SCALER,))
def _unscale(call: Call) -> Value:
    return UNKNOWN
