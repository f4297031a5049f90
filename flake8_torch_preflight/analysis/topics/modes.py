"""Train/eval mode along a loop body: the ordered mode events TPF007 reasons about.

For a loop, the analysis lists in source order what one iteration does to module modes:
`train` / `eval` calls, backward passes (`work`), forward passes (to know which model is
trained) and calls of imported project functions that might call `train()` for us. Calls of
file-local helpers are expanded in place (transitively, memoised per function), with the
helper's receivers translated into the caller's names through the call's arguments, so
`evaluate(model, ...)` whose body calls `net.eval()` is an `eval` of `model` at the call.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional, Tuple

from ..semantics import torchapi as api
from ..core import values as V
from ..core.astutil import dotted, is_const
from .epochs import argument_for, resolve_values
from ..core.memo import per_file
from ..core.events import FunctionFacts, Site
from ..core.questions import Does
from ..project.resolution import is_project_name

# Top-level packages that are libraries, not the project's own code: a call into them never
# toggles the user's model back to training mode.


@dataclass(frozen=True)
class ModeEvent:
    kind: str                  # train | eval | work | forward | maybe_train
    receiver: Optional[str]    # receiver text in the loop's function; None: unknown
    site: Site                 # the site in the loop's function (a helper's call site)
    inner_line: int            # the line of the event itself (inside the helper if any)
    via: Optional[str] = None  # name of the helper the event happens in
    no_grad: bool = False      # forward, work: autograd off there (the backward never runs)
    aliases: FrozenSet[str] = frozenset()   # forward: the wrapped model (`DDP(model)`)
    args: Tuple[str, ...] = ()              # maybe_train: argument texts


def related(a: Optional[str], b: Optional[str]) -> bool:
    """Same object or one inside the other (`model` / `model.module` / `self.model`)."""
    if a is None or b is None:
        return True
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def loop_events(analysis, facts: FunctionFacts, loop: ast.AST) -> List[ModeEvent]:
    """Mode events of one iteration of `loop`, in source order, helpers expanded."""
    return _events_by_loop(analysis, facts).get(loop, [])


@per_file("mode_events_by_loop")
def _events_by_loop(analysis, facts: FunctionFacts):
    index = {}
    for event in _events(analysis, facts):
        for enclosing in event.site.loops:
            index.setdefault(enclosing, []).append(event)
    return index


def function_events(analysis, facts: FunctionFacts) -> List[ModeEvent]:
    """Mode events of the whole function, in source order, helpers expanded."""
    return _events(analysis, facts)


# (position, order among events at one position, event): sorted into source order
_Raw = Tuple[Tuple[int, int], int, ModeEvent]


@per_file("mode_events", guard=[])
def _events(analysis, facts: FunctionFacts) -> List[ModeEvent]:
    """The mode events of one function in source order, its helpers' expanded in place
    (memoised; a helper that calls back into a function being expanded adds nothing)."""
    local_nodes = {id(c.node) for c in facts.local_calls}
    raw: List[_Raw] = _own_events(facts)
    resolved = _parameter_events(analysis, facts)
    raw += resolved
    if _trains(analysis, facts):
        raw += _opaque_train_events(facts, local_nodes | {id(r[2].site.node) for r in resolved})
    raw += _project_call_events(facts, local_nodes)
    for call in facts.local_calls:
        raw += _helper_events(analysis, call)
    raw.sort(key=lambda item: (item[0], item[1]))
    return [item[2] for item in raw]


def _own_events(facts: FunctionFacts) -> List[_Raw]:
    """Mode calls, backward passes and forward passes written in the function itself."""
    raw: List[_Raw] = []
    for mode in facts.modes:
        raw.append((_pos(mode.site), 0, ModeEvent(mode.mode, mode.receiver, mode.site,
                                                  mode.site.line)))
    for back in facts.backwards:
        raw.append((_pos(back.site), 2, ModeEvent("work", None, back.site, back.site.line,
                                                  no_grad=back.site.no_grad)))
    for fwd in facts.forwards:
        if fwd.module.has(V.LOSS_FN) or fwd.module.has(V.ACTIVATION_MODULE):
            continue
        raw.append((_pos(fwd.site), 1, ModeEvent("forward", _forward_receiver(fwd), fwd.site,
                                                 fwd.site.line, no_grad=fwd.site.no_grad,
                                                 aliases=_wrapped_aliases(fwd))))
    return raw


def _forward_receiver(fwd) -> Optional[str]:
    """`model` for `model(x)` and `model.forward(x)`."""
    node = fwd.site.node
    text = dotted(node.func) if isinstance(node, ast.Call) else None
    if text is not None and text.endswith(".forward"):
        text = text[: -len(".forward")]
    return text


def _wrapped_aliases(fwd) -> FrozenSet[str]:
    """The model a DDP/FSDP wrapper wraps (`ddp = DDP(model)`: `model`)."""
    wrap = fwd.module.node
    if isinstance(wrap, ast.Call) and wrap.args and fwd.module.has(V.DDP):
        inner = dotted(wrap.args[0])
        if inner:
            return frozenset({inner})
    return frozenset()


def _parameter_events(analysis, facts: FunctionFacts) -> List[_Raw]:
    """Mode switches and forwards of a parameter whose name says nothing (`def test(predictor,
    ...)`: `predictor.eval()`, `predictor(x_i, x_j)`) when every call of the function in this
    file passes a module for it (`test(predictor, ...)` with `predictor = LinkPredictor(...)`).
    A parameter some caller fills with anything else, or that no caller is seen filling, stays
    unknown (`evaluator.eval(...)` is the metric's, not a module's)."""
    if facts.func is None:
        return []
    params = facts.func.params
    seen = {id(m.site.node) for m in facts.modes} | {id(f.site.node) for f in facts.forwards}
    candidates = []
    for call in facts.calls:
        if id(call.node) in seen:
            continue
        if call.method in ("eval", "train") and _module_mode_signature(call):
            receiver = dotted(call.node.func.value)
            if receiver is not None and receiver.split(".", 1)[0] in params:
                candidates.append((call, receiver, call.method))
        elif call.method is None and call.qualname is None and \
                isinstance(call.node.func, ast.Name) and call.node.func.id in params:
            candidates.append((call, call.node.func.id, "forward"))
    if not candidates:
        return []   # (the callers are only asked about functions that could use the answer)
    names = _module_parameters(analysis, facts)
    raw: List[_Raw] = []
    for call, receiver, what in candidates:
        if what == "forward":
            if receiver in names:
                raw.append((_pos(call.site), 1, ModeEvent("forward", receiver, call.site,
                                                          call.site.line,
                                                          no_grad=call.site.no_grad)))
        elif _holds_parameter(call.receiver, receiver, names):
            mode = "train" if what == "train" and not (
                call.node.args and is_const(call.node.args[0], False)) else "eval"
            raw.append((_pos(call.site), 0, ModeEvent(mode, receiver, call.site,
                                                      call.site.line)))
    return raw


def _module_parameters(analysis, facts: FunctionFacts) -> Dict[str, int]:
    """The function's parameters (name: position) that every call of it in this file fills
    with a module; a name rebound in the body no longer holds the argument."""
    func = facts.func
    if func is None:
        return {}
    rebound = analysis.bindings(func).names
    out = {}
    for i, name in enumerate(func.params):
        if name in rebound or (i == 0 and func.cls is not None):
            continue
        held = resolve_values(analysis, facts, V.Value(params=frozenset({i})))
        if held and all(_holds_module(v) for v in held):
            out[name] = i
    return out


def _holds_parameter(value, text: str, names: Dict[str, int]) -> bool:
    """`text` (`predictor`, `predictor.lins`) reads a module parameter, unchanged."""
    head = text.split(".", 1)[0]
    return head in names and value is not None and value.params == frozenset({names[head]})


def _module_mode_signature(call) -> bool:
    """`x.eval()`, `x.train()`, `x.train(True/False)`: the shapes of `nn.Module`'s methods."""
    node = call.node
    if node.keywords or not isinstance(node.func, ast.Attribute):
        return False
    if call.method == "eval":
        return not node.args
    return not node.args or (len(node.args) == 1 and isinstance(node.args[0], ast.Constant)
                             and isinstance(node.args[0].value, bool))


