"""TPF013 input-pipeline-stall: the GPU waits on the host for transfers and loading.

## What it does
- **warning**: a loop-invariant host-to-device transfer repeated every training step:
  `model.to(device)` / `model.cuda()` (or a loss module's) inside the step loop or in a
  helper called every step, or `.to(device)` / `.cuda()` of a value bound before the loop
  that nothing in the loop rebinds or changes in place (class weights, a fixed mask, a
  constant batch).
- **note**: in a file that targets CUDA, a training `DataLoader` (iterated by a training
  loop, returned by Lightning's `train_dataloader`, or built with `shuffle=True`) with
  `num_workers` absent or `0` (unless it iterates data already in memory and has no
  `collate_fn`: a `TensorDataset`, an index range or index tensor such as `range(n)` or
  `mask.nonzero().view(-1)`, a Python list or tuple (a display, a comprehension,
  `list(...)`, `.tolist()`, `.readlines()`), or a dataset class of the file whose
  `__getitem__` only slices what it stores, casting or wrapping the slice
  (`torch.tensor(self.ids[i])`)), or with no `pin_memory=True` while the loop
  copies batches with `.to(..., non_blocking=True)` (a batch: a name the loop binds, or a
  parameter of a per-step helper; not a module or an EMA copy moved between steps; not for
  a loader of strings, whose batches the loop turns into tensors itself, so the loader has
  nothing to pin).

## Why is this bad?
A transfer of the same tensor every step copies identical bytes over PCIe again and again
(and `model.to(device)` walks every parameter each step). With `num_workers=0` the training
process decodes and collates each batch itself while the GPU idles. `non_blocking=True`
only overlaps the copy with compute when the source is in pinned memory; from pageable
memory it is an ordinary blocking copy.

## Example
```python
loader = DataLoader(train_set, batch_size=64, shuffle=True)
weights = torch.tensor([1.0, 5.0])
for x, y in loader:
    model.to(device)
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    loss = F.cross_entropy(model(x), y, weight=weights.to(device))
```

## Use instead
```python
loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=4, pin_memory=True)
weights = torch.tensor([1.0, 5.0]).to(device)
model.to(device)
for x, y in loader:
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    loss = F.cross_entropy(model(x), y, weight=weights)
```

## Fix safety
Safe for the note: adding `pin_memory=True` to the loader call changes no result. Raising
`num_workers` is left to the user (it needs a picklable dataset and free CPU cores). The
warning has no autofix: the transfer has to move before the loop by hand.

## Known limits
Quiet when the transfer sits under an `if` in the loop, when the value is created, rebound
or changed in place inside the loop (a fresh random tensor per epoch), when the same module
is also moved elsewhere in the loop (CPU offloading), in evaluation code, and for loaders
whose name says validation; the note needs a host-to-device copy in training code (without
one the data already lives on the GPU, where loader workers cannot be used). A loader passed
into the training function is followed one call level up; loaders built by other packages
(HF `Trainer`, `accelerator.prepare` of a loader built elsewhere) are not checked.
`num_workers` set from a variable is trusted. An in-memory dataset is recognised when passed
directly or through a name of the same function (or a `self.` attribute for a
`TensorDataset`) assigned only from one; an index tensor passed in as a parameter is not.
Names bound by a comprehension (`[g.to(dev) for g in blocks]`) are the comprehension's own.
"""
from __future__ import annotations

import ast
from typing import Iterator, Optional

from ..analysis import Does, FileAnalysis
from ..analysis.semantics import torchapi as api
from ..analysis.core import values as V
from ..analysis.core.astutil import dotted, keyword, short
from ..analysis.core.constants import unreachable
from ..analysis.topics.device import (batch_transfer, cuda_evidence, hot_reason, in_memory_dataset,
                                      is_transfer, loader_items_are_strings, loop_mutations,
                                      loop_targets, non_blocking, step_loops, transfer_target)
from ..analysis.core.events import CallSite, FunctionFacts
from ..analysis.project.index import VAL_LOADER_RE
from ..analysis.topics.seeding import main_guard
from ..findings import NOTE, WARNING, Finding, FixPlan
from .base import Rule


