"""TPF001 retained-graph: a grad-bearing value is stored across loop iterations.

## What it does
Reports a value that may carry a live autograd graph (a model output, a loss, anything
computed from them) being stored, inside a loop, into something that outlives the iteration:
`losses.append(loss)`, `history[k] = out`, `self.last = loss`, `total += loss` where the
container or accumulator was created before the loop.

It is an **error** when nothing in the same iteration runs backward through the stored graph:
every iteration's activations stay in GPU memory and the run dies with an out-of-memory error
after N steps. It is a **warning** when a backward pass over that graph already runs in the
iteration: activations are freed, but the graph nodes still accumulate and the stored value
stays differentiable.

## Why is this bad?
Autograd keeps every tensor it needs for the backward pass alive as long as something
references the graph. A list of losses references all of them. Memory grows linearly with
the number of steps until the job crashes, usually long after the bug was written.

## Example
```python
losses = []
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss)
```

## Use instead
```python
losses = []
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.detach())
```

## Fix safety
Safe where proven: appending `.detach()` to the stored expression keeps the value on its
device and only drops the graph. `tpf fix` applies it only where the analysis proves both
premises of `analysis/fix_proof.py`: the stored value is one tensor, made by a torch
operation or by a module or loss the file builds or resolves (not a Python number, a tuple,
a container, a module or a class, nor the output of a parameter known as a model or a loss
only by its name); and nothing made from the container reaches a backward, a loss, a call
the analysis cannot see into (positional, by keyword, `*`/`**`-unpacked, or as the
receiver), a helper of the project that hands it on, an attribute of an object, a `yield`,
or a return to callers outside the file (allowed when a backward of the same iteration
already ran through the stored graph). Otherwise the finding stays and its fix text names
the premise that failed. The message suggests `.item()` only outside hot training loops,
since `.item()` waits for the GPU (see TPF010).

## Known limits
An error needs every premise proven (`analysis/core/provenance.py`): a stored value made
by an object known as a model or a loss only by its parameter's name is reported as a
warning whose evidence names that assumption. A module frozen by `requires_grad_(False)`,
by `p.requires_grad = False` over its `parameters()`, or by its own class (which freezes
itself in `__init__` or runs `forward` under `no_grad`/`inference_mode`) makes no graph of
its own, and casts to an integer dtype (`.long()`, token ids) carry none. A local list
filled by a walk over one output (`for i, p in enumerate(preds)`, `range(x.shape[1])`) in
a function that runs no backward lives for that call only.
Quiet when the value went through a graph breaker (`.detach()`, `.item()`, `float()`,
comparisons, `argmax`, `torch.no_grad()`), when the container is created inside the loop,
when the stored graphs are later consumed by a backward anywhere in the file
(`torch.stack(losses).sum().backward()`, chunked or pipelined micro-batch losses), when a
function that runs no backward itself returns them as a loss (perceptual / contrastive losses
built in a helper) or as a module's output (U-Net skip connections), for `nn.Parameter`
leaves, for loops that walk a model's layers (`for block in self.blocks`), for lists local to
an `nn.Module` method or to a class with `forward` or with a base from the project that
builds `torch.nn` layers in `__init__` and never trains (they die with the call, and autograd
keeps those activations for the backward anyway), for a local list filled by the only loop of
a function that steps the optimizer after it, or by a `for _ in range(grad_accum_steps)` loop
(one step's micro-batches, also with a DeepSpeed `engine.step()` inside), for iterative updates
whose added term is computed from the accumulator itself (`x = x + dt * model(x)`: samplers,
ODE steps), when every in-file caller runs the function under `no_grad`, and inside pytest
`test_*` functions. A value carries a graph when the code proves it, and names only break
ties: a helper that returns `loss_fn(out, y).detach().item()` returns a number whatever it
is given, a helper's return under the caller's `no_grad` carries no graph, a loss of a
detached prediction and a parameter-free `torch.nn` layer (`nn.Upsample`, pooling,
activations) on a detached or fresh (`torch.randn`) input make none, and a parameter named
`model`, `module` or `criterion` that every caller in the file fills with a class, a
`functools.partial` or a lambda holds a constructor (calling it runs no forward); with no
caller in the file the name decides. Quiet, too, for pieces of graphs made before the loop in
the function's own body (`for part in torch.chunk(feats, n)`), for dict entries keyed by a
short inner loop whose enclosing iteration runs a backward (`for k in keys: feats[k] = ...`
in a micro-step), and when the function is only called under `no_grad` up to three calls
away. `torch.autograd.grad(loss, ...)` consumes like a backward, also through
helpers that differentiate what they are passed. Overwriting an attribute each
iteration (`self.last_loss = loss`) keeps one graph, not one per step, and is not reported;
`self.total = self.total + loss` is. Values whose origin the analysis cannot see (a call into
another package) are assumed not to carry a graph, unless a backward proves it: after
`loss.backward()` on a value known to be a tensor (built by torch ops from a model of
unknown kind), or `accelerator.backward(loss)` / `fabric.backward(loss)` /
`engine.backward(loss)` on a proven framework object, the name holds a graph that this
backward ran through (stores after it are warnings); `loss = model.loss(...)` of an unknown
model is not known to be a tensor and stays unjudged. A value read back from a container
through a breaker still counts as consuming it. A per-step list filled by a loop whose count
does not name accumulation (`for _ in range(k)` with `engine.step()` inside) is still
reported as a warning, though it may live only for one step.
"""
from __future__ import annotations

