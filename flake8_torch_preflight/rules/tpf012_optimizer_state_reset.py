"""TPF012 optimizer-state-reset: optimizer/scaler built inside the training loop.

## What it does
Reports the construction of an optimizer (`torch.optim.*`, `bnb.optim.*`, any
`*Optimizer` / `AdamW` / `SGD` class), an AMP `GradScaler` or an LR scheduler inside an
epoch or step loop that also steps it (directly or through a helper it calls with the
object), while the model it trains is not rebuilt in that loop.

## Why is this bad?
The optimizer's state lives in the object: Adam's moment estimates, SGD momentum buffers,
the scaler's loss scale and growth tracker, the scheduler's step count. Re-creating it each
epoch (or step) throws that state away: Adam restarts its bias-corrected warm-up, the loss
scale starts again at 65536 and skips steps while it re-calibrates, the schedule restarts at
its first learning rate. Training runs and silently degrades.

## Example
```python
model = Net().cuda()
for epoch in range(epochs):
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
```

## Use instead
```python
model = Net().cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
for epoch in range(epochs):
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
```

## Fix safety
No autofix: moving the construction out of the loop changes which parameters and learning
rate it sees when they are computed in the loop.

## Known limits
Quiet when the loop also builds a model (k-fold, trials, sweeps: any module constructed in
it, or by a helper it calls that returns or stores the module, or a model-named variable
rebound in it and then used as a module: called, `.parameters()`, handed to a helper; a
tensor named `model_pred` or a `torch.Generator` named `generator` is no model, nor is a
pipeline a validation helper builds and drops), restores state in it
(`load_state_dict`, `reset_parameters`, `apply(...)`), when the construction is under an
`if` in the loop (rebuilding at an unfreeze epoch, lazy creation), and when the object is
stepped only outside the loop or by code the analysis cannot see. A scheduler whose
optimizer is also rebuilt in the loop is left to the optimizer's finding.
"""
from __future__ import annotations

import ast
from typing import Iterator, Optional, Set

from ..analysis import Does, FileAnalysis
from ..analysis.semantics import torchapi as api
from ..analysis.core import values as V
from ..analysis.core.astutil import declared_outer, dotted, keyword, names_read, short
from ..analysis.core.events import CallSite, FunctionFacts
from ..analysis.semantics.nn_module import RETURNS_SELF
from ..findings import ERROR, Finding
from ..analysis.core.provenance import proven
from .base import Rule

_STEPS = {"optimizer": ("step",), "scaler": ("step", "update", "scale"), "scheduler": ("step",)}
_STATE_METHODS = frozenset({"load_state_dict", "reset_parameters", "apply", "init_weights",
                            "_init_weights", "reset_weights", "initialize_weights"})
_MAX_DEPTH = 2
# Methods of `nn.Module` a tensor or a generator does not have: calling one proves a module.
_MODULE_ONLY_METHODS = frozenset({"parameters", "named_parameters", "train", "eval",
                                  "state_dict", "load_state_dict", "modules", "children",
                                  "named_modules", "zero_grad", "requires_grad_", "apply"})


class OptimizerStateReset(Rule):
    code = "TPF012"
    name = "optimizer-state-reset"
    severity = ERROR
    # the premises every finding of this rule rests on (each proven by the search named)
    chain = (proven("the optimizer is rebuilt inside the training loop",
                    "its construction was seen in the loop"),)

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for facts in analysis.all_facts():
            for call in facts.calls:
                if not call.site.loops or call.qualname is None:
                    continue
                kind = _kind(call.qualname)
                if kind is None:
                    continue
                finding = self._judge(analysis, facts, call, kind)
                if finding is not None:
                    yield finding

    def _judge(self, analysis, facts: FunctionFacts, call: CallSite, kind: str) -> Optional[Finding]:
        target = _bound_to(call)
        for loop in reversed(call.site.loops):
            if call.site.conds_inside(loop):
                return None   # rebuilt under a condition: an unfreeze epoch, lazy creation
            step = _stepped_in(analysis, facts, loop, call, target, kind)
            if step is None:
                continue
            if not analysis.loop_does(facts, loop, Does.BACKWARD):
                return None
            why_quiet = _model_rebuilt(analysis, facts, loop, call, kind)
            if why_quiet:
                return None
            label = {"optimizer": "optimizer", "scaler": "GradScaler",
                     "scheduler": "LR scheduler"}[kind]
            lost = {"optimizer": "its moment/momentum state restarts",
                    "scaler": "its loss scale restarts at the initial value",
                    "scheduler": "the schedule restarts at its first step"}[kind]
            name = f"`{target}`" if target else f"`{short(call.node)}`"
            model = _model_text(call, kind)
            model_words = (f"the model `{model}` is not rebuilt in it" if model
                           else "no model is built in it")
            return self.finding(
                call.site,
                f"{label} {name} is re-created every iteration of the loop at line "
                f"{loop.lineno}: {lost}",
                f"`{short(call.node)}` at line {call.site.line} inside the loop at line "
                f"{loop.lineno}, which steps it at line {step}; {model_words}",
                f"construct the {label} once, before the loop at line {loop.lineno}")
        return None


