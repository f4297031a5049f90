"""Gradient-accumulation windows: how the optimizer step is gated, and what one window is.

One question shared by TPF004 (the summed micro-batch losses are never averaged), TPF014
(`scaler.unscale_` once per window, not per micro-step) and TPF015 (a reset inside the window
undoes it). A *window* is the run of micro-steps whose gradients one optimizer step applies:

- a loop that backwards on every iteration while every optimizer step in it sits under an
  accumulation gate: a counter test (`if (i + 1) % accum == 0:`), a flag the loop updates
  (`if need_update:`, `if not is_accumulating:`, `if engine.is_gradient_accumulation_boundary():`),
  or a count the loop advances and compares (`if micro == accum_steps:`);
- a micro-batch loop (`for i in range(0, batch, micro):`, `for chunk in x.split(n):`,
  `for _ in range(accum_steps):`) that backwards on every iteration, with the step after it.

A window is *owned* when a framework scales and gates it for the user: DeepSpeed engines
(`engine.backward` divides by the accumulation count, `engine.step` acts at the boundary),
Accelerate's `accumulate()` and an `Accelerator` built with an accumulation count (its
`backward` divides by `gradient_accumulation_steps`; its optimizer skips `step`/`zero_grad`
until the boundary). Lightning and HF `Trainer` code is left out altogether. Everything is
computed once per file from the flow facts (memoised).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import FrozenSet, List, Optional, Tuple

from ..semantics import torchapi as api
from ..core import values as V
from .amp import SCALE
from ..core.astutil import dotted, keyword, names_read, short, target_texts
from ..core.events import Backward, Cond, FunctionFacts, LocalCall, Site
from ..core.memo import per_file
from .optimizers import call_at
from ..core.questions import Does

_ACCUM_NAME = re.compile(r"accum|micro_?batch|microbatch|num_micro", re.IGNORECASE)
# A flag that says "this micro-step ends the window" (or "we are still accumulating").
_FLAG = re.compile(
    r"accumulat|sync_grad|grad_sync|boundary|last_micro|end_of_accum"
    r"|^(is|do|should|need|needs|take|time_to|ready_to|can|must)_(update|step|sync|optimi[sz]e)"
    r"|^(update|step|sync)_(now|time|ready|due)$", re.IGNORECASE)
# A counter compared with the accumulation count (`if micro_steps == accum:`).
_COUNT = re.compile(r"accum|micro|count|since|pending|seen|n_?acc|num_?batch|nb_?batch",
                    re.IGNORECASE)
# What a micro-batch loop iterates: slices of one batch. Each slicing call -> the position
# of its argument that is the number of slices (`x.chunk(4)`, `torch.chunk(x, k)`), or None
# where it is a slice size or absent (`x.split(n)`, `x.unbind()`).
_CHUNK_METHODS = {"chunk": 0, "split": None, "tensor_split": None, "unbind": None}
_CHUNK_FUNCS = {"torch.chunk": 1, "torch.split": None, "torch.tensor_split": None,
                "torch.unbind": None}
_CHUNK_NAME = re.compile(r"micro|chunk|sub_?batch", re.IGNORECASE)

COUNTER = "counter"          # if (i + 1) % k == 0
FLAG = "flag"                # if need_update: / if not is_accumulating:
COUNT = "count"              # if micro == accum_steps:
MICRO_LOOP = "micro-loop"    # for chunk in batch.split(micro): … backward …; step after


def accumulation_loop(loop: ast.AST) -> bool:
    """`for _ in range(accum_steps)` / `range(cfg.gradient_accumulation_steps)` /
    `range(num_micro_batches)`: the count names gradient accumulation."""
    iterated = getattr(loop, "iter", None)
    if not (isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name)
            and iterated.func.id == "range" and len(iterated.args) == 1):
        return False
    names = [dotted(n) for n in ast.walk(iterated.args[0]) if isinstance(n, (ast.Name, ast.Attribute))]
    return any(name and _ACCUM_NAME.search(name.rsplit(".", 1)[-1]) for name in names)


@dataclass(frozen=True)
class Gate:
    kind: str
    test: Optional[ast.expr]   # the `if` test; None for a micro-batch loop
    line: int
    caller: Optional[str] = None   # the step is a caller's, after the call at this line

    def describe(self) -> str:
        if self.kind == MICRO_LOOP and self.caller is not None:
            return f"after the micro-batch loop at line {self.line}, in {self.caller}"
        if self.kind == MICRO_LOOP:
            return f"after the micro-batch loop at line {self.line}"
        return f"only when `{short(self.test, 50)}` (line {self.line})"

    @property
    def count(self) -> Optional[str]:
        """The accumulation count as the code writes it (`accum_steps`), when the gate names it."""
        if self.test is None:
            return None
        for node in ast.walk(self.test):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
                return short(node.right, 40)
        if self.kind == COUNT and isinstance(self.test, ast.Compare):
            return short(self.test.comparators[0], 40)
        return None


@dataclass(frozen=True, eq=False)
class Window:
    """One per loop, made once per file by `windows()`: compared and memoised by identity."""

    facts: FunctionFacts
    loop: ast.AST                     # one iteration of it is one micro-step
    steps: Tuple[Site, ...]           # the step(s) that end the window (or calls of helpers that step)
    gate: Gate
    backwards: Tuple[object, ...]     # Backward records, or LocalCalls of helpers that backward
    owner: Optional[str]              # who scales the loss for the user, if anyone (or may)
    loop_count: Optional[str] = None  # a micro-batch loop's count as written, if known
    gated_by: Optional[str] = None    # the framework that gates resets and steps for the user
    step_facts: Optional[FunctionFacts] = None   # the caller whose steps end it, if not `facts`

    @property
    def stepping_facts(self) -> FunctionFacts:
        """The function the steps are in: `facts`, or the caller that steps after calling it."""
        return self.step_facts if self.step_facts is not None else self.facts

    @property
    def count(self) -> Optional[str]:
        """The accumulation count as the code writes it (`accum_steps`), if known."""
        return self.loop_count if self.gate.kind == MICRO_LOOP else self.gate.count

    @property
    def first_step(self) -> Site:
        return min(self.steps, key=lambda s: s.line)

    @property
    def first_backward_line(self) -> int:
        return min(b.site.line for b in self.backwards)


@per_file("accumulation")
def windows(analysis) -> List[Window]:
    """Every accumulation window of the file (see the module docstring), source order."""
    found: List[Window] = []
    for facts in analysis.all_facts():
        if analysis.framework_owned(facts.func):
            continue
        for loop in facts.loops:
            window = _gated_window(analysis, facts, loop) or _micro_loop_window(
                analysis, facts, loop)
            if window is not None:
                found.append(window)
    return found


def every_micro_step(analysis, window: Window, site: Site, unconditional: bool = False) -> bool:
    """`site` runs on every micro-step of `window`: inside its loop, under no accumulation
    gate, and under no test that may change from one iteration to the next; with
    `unconditional`, under no test at all (a configuration switch such as
    `if not args.accumulate:` may be what turns accumulation off)."""
    if window.loop not in site.loops:
        return False
    conds = _conds(analysis, window.facts, window.loop, site)
    if unconditional:
        return not conds
    varying = _varying(analysis, window.facts, window.loop)
    return all(_gate_kind(c, varying) is None and _invariant(c.test, varying) for c in conds)


# ---------------------------------------------------------------------------- gated steps
def _gated_window(analysis, facts: FunctionFacts, loop: ast.AST) -> Optional[Window]:
    steps = analysis.loop_sites(facts, loop, Does.STEP)
    if not steps:
        return None
    varying = _varying(analysis, facts, loop)
    gates = []
    for site in steps:
        if site.loops[-1] is not loop:
            return None          # a step in a nested loop: that loop is the one to judge
        gate = next((Gate(kind, c.test, site.line) for c in _conds(analysis, facts, loop, site)
                     for kind in (_gate_kind(c, varying),) if kind is not None), None)
        if gate is None:
            return None          # some step runs every iteration: no accumulation here
        gates.append(gate)
    backwards = _every_iteration_backwards(analysis, facts, loop, varying)
    if not backwards:
        return None
    first = min(range(len(steps)), key=lambda i: steps[i].line)
    gate = gates[first]
    return Window(facts, loop, tuple(steps), gate, tuple(backwards),
                  _owner(analysis, facts, loop, backwards),
                  gated_by=_gated_by(analysis, facts, loop, backwards))


def _every_iteration_backwards(analysis, facts, loop, varying) -> List[object]:
    """Backwards (direct, or calls of helpers that backward) of `loop`'s own body that run on
    every iteration: unconditionally, or on both sides of an accumulation gate (`no_sync()`
    for the accumulating micro-steps, a plain backward at the boundary)."""
    plain, sides = [], {}
    for record in _backward_records(analysis, facts, loop):
        site = record.site
        if site.loops[-1] is not loop:
            continue
        conds = _conds(analysis, facts, loop, site)
        gate_conds = [c for c in conds if _gate_kind(c, varying) is not None]
        if any(not _invariant(c.test, varying) for c in conds if c not in gate_conds):
            continue
        if not gate_conds:
            plain.append(record)
        elif len(gate_conds) == 1:
            sides.setdefault(id(gate_conds[0].test), {})[gate_conds[0].negated] = record
    both = [r for pair in sides.values() if len(pair) == 2 for r in pair.values()]
    return plain + both


# ---------------------------------------------------------------------------- micro-batch loops
def _micro_loop_window(analysis, facts: FunctionFacts, loop: ast.AST) -> Optional[Window]:
    count = _micro_batch_count(analysis, facts, loop)
    if count is None or analysis.loop_does(facts, loop, Does.STEP):
        return None
    varying = _varying(analysis, facts, loop)
    backwards = [r for r in _backward_records(analysis, facts, loop)
                 if r.site.loops[-1] is loop
                 and all(_invariant(c.test, varying) for c in _conds(analysis, facts, loop, r.site))]
    if not backwards:
        return None
    outer = backwards[0].site.loops[:-1]
    end = getattr(loop, "end_lineno", loop.lineno)
    steps = [s for s in _all_step_sites(analysis, facts) if s.loops == outer and s.line > end]
    step_facts = None
    if not steps and not outer:
        steps, step_facts = _caller_steps(analysis, facts)
    if not steps:
        return None
    caller = None
    if step_facts is not None:
        name = f"`{step_facts.func.name}()`" if step_facts.func is not None else "the module body"
        caller = f"{name} once it has called `{facts.func.name}()` (line {steps[0].line})"
    gate = Gate(MICRO_LOOP, None, loop.lineno, caller)
    return Window(facts, loop, tuple(steps), gate, tuple(backwards),
                  _owner(analysis, facts, loop, backwards), count or None,
                  _gated_by(analysis, facts, loop, backwards), step_facts)


def _caller_steps(analysis, facts: FunctionFacts) -> Tuple[List[Site], Optional[FunctionFacts]]:
    """The steps a caller in this file runs right after calling `facts.func`, at the call's
    own loop level and under the same tests (`self.forward_backward(batch)` then
    `self.helper.optimize(self.opt)`): the micro-batch loop of a function that steps
    nowhere itself is then accumulated by that step. A step under a test of its own is the
    caller's gated window, judged there."""
    func = facts.func
    if func is None or analysis.function_does(func, Does.STEP):
        return [], None
    for caller_facts, call in analysis.callers(func):
        if analysis.framework_owned(caller_facts.func):
            continue
        tests = [c.test for c in call.site.conds]
        steps = [s for s in _all_step_sites(analysis, caller_facts)
                 if s.loops == call.site.loops and s.line > call.site.line
                 and [c.test for c in s.conds] == tests]
        if steps:
            return steps, caller_facts
    return [], None


