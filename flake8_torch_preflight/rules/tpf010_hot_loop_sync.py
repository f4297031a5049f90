"""TPF010 hot-loop-sync: the host waits for the GPU inside every training step.

## What it does
Only in files that target CUDA (`.cuda()`, `device="cuda"`, `torch.device("cuda", ...)`,
`.to(<cuda device>)`, `torch.cuda.set_device`, Lightning `accelerator="gpu"`), reports
host-device synchronisations on the hot path of training:

- **warning**: a sync inside a loop nested in the training step (`.item()`, `.cpu()`,
  `.numpy()`, `.tolist()`, `float(t)`, `int(t)`, `print(t)` on a tensor, once per element:
  per-parameter gradient norms, per-sample accuracy), also in a helper called every step,
  in the `forward` of a module of the file called every step (`loss_fn(out, y)`), or in a
  framework step hook (`training_step`); and `torch.cuda.synchronize()` every step
  in code that does no timing.
- **note**: a per-step `.item()`/`.cpu()` whose result only feeds logging (`print`, a
  logger, `pbar.set_postfix`, `running_loss += loss.item()`, `losses.append(...)`), when it
  is not under a logging interval.

## Why is this bad?
CUDA kernels run asynchronously: the Python loop normally races ahead and queues the next
step while the GPU works. `.item()` and friends force the host to wait until every queued
kernel has finished, then copy the value back. Once per step this costs a bubble per step;
once per parameter or per sample it serialises the whole step and the GPU sits idle.

## Example
```python
for step, (x, y) in enumerate(loader):
    x, y = x.cuda(), y.cuda()
    loss = criterion(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    for name, p in model.named_parameters():
        grad_norms[name] = p.grad.norm().item()
```

## Use instead
```python
for step, (x, y) in enumerate(loader):
    x, y = x.cuda(), y.cuda()
    loss = criterion(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    running += loss.detach()
    if step % log_every == 0:
        norms = torch.stack([p.grad.norm() for p in model.parameters()])
        print(step, (running / log_every).item(), norms.max().item())
        running.zero_()
```

## Fix safety
No autofix: moving the sync behind a logging interval changes what is logged.

## Known limits
Quiet under any `if` inside the training loop (a logging interval `if step % k == 0`, an
opt-in flag, a checkpoint-step guard), in a branch this program never takes (`if
self.autobalance:` where every construction of the class in the file leaves that `__init__`
parameter at its `False` default: `analysis/constants.py`), after the loop, in evaluation
code, in files with
no sign of CUDA, for Python numbers (`float(step)`), and for syncs whose result the loop
needs (`if not math.isfinite(loss.item())`). Tensor-ness comes from the flow analysis: a
tensor returned by another package's function is not recognised. Implicit syncs (`if t:`,
boolean masks, `nonzero()`) and `.item()` returned from a per-step helper are not reported.
A tensor that never left the CPU (labels straight from the loader) is not told apart from a
GPU tensor. A host buffer that the loops around the store read back into computation (label
reuse: `preds[idx] = out.cpu()`, then `preds_old[idx].to(device)` fed to the model) is not
logging, so no "just to log" note; reads after the loop or in other methods of a `self.`
buffer are not followed.
"""
from __future__ import annotations

import ast
from typing import Dict, Iterator, List, Optional, Tuple

from ..analysis import FileAnalysis
from ..analysis.core import values as V
from ..analysis.core.astutil import short
from ..analysis.core.constants import unreachable
from ..analysis.topics.device import cuda_evidence, encloses, hot_reason, step_loops
from ..analysis.core.events import CallSite, FunctionFacts
from ..analysis.core.memo import per_file
from ..analysis.topics.read_back import buffer_name, fed_back
from ..analysis.semantics.containers import STORE_METHODS
from ..findings import NOTE, WARNING, Finding
from .base import Rule

_SYNC_METHODS = frozenset({"item", "cpu", "numpy", "tolist"})
_SYNC_BUILTINS = frozenset({"float", "int", "bool", "print"})
_LOG_METHODS = frozenset({"log", "log_dict", "log_metrics", "info", "debug", "warning",
                          "add_scalar", "add_scalars", "set_postfix", "set_postfix_str",
                          "set_description", "write", "append", "extend"})
