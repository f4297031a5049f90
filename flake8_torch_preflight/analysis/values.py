"""Abstract values: what the analysis knows about the object a name or expression holds.

A `Value` is a small immutable bag of facts. Joining two values (at the end of an `if`, or
around a loop) unions what each may be: the analysis answers "may this carry a graph?", and
every rule decides for itself how sure it must be before it speaks.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import FrozenSet, Optional, Tuple

# Object kinds (what the value *is*).
MODULE = "module"            # an nn.Module instance (model, layer, wrapped model)
LOSS_FN = "loss_fn"          # an nn.*Loss instance
OPTIMIZER = "optimizer"
SCALER = "scaler"            # AMP GradScaler
SCHEDULER = "scheduler"
LOADER = "loader"            # a DataLoader
DIST_SAMPLER = "dist_sampler"
SAMPLER = "sampler"
ACCELERATOR = "accelerator"  # accelerate.Accelerator
FABRIC = "fabric"            # lightning Fabric
ENGINE = "engine"            # a DeepSpeed engine
CONTAINER = "container"      # list / dict / set literal or constructor
PARAMS = "params"            # model.parameters()
SELF = "self"
DDP = "ddp"                  # a model wrapped in DDP/FSDP
PREPARED = "prepared"        # passed through accelerator.prepare / fabric.setup*
CUDA_DEVICE = "cuda_device"  # a torch.device / string naming CUDA

# Tensor facts (what the value *holds*).
TENSOR = "tensor"
PYSCALAR = "pyscalar"        # a host Python number
LOSS = "loss"
SOFTMAX = "softmax"
LOG_SOFTMAX = "log_softmax"
SIGMOID = "sigmoid"
LOGITS = "logits"            # raw output of a model / linear layer
DIVIDED = "divided"          # divided by something (gradient accumulation scaling)
RECIPROCAL = "reciprocal"    # `1 / k`
COUNTER_COND = "counter_cond"  # a test of the form `step % k == 0`
MODULO = "modulo"            # `step % k`: a counter, when tested
ACTIVATION_MODULE = "activation_module"  # nn.Softmax() & co; see `activation`

# Set by `join` when the joined values disagree on their activation (`x if self.training
# else x.softmax(1)`, softmax on one branch only): rules that need the activation for sure
# (TPF005, TPF006) stay quiet on such values.
ACTIVATION_UNSURE = "activation_unsure"
ACTIVATION_TAGS = frozenset({SOFTMAX, LOG_SOFTMAX, SIGMOID, LOGITS, ACTIVATION_UNSURE})


class Origin(tuple):
    """`(line, text)` of the expression that made a graph; the text is rendered on demand
    (only messages need it, and unparsing every forward and loss would cost more than the
    whole analysis)."""

    def __new__(cls, line: int, node) -> "Origin":
        self = super().__new__(cls, (line, None))
        self._node = node
        return self

    def __getitem__(self, index):
        if index == 1 or index == -1:
            from .astutil import short
            return short(self._node)
        return super().__getitem__(index)

    @property
    def line(self) -> int:
        return tuple.__getitem__(self, 0)

    @property
    def text(self) -> str:
        return self[1]


@dataclass(frozen=True)
class Value:
    grad: bool = False                    # may carry a live autograd graph
    leaf: bool = False                    # a leaf (nn.Parameter, requires_grad=True tensor)
    graphs: FrozenSet[int] = frozenset()  # lines where the graph(s) it carries were made
    origin: Optional[Tuple[int, str]] = None  # first (line, text) that made the graph
    tags: FrozenSet[str] = frozenset()
    containers: FrozenSet[str] = frozenset()  # container keys whose contents flowed here
    params: FrozenSet[int] = frozenset()  # parameter positions it depends on (summaries)
    cls: Optional[object] = None          # ClassInfo for instances of a class in the file
    node: Optional[object] = None         # the constructing ast.Call (DataLoader, sampler…)
    elements: Optional[Tuple["Value", ...]] = None  # tuple results (prepare(), enumerate())
    fields: Tuple[Tuple[str, "Value"], ...] = field(default=())  # e.g. a loader's sampler
    activation: Optional[str] = None      # for ACTIVATION_MODULE: which activation it applies

    def has(self, tag: str) -> bool:
        return tag in self.tags

    def with_tags(self, *add: str, drop: FrozenSet[str] = frozenset()) -> "Value":
        return replace(self, tags=(self.tags - drop) | frozenset(add))

    def field(self, name: str) -> Optional["Value"]:
        for key, value in self.fields:
            if key == name:
                return value
        return None

    def no_graph(self, *add: str) -> "Value":
        """The same object seen through a graph breaker."""
        return Value(tags=(self.tags - ACTIVATION_TAGS - {LOSS, DIVIDED}) | frozenset(add),
                     containers=self.containers, params=self.params)


UNKNOWN = Value()


def join(a: Value, b: Value) -> Value:
    if a is b or b is UNKNOWN:
        return a
    if a is UNKNOWN:
        return b
    elements = None
    if a.elements is not None and b.elements is not None and len(a.elements) == len(b.elements):
        elements = tuple(join(x, y) for x, y in zip(a.elements, b.elements))
    return Value(
        grad=a.grad or b.grad,
        # a leaf when every part that may carry a graph is a leaf (`{'params': [p], 'lr': lr}`)
        leaf=(a.leaf or not a.grad) and (b.leaf or not b.grad) and (a.grad or b.grad),
        graphs=a.graphs | b.graphs,
        origin=a.origin or b.origin,
        tags=a.tags | b.tags | (
            {ACTIVATION_UNSURE} if a.tags & ACTIVATION_TAGS != b.tags & ACTIVATION_TAGS else set()),
        containers=a.containers | b.containers,
        params=a.params | b.params,
        cls=a.cls if a.cls is b.cls else (a.cls or b.cls),
        node=a.node or b.node,
        elements=elements,
        fields=a.fields or b.fields,
        activation=a.activation or b.activation,
    )


def join_all(values) -> Value:
    result = UNKNOWN
    for value in values:
        result = join(result, value)
    return result


def derived(values, *add: str) -> Value:
    """A tensor computed from `values` (arithmetic, torch.stack, …): keeps graphs and flow."""
    base = join_all(values)
    return Value(
        grad=base.grad,
        graphs=base.graphs,
        origin=base.origin,
        tags=frozenset(t for t in base.tags if t in (TENSOR, DIVIDED, LOSS)) | frozenset(add),
        containers=base.containers,
        params=base.params,
    )