def _micro_batch_count(analysis, facts, loop) -> Optional[str]:
    """How many micro-batches `loop` runs, as written ("" when it is a micro-batch loop whose
    count is not written down); None when it is not a micro-batch loop."""
    iterated = getattr(loop, "iter", None)
    if iterated is None:
        return None
    if accumulation_loop(loop):
        return short(iterated.args[0], 30)
    if isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name):
        if iterated.func.id == "range" and len(iterated.args) == 3:
            return ""        # `range(0, batch, micro)`: slices of one batch
        if iterated.func.id in ("zip", "enumerate") and iterated.args:
            iterated = iterated.args[0]
    if isinstance(iterated, ast.Call):
        return _chunk_count(analysis, iterated)
    text = dotted(iterated)
    if text and _CHUNK_NAME.search(text.rsplit(".", 1)[-1]):
        return ""
    return None


def _chunk_count(analysis, call: ast.Call) -> Optional[str]:
    """`x.chunk(4)` -> "4", `torch.chunk(x, k)` -> "k", `x.split(n)` -> "" (count not
    written); None when the call does not slice a batch."""
    func = call.func
    qual = analysis.imports.qualname(func)
    if qual in _CHUNK_FUNCS:
        return _count_argument(call, _CHUNK_FUNCS[qual])
    if qual is None and isinstance(func, ast.Attribute) and func.attr in _CHUNK_METHODS:
        return _count_argument(call, _CHUNK_METHODS[func.attr])
    return None