_TIMING = frozenset({"time.time", "time.perf_counter", "time.monotonic", "time.process_time",
                     "time.perf_counter_ns", "time.time_ns", "timeit.default_timer",
                     "torch.cuda.Event"})
_TIMING_WORDS = ("bench", "profil", "timing", "throughput", "latency", "speed")


class HotLoopSync(Rule):
    code = "TPF010"
    name = "hot-loop-sync"
    severity = WARNING

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        evidence = cuda_evidence(analysis)
        if evidence is None:
            return
        reported = set()
        for facts in analysis.all_facts():
            for finding in self._check_facts(analysis, facts, evidence):
                if finding.line not in reported:
                    reported.add(finding.line)
                    yield finding

    def _check_facts(self, analysis, facts: FunctionFacts, evidence) -> Iterator[Finding]:
        cuda = f"the file targets CUDA ({evidence[1]} line {evidence[0]})"
        loops = step_loops(analysis, facts)
        hot = None
        if facts.func is not None and not loops:
            hot = hot_reason(analysis, facts.func) or _forward_hot_reason(analysis, facts.func)
        if not loops and hot is None:
            return
        timing = _does_timing(analysis, facts)
        for loop in loops:
            yield from self._helpers_syncing_per_element(analysis, facts, loop, cuda)
        if hot is not None:
            yield from self._helpers_syncing_per_element(analysis, facts, None, cuda, hot)
        notes: Dict[object, List[Tuple[CallSite, str]]] = {}
        for call in facts.calls:
            site = call.site
            if any(c.counter for c in site.conds) or unreachable(analysis, facts, site):
                continue   # an interval guard, or a branch this program never takes
            if call.qualname == "torch.cuda.synchronize":
                where = self._per_step(loops, hot, site)
                if where is None or timing or analysis.evaluation_reason(facts, site):
                    continue
                yield self.finding(
                    site, "`torch.cuda.synchronize()` blocks the host every training step",
                    f"{where[1]}; no timing code in this function; {cuda}",
                    "remove it (CUDA orders kernels on a stream already), or guard it with "
                    "`if step % log_every == 0:` where you measure time", WARNING)
                continue
            sync = _sync(call)
            if sync is None or analysis.evaluation_reason(facts, site):
                continue
            nested = self._nested(loops, hot, site)
            if nested is not None:
                inner, where = nested
                yield self.finding(
                    site, f"{sync} syncs host and GPU once per element of the loop at line "
                          f"{inner.lineno}, every training step",
                    f"{where}; the loop at line {inner.lineno} runs inside it with no "
                    f"logging-interval guard; {cuda}",
                    "compute on device and sync once (`torch.stack([...])` then one "
                    "`.tolist()`), or only every N steps under `if step % log_every == 0:`",
                    WARNING)
                continue
            where = self._per_step(loops, hot, site)
            if where is None or call.method not in ("item", "cpu"):
                continue
            use = _logging_use(facts, call)
            if use is not None and not _buffer_fed_back(facts, call, where[0]):
                notes.setdefault(where[0], []).append((call, f"{use}; {where[1]}"))
        yield from self._logging_notes(analysis, facts, notes)

    def _logging_notes(self, analysis, facts: FunctionFacts, notes) -> Iterator[Finding]:
        """One note per scope for the syncs made every step only to log, at the first."""
        for scope, items in notes.items():
            call, why = min(items, key=lambda item: item[0].site.line)
            others = sorted({c.site.line for c, _ in items} - {call.site.line})
            more = f"; also line(s) {', '.join(map(str, others))}" if others else ""
            fix = ("accumulate on device (`running += loss.detach()`) and call `.item()` every "
                   "N steps under `if step % log_every == 0:`")
            if scope == "function" and analysis.framework_owned(facts.func) == "Lightning":
                fix = ("log the tensor itself (`self.log(name, loss)`): Lightning reduces it "
                       "without a per-step sync")
            yield self.finding(
                call.site, f"`{short(call.node, 30)}` waits for the GPU every step just to log",
                f"{why}, not under a logging interval{more}", fix, NOTE)

    def _helpers_syncing_per_element(self, analysis, facts, loop, cuda,
                                     hot: Optional[str] = None) -> Iterator[Finding]:
        """A helper of another project file called every step of `loop` (no guard), or
        unguarded in a function run every step (`hot`, `loop` None: `self.helper.optimize(
        self.opt)` in a `run_step` the training loop calls), that syncs once per element of
        a loop of its own (`.item()` per parameter to log or clip norms). Helpers of this
        file are judged in their own body (`hot_reason`)."""
        locals_ = analysis.in_loop(facts, "local_calls", loop) if loop is not None else \
            [lc for lc in facts.local_calls if not lc.site.loops and not lc.site.conds]
        for local in locals_:
            callee = local.callee
            if callee.home in (None, analysis) or (loop is not None and (
                    local.site.loops[-1] is not loop or local.site.conds_inside(loop))):
                continue
            found = _per_element_sync(analysis, callee)
            if found is None:
                continue
            text, line, inner, where = found
            scope = f"in the training loop at line {loop.lineno}" if loop is not None else \
                f"in `{facts.func.name}()`, which runs every training step ({hot})"
            yield self.finding(
                local.site,
                f"`{callee.name}()` syncs host and GPU once per element of a loop, every "
                f"training step",
                f"called at line {local.site.line} {scope} "
                f"with no logging-interval guard; it runs {text} inside its loop at "
                f"{analysis.where(where, inner)} ({analysis.where(where, line)}); {cuda}",
                "compute on device and sync once (`torch.stack([...])` then one `.tolist()`), "
                "or call it only every N steps under `if step % log_every == 0:`", WARNING)

    @staticmethod
    def _per_step(loops, hot, site) -> Optional[Tuple[object, str]]:
        """(scope, why) when `site` runs exactly once per training step, unguarded."""
        for loop in loops:
            if site.loops and site.loops[-1] is loop and not site.conds_inside(loop):
                return loop, f"in the training loop at line {loop.lineno}"
        if hot is not None and not site.loops and not site.conds:
            return "function", hot
        return None

    @staticmethod
    def _nested(loops, hot, site) -> Optional[Tuple[ast.AST, str]]:
        """(inner loop, why) when `site` runs per element of a loop inside the step."""
        for loop in loops:
            if loop in site.loops and site.loops[-1] is not loop:
                depth = site.loops.index(loop) + 1
                if any(c.depth == depth for c in site.conds):
                    return None      # an opt-in flag / checkpoint guard around the inner loop
                return site.loops[depth], f"training loop at line {loop.lineno}"
        if hot is not None and site.loops and not any(c.depth == 0 for c in site.conds):
            return site.loops[0], hot
        return None