def _holds_module(value) -> bool:
    """A model (not a loss or an activation, whose modes and calls say nothing)."""
    if value.has(V.LOSS_FN) or value.has(V.ACTIVATION_MODULE):
        return False
    return value.has(V.MODULE) or (value.cls is not None and value.cls.is_module)


def _opaque_train_events(facts: FunctionFacts, local_nodes) -> List[_Raw]:
    """`task.get_trainable_module().train()`, `trainable.train()`: the receiver is a value
    the analysis cannot see; in a function that trains it is the trained module, and it
    cannot be told apart from the model another helper evaluates (receiver None)."""
    moded = {id(m.site.node) for m in facts.modes} | local_nodes
    return [(_pos(call.site), 0, ModeEvent("train", None, call.site, call.site.line))
            for call in facts.calls
            if call.method == "train" and id(call.node) not in moded and _opaque(call)]


def _project_call_events(facts: FunctionFacts, local_nodes) -> List[_Raw]:
    """Calls into other files of the project: they might switch a model back to training."""
    raw: List[_Raw] = []
    for call in facts.calls:
        if id(call.node) in local_nodes or not is_project_name(call.qualname):
            continue
        texts = tuple(t for t in (dotted(a) for a in call.node.args) if t)
        texts += tuple(t for t in (dotted(k.value) for k in call.node.keywords) if t)
        raw.append((_pos(call.site), 1, ModeEvent("maybe_train", None, call.site,
                                                  call.site.line, args=texts)))
    return raw