def _count_argument(call: ast.Call, position: Optional[int]) -> str:
    """The slice count written at `position` of a slicing call, or "" when it is not written."""
    if position is None or len(call.args) <= position:
        return ""
    return short(call.args[position], 30)


# ---------------------------------------------------------------------------- early continue
def _conds(analysis, facts: FunctionFacts, loop: ast.AST, site: Site) -> List[Cond]:
    """The tests between `loop` and `site`: the enclosing `if`s flow records, plus the
    negation of every `if <test>: … continue` of the loop body that comes before `site`
    (`if not need_update: continue` gates the rest of the iteration)."""
    conds = list(site.conds_inside(loop))
    for test, end, counter in _continue_guards(analysis, facts, loop):
        if site.line > end:
            conds.append(Cond(len(site.loops), test, counter, negated=True))
    return conds


@per_file("accumulation_guards")
def _continue_guards(analysis, facts: FunctionFacts, loop: ast.AST) -> Tuple[Tuple[ast.expr, int, bool], ...]:
    """(test, last line, counter-shaped) of each top-level `if` of the loop body whose body
    ends the iteration (`continue`) and has no `else`. Flow records no such fact (the code
    after the `if` is not under its test), so the loop's own statements are read, once."""
    guards = []
    for stmt in getattr(loop, "body", ()):
        if isinstance(stmt, ast.If) and not stmt.orelse and stmt.body \
                and isinstance(stmt.body[-1], ast.Continue):
            value = facts.value(stmt.test)
            counter = value.has(V.COUNTER_COND) or value.has(V.MODULO)
            guards.append((stmt.test, getattr(stmt, "end_lineno", stmt.lineno), counter))
    return tuple(guards)


