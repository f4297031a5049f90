"""Abstract values: what the analysis knows about the object a name or expression holds.

A `Value` is a small immutable bag of facts. It changes only through the named methods
below (each says which facts survive), never by hand-copying its fields. Joining two values
(at the end of an `if`, or around a loop) unions what each may be: the analysis answers "may
this carry a graph?", and every rule decides for itself how sure it must be before it speaks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import FrozenSet, Iterable, Optional, Tuple

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
ACCUMULATE_CONTEXT = "accumulate"  # `accelerator.accumulate(model)`: scales the loss for us
TEXT = "text"                # a string (a literal or an f-string)

# Tensor facts (what the value *holds*).
TENSOR = "tensor"
PYSCALAR = "pyscalar"        # a host Python number
LOSS = "loss"
SOFTMAX = "softmax"
LOG_SOFTMAX = "log_softmax"
SIGMOID = "sigmoid"
LOGITS = "logits"            # raw output of a model / linear layer
DIVIDED = "divided"          # divided by something (gradient accumulation scaling)
PROVEN_GRAPH = "proven_graph"  # known to carry a graph only because it was backwarded
RECIPROCAL = "reciprocal"    # `1 / k`
COUNTER_COND = "counter_cond"  # a test of the form `step % k == 0`
MODULO = "modulo"            # `step % k`: a counter, when tested
ACTIVATION_MODULE = "activation_module"  # nn.Softmax() & co; see `activation`
# A kind known only from a name (a parameter called `model`, `criterion`): names break ties,
# they prove nothing. What such an object returns is not proven a tensor (a fix that calls
# a tensor method on it is not applied).
BY_NAME = "by_name"
PARAMETER_FREE = "parameter_free"  # a torch.nn module that holds no parameters (nn.Upsample)
# Proven cut from every graph: a graph breaker's result (`.detach()`, `.item()`), a value
# computed under `no_grad`, a tensor constructor's (`torch.randn`). A tensor without `grad`
# but without this tag is only not known to carry a graph.
DETACHED = "detached"
# Identity and kind (the object model): `FRESH`, a new object made by a copy or a
# construction that no name held before (`deepcopy(model).eval()` switches the copy);
# `FACTORY`, a constructor held as a value (`partial(Block, dim=8)`, a class): calling it
# builds an object, it is no forward; `BOUND_METHOD`, a method read off an object
# (`f = model.create_dummy_batch`): calling it runs that method, not a submodule;
# `FROZEN`, a module none of whose parameters records a graph (`requires_grad_(False)`,
# `p.requires_grad = False` over its `parameters()`, a class that freezes itself or runs
# its `forward` under `no_grad`/`inference_mode`): its output carries only its inputs' graphs.
FRESH = "fresh"
FACTORY = "factory"
BOUND_METHOD = "bound_method"
FROZEN = "frozen"
_EVERY_PATH_TAGS = frozenset({FRESH, FROZEN})

# Set by `join` when the joined values disagree on their activation (`x if self.training
# else x.softmax(1)`, softmax on one branch only): rules that need the activation for sure
# (TPF005, TPF006) stay quiet on such values.
ACTIVATION_UNSURE = "activation_unsure"
ACTIVATION_TAGS = frozenset({SOFTMAX, LOG_SOFTMAX, SIGMOID, LOGITS, ACTIVATION_UNSURE})
# What a computation on tensors keeps of its inputs' tags (`derived`).
_DERIVED_TAGS = frozenset({TENSOR, DIVIDED, LOSS, BY_NAME, DETACHED})
# What flows back out of a call from the arguments a summary's return depends on.
_THROUGH_CALL_TAGS = ACTIVATION_TAGS | {TENSOR, LOSS, DIVIDED, BY_NAME}

# A value that joins the graphs of many statements (a list appended to on every line of a
# long loop body) stops counting them: past this many it may share a graph with anything.
# Without the bound, each join copies every line seen so far and one long function costs
# quadratic time and memory.
_MAX_GRAPH_LINES = 32
ANY_GRAPH: FrozenSet[int] = frozenset({-1})


def union_graphs(a: FrozenSet[int], b: FrozenSet[int]) -> FrozenSet[int]:
    if a is ANY_GRAPH or b is ANY_GRAPH:
        return ANY_GRAPH
    if not b or a is b:
        return a
    if not a:
        return b
    merged = a | b
    return ANY_GRAPH if len(merged) > _MAX_GRAPH_LINES else merged


def graphs_overlap(a: FrozenSet[int], b: FrozenSet[int]) -> bool:
    """Some graph may be in both (a saturated set overlaps every non-empty one)."""
    if not a or not b:
        return False
    if a is ANY_GRAPH or b is ANY_GRAPH:
        return True
    return not a.isdisjoint(b)


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


def _replace(value: "Value", **changes) -> "Value":
    """`dataclasses.replace` without its per-call field introspection (it was a visible share
    of the interpreter's time): a copy of the instance dictionary with `changes` applied.
    `Value` has no `__post_init__` to run; frozen only forbids `setattr`, not this."""
    copy = object.__new__(Value)
    copy.__dict__.update(value.__dict__)
    copy.__dict__.update(changes)
    return copy


@dataclass(frozen=True)
class Value:
    grad: bool = False                    # may carry a live autograd graph
    leaf: bool = False                    # a leaf (nn.Parameter, requires_grad=True tensor)
    graphs: FrozenSet[int] = frozenset()  # lines where the graph(s) it carries were made
    origin: Optional[Tuple[int, str]] = None  # first (line, text) that made the graph
    tags: FrozenSet[str] = frozenset()
    containers: FrozenSet[str] = frozenset()  # container keys whose contents flowed here
    params: FrozenSet[int] = frozenset()  # parameter positions it depends on (summaries)
    # The positions among `params` whose graph may flow into this value (None: all of them).
    # A graph breaker (`.detach()`, `.item()`) or `torch.no_grad()` keeps the dependency (a
    # container's flow, a division) but cuts the graph: `def f(x): return x.detach()` gives
    # its callers no graph, whatever they pass.
    graph_params: Optional[FrozenSet[int]] = None
    cls: Optional[object] = None          # ClassInfo for instances of a class in the file
    node: Optional[object] = None         # the constructing ast.Call (DataLoader, sampler…)
    elements: Optional[Tuple["Value", ...]] = None  # tuple results (prepare(), enumerate())
    fields: Tuple[Tuple[str, "Value"], ...] = field(default=())  # e.g. a loader's sampler
    activation: Optional[str] = None      # for ACTIVATION_MODULE: which activation it applies

    # ------------------------------------------------------------------ constructors
    @staticmethod
    def of(*tags: str, node: object = None, **facts) -> "Value":
        """A fresh object of the given kinds (`Value.of(SCALER, node=call)`)."""
        return Value(tags=frozenset(tags), node=node, **facts)

    @staticmethod
    def new_graph(line: int, node, *tags: str, leaf: bool = False,
                  inputs: "Value" = None) -> "Value":
        """A tensor whose graph is made at `line` (a forward, a loss, a parameter), carrying
        along the graphs and the flow of `inputs`."""
        base = inputs or UNKNOWN
        return Value(grad=True, leaf=leaf, graphs=union_graphs(frozenset({line}), base.graphs),
                     origin=Origin(line, node), tags=frozenset(tags),
                     containers=base.containers, params=base.params,
                     graph_params=base.graph_params)

    # ------------------------------------------------------------------ queries
    def has(self, tag: str) -> bool:
        return tag in self.tags

    def field(self, name: str) -> Optional["Value"]:
        for key, value in self.fields:
            if key == name:
                return value
        return None

    def shares_graph(self, other: "Value") -> bool:
        return graphs_overlap(self.graphs, other.graphs)

    @property
    def is_tensor_like(self) -> bool:
        return self.grad or TENSOR in self.tags

    @property
    def flowing_params(self) -> FrozenSet[int]:
        """The parameter positions whose graph may flow into this value."""
        return self.params if self.graph_params is None else self.graph_params

    @property
    def graph_free(self) -> bool:
        """Proven to carry no graph here or from a caller: a tensor made without one (a
        constructor, a batch, a detached value) or a host value, with no parameter whose
        graph flows in. A value of unknown kind is not graph-free: nothing is known of it."""
        return not self.grad and not self.flowing_params and bool(self.tags & {DETACHED, PYSCALAR, TEXT})

    # ------------------------------------------------------------------ changes
    def with_tags(self, *add: str, drop: FrozenSet[str] = frozenset()) -> "Value":
        return _replace(self, tags=(self.tags - drop) | frozenset(add))

    def proven_by_backward(self, line: int) -> "Value":
        """The same tensor after `backward()` at `line` succeeded on it: it carries a graph
        (keyed by that line, since where it was made is not known)."""
        return _replace(self, grad=True, graphs=union_graphs(self.graphs, frozenset({line})),
                        tags=self.tags | {PROVEN_GRAPH})

    def with_containers(self, *keys: str) -> "Value":
        return _replace(self, containers=self.containers | frozenset(keys))

    def no_graph(self, *add: str) -> "Value":
        """The same object seen through a graph breaker: only its flow (containers, params)
        and its non-activation tags survive."""
        return Value(tags=(self.tags - ACTIVATION_TAGS - {LOSS, DIVIDED}) | frozenset(add) | {DETACHED},
                     containers=self.containers, params=self.params, graph_params=frozenset())

    def graph_cut(self) -> "Value":
        """The same object computed with autograd off (`with torch.no_grad():` around a call of
        a helper): no graph, and none flows in from the parameters it depends on."""
        if not self.grad and not self.flowing_params:
            return self
        return _replace(self, grad=False, leaf=False, graphs=frozenset(), origin=None,
                        graph_params=frozenset(), tags=self.tags | {DETACHED})

    def host_number(self) -> "Value":
        """`.item()`, `.tolist()`: a host value, no longer a tensor at all."""
        return Value(tags=frozenset({PYSCALAR}), containers=self.containers, params=self.params,
                     graph_params=frozenset())

    def activated(self, tag: str) -> "Value":
        """`softmax(x)` & co: `x`'s graph and flow, holding the activation `tag`."""
        return Value(grad=self.grad, graphs=self.graphs, origin=self.origin,
                     tags=(self.tags - ACTIVATION_TAGS - {CONTAINER}) | {tag, TENSOR},
                     containers=self.containers, params=self.params,
                     graph_params=self.graph_params)

    def contents(self) -> "Value":
        """What reading an element of this container gives (itself, if not a container)."""
        if not self.has(CONTAINER) and self.elements is None:
            return self
        tags = self.tags - {CONTAINER, PARAMS} | ({TENSOR} if self.has(PARAMS) else set())
        return _replace(self, tags=tags, node=None, elements=None, fields=(), activation=None)

    def as_container(self) -> "Value":
        """A container holding elements like this one."""
        return _replace(self, tags=self.tags | {CONTAINER}, node=None, elements=None,
                        fields=(), activation=None)

    def unpacked(self) -> "Value":
        """One item of `a, b = value` when the items are not known one by one."""
        return _replace(self, tags=self.tags - {CONTAINER}, leaf=False, node=None,
                        elements=None, fields=(), activation=None)

    def as_attribute(self) -> "Value":
        """What `self.x` holds as seen from another method: the object, without the flow
        facts (containers, parameters) of the method that bound it."""
        return _replace(self, containers=frozenset(), params=frozenset(), graph_params=None)

    def seen_from(self, node) -> "Value":
        """A value made in another file, as the file that called for it (at `node`) sees it:
        the same kinds and class, but its construction, origin and graphs are the call's
        (line numbers and nodes of another file mean nothing here)."""
        line = getattr(node, "lineno", 0)
        return _replace(
            self, node=node if self.node is not None else None,
            origin=Origin(line, node) if self.origin is not None else None,
            graphs=frozenset({line}) if self.graphs else frozenset(),
            fields=(), elements=None if self.elements is None else tuple(
                e.seen_from(node) for e in self.elements))

    def without_params(self) -> "Value":
        """A summary's return value at a call site that passes nothing it depends on."""
        return _replace(self, params=frozenset(), graph_params=None) if self.params else self

    def through_call(self, bound: dict, depth: int = 0) -> "Value":
        """This summary return value at one call: what flowed in through the arguments it
        depends on (`bound`: parameter position -> argument value) joins it, element by
        element for tuples (`loss, logs = compute(model, batch)`)."""
        elements = self.elements
        if elements is not None and depth < 2:
            elements = tuple(e.through_call(bound, depth + 1) for e in elements)
        flowing = [bound[i] for i in sorted(self.params) if i in bound]
        if not flowing:
            return _replace(self.without_params(), elements=elements)
        merged = join_all(flowing)
        # only the arguments whose graph reaches the return bring a graph and tensor facts
        # (`return loss_fn(out, y).detach().item()` returns a number whatever `out` carries)
        graphed = join_all(bound[i] for i in sorted(self.flowing_params) if i in bound)
        return Value(grad=self.grad or graphed.grad, graphs=union_graphs(self.graphs, graphed.graphs),
                     origin=self.origin or graphed.origin,
                     tags=self.tags | (graphed.tags & _THROUGH_CALL_TAGS),
                     containers=self.containers | merged.containers, cls=self.cls,
                     node=self.node, elements=elements)


UNKNOWN = Value()


def join(a: Value, b: Value) -> Value:
    if a is b or b is UNKNOWN:
        return a
    if a is UNKNOWN:
        return b
    elements = _joined_elements(a, b)
    activation_unsure = a.tags & ACTIVATION_TAGS != b.tags & ACTIVATION_TAGS
    return Value(
        grad=a.grad or b.grad,
        # a leaf when every part that may carry a graph is a leaf (`{'params': [p], 'lr': lr}`)
        leaf=(a.leaf or not a.grad) and (b.leaf or not b.grad) and (a.grad or b.grad),
        graphs=union_graphs(a.graphs, b.graphs),
        origin=a.origin or b.origin,
        tags=_joined_tags(a, b, activation_unsure),
        containers=a.containers | b.containers,
        params=a.params | b.params,
        graph_params=None if a.graph_params is None and b.graph_params is None
        else a.flowing_params | b.flowing_params,
        # two different classes: which one is not known (`RNNModel(...) if rnn else
        # TransformerModel(...)`); one class or none: it may be that class
        cls=a.cls if a.cls is b.cls or b.cls is None else (b.cls if a.cls is None else None),
        node=a.node or b.node,
        elements=elements,
        fields=a.fields or b.fields,
        activation=a.activation or b.activation,
    )


def _joined_tags(a: Value, b: Value, activation_unsure: bool) -> FrozenSet[str]:
    """What either may be; `DETACHED` only when both are proven free of a graph."""
    tags = a.tags | b.tags | ({ACTIVATION_UNSURE} if activation_unsure else set())
    if DETACHED in tags and not (a.graph_free and b.graph_free):
        tags = tags - {DETACHED}
    # frozen or a new object only when it is on every path (`if args.freeze: ...`)
    return tags - (_EVERY_PATH_TAGS - (a.tags & b.tags))


def _joined_elements(a: Value, b: Value) -> Optional[Tuple[Value, ...]]:
    """Per-position elements of a join, for unpacking. `return loss, auc` on one branch and
    `return loss` on the other: a scalar loss cannot be unpacked, so a caller that unpacks
    the result gets the tuple's elements (the float `auc` stays a float)."""
    if a.elements is not None and b.elements is not None:
        if len(a.elements) == len(b.elements):
            return tuple(join(x, y) for x, y in zip(a.elements, b.elements))
        return None
    if a.elements is not None and _scalar_loss(b):
        return a.elements
    if b.elements is not None and _scalar_loss(a):
        return b.elements
    return None


def _scalar_loss(value: Value) -> bool:
    return value.has(LOSS) and not value.has(CONTAINER)


def join_all(values: Iterable[Value]) -> Value:
    result = UNKNOWN
    for value in values:
        result = join(result, value)
    return result


def derived(values: Iterable[Value], *add: str) -> Value:
    """A tensor computed from `values` (arithmetic, torch.stack, …): keeps graphs and flow."""
    values = list(values)
    base = join_all(values)
    tags = base.tags & _DERIVED_TAGS
    if DETACHED in tags and not all(v.graph_free for v in values):
        tags = tags - {DETACHED}
    return Value(grad=base.grad, graphs=base.graphs, origin=base.origin,
                 tags=tags | frozenset(add),
                 containers=base.containers, params=base.params, graph_params=base.graph_params)


def computed_without_graph(inputs) -> bool:
    """A differentiable operation with no parameters of its own (a loss, `nn.Upsample`)
    makes no graph when its first input (the prediction, the input) is proven cut from
    every graph and no input carries one: `criterion(pred.detach().cpu(), y)`,
    `upsample(torch.randn(...))`. The parameters other inputs depend on keep flowing."""
    inputs = list(inputs)
    return bool(inputs) and inputs[0].has(DETACHED) and not inputs[0].flowing_params \
        and not any(v.grad for v in inputs)