import ast
from typing import Dict, FrozenSet, Iterator, NamedTuple, Optional, Set

from ..analysis import Does, FileAnalysis
from ..analysis.semantics import torchapi as api
from ..analysis.core import values as V
from ..analysis.topics.accumulation import accumulation_loop
from ..analysis.topics.classes import module_like
from ..analysis.topics.epochs import resolve_values
from ..analysis.core.astutil import bound_names, short
from ..analysis.core.events import FunctionFacts, Store
from ..analysis.core.provenance import first_unproven, graph_premise, proven
from ..analysis.topics.fix_proof import arguments, detach_premises
from ..analysis.core.memo import per_file
from ..findings import ERROR, WARNING, Finding, FixPlan
from .base import Rule

# Stores `.detach()` can be appended to, and stored expressions that are not one tensor.
_FIXABLE_HOW = frozenset({"append", "insert", "add", "extend", "setitem", "setattr", "augassign"})
_NOT_TENSORS = (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp,
                ast.GeneratorExp, ast.Constant, ast.Starred, ast.JoinedStr, ast.Lambda)
# Expressions `.detach()` binds to whole when written after them.
_ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript)
_VERBS = {"append": "appended to", "extend": "extended into", "insert": "inserted into",
          "add": "added to", "update": "merged into", "setitem": "stored into",
          "setattr": "assigned to", "augassign": "accumulated into"}


_BOUNDED_RANGE = 16   # `for i in range(3)` over detection levels: a structure, not steps