def _helper_events(analysis, call) -> List[_Raw]:
    """A file-local helper's events at its call site, its receivers in the caller's names."""
    callee = call.callee
    raw: List[_Raw] = []
    for i, ev in enumerate(_events(analysis, analysis.facts_for(callee))):
        def translated(text: Optional[str]) -> Optional[str]:
            return _translate(text, callee, call.node)
        receiver = translated(ev.receiver)
        if ev.kind in ("eval", "train") and _local_of(analysis, callee, ev.receiver):
            if ev.kind == "eval" or _built_in(analysis, callee, ev.receiver):
                continue   # the call's own model (`best = copy.deepcopy(model)`, a probe)
            receiver = None   # a local alias (`net = self.model`): any of the caller's models
        raw.append((_pos(call.site), 3 + i, ModeEvent(
            ev.kind, receiver, call.site, ev.inner_line, ev.via or callee.name,
            ev.no_grad or call.site.no_grad,   # a helper called under no_grad records nothing
            frozenset(t for t in map(translated, ev.aliases) if t),
            tuple(t for t in map(translated, ev.args) if t))))
    return raw


def _local_of(analysis, func, text: Optional[str]) -> bool:
    """`text` names a local variable of `func` (bound in its body, not a parameter): what it
    holds is the call's own object, or an alias the caller cannot name."""
    if text is None:
        return False
    head = text.split(".", 1)[0]
    return head not in func.params and head in analysis.bindings(func).names


def _built_in(analysis, func, text: str) -> bool:
    """The local holds a module the function constructs itself (`log = LogReg(d, k)`): an
    object of this call, never one of the caller's models."""
    value = analysis.facts_for(func).env.get(text.split(".", 1)[0])
    node = value.node if value is not None else None
    body = func.node
    return isinstance(node, ast.Call) and _holds_module(value) and \
        body.lineno <= node.lineno <= getattr(body, "end_lineno", body.lineno)


def _trains(analysis, facts: FunctionFacts) -> bool:
    """The function (or module body) runs a backward pass itself or through its helpers."""
    if facts.func is not None:
        return analysis.function_does(facts.func, Does.BACKWARD)
    return bool(facts.backwards) or any(analysis.function_does(c.callee, Does.BACKWARD)
                                        for c in facts.local_calls)


# Kinds of values whose `train()` is not `nn.Module.train` (or is already a recorded mode).
_KNOWN_KINDS = frozenset({V.MODULE, V.OPTIMIZER, V.SCHEDULER, V.LOADER, V.ACCELERATOR, V.FABRIC,
                          V.CONTAINER, V.LOSS_FN, V.SCALER, V.TENSOR, V.PYSCALAR})


def _opaque(call) -> bool:
    """`x.train()` / `x.train(True)` on a value of unknown kind, not a library function."""
    node = call.node
    if call.qualname or node.keywords or len(node.args) > 1:
        return False
    if node.args and not is_const(node.args[0], True):
        return False
    receiver = call.receiver or V.UNKNOWN
    return not (receiver.tags & _KNOWN_KINDS) and receiver.cls is None


def _pos(site: Site) -> Tuple[int, int]:
    node = site.node
    return (getattr(node, "lineno", site.line), getattr(node, "col_offset", 0))