def _tensor(value: Optional[V.Value]) -> bool:
    if value is None:
        return False
    if value.has(V.PYSCALAR) or value.has(V.MODULE) or value.has(V.CONTAINER):
        return False
    return value.grad or value.has(V.TENSOR)


def _sync(call: CallSite) -> Optional[str]:
    """What host-device sync `call` is, on a tensor; None otherwise."""
    node = call.node
    if call.qualname is None and call.method in _SYNC_METHODS and _tensor(call.receiver):
        return f"`{short(node, 30)}`"
    if call.qualname is None and call.method is None and isinstance(node.func, ast.Name) \
            and node.func.id in _SYNC_BUILTINS and call.args and _tensor(call.args[0]):
        return f"`{node.func.id}({short(node.args[0], 20)})`"
    return None


def _logging_use(facts: FunctionFacts, call: CallSite) -> Optional[str]:
    """How the synced value is used when that use is only logging, else None."""
    stmt = call.site.stmt
    if isinstance(stmt, ast.AugAssign) and encloses(stmt.value, call.node):
        return f"accumulated into `{short(stmt.target, 20)}` on the host"
    if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Subscript) for t in stmt.targets):
        return f"stored into `{short(stmt.targets[0], 20)}`"
    for other in facts.calls:
        if other.site.stmt is stmt and other is not call and encloses(other.node, call.node) \
                and _logs(other):
            return f"passed to `{short(other.node, 30)}`"
    return None


def _logs(call: CallSite) -> bool:
    """`print(...)`, a logger or tracker call, `pbar.set_postfix(...)`, `losses.append(...)`."""
    func = call.node.func
    return (isinstance(func, ast.Name) and func.id == "print") or \
        (call.qualname or "").startswith(("wandb.", "mlflow.", "logging.")) or \
        (call.qualname is None and call.method in _LOG_METHODS)