class InputPipelineStall(Rule):
    code = "TPF013"
    name = "input-pipeline-stall"
    severity = WARNING
    fix_safety = "safe"

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        if analysis.is_test_file:
            return
        for facts in analysis.all_facts():
            yield from self._transfers(analysis, facts)
        yield from self._loaders(analysis)

    # ------------------------------------------------------------------ warning
    def _transfers(self, analysis, facts: FunctionFacts) -> Iterator[Finding]:
        loops = step_loops(analysis, facts)
        hot = hot_reason(analysis, facts.func) if facts.func is not None and not loops else None
        if not loops and hot is None:
            return
        for call in facts.calls:
            site = call.site
            if not is_transfer(facts, call) or analysis.evaluation_reason(facts, site) \
                    or unreachable(analysis, facts, site):
                continue
            text = dotted(call.node.func.value)
            recv = call.receiver or V.UNKNOWN
            if text is None:
                continue
            module = recv.has(V.MODULE) and not (recv.grad or recv.has(V.TENSOR))
            placed = _every_step(loops, hot, site, module)
            if placed is None:
                continue
            where, inner = placed
            why = self._invariant(analysis, facts, call, text, recv, module, inner, site)
            if why is None:
                continue
            kind = "the model" if module and not recv.has(V.LOSS_FN) else (
                "the loss module" if module else f"`{text}`")
            yield self.finding(
                site, f"`{short(call.node, 40)}` moves {kind} to the device again every step",
                f"{where}; {why}, so every iteration repeats the same transfer",
                f"move `{text}` to the device once, before the loop", WARNING)

    @staticmethod
    def _invariant(analysis, facts, call: CallSite, text: str, recv, module: bool, inner,
                   site) -> Optional[str]:
        """Why `text` is the same object in every iteration of the loops `inner`, or None."""
        head = text.split(".", 1)[0]
        if head in site.comprehension_names:
            return None   # `[g.to(dev) for g in blocks]`: a different object per element
        if not module and head != "self" and head not in facts.env:
            return None
        # A tensor made in any enclosing loop (a fresh noise batch per epoch) is not
        # invariant; a module only needs to be the same object across the step loop.
        if _changed_in_loops(analysis, facts, call, text, module, inner if module else site.loops):
            return None
        if _moved_elsewhere(facts, call, text, inner):
            return None          # moved back and forth: deliberate (CPU) offloading
        if module:
            if _built_inside(recv.node, inner):
                return None          # built inside the loop (folds, trials)
            return f"`{text}` is a module already moved by this call in the previous step"
        return f"`{text}` is bound before the loop and never rebound or changed in it"

    # ------------------------------------------------------------------ note
    def _loaders(self, analysis) -> Iterator[Finding]:
        evidence = cuda_evidence(analysis)
        if evidence is None:
            return
        training = _training_loader_nodes(analysis)
        nb = _non_blocking_line(analysis)
        fed = _host_fed(analysis)
        for facts in analysis.all_facts():
            for call in facts.calls:
                reason = _training_reason(call, training)
                if reason is None or (fed is None and "train_dataloader" not in reason):
                    continue         # batches never copied to the GPU: data already there
                issues, fixes = _loader_issues(analysis, facts, call, nb)
                if not issues:
                    continue
                pin = keyword(call.node, "pin_memory")
                yield self.finding(
                    call.site, "the GPU waits on the input pipeline of this training loader",
                    f"{'; '.join(issues)}; the loader is {reason}; the file targets CUDA "
                    f"({evidence[1]} line {evidence[0]})",
                    f"add {' and '.join(fixes)} to the `DataLoader(...)` call"
                    + (_spawn_guard_advice(analysis) if _WORKERS_FIX in fixes else ""),
                    NOTE, plan=_pin_memory_plan(call.node, pin, fixes))


_WORKERS_FIX = "`num_workers=4` (or more)"
_PIN_FIX = "`pin_memory=True`"


def _training_reason(call: CallSite, training: dict) -> Optional[str]:
    """Why the `DataLoader(...)` call is a training loader whose settings we can read
    (no `**kwargs`, not named for validation), or None."""
    node = call.node
    if call.qualname not in api.DATALOADER_NAMES or any(kw.arg is None for kw in node.keywords):
        return None          # **kwargs may set them
    name = _bound_name(call.site.stmt, node)
    if name and VAL_LOADER_RE.match(name):
        return None
    reason = training.get(id(node))
    shuffle = keyword(node, "shuffle")
    if reason is None and isinstance(shuffle, ast.Constant) and shuffle.value is True:
        reason = "built with `shuffle=True`"
    return reason


