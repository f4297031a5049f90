"""Tensor methods and attributes: which keep the autograd graph, which break it, and the
universal training calls (`backward`, `zero_grad`) that mean the same on any receiver."""
from __future__ import annotations

import ast
from typing import Optional

from . import torchapi as api
from ..core import values as V
from ..core.astutil import dotted, is_const, reached_from
from ..core.values import UNKNOWN, Value, derived
from .registry import (GRAD, OPAQUE, Access, Call, assigned_attribute, attribute, method,
                       other_attributes, other_methods)

# Graph-breaking methods whose result lives on the host (a number, a size, a list/array).
HOST_RESULTS = frozenset({"item", "tolist", "numpy", "size", "dim", "numel", "nelement",
                          "element_size", "data_ptr", "stride", "get_device", "is_contiguous"})
# Graph-keeping methods whose result still holds the receiver's activation (a cast, a view).
_KEEPS_ACTIVATION = frozenset({"to", "float", "half", "double", "bfloat16", "cuda",
                               "contiguous", "view", "reshape", "squeeze", "unsqueeze",
                               "flatten", "clone"})
# `x.backward()` through a framework object: which one ran it.
_BACKWARD_VIA = ((V.ACCELERATOR, "accelerator"), (V.ENGINE, "engine"), (V.FABRIC, "fabric"))


# ---------------------------------------------------------------------- universal calls
@method("backward")
def _backward(call: Call) -> Value:
    """`loss.backward()`, or `accelerator.backward(loss)` / `engine.backward(loss)` /
    `fabric.backward(loss)` (an unknown receiver given the loss is taken as Accelerate's)."""
    receiver = call.receiver
    if receiver.grad or receiver.has(V.LOSS) or not call.args or receiver.has(V.TENSOR):
        call.flow.record_backward(call.node, receiver, "tensor")
        _proven_by_backward(call, receiver)
        return UNKNOWN
    via = next((name for kind, name in _BACKWARD_VIA if receiver.has(kind)), None)
    call.flow.record_backward(call.node, call.args[0], via or "accelerator")
    if via is not None:   # a proven framework object runs `loss.backward()` itself
        _proven_by_backward(call, call.args[0].with_tags(V.TENSOR), call.node.args[0])
    return UNKNOWN


def _proven_by_backward(call: Call, receiver: Value, target: Optional[ast.expr] = None) -> None:
    """`loss.backward()` on a tensor the analysis did not see get a graph (`loss` computed
    from a model it cannot type, a parameter `predictor(x)`): torch raises unless the tensor
    requires grad, so from here on the name holds a graph. The graph is keyed by the
    backward's line (where it was made is not known; TPF001 reads that key as "this
    backward ran through it"). The backward itself is recorded with the value as it was:
    what was derived from the loss before (a division's tag) was derived without a graph.
    `accelerator.backward(loss)` (`fabric.`, a DeepSpeed engine's) proves `loss` the same way:
    `target` is then the argument."""
    target = call.receiver_node if target is None else target
    if receiver.grad or not receiver.has(V.TENSOR) or receiver.leaf or dotted(target) is None:
        return
    call.flow.rebind(target, receiver.proven_by_backward(call.node.lineno))


@method("zero_grad")
def _zero_grad(call: Call) -> Value:
    call.flow.record_reset(call.node)
    return UNKNOWN


@method("zero_")
def _grad_zero(call: Call) -> Optional[Value]:
    """`p.grad.zero_()` over parameters resets gradients; any other `zero_()` does not."""
    receiver = call.receiver_node
    if isinstance(receiver, ast.Attribute) and receiver.attr == "grad":
        call.flow.record_reset(call.node)
        return UNKNOWN
    return None


@assigned_attribute("grad")
def _grad_assigned(flow, stmt: ast.stmt) -> None:
    """`p.grad = None` over parameters resets gradients."""
    flow.record_reset(stmt)


@assigned_attribute("grad", augmented=True)
def _grad_scaled(flow, stmt: ast.stmt) -> None:
    """`p.grad /= n`, `p.grad *= 1 / n`: gradients normalised in place."""
    flow.record_grad_scale(stmt)


@method("mul_", "div_")
def _grad_scaled_by_method(call: Call) -> Optional[Value]:
    """`p.grad.mul_(s)` / `p.grad.div_(n)` scale gradients in place (any other receiver's
    `mul_` is an ordinary tensor method: looked up as usual)."""
    receiver = call.receiver_node
    if isinstance(receiver, ast.Attribute) and receiver.attr == "grad":
        call.flow.record_grad_scale(call.node)
    return None


_PARAMETER_ITERATORS = frozenset({"parameters", "named_parameters"})


@assigned_attribute("requires_grad")
def _requires_grad_assigned(flow, stmt: ast.stmt) -> None:
    """`for p in model.backbone.parameters(): p.requires_grad = False` freezes the module
    whose parameters the loop walks (a linear probe, a frozen encoder)."""
    value = getattr(stmt, "value", None)
    targets = getattr(stmt, "targets", None) or [getattr(stmt, "target", None)]
    frozen = isinstance(value, ast.Constant) and value.value is False
    for target in targets:
        if not isinstance(target, ast.Attribute):
            continue
        if not frozen:
            thaw_parameters_of(flow, target.value)   # anything but False may train again
            continue
        if isinstance(target.value, ast.Name):
            loop = flow.innermost_loop_binding(target.value.id)
            module = _parameters_of(getattr(loop, "iter", None)) if loop is not None else None
            if module:
                flow.record_freeze(stmt, module)
                if stmt in loop.body:   # on every iteration: the whole module is frozen
                    flow.freeze_after_loop(loop, module)