def _buffer_fed_back(facts: FunctionFacts, call: CallSite, scope) -> bool:
    """The synced value is stored into a container (`preds[idx] = out.cpu()`,
    `losses.append(loss.item())`) that the loops around the store, or the per-step function,
    read back into computation: label reuse feeds the host predictions of one round to the
    model in the next. Then the host copy is the work, not logging, and keeping the value
    on device (the note's fix) is no fix: the rule stays quiet."""
    buffer = _buffer_of(facts, call)
    if buffer is None:
        return False
    body = call.site.loops[0] if scope != "function" else facts.func.node
    return fed_back(facts, body, buffer, _logs)


def _buffer_of(facts: FunctionFacts, call: CallSite) -> Optional[str]:
    """The container the synced value goes into (`preds` of `preds[idx] = ...`, `self.losses`
    of `self.losses.append(...)`), or None when it goes into a number or a logging call."""
    stmt = call.site.stmt
    targets = getattr(stmt, "targets", None) or [getattr(stmt, "target", None)]
    stored = next((t for t in targets if isinstance(t, ast.Subscript)), None)
    if isinstance(stmt, (ast.Assign, ast.AugAssign)) and stored is not None:
        return buffer_name(stored)
    for other in facts.calls:
        if other.site.stmt is stmt and other.method in STORE_METHODS and \
                isinstance(other.node.func, ast.Attribute) and any(
                    encloses(arg, call.node) for arg in other.node.args):
            return buffer_name(other.node.func.value)
    return None


def _does_timing(analysis, facts: FunctionFacts) -> bool:
    """The function measures time: a clock call in it, or in a helper it calls (a metric
    logger's `log_every()` iterator, in another file too), or its name or file says so."""
    name = (facts.func.name if facts.func is not None else "").lower()
    if any(w in name for w in _TIMING_WORDS) or any(
            w in analysis.filename.lower().rsplit("/", 1)[-1] for w in _TIMING_WORDS):
        return True
    return _times(facts) or any(_helper_times(analysis, c.callee) for c in facts.local_calls)


def _times(facts: FunctionFacts) -> bool:
    return any(c.qualname in _TIMING or c.method == "elapsed_time" for c in facts.calls)


@per_file("tpf010_helper_times", guard=False)
def _helper_times(analysis, func) -> bool:
    facts = analysis.facts_for(func)
    return _times(facts) or any(_helper_times(analysis, c.callee) for c in facts.local_calls)


@per_file("tpf010_per_element_sync")
def _per_element_sync(analysis, func) -> Optional[Tuple[str, int, int, object]]:
    """(sync text, its line, its loop's line, the function it is in) for a sync inside a
    loop of `func` (or of a helper it calls outside its loops) that no condition guards."""
    facts = analysis.facts_for(func)
    for call in facts.calls:
        # a test inside the loop filters elements (`if p.grad is not None`); one around the
        # loop, or a counter, is a guard
        conds = call.site.conds
        if call.site.loops and not any(c.depth == 0 or c.counter for c in conds) \
                and not unreachable(analysis, facts, call.site):
            sync = _sync(call)
            if sync is not None:
                return sync, call.site.line, call.site.loops[-1].lineno, func
    for local in facts.local_calls:
        if not local.site.loops and not local.site.conds:
            found = _per_element_sync(analysis, local.callee)
            if found is not None:
                return found
    return None


def _forward_hot_reason(analysis, func) -> Optional[str]:
    """Why the `forward` of a module class of the file runs once per training step: the
    module is called (`loss_fn(out, y)`, not only `loss_fn.forward(...)`) in a step loop with
    no `if` around the call. None for any other function."""
    if func.name != "forward" or func.cls is None:
        return None
    for facts in analysis.all_facts():
        loops = step_loops(analysis, facts)
        for forward in facts.forwards:
            cls = forward.module.cls
            if cls is None or cls.method("forward") is not func:
                continue
            site = forward.site
            loop = next((lp for lp in loops if lp in site.loops), None)
            if loop is None or site.conds_inside(loop) or analysis.evaluation_reason(facts, site):
                continue
            return (f"`{cls.name}.forward()` runs when the module is called at line "
                    f"{site.line} in the training loop at line {loop.lineno}")
    return None