def _translate(text: Optional[str], func, call: ast.Call) -> Optional[str]:
    """A helper's receiver text as the caller names it (None when it cannot be told)."""
    if text is None:
        return None
    head, _, rest = text.partition(".")
    if head not in func.params:
        return text   # a global or closure name: the same object in the caller
    expr = argument_for(func, call, func.params.index(head))
    base = dotted(expr) if expr is not None else None
    if base is None:
        return None
    return f"{base}.{rest}" if rest else base


# ---------------------------------------------------------------------------------- loops
def exits_after(loop: ast.AST) -> FrozenSet[int]:
    """ids of nodes in `loop`'s body after which the block leaves the loop (break/return)."""
    marked = set()
    todo = [loop.body]
    while todo:
        block = todo.pop()
        exit_at = next((i for i, s in enumerate(block)
                        if isinstance(s, (ast.Break, ast.Return, ast.Raise))), None)
        for i, stmt in enumerate(block):
            if exit_at is not None and i < exit_at:
                marked.update(id(n) for n in ast.walk(stmt))
            if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef,
                                 ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for name in ("body", "orelse", "finalbody"):
                child = getattr(stmt, name, None)
                if isinstance(child, list) and child and isinstance(child[0], ast.stmt):
                    todo.append(child)
            for handler in getattr(stmt, "handlers", ()):
                todo.append(handler.body)
    return frozenset(marked)


def cond_texts(site: Site, loop: ast.AST) -> FrozenSet[str]:
    """Names tested by the non-counter `if`s between `loop` and `site` (`phase`, `args.x`)."""
    out = set()
    for cond in site.conds_inside(loop) if loop in site.loops else ():
        if cond.counter:
            continue
        for node in ast.walk(cond.test):
            if isinstance(node, (ast.Name, ast.Attribute)):
                text = dotted(node)
                if text:
                    out.add(text)
    return frozenset(out)


def last_iteration_only(site: Site, loop: ast.AST) -> bool:
    """Under `if epoch == epochs - 1:` / `if step >= max_steps:`: no next iteration follows."""
    target = getattr(loop, "target", None)
    names = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)} if target else set()
    for cond in site.conds_inside(loop) if loop in site.loops else ():
        test = cond.test
        if cond.negated or not isinstance(test, ast.Compare):
            continue
        if not all(isinstance(op, (ast.Eq, ast.GtE, ast.Gt)) for op in test.ops):
            continue
        mentioned = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
        if (names & mentioned or not names) and not all(
                isinstance(c, ast.Constant) for c in test.comparators):
            return True
    return False


@per_file("optimized_modules")
def optimized_modules(analysis) -> FrozenSet[str]:
    """Texts of the modules whose parameters an optimizer of the file is built over
    (`Adam(model.parameters())`, `SGD([{"params": net.head.parameters()}])`): models the
    file trains, whether or not their training forward is visible."""
    found = set()
    for facts in analysis.all_facts():
        for call in facts.calls:
            if call.qualname is None or not api.OPTIMIZER_RE.match(call.qualname):
                continue
            arguments = list(call.node.args) + [kw.value for kw in call.node.keywords]
            for node in (n for arg in arguments for n in ast.walk(arg)):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr in ("parameters", "named_parameters"):
                    text = dotted(node.func.value)
                    if text is not None:
                        found.add(text)
    return frozenset(found)


@per_file("frozen_modules")
def frozen_modules(analysis) -> FrozenSet[str]:
    """Modules the file freezes anywhere (`x.requires_grad_(False)`, a loop setting
    `requires_grad = False` over `x.parameters()`): frozen teachers, EMA copies, VAEs, and the
    backbone of a linear probe, which is kept in `eval()` on purpose. As written (`model`,
    `model.encoder`): a helper freezing its parameter `model` and the training function's
    `model` are taken to be the same object, which can only make the rule quieter."""
    out = set()
    for facts in analysis.all_facts():
        out.update(freeze.module for freeze in facts.freezes)
        for call in facts.calls:   # on receivers of unknown kind too
            if call.method == "requires_grad_" and call.node.args and \
                    is_const(call.node.args[0], False) and isinstance(call.node.func, ast.Attribute):
                text = dotted(call.node.func.value)
                if text:
                    out.add(text)
    return frozenset(out)