def thaw_parameters_of(flow, expr: ast.AST) -> None:
    """What `expr` is a parameter of trains again (`p.requires_grad = True` in a loop over
    `model.get_classifier().parameters()`, `model.fc.weight.requires_grad_()`): the module
    reached from it, or from the `parameters()` a loop binds it to, is no longer frozen."""
    owner = reached_from(expr)
    if owner is None:
        return
    loop = flow.innermost_loop_binding(owner) if "." not in owner else None
    if loop is not None:
        owner = reached_from(_parameters_call(getattr(loop, "iter", None))) or owner
    flow.thaw(owner)


def _parameters_of(expr) -> Optional[str]:
    """`model.backbone` for `model.backbone.parameters()` (also inside `enumerate(...)`)."""
    call = _parameters_call(expr)
    return dotted(call.func.value) if call is not None else None


def _parameters_call(expr) -> Optional[ast.Call]:
    """The `x.parameters()` call a loop iterates (also inside `enumerate(...)`), its receiver."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.args:
        expr = expr.args[0]
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) \
            and expr.func.attr in _PARAMETER_ITERATORS:
        return expr
    return None


# ---------------------------------------------------------------------- tensor methods
@method("detach", "detach_", on=(V.TENSOR,))
def _detach(call: Call) -> Value:
    return call.receiver.no_graph(V.TENSOR)


@method(*(api.GRAPH_BREAKING_METHODS - {"detach", "detach_"}), on=(V.TENSOR,))
def _breaks_graph(call: Call) -> Value:
    if call.method in HOST_RESULTS:
        return call.receiver.host_number()
    return call.receiver.no_graph(V.TENSOR)


# `.softmax()`, `.log_softmax()` and `.sigmoid()` are tensor methods (no other object in the
# libraries we know has them), so a receiver of unknown kind (a parameter, a closure variable,
# a factory's output) that has one is a tensor.
@method("softmax", on=(V.TENSOR, OPAQUE))
def _softmax(call: Call) -> Value:
    return call.receiver.activated(V.SOFTMAX)


@method("log_softmax", on=(V.TENSOR, OPAQUE))
def _log_softmax(call: Call) -> Value:
    return call.receiver.activated(V.LOG_SOFTMAX)


@method("sigmoid", on=(V.TENSOR, OPAQUE))
def _sigmoid(call: Call) -> Value:
    return call.receiver.activated(V.SIGMOID)


@method("div", "div_", "true_divide", on=(V.TENSOR,))
def _divide(call: Call) -> Optional[Value]:
    """`loss.div(k)`: a divided loss (gradient accumulation scaling)."""
    receiver = call.receiver
    if receiver.grad or receiver.has(V.LOSS):
        return derived([receiver] + list(call.args), V.DIVIDED)
    return None


@method(*(api.GRAPH_KEEPING_METHODS - {"softmax", "log_softmax", "sigmoid", "div"}),
        on=(V.TENSOR,))
def _keeps_graph(call: Call) -> Value:
    """Graph-keeping methods keep the receiver's graphs (and, for casts and views, its
    activation; `.cuda()` / `.to(<cuda>)` put it on the GPU)."""
    receiver = call.receiver
    if call.method == "requires_grad_" and not (call.node.args and is_const(call.node.args[0], False)):
        thaw_parameters_of(call.flow, call.receiver_node)
    keep = [t for t in receiver.tags if t in V.ACTIVATION_TAGS] \
        if call.method in _KEEPS_ACTIVATION else []
    on_cuda = call.method == "cuda" or (
        call.method == "to" and any(a.has(V.CUDA_DEVICE) for a in call.args))
    out = derived([receiver] + [a for a in call.args if a.grad], *keep,
                  *((V.CUDA_DEVICE,) if on_cuda else ()))
    return out.with_tags(*(t for t in receiver.tags if t == V.CUDA_DEVICE))


@other_methods(V.TENSOR)
def _other_tensor_method(call: Call) -> Value:
    return UNKNOWN


# ---------------------------------------------------------------------- attributes
@attribute(*api.GRAPH_BREAKING_ATTRS, on=(GRAD,))
def _breaking_attribute(access: Access) -> Value:
    """`loss.data`, `out.shape`, `x.requires_grad`: no graph."""
    return access.base.no_graph(V.TENSOR if access.attr in ("data", "grad") else V.PYSCALAR)


@other_attributes(GRAD)
def _graph_attribute(access: Access) -> Value:
    """`out.logits`, `out.loss`: part of a grad-bearing output."""
    tag = {"logits": V.LOGITS, "loss": V.LOSS}.get(access.attr)
    return derived([access.base], *((tag,) if tag else ()))


@attribute("grad", "data", "T", "mT", on=(V.TENSOR,))
def _tensor_attribute(access: Access) -> Optional[Value]:
    """`p.grad` of a parameter (TPF010 counts syncs on it)."""
    return None if access.base.has(V.PYSCALAR) else Value.of(V.TENSOR)
