"""Library semantics, by library: what torch, `nn.Module`, tensors, Python containers,
optimizers, data loaders, Accelerate, Lightning Fabric, DeepSpeed and Hugging Face *do*.

Each module registers handlers into the tables of `registry` (see its docstring); the
interpreter (`flow.py`) only looks them up. Teaching the analysis a new framework is one new
module here, imported below, and a fixture.
"""
from __future__ import annotations

# Import order is registration order: it decides between patterns of equal `order`.
from . import torch, nn_module, tensor, optim, data, containers  # noqa: F401
from . import accelerate, lightning, deepspeed, hf, stdlib  # noqa: F401
from . import tensor_only  # noqa: F401
from .containers import iterated_item
from .conventions import parameter_value
from .nn_module import forward_output
from .optim import optimizer_class
from .torch import statement_grad_mode
from .registry import (Access, Call, assign_attribute, call_builtin, call_method,
                       call_qualified, call_value, callable_value, context_grad_mode,
                       read_attribute)

__all__ = ["Access", "Call", "assign_attribute", "call_builtin", "call_method",
           "call_qualified", "call_value", "callable_value", "context_grad_mode",
           "forward_output", "iterated_item", "optimizer_class", "parameter_value", "read_attribute",
           "statement_grad_mode"]
