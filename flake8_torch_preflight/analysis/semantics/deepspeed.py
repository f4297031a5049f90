"""DeepSpeed: `deepspeed.initialize(...)` returns (engine, optimizer, loader, scheduler).

The engine is the model (a module) and runs backward with loss scaling and gradient
accumulation, and its `step()` updates only at the accumulation boundary and zeroes the
gradients (semantics/optim.py records that). The optimizer it returns is an optimizer.
"""
from __future__ import annotations

from . import torchapi as api
from ..core import values as V
from ..core.values import Value
from .registry import Call, qualified


@qualified(*api.DEEPSPEED_INIT)
def _initialize(call: Call) -> Value:
    engine = Value.of(V.ENGINE, V.MODULE, node=call.node)
    # The second element is the (wrapped) optimizer: stepping it directly updates the
    # parameters but, unlike `engine.step()`, zeroes no gradients.
    return Value(tags=frozenset({V.ENGINE}), node=call.node,
                 elements=(engine, Value.of(V.OPTIMIZER), Value.of(V.LOADER, V.PREPARED),
                           Value.of(V.SCHEDULER)))
