"""Hugging Face Accelerate: the `Accelerator`, what `prepare()` returns, and its contexts.

`accelerator.backward(loss)` is handled with every backward (semantics/tensor.py); it
scales the loss by the accumulation count only inside `accelerator.accumulate(model)`,
which is why that context is marked (Accelerate docs, "Gradient accumulation").
"""
from __future__ import annotations

from . import torchapi as api
from ..core import values as V
from ..core.values import UNKNOWN, Value
from .registry import Call, method, other_methods, qualified
from .torch import wrapped_model

PREPARE_METHODS = ("prepare", "prepare_data_loader", "prepare_model", "prepare_optimizer",
                   "prepare_scheduler")


@qualified(*api.ACCELERATOR_NAMES)
def _accelerator(call: Call) -> Value:
    return Value.of(V.ACCELERATOR, node=call.node)


def prepared(call: Call) -> Value:
    """Each argument, marked as handed to the framework (sharded loaders, wrapped models);
    one value, or a tuple of them."""
    values = tuple(a.with_tags(V.PREPARED) for a in call.args)
    return values[0] if len(values) == 1 else Value(tags=frozenset({V.CONTAINER}), elements=values)


@qualified(*api.ACCELERATE_MODEL_WRAPPERS)
def _pipeline_stages(call: Call) -> Value:
    return wrapped_model(call)


@method(*PREPARE_METHODS, on=(V.ACCELERATOR,))
def _prepare(call: Call) -> Value:
    return prepared(call)


@method("accumulate", on=(V.ACCELERATOR,))
def _accumulate(call: Call) -> Value:
    return Value.of(V.ACCUMULATE_CONTEXT)


@other_methods(V.ACCELERATOR)
def _other_accelerator_method(call: Call) -> Value:
    # `no_sync()` just skips the all-reduce, like DDP's: it does not scale the loss.
    return UNKNOWN
