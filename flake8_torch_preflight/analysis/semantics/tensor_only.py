"""Methods and attributes that only tensors have, read on a receiver of unknown kind.

`p.grad`, `t.detach()` and `t.norm()` exist on `torch.Tensor` and on no other object of the
libraries a training script uses (a module has no `.grad`; NumPy arrays have no `detach` or
`norm` method: `np.linalg.norm` is a function), so a value of unknown kind that is asked
for one is a tensor, and so is the answer: `for p in model[key].parameters(): total +=
p.grad.detach().norm(2).item()` syncs once per parameter whatever `model` is (checked
against torch's `Tensor` documentation; `nn.Module` defines `zero_grad` but no `grad`).
What a tensor-kind receiver does with them stays in `tensor.py`.
"""
from __future__ import annotations

from typing import Optional

from ..core import values as V
from ..core.values import Value
from .registry import OPAQUE, Access, Call, attribute, method

# Tensor-only methods whose result is a tensor cut from the graph / possibly on it.
DETACHING_METHODS = ("detach", "detach_")
TENSOR_RESULT_METHODS = ("norm",)
# Attributes only a tensor has, whose value is a tensor (or None: `p.grad` before backward).
TENSOR_ATTRIBUTES = ("grad",)


@method(*DETACHING_METHODS, on=(OPAQUE,))
def _detached(call: Call) -> Value:
    return call.receiver.no_graph(V.TENSOR)


@method(*TENSOR_RESULT_METHODS, on=(OPAQUE,))
def _tensor_result(call: Call) -> Value:
    return Value.of(V.TENSOR)


@attribute(*TENSOR_ATTRIBUTES, on=(OPAQUE,))
def _tensor_attribute(access: Access) -> Optional[Value]:
    return Value.of(V.TENSOR)