# ---------------------------------------------------------------------------- gates
def _gate_kind(cond: Cond, varying: FrozenSet[str]) -> Optional[str]:
    if cond.counter:
        return COUNTER
    if _is_flag(cond.test, varying):
        return FLAG
    if _is_count_reached(cond.test, varying):
        return COUNT
    return None


def _is_flag(test: ast.expr, varying: FrozenSet[str]) -> bool:
    """`need_update`, `not is_accumulating`, `is_last_micro or last_batch`, or a call such as
    `engine.is_gradient_accumulation_boundary()`: a flag the loop updates (a name that is
    rebound in it), never a configuration attribute that stays the same."""
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if isinstance(test, ast.BoolOp):
        return any(_is_flag(v, varying) for v in test.values)
    if isinstance(test, ast.Call):
        name = test.func.attr if isinstance(test.func, ast.Attribute) else getattr(test.func, "id", "")
        return bool(_FLAG.search(name))
    text = dotted(test)
    return bool(text) and text in varying and bool(_FLAG.search(text.rsplit(".", 1)[-1]))


def _is_count_reached(test: ast.expr, varying: FrozenSet[str]) -> bool:
    if isinstance(test, ast.BoolOp):
        return any(_is_count_reached(v, varying) for v in test.values)
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Eq, ast.NotEq, ast.GtE, ast.Gt, ast.Lt, ast.LtE))):
        return False      # either side of the test may be the one that steps
    text = dotted(test.left)
    return bool(text) and text in varying and bool(_COUNT.search(text.rsplit(".", 1)[-1]))


def _invariant(test: ast.expr, varying: FrozenSet[str]) -> bool:
    """The test cannot change between iterations (`if args.clip:`, `if scaler is not None:`)."""
    for node in ast.walk(test):
        if isinstance(node, ast.Call):
            return False
        if isinstance(node, (ast.Name, ast.Attribute)) and dotted(node) in varying:
            return False
    return True


@per_file("accumulation_varying")
def _varying(analysis, facts: FunctionFacts, loop: ast.AST) -> FrozenSet[str]:
    """Names and `a.b` texts that `loop` rebinds or updates, its own target included."""
    targets = frozenset(target_texts(getattr(loop, "target", None)))
    return facts.loop_rebinds.get(loop, frozenset()) | facts.loop_writes.get(
        loop, frozenset()) | targets


# ---------------------------------------------------------------------------- events
@per_file("accumulation_steps")
def _all_step_sites(analysis, facts: FunctionFacts) -> List[Site]:
    """Every step of the function, direct or through a helper, wherever it is."""
    return Does.STEP.sites_in(facts) + [
        c.site for c in facts.local_calls if analysis.function_does(c.callee, Does.STEP)]


def _backward_records(analysis, facts: FunctionFacts, loop: ast.AST) -> List[object]:
    direct = list(analysis.in_loop(facts, "backwards", loop))
    helpers = [c for c in analysis.in_loop(facts, "local_calls", loop)
               if analysis.function_does(c.callee, Does.BACKWARD)]
    return direct + helpers


# ---------------------------------------------------------------------------- owners
_DEEPSPEED = "a DeepSpeed engine"
_ACCUMULATE = "Accelerate's `accumulate()`"


def _gated_by(analysis, facts: FunctionFacts, loop: ast.AST, backwards) -> Optional[str]:
    """The framework that makes per-micro-step resets and steps harmless: DeepSpeed engines
    (`engine.step` acts at the boundary and zeroes there) and Accelerate's `accumulate()` (its
    prepared optimizer skips `step` / `zero_grad` until the boundary). An object whose
    `backward(loss)` we cannot read may scale the loss (TPF004 stays quiet), but it does not
    make `optimizer.zero_grad()` a no-op."""
    if _engine_steps(analysis, facts, loop):
        return _DEEPSPEED
    for record in backwards:
        gate = _framework_gate(record)
        if gate is not None:
            return gate
    return None


def _owner(analysis, facts: FunctionFacts, loop: ast.AST, backwards) -> Optional[str]:
    """Who scales the loss of the window for the user: a framework that gates it
    (`_gated_by`), or whoever runs a `backward(loss)` (`_backward_owner`)."""
    if _engine_steps(analysis, facts, loop):
        return _DEEPSPEED
    for record in backwards:
        owner = _framework_gate(record)
        if owner is None and isinstance(record, Backward) and record.via == "accelerator":
            owner = _backward_owner(analysis, facts, record)
        if owner is not None:
            return owner
    return None


def _engine_steps(analysis, facts: FunctionFacts, loop: ast.AST) -> bool:
    return any(s.via == "engine" for s in analysis.in_loop(facts, "steps", loop))


def _framework_gate(record) -> Optional[str]:
    """The framework a backward (or a helper call that backwards) runs under, if it gates."""
    if record.site.accumulate:
        return _ACCUMULATE
    if isinstance(record, Backward) and record.via == "engine":
        return _DEEPSPEED
    return None


