"""`torch.nn`: building layers and losses, calling modules, and what module methods return."""
from __future__ import annotations

import ast
from typing import Optional

from . import torchapi as api
from ..core import values as V
from ..core.astutil import dotted, is_const, reached_from
from ..core.values import UNKNOWN, Value, derived, join_all
from .registry import (OPAQUE, Access, Call, callee, method, method_kind, other_attributes,
                       other_methods, qualified_matching)
from .torch import loss_result

# Module methods that return the module itself (`model.to(device).train()`).
RETURNS_SELF = frozenset({"to", "cuda", "cpu", "train", "eval", "half", "float", "double",
                          "bfloat16", "requires_grad_", "type", "share_memory"})
# Attributes of a module that are not submodules.
_NOT_SUBMODULES = frozenset({"config", "device", "dtype", "training"})
_ACTIVATION_OF_MODULE = (
    (api.SOFTMAX_MODULES, V.SOFTMAX),
    (api.LOG_SOFTMAX_MODULES, V.LOG_SOFTMAX),
    (api.SIGMOID_MODULES, V.SIGMOID),
)
# What a receiver may already be known as for its `eval()` to prove it a module: nothing,
# or passed through a wrapper that returns what it was given (`accelerator.prepare`). Any
# other kind stays (`optimizer.eval()` of a schedule-free optimizer, a DeepSpeed engine).
_KINDS_AN_EVAL_COMPLETES = frozenset({V.PREPARED, V.DDP})
_CONTAINER_MODULES = frozenset({"torch.nn.ModuleList", "torch.nn.ModuleDict",
                                "torch.nn.ParameterList"})
# `torch.nn` layers that hold no parameters (read in torch's `torch.nn` reference: pooling,
# padding, resampling, reshaping, dropout and the non-learnable activations; `PReLU`,
# normalisation and every layer with `weight` are absent): what they return carries a graph
# only when what they are given does.
PARAMETER_FREE_MODULES = frozenset("""
    Identity Flatten Unflatten Upsample UpsamplingNearest2d UpsamplingBilinear2d PixelShuffle
    PixelUnshuffle ChannelShuffle Fold Unfold Dropout Dropout1d Dropout2d Dropout3d AlphaDropout
    FeatureAlphaDropout MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d LPPool1d
    LPPool2d AdaptiveAvgPool1d AdaptiveAvgPool2d AdaptiveAvgPool3d AdaptiveMaxPool1d
    AdaptiveMaxPool2d AdaptiveMaxPool3d ZeroPad1d ZeroPad2d ZeroPad3d ConstantPad1d
    ConstantPad2d ConstantPad3d ReflectionPad1d ReflectionPad2d ReflectionPad3d
    ReplicationPad1d ReplicationPad2d ReplicationPad3d CircularPad1d CircularPad2d
    CircularPad3d ReLU ReLU6 LeakyReLU ELU SELU CELU GELU SiLU Mish Tanh Sigmoid Hardtanh
    Hardswish Hardsigmoid Hardshrink Softshrink Tanhshrink Softplus Softsign Threshold GLU
    LogSigmoid Softmax Softmin Softmax2d LogSoftmax CosineSimilarity PairwiseDistance
""".split())


@qualified_matching(api.is_torch_nn_class, order=10)
def construct_nn(call: Call) -> Value:
    """`nn.Linear(...)`, `nn.CrossEntropyLoss()`, `nn.Parameter(t)`, `nn.Sequential(...)`."""
    node, qual = call.node, call.qual
    if qual.rsplit(".", 1)[-1] == "Parameter":
        return Value.new_graph(node.lineno, node, V.TENSOR, leaf=True)
    if qual in _CONTAINER_MODULES:
        return Value.of(V.MODULE, node=node)
    tags = {V.MODULE} | ({V.LOSS_FN} if api.is_loss_class(qual) else set())
    if qual.rsplit(".", 1)[-1] in PARAMETER_FREE_MODULES:
        tags.add(V.PARAMETER_FREE)
    for names, activation in _ACTIVATION_OF_MODULE:
        if qual in names:
            return Value(tags=frozenset(tags | {V.ACTIVATION_MODULE}), node=node,
                         activation=activation)
    if qual.rsplit(".", 1)[-1] == "Sequential" and node.args:
        last_layer = call.args[-1]
        activation = last_layer.activation if last_layer.has(V.ACTIVATION_MODULE) else None
        # The last layer, for rules that ask what the stack outputs (TPF006 raw logits).
        return Value(tags=frozenset(tags), node=node, activation=activation,
                     fields=(("last", last_layer),))
    return Value(tags=frozenset(tags), node=node)