class RetainedGraph(Rule):
    code = "TPF001"
    name = "retained-graph"
    severity = ERROR
    fix_safety = "safe"

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        consumed = _keys_consumed_by_backward(analysis)
        for facts in analysis.all_facts():
            func = facts.func
            if func is not None and func.name.startswith("test_"):
                continue
            if func is not None and _called_without_grad(analysis, func):
                continue          # `with torch.no_grad(): feats = extract(model, loader)`
            returned = _returned_for_backward(analysis, facts)
            for store in facts.stores:
                if self._quiet(analysis, facts, store, consumed, returned):
                    continue
                yield self._report(analysis, facts, store)

    @staticmethod
    def _quiet(analysis: FileAnalysis, facts: FunctionFacts, store: Store, consumed: Set[str],
               returned) -> bool:
        value = store.value
        if store.site.no_grad or not value.grad or value.leaf:
            return True
        innermost = store.site.loops[-1]
        if innermost in store.fresh_in:
            return True           # the container is created anew inside the loop
        if store.how == "setitem" and _constant_key(store):
            return True           # `outputs["loss"] = loss` overwrites one entry: one graph
        func = facts.func
        in_call = func is not None and store.key.startswith(func.qualname + ":")
        # created by this call (a parameter's list is the caller's: it outlives the call)
        local = in_call and store.target.split(".", 1)[0] not in func.params
        if local and (_graph_made_before(facts, store) or _graphs_made_before_loops(analysis, facts, store)):
            return True           # slices of one tensor made before the loop: one graph
        if store.how == "setitem" and _keyed_by_inner_loop(analysis, facts, store):
            return True           # `for k in keys: feats[k] = ...` in a micro-step: same entries
        if _bounded_by_the_iteration(analysis, facts, store, in_call, local):
            return True
        return store.key in consumed or store.key in returned

    def _report(self, analysis: FileAnalysis, facts: FunctionFacts, store: Store) -> Finding:
        loop = store.site.loops[-1]
        stored = short(store.expr)
        origin = store.value.origin
        chain = f"`{stored}` ← `{origin[1]}` line {origin[0]}" if origin and origin[1] != stored \
            else f"`{stored}` line {origin[0] if origin else store.site.line}"
        where = (f"{_VERBS.get(store.how, 'stored into')} `{store.target}` (created before the loop) "
                 f"inside the loop at line {loop.lineno}")
        freeing = _backward_in_iteration(analysis, facts, store)
        hot = analysis.loop_does(facts, loop, Does.BACKWARD)
        atom = stored if isinstance(store.expr, _ATOMS) else f"({stored})"   # `(loss * n).detach()`
        detach = f"`{atom}.detach()`" if len(stored) < 30 else "`.detach()` on the stored value"
        fix = f"store {detach}" + ("" if hot else " (or `.item()` for a Python number)")
        plan, unsafe = _detach_plan(analysis, store, freeing is not None and freeing[1])
        premises = (
            graph_premise(stored, store.value),
            proven(f"`{store.target}` outlives the loop at line {loop.lineno}",
                   "it is created before the loop and not re-created in it"),
        )
        if freeing is None:
            return self.finding(
                store.site,
                f"`{store.target}` keeps the autograd graph of every iteration alive",
                f"{chain}; {where}; no backward frees it, so activations pile up until OOM",
                fix, ERROR, plan=plan, no_autofix=unsafe,
                premises=premises + (proven("no backward frees it",
                                            "searched every backward of the iteration, "
                                            "helpers included"),))
        line, freed = freeing
        frees = "frees activations" if freed else \
            "(of a value made by a call the analysis cannot see into) may free activations"
        return self.finding(
            store.site,
            f"`{store.target}` keeps each iteration's autograd graph nodes alive",
            f"{chain}; {where}; backward at line {line} {frees} but the stored "
            f"value still references its graph",
            fix, WARNING, plan=plan, no_autofix=unsafe, premises=premises)


def _detach_plan(analysis: FileAnalysis, store: Store, freed: bool):
    """(the `.detach()` fix, None) when the proof holds: the stored value is one tensor and
    nothing made from the container reaches a gradient consumer (`analysis/fix_proof.py`);
    else (None, the premise that failed)."""
    stored = short(store.expr)
    if store.how not in _FIXABLE_HOW:
        return None, f"`{stored}` is {_VERBS.get(store.how, 'stored')} `{store.target}` whole"
    if isinstance(store.expr, _NOT_TENSORS):
        return None, f"`{stored}` is not one tensor"
    unproven = first_unproven(detach_premises(analysis, stored, store.value, store.target,
                                              store.key, returns_freed=freed))
    if unproven is not None:
        return None, unproven.basis
    return FixPlan("detach", store.expr), None


def _constant_key(store: Store) -> bool:
    """`d["h"] = v` / `d[0] = v`: every iteration writes the same entry."""
    stmt = store.site.stmt
    targets = getattr(stmt, "targets", None) or [getattr(stmt, "target", None)]
    return any(isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) for t in targets)