_ACCELERATOR_ACCUMULATION = ("gradient_accumulation_steps", "gradient_accumulation_plugin",
                             "deepspeed_plugin")


def _backward_owner(analysis, facts: FunctionFacts, backward: Backward) -> Optional[str]:
    """Who scales `x.backward(loss)` (flow's "accelerator" kind: a backward that takes the
    loss as an argument). An Accelerate `Accelerator` divides by its accumulation count,
    so it owns the window unless we can see its construction and it sets no count (or
    literally 1); any other object's `backward(loss)` (a ColossalAI or apex optimizer, a
    booster) is code we cannot read, which may scale: unknown, so it owns the window too."""
    call = call_at(analysis, facts, backward.site.node)
    receiver = call.receiver if call is not None else None
    if receiver is not None and not receiver.has(V.ACCELERATOR) and _named_fabric(call.node):
        return None      # Lightning Fabric's backward runs the precision plugin, divides nothing
    if receiver is None or not receiver.has(V.ACCELERATOR):
        return "an object whose `backward(loss)` the analysis cannot read"
    node = receiver.node
    if not isinstance(node, ast.Call) or any(kw.arg is None for kw in node.keywords):
        return "an Accelerator whose accumulation count the analysis cannot see"
    for name in _ACCELERATOR_ACCUMULATION:
        value = keyword(node, name)
        if value is not None and not (isinstance(value, ast.Constant) and value.value in (1, None)):
            return "an Accelerator built with an accumulation count"
    return None


@per_file("accumulation_resets")
def every_step_resets(analysis, window: Window) -> List[Site]:
    """Gradient resets that run on every micro-step of `window` (directly or in a helper),
    of the optimizer the window steps: each one undoes the accumulation (TPF015). When the
    loop steps several optimizers, only a reset of one of those it gates counts."""
    facts = window.facts
    found = [site for site in analysis.loop_sites(facts, window.loop, Does.RESET)
             if every_micro_step(analysis, window, site, unconditional=True)
             and not _optimizer_construction(analysis, facts, site)]
    if found:
        others = {_identity(analysis, facts, s)
                  for s in analysis.loop_sites(facts, window.loop, Does.STEP)}
        if len(others) > 1:
            stepped = {_identity(analysis, window.stepping_facts, s) for s in window.steps}
            found = [site for site in found if _identity(analysis, facts, site) in stepped]
    return found


def _identity(analysis, facts: FunctionFacts, site: Site):
    """Which optimizer a step or reset acts on: the node that built it, else its text."""
    call = call_at(analysis, facts, site.node)
    if call is None or call.receiver is None:
        return None
    target = call.receiver
    expr = call.node.func.value if isinstance(call.node.func, ast.Attribute) else None
    if target.has(V.SCALER) and call.args:
        target, expr = call.args[0], call.node.args[0] if call.node.args else None
    if target.node is not None:
        return id(target.node)
    return dotted(expr) if expr is not None else None


def _optimizer_construction(analysis, facts: FunctionFacts, site: Site) -> bool:
    """Flow counts an optimizer built in a loop as a reset (fresh state): not a reset here."""
    call = call_at(analysis, facts, site.node)
    return call is not None and call.qualname is not None and bool(
        api.OPTIMIZER_RE.match(call.qualname) or api.OPTIMIZER_FACTORY_RE.match(call.qualname))


def _named_fabric(node: ast.Call) -> bool:
    """`fabric.backward(loss)` / `self.fabric.backward(loss)` on an object the analysis did not
    see built (a `fabric` parameter): Lightning's naming convention for its `Fabric`."""
    text = dotted(node.func.value) if isinstance(node.func, ast.Attribute) else None
    return bool(text) and text.rsplit(".", 1)[-1] == "fabric"


# Names that may carry the accumulation count into code the analysis cannot read.
_CARRIES_COUNT = re.compile(r"accum|grad_acc|micro|^(args|cfg|config|conf|opt|opts|hparams|hp"
                            r"|train|training|settings|self)$", re.IGNORECASE)
_KEEPS_SCALE = frozenset({"mean", "sum", "float", "double", "half", "bfloat16", "to", "cuda",
                          "contiguous", "squeeze", "view", "reshape", "clone"})


def backwarded_expr(record: Backward) -> Optional[ast.expr]:
    """What a backward call backwards, as written: `loss` in `loss.backward()`,
    `accelerator.backward(loss)`, `scaler.scale(loss).backward()`."""
    node = record.site.node
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    expr = node.args[0] if record.via != "tensor" and node.args else node.func.value
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) \
            and expr.func.attr == SCALE and expr.args:
        expr = expr.args[0]
    return expr


