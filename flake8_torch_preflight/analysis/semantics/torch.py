"""torch functions: losses, activations, autograd, devices, grad-mode contexts, wrappers.

Every name is a qualified name resolved through the file's imports (`F.softmax` ->
`torch.nn.functional.softmax`); see `torchapi` for the name tables.
"""
from __future__ import annotations

import ast
from typing import Optional

from . import torchapi as api
from ..core import values as V
from ..core.astutil import is_const, keyword
from ..core.values import UNKNOWN, Value, derived, join_all
from .registry import Call, grad_context, qualified, qualified_matching


def loss_result(call: Call) -> Value:
    """The value of a loss: a fresh graph over its inputs (keywords and `**` too), or none
    when its prediction was detached (`criterion(pred.detach(), y)`)."""
    node = call.node
    inputs = list(call.args) + list(call.kwargs.values())
    if V.computed_without_graph(inputs):
        return derived(inputs, V.TENSOR, V.LOSS)
    return Value.new_graph(node.lineno, node, V.TENSOR, V.LOSS, inputs=join_all(inputs))


@qualified(*api.LOSS_FUNCTIONS)
def _loss_function(call: Call) -> Value:
    return loss_result(call)


@qualified(*api.SOFTMAX_FUNCS)
def _softmax(call: Call) -> Value:
    return call.first.activated(V.SOFTMAX)


@qualified(*api.LOG_SOFTMAX_FUNCS)
def _log_softmax(call: Call) -> Value:
    return call.first.activated(V.LOG_SOFTMAX)


@qualified(*api.SIGMOID_FUNCS)
def _sigmoid(call: Call) -> Value:
    return call.first.activated(V.SIGMOID)


@qualified("torch.autograd.backward")
def _autograd_backward(call: Call) -> Optional[Value]:
    if not call.args:
        return None
    call.flow.record_backward(call.node, call.args[0], "autograd")
    return UNKNOWN


@qualified("torch._foreach_mul_", "torch._foreach_div_")
def _foreach_scale(call: Call) -> Optional[Value]:
    """`torch._foreach_mul_(grads, scale)`: how gradient helpers normalise in bulk (it scales
    whatever list it is given; read as gradients, the only lists training code scales)."""
    call.flow.record_grad_scale(call.node)
    return None


@qualified("torch.device")
def _device(call: Call) -> Optional[Value]:
    if call.args and call.args[0].has(V.CUDA_DEVICE):
        return Value.of(V.CUDA_DEVICE)
    return None


@qualified(*api.LOADED_OBJECT_FUNCS)
def _loaded_object(call: Call) -> Value:
    """`torch.load(f)`: whatever was saved, of no kind the file shows (`model.eval()` on it
    says it was a module)."""
    return UNKNOWN


@qualified(*api.SCRIPT_MODULE_LOADERS)
def _script_module(call: Call) -> Value:
    return Value.of(V.MODULE, node=call.node)


@qualified(*api.DDP_WRAPPERS)
def _data_parallel_wrapper(call: Call) -> Value:
    """`DDP(model)`, `FSDP(model)`: still the model (its class), now wrapped."""
    wrapped = call.first
    return Value(tags=wrapped.tags | {V.MODULE, V.DDP}, cls=wrapped.cls, node=call.node)


@qualified_matching(lambda qual: bool(api.TORCH_MODEL_WRAPPER_RE.match(qual)), order=40)
def _model_wrapper(call: Call) -> Value:
    """`torch.compile(model)`, `DataParallel(model)`: the same model behind a wrapper. A
    compiled method (`torch.compile(self._optimizer.step)`) is still that method."""
    if call.qual in _COMPILERS and _compiles_a_method(call.node):
        return call.first
    return wrapped_model(call)


_COMPILERS = frozenset({"torch.compile", "torch.jit.script"})
# Attributes an `nn.Module` does not have: `torch.compile(x.step)` compiles a bound method
# (an optimizer's step, a trainer's step function), never a module.
_METHOD_ATTRIBUTES = frozenset({"step", "zero_grad", "backward"})


def _compiles_a_method(node) -> bool:
    arg = node.args[0] if node.args else None
    return isinstance(arg, ast.Attribute) and arg.attr in _METHOD_ATTRIBUTES


def wrapped_model(call: Call) -> Value:
    wrapped = call.first
    return Value(tags=frozenset({V.MODULE}) | (wrapped.tags & {V.DDP}), cls=wrapped.cls,
                 node=call.node)


@qualified_matching(lambda qual: qual.startswith("torch."), order=90)
def _torch_function(call: Call) -> Value:
    """Any other `torch.*` function: a tensor, carrying the graphs of its tensor inputs
    unless it is one that breaks them (`torch.argmax`, constructors)."""
    node = call.node
    if is_const(keyword(node, "requires_grad"), True):
        return Value.new_graph(node.lineno, node, V.TENSOR, leaf=True)
    if call.qual in api.TORCH_BREAKING_FUNCS or not any(a.grad or a.params for a in call.args):
        cuda = any(v.has(V.CUDA_DEVICE) for v in call.kwargs.values())
        # a constructor or a graph breaker (`torch.randn`, `torch.argmax`) proves no graph
        cut = (V.DETACHED,) if call.qual in api.TORCH_BREAKING_FUNCS else ()
        return Value.of(V.TENSOR, *((V.CUDA_DEVICE,) if cuda else ()), *cut)
    inputs = list(call.args) + list(call.kwargs.values())
    if not any(a.grad for a in call.args):
        # Of a helper's parameter (`def apply(ls): torch.stack(ls).sum().backward()`): the
        # summary follows what the caller passes, but `torch.log(p)` of a probability is
        # no longer that probability: what activation it holds is not known.
        return derived(inputs, V.TENSOR, V.ACTIVATION_UNSURE)
    return derived(inputs, V.TENSOR)


def statement_grad_mode(qual: Optional[str], call: ast.Call) -> Optional[bool]:
    """`torch.set_grad_enabled(flag)` written as a statement switches autograd for what
    follows (`torch.no_grad()` as a statement does nothing: see TPF016)."""
    return grad_mode(qual, call) if qual in api.SET_GRAD_ENABLED else None


@grad_context
def grad_mode(qual: Optional[str], call: Optional[ast.Call]) -> Optional[bool]:
    """For a `with` context: False when it disables autograd, True when it enables it,
    None when it does not touch it (or we cannot tell which)."""
    if qual in api.GRAD_DISABLING:
        if call is not None and call.args and is_const(call.args[0], False):
            return None  # inference_mode(False)
        return False
    if qual in api.SET_GRAD_ENABLED and call is not None and call.args:
        flag = call.args[0]
        if isinstance(flag, ast.Constant):
            return bool(flag.value)
        return False  # `set_grad_enabled(phase == "train")`: may be off; stay quiet
    return None
