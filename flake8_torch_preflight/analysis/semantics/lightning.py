"""Lightning Fabric: `Fabric(...)` and what its `setup*` methods return.

(LightningModule subclasses are recognised by their bases in `index.py`; Lightning runs
their loop and manages gradients and modes, see `FileAnalysis.framework_owned`.)
"""
from __future__ import annotations

from . import torchapi as api
from ..core import values as V
from ..core.values import UNKNOWN, Value
from .accelerate import prepared
from .registry import Call, method, other_methods, qualified

SETUP_METHODS = ("setup", "setup_dataloaders", "setup_module", "setup_optimizers")


@qualified(*api.FABRIC_NAMES)
def _fabric(call: Call) -> Value:
    return Value.of(V.FABRIC, node=call.node)


@method(*SETUP_METHODS, on=(V.FABRIC,))
def _setup(call: Call) -> Value:
    return prepared(call)


@other_methods(V.FABRIC)
def _other_fabric_method(call: Call) -> Value:
    return UNKNOWN