def _loader_issues(analysis, facts, call: CallSite, nb: Optional[int]):
    """(what stalls, what to add) for one training loader. Workers are advised only where
    items need loading (not an in-memory dataset); `pin_memory` only where the loader yields
    the tensors the loop copies with `non_blocking=True` (not a list of strings, whose
    batches the loop turns into tensors itself)."""
    node = call.node
    issues, fixes = [], []
    workers = keyword(node, "num_workers")
    if (workers is None or (isinstance(workers, ast.Constant) and workers.value == 0)) \
            and in_memory_dataset(analysis, facts, call) is None \
            and not _dataset_touched_by_training(analysis, facts, node):
        issues.append("batches are loaded in the training process "
                      f"(`num_workers` {'absent' if workers is None else '0'})")
        fixes.append(_WORKERS_FIX)
    pin = keyword(node, "pin_memory")
    if loader_items_are_strings(analysis, facts, call):
        return issues, fixes
    if nb is not None and (pin is None or (isinstance(pin, ast.Constant) and pin.value is False)):
        issues.append(f"`.to(..., non_blocking=True)` at line {nb} copies from "
                      "pageable memory without `pin_memory=True`, so it blocks")
        fixes.append(_PIN_FIX)
    elif pin is None and fixes:
        fixes.append(_PIN_FIX)
    return issues, fixes


def _every_step(loops, hot: Optional[str], site, module: bool):
    """(where, the loops from the step loop inwards) when the transfer at `site` runs on
    every training step with no `if` in the loop around it, or None."""
    loop = next((lp for lp in loops if lp in site.loops), None)
    if loop is None:
        # A helper that runs every step: only modules are known to be the same object.
        if hot is None or site.loops or site.conds or not module:
            return None
        return hot, ()
    if site.conds_inside(loop):
        return None
    return f"inside the training loop at line {loop.lineno}", site.loops[site.loops.index(loop):]


def _changed_in_loops(analysis, facts, call: CallSite, text: str, module: bool, loops) -> bool:
    """`text` (or an object it is an attribute of) is rebound or changed in place in one of
    `loops`; a module moved by `model = model.to(dev)` rebinds only itself, which is fine."""
    stmt = call.site.stmt
    self_assign = isinstance(stmt, ast.Assign) and stmt.value is call.node and all(
        dotted(t) == text for t in stmt.targets)
    prefixes = {text.rsplit(".", i)[0] for i in range(text.count(".") + 1)}
    for loop in loops:
        rebound = set(facts.loop_rebinds.get(loop, ())) & prefixes
        if rebound and not (module and self_assign and rebound == {text}):
            return True
        changed = loop_mutations(analysis, facts, loop)
        if prefixes & changed and (not module or prefixes & loop_targets(loop)):
            return True
    return False


def _moved_elsewhere(facts, call: CallSite, text: str, inner) -> bool:
    """Another call in the same loop moves `text` to another device (or back to the CPU)."""
    target = transfer_target(call)
    for other in facts.calls:
        if other is call or (inner and inner[0] not in other.site.loops):
            continue
        if other.method in ("to", "cuda", "cpu") and other.qualname is None \
                and isinstance(other.node.func, ast.Attribute) \
                and dotted(other.node.func.value) == text \
                and (other.method == "cpu" or transfer_target(other) != target):
            return True
    return False


def _built_inside(made, inner) -> bool:
    """The module was constructed inside the outermost loop of `inner`."""
    return made is not None and bool(inner) and getattr(made, "lineno", 0) >= inner[0].lineno \
        and getattr(made, "end_lineno", 0) <= inner[0].end_lineno


def _spawn_guard_advice(analysis) -> str:
    """Worker processes re-import the script where they are spawned (macOS, Windows, and
    Linux from Python 3.14): a script that trains at module level with no `__main__` guard
    would re-run itself in every worker and fail."""
    if main_guard(analysis) is not None or not _module_level_work(analysis):
        return ""
    return ("; first move the script's top-level code under `if __name__ == \"__main__\":` "
            "(worker processes re-import the script where they are spawned)")


def _module_level_work(analysis) -> bool:
    """The module body itself trains (loops over batches at top level)."""
    return bool(analysis.training_loops(analysis.module_facts))