def _graph_made_before(facts: FunctionFacts, store: Store) -> bool:
    """The stored expression reads a value bound before the loops the container outlives
    and never rebound or written in them (`for i in range(n): parts.append(logprobs[i])`):
    each iteration stores a piece of the same graph. (Asked for containers local to the
    function: one that outlives the call gathers a new graph on every call.)"""
    root = store.expr
    while isinstance(root, (ast.Subscript, ast.Attribute)):
        root = root.value
    if not isinstance(root, ast.Name):
        return False
    for loop in store.site.loops:
        if loop in store.fresh_in:
            continue
        if root.id in facts.loop_rebinds.get(loop, ()) or root.id in facts.loop_writes.get(loop, ()):
            return False
        if root.id in _loop_targets(loop):
            return False
    return True


def _graphs_made_before_loops(analysis: FileAnalysis, facts: FunctionFacts, store: Store) -> bool:
    """Every graph the stored value carries was made in this function's own body (not in a
    helper or a nested function) before the loops the container outlives:
    `parts.append(feats[i].mean(0))`, `for p in torch.chunk(out, 4): parts.append(p)` store
    pieces of one graph, not one graph per iteration."""
    graphs = store.value.graphs
    if not graphs or graphs is V.ANY_GRAPH or store.value.has(V.PROVEN_GRAPH):
        return False
    outlived = [loop for loop in store.site.loops if loop not in store.fresh_in]
    spans = [(loop.lineno, loop.end_lineno) for loop in outlived]
    own = _own_lines(analysis, facts.func)
    return all(own(line) and not any(start <= line <= end for start, end in spans)
               for line in graphs)


def _own_lines(analysis: FileAnalysis, func):
    """A predicate: the line belongs to `func`'s own body (the module's for None), not to a
    function or class it defines."""
    if func is None:
        others = [(f.node.lineno, f.node.end_lineno) for f in analysis.index.functions]
        start, end = 1, float("inf")
    else:
        start, end = func.node.lineno, func.node.end_lineno
        others = [(f.node.lineno, f.node.end_lineno) for f in analysis.index.functions
                  if f is not func and start < f.node.lineno <= end]
    return lambda line: start <= line <= end and not any(a <= line <= b for a, b in others)


def _keyed_by_inner_loop(analysis: FileAnalysis, facts: FunctionFacts, store: Store) -> bool:
    """`for k in keys: feats[k] = encoder(batch[k])` inside a micro-step loop that ends in a
    backward: the short inner loop is not the iteration; each iteration of the enclosing loop
    writes the same entries again, and its backward frees what they hold."""
    loops = store.site.loops
    if len(loops) < 2:
        return False
    inner, outer = loops[-1], loops[-2]
    stmt = store.site.stmt
    targets = getattr(stmt, "targets", None) or [getattr(stmt, "target", None)]
    names = _loop_targets(inner)
    keyed = any(isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Name)
                and t.slice.id in names for t in targets)
    return keyed and not analysis.loop_does(facts, inner, Does.BACKWARD) \
        and analysis.loop_does(facts, outer, Does.BACKWARD)


def _called_without_grad(analysis: FileAnalysis, func, depth: int = 3) -> bool:
    """A call of `func` in this file runs with autograd off, or is made by a function that is
    itself only called so (`with torch.no_grad(): runner.collect()` -> `self.act(obs)`): the
    callee's stores take the grad mode of its callers."""
    callers = analysis.callers(func)
    if any(call.site.no_grad for _, call in callers):
        return True
    if depth <= 0 or not callers:
        return False
    owners = {facts.func for facts, _ in callers}
    return None not in owners and all(_called_without_grad(analysis, owner, depth - 1)
                                      for owner in owners if owner is not func)


def _loop_targets(loop) -> Set[str]:
    return bound_names(getattr(loop, "target", None))


def _steps_after(analysis: FileAnalysis, facts: FunctionFacts, loop) -> bool:
    """The function steps the optimizer outside `loop` (one call = one optimizer step)."""
    if any(loop not in s.site.loops for s in facts.steps):
        return True
    return any(loop not in c.site.loops and analysis.function_does(c.callee, Does.STEP)
               for c in facts.local_calls)