def undivided_from_unread_code(analysis, facts: FunctionFacts, expr: ast.expr, depth: int = 4,
                               loop: Optional[ast.AST] = None) -> bool:
    """`expr` is a loss computed by code the analysis cannot read (`chunked_cross_entropy(
    logits, y)` from another file, `self.loss_fn(...)` built from a config) on the model's
    output, and nothing on its way could have divided it by the accumulation count: no
    division, and no call that received the count (or an object that may hold it: `args`,
    `cfg`, `self`). Also a loss returned by a function of this file that can read no such
    name (`forward_and_loss(model, x, y)`): a division inside it is not by the count. Proven
    from the function's own assignments; anything else is unknown."""
    if depth < 0 or expr is None:
        return False
    if isinstance(expr, ast.Name):
        earlier = [p for p in _loop_producers(analysis, loop).get(expr.id, [])
                   if p.lineno < expr.lineno]
        # the assignment that reaches the use (the last one above it: a later `loss = …` for a
        # log line, or a branch we cannot order, is not it)
        if not earlier:
            return False
        rhs = max(earlier, key=lambda p: p.lineno)
        if facts.value(expr).has(V.DIVIDED) and not facts.value(rhs).has(V.DIVIDED):
            return False      # divided on the way (`loss /= n_accum`)
        if isinstance(rhs, ast.AugAssign) or _changed_in_place(facts, expr.id, rhs, expr):
            return False      # `loss /= n`, `loss.div_(n)`: changed on the way
        return undivided_from_unread_code(analysis, facts, rhs, depth - 1, loop)
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, (ast.Add, ast.Sub)):
            parts = [p for p in (expr.left, expr.right) if not isinstance(p, ast.Constant)]
            return bool(parts) and all(
                undivided_from_unread_code(analysis, facts, p, depth - 1, loop) for p in parts)
        if isinstance(expr.op, ast.Mult) and isinstance(expr.left, ast.Constant):
            return undivided_from_unread_code(analysis, facts, expr.right, depth - 1, loop)
        return False
    if not isinstance(expr, ast.Call):
        return False
    func = expr.func
    if isinstance(func, ast.Attribute) and func.attr in _KEEPS_SCALE:
        return undivided_from_unread_code(analysis, facts, func.value, depth - 1, loop)
    return _unread_loss_call(analysis, facts, expr, loop)


def _changed_in_place(facts: FunctionFacts, name: str, since: ast.AST, use: ast.AST) -> bool:
    """An in-place method (`loss.div_(n)`, `loss.mul_(s)`) runs on `name` between its
    assignment and its use."""
    return any(isinstance(c.node.func, ast.Attribute) and c.node.func.attr.endswith("_")
               and isinstance(c.node.func.value, ast.Name) and c.node.func.value.id == name
               and since.lineno <= c.node.lineno <= use.lineno for c in facts.calls)


def _unread_loss_call(analysis, facts: FunctionFacts, call: ast.Call, loop) -> bool:
    func = call.func
    if _flow_decides(analysis, facts, func):
        return False
    helper = analysis.index.function_named(func.id, facts.func) if isinstance(func, ast.Name) \
        else None
    if helper is not None and not (_blind_to_count(analysis, helper)
                                   and facts.value(call).has(V.LOSS)):
        return False   # a function of this file that may see the count: its summary decides
    if _own_method(facts, dotted(func) or ""):
        return False                  # a method may read `self`'s accumulation count
    if any(kw.arg is None for kw in call.keywords):
        return False
    arguments = list(call.args) + [kw.value for kw in call.keywords]
    if any(_names_a_count(arg) for arg in arguments):
        return False
    if helper is not None:
        return True    # flow read the helper: what it returns is a loss
    return any(facts.value(arg).grad or _model_output(analysis, loop, arg) for arg in arguments)


def _flow_decides(analysis, facts: FunctionFacts, func: ast.expr) -> bool:
    """A loss or model object the flow knows (its value decides), or a torch function (flow
    models torch's own functions)."""
    callee = facts.value(func)
    if callee.tags or callee.cls is not None:
        return True
    qual = analysis.imports.qualname(func)
    return qual is not None and qual.startswith("torch.")


def _own_method(facts: FunctionFacts, text: str) -> bool:
    """`self.compute_loss(...)` naming a method of the enclosing class."""
    return text.startswith("self.") and facts.func is not None and facts.func.cls is not None \
        and facts.func.cls.method(text.split(".")[1]) is not None


def _names_a_count(arg: ast.expr) -> bool:
    """An argument mentioning a name that may carry the accumulation count."""
    for node in ast.walk(arg):
        if isinstance(node, (ast.Name, ast.Attribute)):
            name = dotted(node)
            if name and any(_CARRIES_COUNT.search(part) for part in name.split(".")):
                return True
    return False


def _blind_to_count(analysis, func, depth: int = 3) -> bool:
    """No name that may carry the accumulation count (a parameter, a global, an attribute:
    see `_CARRIES_COUNT`) is read in `func` or in the project functions it calls: a division
    flow sees there (a mean over tokens in `chunked_cross_entropy`) is not the accumulation
    scaling. Deeper helpers than `depth` are unknown."""
    if depth < 0:
        return False
    memo = analysis.memo("accumulation_blind_to_count")
    if func in memo:
        return memo[func]
    memo[func] = False   # recursion: not proven
    names = (getattr(node, "id", None) or getattr(node, "attr", None) or getattr(node, "arg", None)
             for node in ast.walk(func.node) if isinstance(node, (ast.Name, ast.Attribute, ast.arg)))
    blind = not any(_CARRIES_COUNT.search(name) for name in names if name) and all(
        _blind_to_count(analysis, call.callee, depth - 1)
        for call in analysis.facts_for(func).local_calls)
    memo[func] = blind
    return blind