def _dataset_touched_by_training(analysis, facts, node: ast.Call) -> bool:
    """The loader reads an object the training loop itself changes or calls into (a replay
    buffer the step fills): worker processes would read a stale copy."""
    arg = keyword(node, "dataset") or (node.args[0] if node.args else None)
    text = dotted(arg) if arg is not None else None
    if text is None:
        return False
    for other in analysis.all_facts():
        for loop in analysis.training_loops(other):
            if text in loop_mutations(analysis, other, loop):
                return True
            if any(isinstance(c.node.func, ast.Attribute) and dotted(c.node.func.value) == text
                   for c in analysis.in_loop(other, "calls", loop)):
                return True
    return False


def _pin_memory_plan(node: ast.Call, pin, fixes) -> Optional[FixPlan]:
    """The autofix adds `pin_memory=True` when that is the whole advice (more workers is a
    judgement call) and the call can take a keyword: no `pin_memory` given, no `*args`, and
    fewer positional arguments than the parameter's position."""
    if fixes != [_PIN_FIX] or pin is not None:
        return None
    if len(node.args) >= 8 or any(isinstance(a, ast.Starred) for a in node.args):
        return None
    return FixPlan("pin_memory", node)


def _loop_iterated(loop: ast.AST) -> Optional[ast.AST]:
    expr = getattr(loop, "iter", None)
    while isinstance(expr, ast.Call) and expr.args:
        expr = expr.args[0]
    return expr


def _training_loader_nodes(analysis):
    """id(DataLoader call node) -> why it is a training loader."""
    found = {}
    for facts in analysis.all_facts():
        func = facts.func
        if func is not None and func.name == "train_dataloader" and func.cls is not None:
            node = facts.returns.node
            if facts.returns.has(V.LOADER) and isinstance(node, ast.Call):
                found.setdefault(id(node), f"returned by `{func.qualname}()`")
        for loop in analysis.training_loops(facts):
            expr = _loop_iterated(loop)
            if expr is None:
                continue
            value = facts.value(expr)
            why = f"iterated by the training loop at line {loop.lineno}"
            if value.has(V.LOADER) and isinstance(value.node, ast.Call):
                found.setdefault(id(value.node), why)
            elif isinstance(expr, ast.Name) and func is not None and expr.id in func.params:
                for cfacts, lc in analysis.callers(func):
                    arg = _argument(func, lc.node, expr.id)
                    passed = cfacts.value(arg) if arg is not None else V.UNKNOWN
                    if passed.has(V.LOADER) and isinstance(passed.node, ast.Call):
                        found.setdefault(id(passed.node), why + f" (passed at line {lc.site.line})")
    return found


def _argument(func, call: ast.Call, param: str) -> Optional[ast.AST]:
    for kw in call.keywords:
        if kw.arg == param:
            return kw.value
    index = func.params.index(param)
    if func.is_method and isinstance(call.func, ast.Attribute):
        index -= 1
    if 0 <= index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args):
        return call.args[index]
    return None


def _non_blocking_line(analysis) -> Optional[int]:
    lines = [call.site.line for facts in analysis.all_facts()
             for call in facts.calls
             if call.method in ("to", "cuda") and call.qualname is None and non_blocking(call)
             and batch_transfer(facts, call) and (_in_training_loop(analysis, facts, call) or (
                 facts.func is not None and hot_reason(analysis, facts.func) is not None))]
    return min(lines) if lines else None


def _in_training_loop(analysis, facts, call: CallSite) -> bool:
    return any(analysis.loop_does(facts, loop, Does.BACKWARD) for loop in call.site.loops)


def _host_fed(analysis) -> Optional[int]:
    """Line of a host-to-device copy in training code (a training loop or a per-step
    helper), or None: without one the batches are already on the GPU (a CUDA-resident
    dataset, where worker processes cannot even be used)."""
    for facts in analysis.all_facts():
        hot = facts.func is not None and hot_reason(analysis, facts.func) is not None
        for call in facts.calls:
            if is_transfer(facts, call) and (hot or _in_training_loop(analysis, facts, call)):
                return call.site.line
    return None


def _bound_name(stmt: ast.AST, node: ast.AST) -> Optional[str]:
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and getattr(stmt, "value", None) is node:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        text = dotted(targets[0])
        return text.rsplit(".", 1)[-1] if text else None
    return None