def _bounded_by_the_iteration(analysis, facts, store, in_call: bool, local: bool) -> bool:
    """Stores that grow with something other than the training steps: layers, an
    iterative computation, one forward, or the micro-batches of one optimizer step."""
    innermost = store.site.loops[-1]
    if _iterates_modules(facts, innermost):
        return True           # a walk over layers: as many entries as layers, not steps
    if local and len(store.site.loops) == 1 and _walks_one_output(analysis, facts, innermost) \
            and not analysis.loop_does(facts, innermost, Does.BACKWARD):
        # `for i, pi in enumerate(preds): parts.append(...)`, then `torch.cat(parts)`: the
        # list lives for this call and holds pieces of the graphs it was given
        return True
    if store.how == "augassign" and store.key in store.value.containers:
        # `x = x + dt * model(x)`: an iterative computation (sampler, ODE step,
        # unrolled RNN), not a pile of per-step graphs.
        return True
    if in_call and module_like(analysis, facts.func.cls):
        # A list in a module method lives for this forward (its own, or a graph object
        # passed in), and autograd keeps those activations for its backward anyway.
        return True
    # Micro-batches of one optimizer step: bounded by the accumulation count, and the list
    # dies with the call (also `for _ in range(grad_accum): ... engine.step()`).
    return local and len(store.site.loops) == 1 and (
        _steps_after(analysis, facts, innermost) or accumulation_loop(innermost)
        and analysis.loop_does(facts, innermost, Does.BACKWARD))


def _walks_one_output(analysis, facts: FunctionFacts, loop) -> bool:
    """The loop walks something of bounded size that already exists (the tensors of one
    output: detection levels, per-feature embeddings, also when every caller in the file
    passes such an output for the parameter walked; `range` of a literal): not a loader,
    not a stream of steps."""
    iterated = getattr(loop, "iter", None)
    if iterated is None:
        return False
    while isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name) \
            and iterated.func.id in ("enumerate", "zip", "reversed") and iterated.args:
        iterated = iterated.args[0]
    if isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name) \
            and iterated.func.id == "range":
        return bool(iterated.args) and all(_structure_size(a) for a in iterated.args)
    value = facts.value(iterated)
    if value.grad or not value.params:
        return value.grad and not value.has(V.LOADER)
    passed = resolve_values(analysis, facts, value)
    return bool(passed) and all(v.grad and not v.has(V.LOADER) for v in passed)


def _structure_size(expr: ast.expr) -> bool:
    """A count fixed by a data structure, not by training: a small literal, `len(x)`,
    `x.shape[i]`, `x.size(i)` (the fields of one batch, the levels of one output)."""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, int) and expr.value <= _BOUNDED_RANGE
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "len":
        return True
    if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Attribute):
        return expr.value.attr == "shape"
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) \
        and expr.func.attr == "size" and bool(expr.args)


def _iterates_modules(facts: FunctionFacts, loop) -> bool:
    """`for layer in self.layers`, `for i, block in enumerate(self.blocks)`, `zip(...)`."""
    iterated = getattr(loop, "iter", None)
    if iterated is None:
        return False
    value = facts.value(iterated)
    items = value.elements if value.elements is not None else (value,)
    return any(item.has(V.MODULE) for item in items)


def _returned_for_backward(analysis: FileAnalysis, facts: FunctionFacts) -> Set[str]:
    """Containers whose graphs the function returns for a backward its caller runs: a loss
    built from them (perceptual / chunked losses), or a module method's output (U-Net skip
    connections consumed in `forward`). Other returns are judged by the file's backwards."""
    returns = facts.returns
    func = facts.func
    if func is None or analysis.function_does(func, Does.BACKWARD):
        return set()              # it backwards them itself: the return is for logging
    if module_like(analysis, func.cls):
        return set(returns.containers)
    keys: Set[str] = set()
    todo = [returns]
    while todo:                   # `return total_loss, logs`: the loss element counts
        value = todo.pop()
        if value.has(V.LOSS) and not value.has(V.CONTAINER):
            keys |= value.containers
        todo.extend(value.elements or ())
    return keys