def _model_output(analysis, loop, expr: ast.expr) -> bool:
    """`logits` bound by `logits = model(input_ids)` (or `logits[..., :-1, :]` of it) where
    `model` is something the analysis knows nothing about but whose name says it is a model."""
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return False
    earlier = [p for p in _loop_producers(analysis, loop).get(expr.id, []) if p.lineno < expr.lineno]
    if not earlier:
        return False
    rhs = max(earlier, key=lambda p: p.lineno)
    callee = dotted(rhs.func) if isinstance(rhs, ast.Call) else None
    return bool(callee) and bool(api.MODEL_PARAM_RE.match(callee.rsplit(".", 1)[-1]))


@per_file("accumulation_producers")
def _loop_producers(analysis, loop) -> dict:
    """name -> the right-hand sides (or the `x op= …` statements) that bind it in the body of
    the window's loop: one pass over that loop's statements, memoised. Flow keeps no
    assignment facts, and the function-wide scan of `distributed.scope_of` costs far more."""
    found: dict = {}
    stack = [loop.body] if loop is not None else []
    while stack:
        for stmt in stack.pop():
            kind = type(stmt)
            if kind is ast.Assign:
                for target in stmt.targets:
                    for name in target_texts(target):
                        found.setdefault(name, []).append(stmt.value)
            elif kind is ast.AugAssign:
                text = dotted(stmt.target)
                if text:
                    found.setdefault(text, []).append(stmt)
            elif kind in (ast.If, ast.For, ast.While, ast.AsyncFor):
                stack.extend([stmt.body, stmt.orelse])
            elif kind in (ast.With, ast.AsyncWith):
                stack.append(stmt.body)
            elif kind is ast.Try:
                stack.extend([stmt.body, stmt.orelse, stmt.finalbody]
                             + [h.body for h in stmt.handlers])
    return found


@dataclass(frozen=True)
class StalledCounter:
    name: str          # the counter the gate tests (`global_step`)
    lines: Tuple[int, ...]   # where it advances, all inside the gated block


def counter_advanced_only_when_stepping(window: Window) -> Optional[StalledCounter]:
    """The `%` gate of `window` tests a local counter that the loop advances only inside the
    gated block (`if (global_step + 1) % k == 0: step(); global_step += 1`): once the test
    is false it stays false, so the optimizer steps once (or never) and then only
    accumulates. None when the counter also changes outside the block, is the loop's own
    variable, or the gate is of another kind."""
    gate = window.gate
    if gate.kind != COUNTER or gate.test is None:
        return None
    block = next((node for node in _loop_statements(window.loop)
                  if isinstance(node, ast.If) and node.test is gate.test), None)
    if block is None:
        return None
    inside = {id(n) for stmt in block.body for n in ast.walk(stmt)}
    looped = {n.id for n in ast.walk(getattr(window.loop, "target", ast.Pass()))
              if isinstance(n, ast.Name)}
    for name in _modulo_counters(gate.test):
        if name in looped:
            continue
        lines = _bindings_of(window.loop, name)
        if lines and all(id(node) in inside for node in lines):
            return StalledCounter(name, tuple(sorted(node.lineno for node in lines)))
    return None


def _modulo_counters(test: ast.expr) -> List[str]:
    """Plain names in the left operand of the test's `%` (`step` in `(step + 1) % k`)."""
    return [n.id for node in ast.walk(test) if isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Mod) for n in ast.walk(node.left)
            if isinstance(n, ast.Name)]


def _loop_statements(loop: ast.AST):
    """Every node of the loop body, not descending into nested functions or classes."""
    todo = list(loop.body) + list(getattr(loop, "orelse", []))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))


def _bindings_of(loop: ast.AST, name: str) -> list:
    """The statements (and nested loop targets, walrus) in `loop` that bind `name`."""
    found = []
    for node in _loop_statements(loop):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
            targets = [node.target]
        elif isinstance(node, ast.NamedExpr):
            targets = [node.target]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
        if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t)):
            found.append(node)
    return found


def helper_backwards(analysis, call: LocalCall) -> List[Backward]:
    """The backwards a helper called per micro-step runs itself (outside its own loops)."""
    facts = analysis.facts_for(call.callee)
    return [b for b in facts.backwards if not b.site.loops]


__all__ = ["Gate", "Window", "windows", "StalledCounter",
           "counter_advanced_only_when_stepping", "every_micro_step", "every_step_resets",
           "accumulation_loop", "helper_backwards", "backwarded_expr", "undivided_from_unread_code",
           "COUNTER", "FLAG", "COUNT", "MICRO_LOOP"]