# ---------------------------------------------------------------------- calling a module
@callee(lambda called: called.has(V.LOSS_FN))
def _call_loss(call: Call, called: Value) -> Value:
    result = loss_result(call)
    # a loss object known only by its name (`criterion`) may return anything
    return result.with_tags(V.BY_NAME) if called.has(V.BY_NAME) else result


@callee(lambda called: called.has(V.ACTIVATION_MODULE))
def _call_activation(call: Call, called: Value) -> Value:
    return call.first.activated(called.activation)


@callee(lambda called: called.has(V.MODULE) or (
    called.has(V.SELF) and called.cls is not None and called.cls.is_module))
def _call_module(call: Call, called: Value) -> Value:
    return call.flow.forward(call.node, called, call.args, call.kwargs)


# ---------------------------------------------------------------------- module methods
MODEL_NAME_RE = api.MODEL_PARAM_RE


def _model_like(text: str) -> bool:
    return bool(MODEL_NAME_RE.match(text.split(".")[-1]))


def _chain_root(call: Call) -> str:
    """`model` for `model.to(device).cuda().train()`: calls returning the module are skipped."""
    expr = call.receiver_node
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) \
            and expr.func.attr in RETURNS_SELF:
        expr = expr.func.value
    return (dotted(expr) or "") if expr is not None else ""


@method("eval", "train")
def _mode_switch(call: Call) -> Optional[Value]:
    """`model.eval()` / `model.train()` / `model.train(False)` on a module or a model-named
    receiver, and `x.eval()` on a receiver of unknown kind (which it proves a module);
    anything else named `train()` (a trainer's) is not a mode switch."""
    root = call.receiver_text or _chain_root(call)
    if not root and call.receiver.has(V.FRESH):
        return call.receiver   # `deepcopy(model).eval()`: the copy's mode, no name's
    proven = _proven_module_by_eval(call)
    if not (call.receiver.has(V.MODULE) or _model_like(root) or proven):
        return None
    node = call.node
    to_eval = call.method == "eval" or (node.args and is_const(node.args[0], False))
    call.flow.record_mode(node, "eval" if to_eval else "train", root)
    if to_eval and root and call.receiver.has(V.FROZEN):
        call.flow.record_freeze(node, root)   # a frozen module kept in eval on purpose
    return proven or call.receiver


def _proven_module_by_eval(call: Call) -> Optional[Value]:
    """`x.eval()` with no argument on a receiver of no kind the analysis knows (a parameter,
    what a library factory returned) proves `x` a module: only `nn.Module` (and its script,
    compiled and wrapped forms) has that method among objects that are then called. `x` is
    a module from here on, so `x(batch)` is a forward. A class of this file, an optimizer
    (schedule-free ones have `eval()` too) or a tensor keep what they are, and in a file
    that defines a plain class with an `eval()` of its own (an ensemble helper) the receiver
    may be one of those: nothing is proven."""
    receiver = call.receiver
    if call.method != "eval" or call.node.args or call.node.keywords \
            or receiver.cls is not None or method_kind(receiver) != OPAQUE \
            or not receiver.tags <= _KINDS_AN_EVAL_COMPLETES \
            or call.flow.plain_class_defines("eval"):
        return None
    module = receiver.with_tags(V.MODULE)
    target = call.receiver_node
    if target is not None and dotted(target) is not None:
        call.flow.rebind(target, module)
    return module