def _keys_consumed_by_backward(analysis: FileAnalysis) -> Set[str]:
    """Containers whose graphs reach a backward (or `torch.autograd.grad`) somewhere in the
    file, also through helpers that backward what they are passed (`update(latents, loss)`)."""
    keys: Set[str] = set()
    by_param: Dict[object, Set[int]] = {}     # function -> parameter positions it backwards
    every = list(analysis.all_facts())
    for facts in every:
        consumed = [b.value for b in facts.backwards]
        consumed += [c.args[0] for c in facts.calls if c.qualname in api.GRADIENT_FUNCS and c.args]
        for value in consumed:
            keys |= value.containers
            if facts.func is not None and value.params:
                by_param.setdefault(facts.func, set()).update(value.params)
    for _ in range(3):                        # helpers of helpers, a few levels up
        grew = False
        for facts in every:
            for call in facts.local_calls:
                wanted = by_param.get(call.callee)
                if not wanted:
                    continue
                for position, value in arguments(facts, call):
                    if position is not None and position not in wanted:
                        continue   # (`**inputs` may fill any parameter)
                    keys |= value.containers
                    if facts.func is not None and not value.params <= by_param.get(facts.func, set()):
                        by_param.setdefault(facts.func, set()).update(value.params)
                        grew = True
        if not grew:
            break
    return keys


def _backward_in_iteration(analysis: FileAnalysis, facts: FunctionFacts, store: Store):
    """(line, proven) of a backward in the same iteration that runs through the stored graph,
    if any. `proven` is False for a backward of a value made by a call the analysis cannot
    see into (`model.loss(scores, y).backward()`): it may run through the stored graph, so
    "no backward frees it" is not proven either."""
    backwards = _backwards_of_loop(analysis, facts, store.site.loops[-1])
    lines = [backwards.by_graph[g] for g in store.value.graphs if g in backwards.by_graph]
    # a tensor that a backward proved to carry a graph holds that backward's line as its
    # graph key (semantics/tensor.py): that backward ran through the stored graph
    if store.value.graphs is not V.ANY_GRAPH:
        lines += [g for g in store.value.graphs if g in backwards.lines]
    if backwards.any_graph is not None and store.value.graphs:
        lines.append(backwards.any_graph)
    if store.value.graphs is V.ANY_GRAPH and backwards.by_graph:
        lines.append(min(backwards.by_graph.values()))
    if lines:
        return min(lines), True
    if backwards.helper is not None:
        return backwards.helper, True
    if backwards.opaque is not None:
        return backwards.opaque, False
    return None


class _LoopBackwards(NamedTuple):
    by_graph: Dict[int, int]   # graph line -> first backward through it
    any_graph: Optional[int]   # first backward of a saturated graph set
    helper: Optional[int]      # first call of a helper that runs a backward
    opaque: Optional[int]      # first backward of a value of unknown provenance
    lines: FrozenSet[int]      # lines of the loop's backwards


@per_file("tpf001_loop_backwards")
def _backwards_of_loop(analysis: FileAnalysis, facts: FunctionFacts, loop) -> _LoopBackwards:
    """For one loop, indexed once (a long loop body must not cost a scan per store)."""
    by_graph: Dict[int, int] = {}
    any_graph = opaque = None
    at_lines = set()
    for backward in analysis.in_loop(facts, "backwards", loop):
        line = backward.site.line
        at_lines.add(line)
        if backward.value.graphs is V.ANY_GRAPH:
            any_graph = line if any_graph is None else min(any_graph, line)
            continue
        if _unknown_provenance(backward.value):
            opaque = line if opaque is None else min(opaque, line)
        for graph in backward.value.graphs:
            by_graph[graph] = min(by_graph.get(graph, line), line)
    helper = next((call.site.line for call in analysis.in_loop(facts, "local_calls", loop)
                   if analysis.function_does(call.callee, Does.BACKWARD)), None)
    return _LoopBackwards(by_graph, any_graph, helper, opaque, frozenset(at_lines))


def _unknown_provenance(value) -> bool:
    """Nothing is known of the value (the result of a call the analysis cannot see into)."""
    return not value.graphs and not value.grad and not value.tags and value.origin is None
