"""The tables library semantics register into, and the lookups the interpreter makes.

A handler receives a `Call` (or an `Access` for attributes) and returns the `Value` of the
expression, or None for "not mine": the lookup then goes on to the next table entry, and
in the end the interpreter's own fallback. Handlers are registered with the decorators
below by the library modules of this package, in the order `semantics/__init__.py` imports
them; nothing in the interpreter names a library.

Tables:
- `QUALIFIED`: qualified name -> handler (`torch.autograd.backward`); then `PATTERNS`,
  predicates over the qualified name tried in `order` (`torch.nn.<Class>`, optimizers);
- `METHODS`: (receiver kind, method) -> handler, with `ANY` for methods that mean the
  same on every receiver (`backward`, `step`), tried first; `KIND_DEFAULTS`: what any other
  method of a receiver kind gives;
- `ATTRIBUTES` / `ATTRIBUTE_DEFAULTS`: the same for `x.attr` reads;
- `CALLEES`: what calling a value of a kind does (a module runs its forward);
- `BUILTINS`: Python builtins called by name (`sum`, `enumerate`);
- `GRAD_CONTEXTS`: `with` contexts that turn autograd off or on;
- `ASSIGNED_ATTRIBUTES`: attribute assignments that are events (`p.grad = None`).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from ..core import values as V
from ..core.astutil import dotted
from ..core.values import Value
from .interface import Interpreter

ANY = "*"          # a method that means the same on every receiver
OPAQUE = "opaque"  # a receiver of no kind we model


@dataclass(frozen=True)
class Call:
    """One call being evaluated: the node, what its callee resolved to, its evaluated
    receiver and arguments, and the interpreter to record events with."""

    node: ast.Call
    qual: Optional[str]
    method: Optional[str]
    receiver: Value
    args: Tuple[Value, ...]
    kwargs: Dict[str, Value]
    flow: Interpreter

    @property
    def receiver_text(self) -> str:
        """`self.model` in `self.model.eval()` ("" when the receiver is not a name chain)."""
        func = self.node.func
        return (dotted(func.value) or "") if isinstance(func, ast.Attribute) else ""

    @property
    def receiver_node(self) -> Optional[ast.expr]:
        func = self.node.func
        return func.value if isinstance(func, ast.Attribute) else None

    @property
    def first(self) -> Value:
        return self.args[0] if self.args else V.UNKNOWN


@dataclass(frozen=True)
class Access:
    """`base.attr` being read."""

    node: ast.Attribute
    base: Value
    attr: str


Handler = Callable[[Call], Optional[Value]]
AccessHandler = Callable[[Access], Optional[Value]]
CalleeHandler = Callable[[Call, Value], Optional[Value]]

QUALIFIED: Dict[str, Handler] = {}
PATTERNS: List[Tuple[int, Callable[[str], bool], Handler]] = []
METHODS: Dict[Tuple[str, str], Handler] = {}
KIND_DEFAULTS: Dict[str, Handler] = {}
# Receiver kinds whose every method is known not to do anything we track (Python lists and
# dicts); for the others a catch-all answer is a guess, and the call stays unseen.
KNOWN_KINDS: set = set()
ATTRIBUTES: Dict[Tuple[str, str], AccessHandler] = {}
ATTRIBUTE_DEFAULTS: Dict[str, AccessHandler] = {}
CALLEES: List[Tuple[Callable[[Value], bool], CalleeHandler]] = []
BUILTINS: Dict[str, Handler] = {}
# `with <context>:` -> does it turn autograd off (False), on (True), or neither (None)?
GRAD_CONTEXTS: List[Callable[[Optional[str], Optional[ast.Call]], Optional[bool]]] = []
# `x.<attr> = value` statements that mean something (`p.grad = None` resets gradients).
ASSIGNED_ATTRIBUTES: Dict[Tuple[str, bool], Callable[[Interpreter, ast.stmt], None]] = {}

# Which table a receiver's methods are looked up in: its first kind in this order.
METHOD_RECEIVER_KINDS = (V.SCALER, V.ACCELERATOR, V.FABRIC, V.MODULE, V.CONTAINER, V.TENSOR,
                         V.TEXT)
# For attribute reads a grad-bearing base decides first (`out.logits`, `losses.data`).
GRAD = "grad"
ATTRIBUTE_BASE_KINDS = (GRAD, V.LOADER, V.MODULE, V.CONTAINER, V.TENSOR)


# ---------------------------------------------------------------------- registration
def qualified(*names: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for name in names:
            if name in QUALIFIED:
                raise ValueError(f"{name} registered twice")
            QUALIFIED[name] = handler
        return handler
    return register


def qualified_matching(predicate: Callable[[str], bool], order: int) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        PATTERNS.append((order, predicate, handler))
        PATTERNS.sort(key=lambda entry: entry[0])
        return handler
    return register


def method(*names: str, on: Tuple[str, ...] = (ANY,)) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for kind in on:
            for name in names:
                if (kind, name) in METHODS:
                    raise ValueError(f"{kind}.{name} registered twice")
                METHODS[(kind, name)] = handler
        return handler
    return register


def other_methods(*kinds: str, known: bool = False) -> Callable[[Handler], Handler]:
    """What any other method of these receiver kinds gives; `known`: every such method is
    known to do nothing the analysis tracks."""
    def register(handler: Handler) -> Handler:
        for kind in kinds:
            KIND_DEFAULTS[kind] = handler
            if known:
                KNOWN_KINDS.add(kind)
        return handler
    return register


def attribute(*names: str, on: Tuple[str, ...]) -> Callable[[AccessHandler], AccessHandler]:
    def register(handler: AccessHandler) -> AccessHandler:
        for kind in on:
            for name in names:
                ATTRIBUTES[(kind, name)] = handler
        return handler
    return register


def other_attributes(*kinds: str) -> Callable[[AccessHandler], AccessHandler]:
    def register(handler: AccessHandler) -> AccessHandler:
        for kind in kinds:
            ATTRIBUTE_DEFAULTS[kind] = handler
        return handler
    return register


def callee(predicate: Callable[[Value], bool]) -> Callable[[CalleeHandler], CalleeHandler]:
    def register(handler: CalleeHandler) -> CalleeHandler:
        CALLEES.append((predicate, handler))
        return handler
    return register


def grad_context(decide):
    GRAD_CONTEXTS.append(decide)
    return decide


def assigned_attribute(*names: str, augmented: bool = False):
    def register(handler):
        for name in names:
            ASSIGNED_ATTRIBUTES[(name, augmented)] = handler
        return handler
    return register


def builtin(*names: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for name in names:
            BUILTINS[name] = handler
        return handler
    return register


# ---------------------------------------------------------------------- lookups
def call_qualified(call: Call) -> Optional[Value]:
    handler = QUALIFIED.get(call.qual)
    if handler is not None:
        result = handler(call)
        if result is not None:
            return result
    for _, predicate, handler in PATTERNS:
        if predicate(call.qual):
            result = handler(call)
            if result is not None:
                return result
    return None


def method_kind(receiver: Value) -> str:
    for kind in METHOD_RECEIVER_KINDS:
        if kind == V.CONTAINER and receiver.elements is not None:
            return kind
        if kind == V.TENSOR and receiver.grad:
            return kind
        if receiver.has(kind):
            return kind
    return OPAQUE


def call_method(call: Call) -> Tuple[Optional[Value], bool]:
    """A method call on a receiver the interpreter has no summary for: (its value or None,
    whether a table entry for this very method answered, rather than a receiver kind's
    catch-all: callers that must prove what a call does not do need the difference)."""
    universal = METHODS.get((ANY, call.method))
    if universal is not None:
        result = universal(call)
        if result is not None:
            return result, True
    kind = method_kind(call.receiver)
    specific = METHODS.get((kind, call.method))
    if specific is not None:
        result = specific(call)
        if result is not None:
            return result, True
    for handler in (KIND_DEFAULTS.get(kind), KIND_DEFAULTS.get(OPAQUE)):
        if handler is not None:
            result = handler(call)
            if result is not None:
                return result, kind in KNOWN_KINDS
    return None, False


def attribute_kind(base: Value) -> Optional[str]:
    for kind in ATTRIBUTE_BASE_KINDS:
        if (kind == GRAD and base.grad) or base.has(kind):
            return kind
    return None


def read_attribute(access: Access) -> Optional[Value]:
    kind = attribute_kind(access.base)
    if kind is None:
        # a base of no kind we model: only attributes that tell its kind answer (`p.grad`)
        handler = ATTRIBUTES.get((OPAQUE, access.attr))
        return handler(access) if handler is not None else None
    for handler in (ATTRIBUTES.get((kind, access.attr)), ATTRIBUTE_DEFAULTS.get(kind)):
        if handler is not None:
            result = handler(access)
            if result is not None:
                return result
    return None


def call_value(call: Call, called: Value) -> Optional[Value]:
    """Calling a value of a library kind (a module, a loss object, an activation)."""
    for predicate, handler in CALLEES:
        if predicate(called):
            result = handler(call, called)
            if result is not None:
                return result
    return None


def call_builtin(call: Call, name: str) -> Optional[Value]:
    handler = BUILTINS.get(name)
    return handler(call) if handler is not None else None


def callable_value(value: Value) -> bool:
    """Calling `value` means something to a library table (a module, a loss object)."""
    return any(predicate(value) for predicate, _ in CALLEES)


def context_grad_mode(qual: Optional[str], call: Optional[ast.Call]) -> Optional[bool]:
    for decide in GRAD_CONTEXTS:
        mode = decide(qual, call)
        if mode is not None:
            return mode
    return None


def assign_attribute(flow: Interpreter, attr: str, stmt: ast.stmt, augmented: bool = False) -> None:
    """`x.<attr> = v` (or, `augmented`, `x.<attr> *= v` / `/= v`) is being executed."""
    handler = ASSIGNED_ATTRIBUTES.get((attr, augmented))
    if handler is not None:
        handler(flow, stmt)