# ---------------------------------------------------------------------------- hooks that step
# Registrations of a per-parameter hook that runs once the parameter's gradient is complete,
# in every backward (torch's "optimizer in backward" recipe).
GRAD_READY_HOOKS = frozenset({"register_post_accumulate_grad_hook"})


@dataclass(frozen=True)
class SteppingHook:
    site: Site              # the registration, `p.register_post_accumulate_grad_hook(fn)`
    func: object            # FunctionInfo of the hook: it steps and resets gradients


@dataclass(frozen=True)
class HookUndoes:
    facts: FunctionFacts
    loop: ast.AST
    backward: Site          # a backward that runs every iteration of `loop`
    hook: SteppingHook
    gate: Gate              # the accumulation counter test the loop keeps


@per_file("stepping_grad_hooks")
def stepping_grad_hooks(analysis) -> List[SteppingHook]:
    """Hooks registered unconditionally on parameters that step an optimizer and reset the
    gradients (`def hook(p): opts[p].step(); opts[p].zero_grad()`): every backward after the
    registration steps and zeroes each parameter as soon as its gradient is ready."""
    found = []
    for facts in analysis.all_facts():
        for call in facts.calls:
            if call.method not in GRAD_READY_HOOKS or not call.node.args or call.site.conds:
                continue
            func = _hook_function(facts.value(call.node.args[0]))
            if func is not None and analysis.function_does(func, Does.STEP) \
                    and analysis.function_does(func, Does.RESET):
                found.append(SteppingHook(call.site, func))
    return found


def _hook_function(value: V.Value):
    from ..core.flow import FunctionRef   # the marker of a value naming a function of the file
    return value.node.func if isinstance(value.node, FunctionRef) else None


@per_file("hook_undone_accumulation")
def accumulation_undone_by_hooks(analysis) -> List[HookUndoes]:
    """Loops that mean to accumulate (a counter test on an accumulation count, `if (i + 1) %
    grad_accum_steps == 0:`) and backward on every iteration, in a file that registers a
    stepping hook (`stepping_grad_hooks`): each backward steps and zeroes every parameter
    at once, so no gradient is ever summed over the micro-steps."""
    hooks = stepping_grad_hooks(analysis)
    if not hooks:
        return []
    found = []
    for facts in analysis.all_facts():
        if analysis.framework_owned(facts.func):
            continue
        for loop in facts.loops:
            gate = _accumulation_counter(analysis, facts, loop)
            if gate is None:
                continue
            for record in analysis.in_loop(facts, "backwards", loop):
                if record.site.loops[-1] is loop and not record.site.conds_inside(loop):
                    found.append(HookUndoes(facts, loop, record.site, hooks[0], gate))
                    break
    return found


def _accumulation_counter(analysis, facts: FunctionFacts, loop: ast.AST) -> Optional[Gate]:
    """A counter test directly in `loop` whose count names gradient accumulation."""
    for call in analysis.in_loop(facts, "calls", loop):
        for cond in call.site.conds_inside(loop):
            gate = Gate(COUNTER, cond.test, cond.test.lineno)
            count = gate.count if cond.counter else None
            if count and _ACCUM_NAME.search(count.rsplit(".", 1)[-1]):
                return gate
    return None


# ---------------------------------------------------------------------------- names of the count
# A name that says "accumulation count" in a helper that scales by it.
_COUNT_WORD = re.compile(r"accum|grad_acc|micro|num_steps_per|_gas$|^gas$", re.IGNORECASE)
# An argument that may carry the count or a scale into a helper (TPF004).
_ARGUMENT_CARRIES_COUNT = re.compile(r"accum|grad_acc|micro|scale|^(args|cfg|config|conf|opt|"
                                     r"opts|hparams|hp|settings)$", re.IGNORECASE)


def may_carry_accumulation_count(expr: ast.expr) -> bool:
    """An argument that may hold the accumulation count or a scale (`args`, `accum_steps`,
    `1 / k`, any number)."""
    return isinstance(expr, (ast.Constant, ast.BinOp)) or any(
        any(_ARGUMENT_CARRIES_COUNT.search(part) for part in name.split("."))
        for name in names_read(expr))


def never_names_accumulation_count(func) -> bool:
    """No name, attribute or parameter of `func` says accumulation (`accum`, `micro`,
    `grad_acc`): a helper that scales by the count must name it somewhere."""
    return not any(_COUNT_WORD.search(getattr(node, "id", None) or getattr(node, "attr", None)
                                      or getattr(node, "arg", None) or "")
                   for node in ast.walk(func.node)
                   if isinstance(node, (ast.Name, ast.Attribute, ast.arg)))


def passes_parameters_of(arg: ast.expr, models: set) -> bool:
    """`model.parameters()` / `list(model.parameters())` given as the argument, for one of
    `models`."""
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and node.func.attr in ("parameters", "named_parameters")
               and dotted(node.func.value) in models for node in ast.walk(arg))