@method(*RETURNS_SELF, on=(V.MODULE,))
def _returns_self(call: Call) -> Value:
    if call.method == "requires_grad_" and call.node.args and is_const(call.node.args[0], False) \
            and call.receiver_text:
        call.flow.record_freeze(call.node, call.receiver_text)   # a frozen teacher / encoder
        return call.receiver.with_tags(V.FROZEN)
    owner = reached_from(call.receiver_node)
    if call.method == "requires_grad_" and owner:
        call.flow.thaw(owner)   # `requires_grad_()` (of a part, too): trainable again
        return call.receiver.with_tags(drop=frozenset({V.FROZEN}))
    return call.receiver


@method("forward", on=(V.MODULE,))
def _forward(call: Call) -> Value:
    return call.flow.forward(call.node, call.receiver, call.args, call.kwargs)


@method("module", on=(V.MODULE,))
def _wrapped_forward(call: Call) -> Value:
    """`model.module(x)`: `nn.Module` has no method of that name; it is the module that
    DDP, DataParallel, FSDP or a DeepSpeed engine wraps, called past the wrapper."""
    wrapped = Value(tags=frozenset({V.MODULE}) | (call.receiver.tags & {V.BY_NAME}),
                    cls=call.receiver.cls)
    return call.flow.forward(call.node, wrapped, call.args, call.kwargs)


@method("parameters", "named_parameters", on=(V.MODULE,))
def _parameters(call: Call) -> Value:
    """The module's parameters (the call is kept: whose parameters an optimizer holds)."""
    return Value.of(V.PARAMS, V.CONTAINER, node=call.node)


@method("modules", "children", on=(V.MODULE,))
def _submodules(call: Call) -> Value:
    return Value.of(V.MODULE).as_container()


@other_methods(V.MODULE)
def _other_module_method(call: Call) -> Value:
    return UNKNOWN   # `no_sync()` too: DDP/FSDP skip the all-reduce, nothing scales the loss


@other_attributes(V.MODULE)
def _submodule(access: Access) -> Optional[Value]:
    """`model.module`, `model.fc`: submodules of a module are modules."""
    if access.attr in _NOT_SUBMODULES:
        return None
    cls = access.base.cls
    if cls is not None and cls.method(access.attr) is not None:
        return Value.of(V.BOUND_METHOD)   # `f = model.create_dummy_batch`: a method, no submodule
    return Value.of(V.MODULE, *(access.base.tags & {V.BY_NAME}))


def forward_output(node, module: Value, result: Value, inputs, no_grad: bool) -> Value:
    """What `module(x)` returns: a fresh graph (unless autograd is off) holding raw logits,
    or the activation its forward ends in, or a loss; `result` is what the forward's own
    summary returned (a module class of the file) with the module's known activation,
    `inputs` the arguments' values."""
    line = node.lineno
    if module.has(V.FROZEN):
        # a frozen module makes no graph of its own: what it returns carries its inputs'
        return derived(inputs, V.TENSOR, *(result.tags & V.ACTIVATION_TAGS or {V.LOGITS}))
    if module.has(V.PARAMETER_FREE) and (V.computed_without_graph(inputs)
                                         or any(v.grad for v in inputs)):
        # a layer with no parameters passes on its input's graph, and makes none of its own
        # on a detached or fresh input (`nn.Upsample()(torch.randn(...))`)
        return derived(inputs, V.TENSOR)
    tags = {V.TENSOR} | (result.tags & V.ACTIVATION_TAGS) | (module.tags & {V.BY_NAME})
    if not tags & V.ACTIVATION_TAGS:
        tags.add(V.LOGITS)
    if module.has(V.LOSS_FN):
        tags = {V.TENSOR, V.LOSS} | (module.tags & {V.BY_NAME})
    # the output shares its inputs' graphs too: a backward through it runs through theirs
    graphs = V.union_graphs(frozenset({line}), result.graphs)
    if not no_grad:
        graphs = V.union_graphs(graphs, join_all(inputs).graphs)
    return Value(grad=not no_grad, graphs=graphs,
                 origin=V.Origin(line, node),
                 tags=frozenset(tags) | (result.tags & {V.DIVIDED, V.LOSS}),
                 containers=result.containers | join_all(inputs).containers,
                 elements=result.elements)
