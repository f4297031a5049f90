"""The proof a fix that removes gradient flow carries: the questions every fixable rule asks
before it attaches a `.detach()` or a `@torch.no_grad()`.

The proof is one use of the analysis's provenance (`core/provenance.py`): `detach_premises`
and `no_grad_premises` give the fix's `Premise`s, proven or not, each saying what was
searched; a fix is proposed only when all are proven. They are built from the questions
below, each answered with None (proven) or the sentence saying which part failed:

- `tensor_premise(value)`: the value is one tensor, made by a torch operation, a module or
  loss the analysis built or resolved (not a Python number, not a container, not a module
  or a constructor, not the output of an object typed only by its parameter's name);
- `container_premise(analysis, key)`: nothing made from what the container `key` holds
  reaches a gradient consumer, through any path the analysis follows: a backward or
  `torch.autograd.grad`, a loss, a call it cannot see into (positional, keyword, `*`/`**`
  unpacked, or as the receiver), a helper of the project that hands the value on to one of
  those (by parameter position, `**` to every parameter), an attribute store or a
  container kept on an object (other methods may read it), a `yield`, or a `return` to
  callers outside the file. Only host numbers (`.item()`, `float()`) are exempt: they
  hold no graph whatever the container held. The question does not depend on whether the
  contents carry a graph now, so it can be asked again on the fixed file (the property
  test does) and must give the same answer.

`function_premise(analysis, func)` is the same question for `@torch.no_grad()` on a whole
function: what it computes (its return, its stores on objects, its calls the analysis
cannot see into) reaches no gradient consumer.
"""
from __future__ import annotations

import ast
from typing import Dict, Iterator, List, Optional, Set, Tuple

from ..semantics import torchapi as api
from ..core import values as V
from ..core.astutil import dotted, short
from ..core.events import FunctionFacts
from ..core.memo import per_file
from ..core.provenance import Premise
from ..core.questions import Does
from ..core.values import Value

# what each failed tensor premise says
_NOT_A_TENSOR = (
    (V.PYSCALAR, "may be a Python number, not a tensor"),
    (V.CONTAINER, "may be a container, not one tensor"),
    (V.MODULE, "may be a module or a class, not a tensor"),
    (V.LOSS_FN, "may be a loss object, not a tensor"),
)
_STORING_METHODS = frozenset({"append", "extend", "insert", "add", "update", "appendleft",
                              "setdefault", "put", "push"})
_MAX_HELPER_ROUNDS = 4


def tensor_premise(value: Value) -> Optional[str]:
    """None when `value` is proven one tensor; else why it is not."""
    for tag, why in _NOT_A_TENSOR:
        if value.has(tag):
            return why
    if value.elements is not None or value.cls is not None:
        return "may be a tuple or an object of a project class, not one tensor"
    if value.has(V.BY_NAME):
        return ("is computed by an object known as a model or a loss only by its parameter's "
                "name, so it is not proven a tensor")
    if not value.has(V.TENSOR):
        return "is not proven a tensor"
    return None


def detach_premises(analysis, text: str, value: Value, target: str, key: str,
                    returns_freed: bool = False) -> Tuple[Premise, ...]:
    """The premises of `.detach()` on `text` stored into `target` (container `key`), each
    proven or not, with what was searched: the fix is proposed only when all hold."""
    why = tensor_premise(value)
    use = container_premise(analysis, key, returns_freed)
    return (
        Premise(f"`{text}` is one tensor",
                f"`{text}` {why}" if why else "made by a torch operation or a module the "
                                              "analysis resolved", why is None),
        Premise(f"nothing made from `{target}` needs its graph",
                f"what `{target}` holds {use}, which may need the graph" if use else
                "searched every backward, loss, call it cannot see into, object store, yield "
                "and return of the file, and the helpers they reach", use is None),
    )


def no_grad_premises(analysis, func) -> Tuple[Premise, ...]:
    """The premise of `@torch.no_grad()` on `func` (see `function_premise`)."""
    why = function_premise(analysis, func)
    return (Premise(f"nothing `{func.name}()` computes needs a graph",
                    why or "searched its calls, stores on objects, returns and helpers",
                    why is None),)


def carries(value: Value, key: str) -> bool:
    """`value` is made from what container `key` holds, and is not a host number."""
    if key not in value.containers:
        return False
    return value.grad or not (value.has(V.PYSCALAR) and not value.has(V.TENSOR))


def container_premise(analysis, key: str, returns_freed: bool = False) -> Optional[str]:
    """None when nothing made from container `key` reaches a gradient consumer; else the
    first such use. `returns_freed`: a backward of the same iteration runs through what is
    stored (its graph is freed), so handing the container back to a caller gives it nothing
    it could differentiate."""
    uses = _container_uses(analysis)
    found = uses.consumed.get(key)
    if found is None and not returns_freed:
        found = uses.returned.get(key)
    return found