def _kind(qual: str) -> Optional[str]:
    if qual in api.SCALER_NAMES:
        return "scaler"
    if api.SCHEDULER_RE.match(qual):
        return "scheduler"
    if api.OPTIMIZER_RE.match(qual) or api.OPTIMIZER_FACTORY_RE.match(qual):
        return "optimizer"
    return None


def _bound_to(call: CallSite) -> Optional[str]:
    """`optimizer` for `optimizer = torch.optim.Adam(...)`."""
    stmt = call.site.stmt
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is call.node:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if len(targets) == 1:
            return dotted(targets[0])
    return None


def _stepped_in(analysis, facts, loop, call: CallSite, target: Optional[str],
                kind: str) -> Optional[int]:
    """The line where `loop` steps the object `call` made, or None."""
    methods = _STEPS[kind]
    for other in facts.calls:
        if loop not in other.site.loops or other.method not in methods:
            continue
        recv = other.receiver
        if (recv is not None and recv.node is call.node) or (
                target and isinstance(other.node.func, ast.Attribute)
                and dotted(other.node.func.value) == target):
            return other.site.line
    if target is None:
        return None
    for local in facts.local_calls:
        if loop not in local.site.loops:
            continue
        if _helper_steps(analysis, local.callee, local.node, target, methods, 0):
            return local.site.line
    return None


def _helper_steps(analysis, func, node: ast.Call, target: str, methods, depth: int) -> bool:
    """`func`, called as `node`, steps what the caller calls `target`."""
    if depth > _MAX_DEPTH:
        return False
    names: Set[str] = set()
    offset = 1 if func.is_method and isinstance(node.func, ast.Attribute) else 0
    for i, arg in enumerate(node.args):
        if dotted(arg) == target and i + offset < len(func.params):
            names.add(func.params[i + offset])
    for kw in node.keywords:
        if kw.arg and dotted(kw.value) == target:
            names.add(kw.arg)
    if target.startswith("self.") and func.is_method:
        names.add(target)
    if not names:
        return False
    facts = analysis.facts_for(func)
    for other in facts.calls:
        if other.method in methods and isinstance(other.node.func, ast.Attribute) \
                and dotted(other.node.func.value) in names:
            return True
    for local in facts.local_calls:
        for name in names:
            if _helper_steps(analysis, local.callee, local.node, name, methods, depth + 1):
                return True
    return False


def _model_text(call: CallSite, kind: str) -> Optional[str]:
    """`model` for `Adam(model.parameters())`."""
    if kind != "optimizer":
        return None
    arg = call.node.args[0] if call.node.args else keyword(call.node, "params")
    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) \
            and arg.func.attr in ("parameters", "named_parameters"):
        return dotted(arg.func.value)
    return None


def _model_rebuilt(analysis, facts: FunctionFacts, loop, call: CallSite, kind: str) -> bool:
    """The loop builds (or re-initialises) a model, or the object's model/optimizer is
    rebound in it: a fresh optimizer is then what the author wants."""
    rebinds = _loop_bindings(facts, loop)
    return (_own_model_rebound(analysis, facts, loop, call, kind, rebinds)
            or any(_model_named_rebuilt(analysis, facts, loop, name) for name in rebinds)
            or _loop_builds_or_restores(analysis, facts, loop))


def _loop_bindings(facts: FunctionFacts, loop) -> Set[str]:
    """Names the loop rebinds, its own target included (`for member in members:`)."""
    rebinds = set(facts.loop_rebinds.get(loop, frozenset()))
    target = getattr(loop, "target", None)
    if target is not None:
        elts = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
        rebinds.update(t for t in (dotted(e) for e in elts) if t)
    return rebinds


def _own_model_rebound(analysis, facts, loop, call: CallSite, kind: str, rebinds) -> bool:
    """What the object itself is built from is bound in the loop: its model (not merely
    moved), the parameters of `Adam([delta])` (a fresh perturbation, a per-sample latent),
    or a scheduler's optimizer (that optimizer's finding covers it)."""
    model = _model_text(call, kind)
    if model:
        return (model in rebinds or model.split(".")[0] in rebinds - {"self"}) \
            and not _only_moved(analysis, facts, loop, model)
    if kind == "optimizer":
        arg = call.node.args[0] if call.node.args else keyword(call.node, "params")
        return arg is None or bool(names_read(arg) & set(rebinds))
    if kind == "scheduler":
        arg = call.node.args[0] if call.node.args else keyword(call.node, "optimizer")
        text = dotted(arg) if arg is not None else None
        return text is None or text in rebinds
    return False


