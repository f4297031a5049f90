"""What the flow analysis records while it walks a function: the facts rules ask about.

Each record carries a `Site`: where it happened, inside which loops, under which `if`
tests, and whether autograd was recording there. Rules filter these lists; they never walk
the tree themselves.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, FrozenSet, List, Optional, Tuple

from .values import UNKNOWN, Value

if TYPE_CHECKING:   # annotations only: index.py does not need events
    from ..project.index import FunctionInfo


@dataclass(frozen=True)
class Cond:
    """An enclosing `if`/`while` test: its depth in the loop stack and what it tests."""

    depth: int          # number of enclosing loops when the `if` was entered
    test: ast.expr
    counter: bool       # `step % k == 0`-shaped (gradient-accumulation / logging interval)
    negated: bool = False  # we are in the `else` branch


@dataclass(frozen=True)
class Site:
    node: ast.AST
    stmt: ast.AST                # the statement holding `node`: findings go on its first line
    loops: Tuple[ast.AST, ...]   # enclosing for/while loops in this function, outermost first
    conds: Tuple[Cond, ...]
    no_grad: bool                # autograd disabled here (context, decorator, or unknown)
    accumulate: bool             # inside `accelerator.accumulate(...)` (not `no_sync()`)
    eval_mode: bool              # after `model.eval()` with no `train()` since, in this scope
    # Names the enclosing comprehensions bind (`g` in `[g.to(dev) for g in blocks]`): there
    # they are the comprehension's own variables, not the function's names.
    comprehension_names: FrozenSet[str] = frozenset()

    @property
    def line(self) -> int:
        return getattr(self.stmt, "lineno", None) or getattr(self.node, "lineno", 1)

    @property
    def col(self) -> int:
        node_line = getattr(self.node, "lineno", None)
        if node_line is not None and node_line == self.line:
            return self.node.col_offset
        return getattr(self.stmt, "col_offset", 0)

    def in_loop(self, loop: ast.AST) -> bool:
        return loop in self.loops

    def conds_inside(self, loop: ast.AST) -> Tuple[Cond, ...]:
        """The `if` tests between `loop` and this site."""
        depth = self.loops.index(loop) + 1
        return tuple(c for c in self.conds if c.depth >= depth)


@dataclass(frozen=True)
class CallSite:
    """Every call the analysis evaluated: rules filter by qualified name or method."""

    site: Site
    node: ast.Call
    qualname: Optional[str]      # resolved through imports (`torch.manual_seed`)
    method: Optional[str]        # `x.method(...)` -> "method"
    receiver: Optional[Value]    # the value of `x` in `x.method(...)`
    args: Tuple[Value, ...]
    result: Value
    # The callee is nothing the analysis can see into (a function of another package, a
    # method of an object of unknown kind): what it does with its arguments is unknown.
    unseen: bool = False
    # the values passed by keyword, `**mapping` included (`loss(**inputs)` hands over every
    # value of `inputs`)
    kwargs: Tuple[Value, ...] = ()

    @property
    def passed(self) -> Tuple[Value, ...]:
        """Every value the call hands to its callee: arguments, keywords, the receiver."""
        receiver = (self.receiver,) if self.receiver is not None else ()
        return self.args + self.kwargs + receiver


@dataclass(frozen=True)
class Backward:
    site: Site
    value: Value       # what is backwarded
    via: str           # tensor | autograd | accelerator | scaler | engine | fabric


@dataclass(frozen=True)
class Step:
    site: Site
    via: str           # optimizer | scaler | engine | framework


@dataclass(frozen=True)
class ModeCall:
    site: Site
    mode: str          # "eval" | "train"
    receiver: str      # text of the receiver (`model`, `self.model`)


@dataclass(frozen=True)
class Store:
    """A value put somewhere that may outlive the loop iteration that made it."""

    site: Site
    key: str           # container key (`fn:losses`, `Class.self.history`)
    target: str        # how the user wrote it (`losses`, `self.history`)
    how: str           # append | extend | insert | add | setitem | setattr | augassign
    value: Value
    expr: ast.AST      # the stored expression, as written
    fresh_in: Tuple[ast.AST, ...]  # loops inside whose body the container is (re)created


@dataclass(frozen=True)
class Freeze:
    """A module's parameters switched off: `for p in model.backbone.parameters():
    p.requires_grad = False`, `model.requires_grad_(False)`."""

    site: Site
    module: str        # the module as written (`model.backbone`)


@dataclass(frozen=True)
class Forward:
    site: Site
    module: Value
    result: Value

    @property
    def text(self) -> str:
        """`model(...)`, rendered only when a message needs it."""
        from .astutil import short
        return short(self.site.node)


@dataclass(frozen=True)
class LocalCall:
    site: Site
    callee: "FunctionInfo"
    node: ast.Call


@dataclass(eq=False)
class FunctionFacts:
    """Everything the flow analysis learnt about one function (or the module body)."""

    func: Optional["FunctionInfo"]
    values: Dict[int, Value] = field(default_factory=dict)
    calls: List[CallSite] = field(default_factory=list)
    backwards: List[Backward] = field(default_factory=list)
    steps: List[Step] = field(default_factory=list)
    resets: List[Site] = field(default_factory=list)
    modes: List[ModeCall] = field(default_factory=list)
    stores: List[Store] = field(default_factory=list)
    forwards: List[Forward] = field(default_factory=list)
    local_calls: List[LocalCall] = field(default_factory=list)
    freezes: List[Freeze] = field(default_factory=list)
    # gradients multiplied or divided in place (`p.grad /= n`, `p.grad.mul_(s)`,
    # `torch._foreach_mul_(grads, s)`): accumulation normalised on the gradients
    grad_scales: List[Site] = field(default_factory=list)
    loops: List[ast.AST] = field(default_factory=list)
    loop_parents: Dict[ast.AST, Optional[ast.AST]] = field(default_factory=dict)
    loop_rebinds: Dict[ast.AST, frozenset] = field(default_factory=dict)
    # what each loop writes into without rebinding (`x[i] = …`, `x.a = …`, `x += …`)
    loop_writes: Dict[ast.AST, frozenset] = field(default_factory=dict)
    returns: Value = UNKNOWN
    # the expression of each of the function's own `return` statements, in the order walked
    # (None for a bare `return`): what a question about returned objects follows
    return_exprs: List[Optional[ast.expr]] = field(default_factory=list)
    env: Dict[str, Value] = field(default_factory=dict)

    def mark(self) -> Dict[str, int]:
        """Lengths of the event lists, to undo a walk with `rollback`."""
        return {name: len(items) for name, items in vars(self).items() if isinstance(items, list)
                and name != "loops"}

    def rollback(self, mark: Dict[str, int]) -> None:
        for name, length in mark.items():
            del getattr(self, name)[length:]

    def value(self, node: ast.AST) -> Value:
        return self.values.get(id(node), UNKNOWN)