class _Uses:
    def __init__(self) -> None:
        self.consumed: Dict[str, str] = {}   # key -> the first use that may need its graph
        self.returned: Dict[str, str] = {}   # key -> how it is handed to callers

    def add(self, value: Value, why: str, returned: bool = False, into: str = "") -> None:
        table = self.returned if returned else self.consumed
        for key in value.containers:
            if key != into and carries(value, key):
                table.setdefault(key, why)


@per_file("fix_proof_container_uses")
def _container_uses(analysis) -> _Uses:
    uses = _Uses()
    every = list(analysis.all_facts())
    escaping = _escaping_parameters(analysis, every)
    for facts in every:
        for value, why in _consumers(analysis, facts, escaping, stores=False):
            uses.add(value, why)
        for value, why, into in object_stores(analysis, facts):
            uses.add(value, why, into=into)
        returned = _handed_to_callers(analysis, facts)
        if returned is not None:
            uses.add(facts.returns, returned, returned=True)
    return uses


def _consumers(analysis, facts: FunctionFacts, escaping,
               stores: bool = True) -> Iterator[Tuple[Value, str]]:
    """(value, how it reaches a gradient consumer) for every such use in `facts` (with
    `stores`, the values put on objects too)."""
    for backward in facts.backwards:
        yield backward.value, f"reaches the backward at line {backward.site.line}"
    for call in facts.calls:
        why = _consuming_call(facts, call)
        if why is not None:
            for value in call.passed:
                yield value, why
    for call in facts.local_calls:
        wanted = escaping.get(call.callee)
        if not wanted:
            continue
        for position, value in arguments(facts, call):
            if position is None or position in wanted:
                yield value, (f"is handed to `{call.callee.name}()` at line {call.site.line}, "
                              f"which passes it on to a gradient consumer")
    for value, why, _into in object_stores(analysis, facts) if stores else ():
        yield value, why


def _consuming_call(facts: FunctionFacts, call) -> Optional[str]:
    """Why a call may need the graph of what it is given (None: it does not)."""
    where = f"`{short(call.node)}` at line {call.site.line}"
    if call.qualname in api.GRADIENT_FUNCS:
        return f"is differentiated by {where}"
    if call.qualname in api.LOSS_FUNCTIONS or facts.value(call.node.func).has(V.LOSS_FN):
        return f"reaches the loss {where}"
    if call.unseen and (call.qualname or "").split(".", 1)[0] not in api.NON_DIFFERENTIATING_PACKAGES:
        return f"reaches {where}, which the analysis cannot see into"
    return None


@per_file("fix_proof_object_stores")
def object_stores(analysis, facts: FunctionFacts) -> List[Tuple[Value, str, str]]:
    """(value, how, the key of the container written) for values put on an object
    (`self.x = v`, `obj.buf.append(v)`, `yield v`): another method or the generator's
    consumer may read them. What another method of the class reads from `self.x` carries
    `self.x`'s key (the interpreter marks it), so only the store's own container is exempt."""
    if facts.func is None:
        return []
    return [(value, why, _key_of(facts.func, target)) for value, why, target in _object_stores(facts)]


def _key_of(func, target: Optional[ast.AST]) -> str:
    """The container key the interpreter gives `target` (`Trainer.self.history`)."""
    while isinstance(target, ast.Subscript):
        target = target.value
    text = dotted(target) if target is not None else None
    if text is None:
        return ""
    if text.startswith("self.") and func.cls is not None:
        return f"{func.cls.name}.{text}"
    return f"{func.qualname}:{text}"


def _object_stores(facts: FunctionFacts) -> Iterator[Tuple[Value, str, Optional[ast.AST]]]:
    func = facts.func
    for node in _own_nodes(func.node):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            kept = next((t for t in targets if _on_object(t)), None)
            if kept is not None:
                yield facts.value(node.value), f"is stored on `{short(kept)}` at line {node.lineno}", kept
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _STORING_METHODS and _on_object(node.func.value):
            for arg in node.args:
                yield facts.value(arg), f"is stored on `{short(node.func.value)}` at line {node.lineno}", \
                    node.func.value
        elif isinstance(node, (ast.Yield, ast.YieldFrom)) and node.value is not None:
            yield facts.value(node.value), f"is yielded at line {node.lineno}", None


def _on_object(target: ast.AST) -> bool:
    """`self.x`, `obj.buf`, `self.cache[k]`: a place on an object, not a local name."""
    while isinstance(target, ast.Subscript):
        target = target.value
    return isinstance(target, ast.Attribute)