def _model_named_rebuilt(analysis, facts, loop, name: str) -> bool:
    """A model-named variable (`student`, `generator`) the loop rebinds to what may be a new
    model and then uses as one. A tensor named like a model (`model_pred`, `model_input`,
    a `torch.Generator` called `generator`) is only read as data: it trains nothing."""
    return bool(api.MODEL_PARAM_RE.match(name.rsplit(".", 1)[-1])) \
        and _rebound_opaquely(analysis, facts, loop, name) \
        and _used_as_module(analysis, facts, loop, name)


def _loop_builds_or_restores(analysis, facts: FunctionFacts, loop) -> bool:
    """The loop re-initialises a model (`load_state_dict`, `apply(init)`), makes a fresh
    trainable tensor, or builds a module, itself or in a helper whose module outlives it."""
    local_nodes = {id(c.node): c.callee for c in facts.local_calls}
    for other in analysis.in_loop(facts, "calls", loop):
        if other.method in _STATE_METHODS or (other.result.leaf and other.result.grad):
            return True
        if _builds_module(other):
            return True
        callee = local_nodes.get(id(other.node))
        if callee is not None and _function_builds_module(analysis, callee, 0):
            return True
    return False


def _rebindings(analysis, facts: FunctionFacts, loop, name: str):
    """The assignments `name = <expr>` in `loop` that contain a call, or None when `name` is
    also bound some other way there (`model = other`, `for model in ...`)."""
    stmts = {}
    for call in analysis.in_loop(facts, "calls", loop):
        stmt = call.site.stmt
        if isinstance(stmt, ast.Assign) and any(dotted(t) == name for t in stmt.targets):
            stmts.setdefault(id(stmt), stmt)
    return list(stmts.values()) or None


def _only_moved(analysis, facts: FunctionFacts, loop, model: str) -> bool:
    """Every rebinding of `model` in the loop is `model = model.to(...)` (or `.cuda()`,
    `.train()`…): the same module, moved, not a new one."""
    stmts = _rebindings(analysis, facts, loop, model)
    return stmts is not None and all(
        isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Attribute)
        and s.value.func.attr in RETURNS_SELF and dotted(s.value.func.value) == model
        for s in stmts)


def _rebound_opaquely(analysis, facts: FunctionFacts, loop, name: str) -> bool:
    """A model-named variable the loop rebinds to something that is not a tensor
    (`student = copy.deepcopy(teacher)`, a library's loader): it may be a new model. Not a
    forward's output (`model_pred = unet(...).sample`) nor the same module moved."""
    stmts = _rebindings(analysis, facts, loop, name)
    if stmts is None:
        return True
    return any(not facts.value(s.value).is_tensor_like for s in stmts) \
        and not _only_moved(analysis, facts, loop, name)


def _builds_module(call: CallSite) -> bool:
    result = call.result
    if not result.has(V.MODULE) or result.has(V.LOSS_FN) or result.has(V.ACTIVATION_MODULE):
        return False
    return result.node is call.node or (call.qualname is None and call.method is None
                                        and result.cls is not None)


def _used_as_module(analysis, facts: FunctionFacts, loop, name: str) -> bool:
    """The loop calls `name` (a forward), calls a method only modules have on it, or hands
    it to a helper of the file or to a call that wraps it into a module (`DDP(student)`)."""
    local_nodes = {id(c.node) for c in facts.local_calls}
    for call in analysis.in_loop(facts, "calls", loop):
        func = call.node.func
        if dotted(func) == name:
            return True
        if isinstance(func, ast.Attribute) and func.attr in _MODULE_ONLY_METHODS \
                and dotted(func.value) == name:
            return True
        passed = any(dotted(arg) == name for arg in
                     list(call.node.args) + [kw.value for kw in call.node.keywords])
        if passed and (id(call.node) in local_nodes or call.result.has(V.MODULE)):
            return True
    return False


def _function_builds_module(analysis, func, depth: int) -> bool:
    """`func` (or a helper it calls) builds a module that outlives the call: returned, or
    stored on an object or a global. A pipeline a validation helper builds, uses and drops
    is no new model of the loop that calls it."""
    if depth > _MAX_DEPTH:
        return False
    facts = analysis.facts_for(func)
    if _escapes(facts.returns) or any(c.method in _STATE_METHODS for c in facts.calls):
        return True
    if any(_builds_module(c) and _stored_outside(func, c) for c in facts.calls):
        return True
    return any(_function_builds_module(analysis, c.callee, depth + 1) for c in facts.local_calls)


def _escapes(returned: V.Value) -> bool:
    return returned.has(V.MODULE) and not returned.has(V.LOSS_FN) \
        and not returned.has(V.ACTIVATION_MODULE)


def _stored_outside(func, call: CallSite) -> bool:
    """The module `call` builds may outlive `func`: assigned to an attribute, an item or a
    global name, handed on by an expression statement (`models.append(Net())`), or built in
    any statement other than a plain local assignment."""
    stmt = call.site.stmt
    if isinstance(stmt, ast.Expr):
        return stmt.value is not call.node
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        return True
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    globals_ = declared_outer(func.node)
    return any(not isinstance(t, ast.Name) or t.id in globals_ for t in targets)