def _own_nodes(func_node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function body, not those of the functions and classes it defines."""
    todo = list(ast.iter_child_nodes(func_node))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def _handed_to_callers(analysis, facts: FunctionFacts) -> Optional[str]:
    """How a function's return may reach code the analysis does not see: no caller in this
    file (it is called from elsewhere). Callers in the file are followed: what they receive
    still says which containers it was made from."""
    func = facts.func
    if func is None or facts.returns is V.UNKNOWN or analysis.callers(func):
        return None
    return f"is returned by `{func.name}()` to callers outside this file"


def _escaping_parameters(analysis, every: List[FunctionFacts]) -> Dict[object, Set[int]]:
    """function -> parameter positions whose value reaches a gradient consumer inside it
    (or in the helpers it hands them to, a few levels deep)."""
    escaping: Dict[object, Set[int]] = {}
    for _ in range(_MAX_HELPER_ROUNDS):
        grew = False
        for facts in every:
            if facts.func is None:
                continue
            found = escaping.setdefault(facts.func, set())
            before = len(found)
            for value, _why in _consumers(analysis, facts, escaping):
                found |= value.params
            if facts.returns.params and _handed_to_callers(analysis, facts) is not None:
                found |= facts.returns.params
            grew = grew or len(found) != before
        if not grew:
            break
    return escaping


def arguments(facts: FunctionFacts, call) -> Iterator[Tuple[Optional[int], Value]]:
    """(parameter position, Value) for each argument of a call of a project function; the
    position is None for `*args` / `**kwargs` unpacked into it (any parameter may get it)."""
    callee, node = call.callee, call.node
    offset = 1 if callee.is_method and isinstance(node.func, ast.Attribute) else 0
    if offset:
        yield 0, facts.value(node.func.value)
    for i, arg in enumerate(node.args):
        yield (None if isinstance(arg, ast.Starred) else i + offset), facts.value(arg)
    for kw in node.keywords:
        if kw.arg is None:
            yield None, facts.value(kw.value)
        elif kw.arg in callee.params:
            yield callee.params.index(kw.arg), facts.value(kw.value)


# ---------------------------------------------------------------------- no_grad on a function
def function_premise(analysis, func, seen=None, helper: bool = False) -> Optional[str]:
    """None when turning autograd off in `func` changes nothing a gradient consumer gets:
    it differentiates nothing (nor do its helpers), and what it computes reaches no call the
    analysis cannot see into, no object store, no return to a caller that differentiates or
    to callers outside the file. Else the premise that failed. (For a `helper` it calls,
    what the helper returns comes back to `func` and is judged there: its other callers
    keep their grad mode.)"""
    seen = set() if seen is None else seen
    if func in seen:
        return None
    seen.add(func)
    if analysis.function_does(func, Does.DIFFERENTIATE):
        return f"`{func.name}()` or a helper it calls differentiates"
    facts = analysis.facts_for(func)
    for call in facts.calls:
        # a module given to a call, or a value that may carry a graph (also as the receiver
        # of a method: `model.load_state_dict(sd)` needs no gradient of `model`)
        given = call.args + call.kwargs
        if call.unseen and (call.qualname or "").split(".", 1)[0] not in \
                api.NON_DIFFERENTIATING_PACKAGES and (
                    any(_may_need_grad(v) for v in given)
                    or call.receiver is not None and call.receiver.grad):
            return (f"the model or its output reaches `{short(call.node)}` at line "
                    f"{call.site.line}, which the analysis cannot see into and which may "
                    f"need gradients")
    for value, why, _into in object_stores(analysis, facts):
        if value.grad:
            why = why.replace("is stored", "an output that may carry a graph is stored", 1)
            return why.replace("is yielded", "an output that may carry a graph is yielded", 1)
    returned = None if helper else _return_needing_graph(analysis, facts)
    if returned is not None:
        return returned
    for local in facts.local_calls:
        found = function_premise(analysis, local.callee, seen, helper=True)
        if found is not None:
            return found
    return None


def _may_need_grad(value: Value) -> bool:
    return value.grad or value.has(V.MODULE)


def _return_needing_graph(analysis, facts: FunctionFacts) -> Optional[str]:
    """A return that may carry a graph, to a caller of the file that differentiates or to
    callers outside the file."""
    func = facts.func
    if not _returns_graph(facts.returns):
        return None
    callers = analysis.callers(func)
    if not callers:
        return f"`{func.name}()` returns a value that may carry a graph to callers outside this file"
    for caller, _call in callers:
        owner = caller.func
        differentiates = analysis.function_does(owner, Does.DIFFERENTIATE) if owner is not None \
            else bool(Does.DIFFERENTIATE.sites_in(caller))
        if differentiates:
            return f"`{func.name}()` returns a value that may carry a graph to a caller that differentiates"
    return None


def _returns_graph(value: Value, depth: int = 0) -> bool:
    if value.grad:
        return True
    return depth < 2 and any(_returns_graph(e, depth + 1) for e in value.elements or ())


def target_text(node: ast.AST) -> str:
    return dotted(node) or short(node)
