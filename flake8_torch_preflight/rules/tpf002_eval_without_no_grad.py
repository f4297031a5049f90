"""TPF002 eval-without-no-grad: evaluation runs forward passes with autograd recording.

## What it does
Reports a model forward call in evaluation code that runs with autograd enabled: not under
`torch.no_grad()`, `torch.inference_mode()` or `torch.set_grad_enabled(False)` (as a context
or as a decorator on the function or an enclosing one), not called from inside such a
context, and with no backward pass in that scope. Evaluation code is a function whose name
says it evaluates (`evaluate`, `validate`, `val_*`, `eval_*`, `predict*`, `infer*`, `test_*`
outside pytest files), a loop over a loader whose name says validation (`val_loader`,
`valid_dl`, `test_loader`, …), or code after `model.eval()` in the same scope.

## Why is this bad?
`model.eval()` only switches dropout and batch-norm; it does not stop autograd. Every
activation is saved for a backward pass that never comes: evaluation takes about twice the
memory and runs slower, and a large validation batch can OOM a job that trains fine.

## Example
```python
def evaluate(model, val_loader):
    model.eval()
    correct = 0
    for x, y in val_loader:
        correct += (model(x).argmax(1) == y).sum().item()
    return correct
```

## Use instead
```python
@torch.no_grad()
def evaluate(model, val_loader):
    model.eval()
    correct = 0
    for x, y in val_loader:
        correct += (model(x).argmax(1) == y).sum().item()
    return correct
```

## Fix safety
Safe for functions named as evaluation, where proven: `@torch.no_grad()` only stops
recording. Elsewhere the fix is a `with torch.no_grad():` block placed by hand. `tpf fix`
decorates only when the proof of `analysis/fix_proof.py` holds for the function and every
helper of the file it calls: it differentiates nothing (a function that calls
`torch.autograd.grad` or runs a backward is not reported at all), hands no module and no
value that may carry a graph to a call the analysis cannot see into (an attack from another
package), stores no such value on an object, and returns none to callers outside the file
or to an in-file caller that differentiates. Otherwise the finding stays, and its fix text
names the premise that failed.

## Known limits
Quiet on a frozen model (see TPF001: `requires_grad_(False)`, a class that freezes itself or
runs its `forward` without grad) given graph-free inputs: it records nothing. A callable held
in a name every binding of which is a factory (`knn = partial(KnnModule, k=10)`), passed for
a parameter named `module` or `model`, builds an object when called; a method read off an
object of a project class (`f = model.create_dummy_batch`) is that method, not a submodule.
"No caller wraps it" is searched among the callers in this file.
Quiet in Lightning `validation_step`/`test_step`/`predict_step` and other LightningModule
hooks (Lightning disables grad), in HF `Trainer` subclasses (but an `evaluate`,
`prediction_step`, `evaluation_loop` or `predict` override that never calls `super()` is
judged like any evaluation function: the Trainer's `no_grad` lived in what it replaced), when any
caller in the same file wraps the call in `no_grad` (one level up), when the scope runs a
backward or differentiates with `torch.autograd.grad`, for `test_*` functions with no loop
(model-file smoke tests), and for calls of a parameter-free module of this file (a metric
written as an `nn.Module`; one whose `__init__` stores what an unmodelled library call returns,
such as a `GCNConv`, is not proven parameter-free) on graph-free inputs.
Quiet as well when the forward call's own output reaches a backward somewhere in the file (the
layers inside a file class's `forward` are shared by every call of the model and do not count),
or the function is called by a module's `forward` (`predict_noise()` inside a diffusion model).
A forward helper shared with training (`loss, logits = forward_step(model, batch)`) is judged
per call path: its call in evaluation code that does not disable grad and runs no backward is
reported at that call (the helper itself is not evaluation code, or feeds training there).
A method of an `nn.Module` class is not evaluation code by its name alone (`inference()`,
`predict_values()`, `evaluate_actions()` are a model's interface: PPO trains through
`evaluate_actions`, and evaluation scripts call `inference()` under their own `no_grad`).
Tokenizers, `model.generate(...)` and `torch.jit.trace(...)` are not forward calls. A
warm-up or shape-probe forward (every argument a tensor of made-up values such as
`torch.randn(1, 3, 224, 224)` or zeros, the output dropped) evaluates nothing and keeps no
graph after it returns: it is not reported, and the evaluation is judged at its own
forwards. Only one finding per evaluation scope.
A model of a kind the file does not show (a parameter named `predictor`, a library class, a
factory, `torch.load(...)`) is a module once `x.eval()` was called on it earlier in the same
scope; without that call it stays unknown and its calls are not forward passes, and in a file
that defines a plain (non-`nn.Module`) class with an `eval()` of its own nothing is concluded
from `eval()`. `torch.jit.load(...)` gives a module, Accelerate's `prepare_pippy(model)`
returns `model`, and `model.module(x)` calls the module a DDP/DeepSpeed wrapper holds. A model
that reaches a function as a parameter is not typed by what its callers pass.
"""
from __future__ import annotations

import ast
from typing import Iterator

from ..analysis import Does, FileAnalysis
from ..analysis.core import values as V
from ..analysis.core.astutil import assigns_self_attribute
from ..analysis.topics.classes import module_like
from ..analysis.core.constants import unreachable
from ..analysis.topics.device import synthetic_tensor
from ..analysis.core.provenance import first_unproven
from ..analysis.topics.fix_proof import no_grad_premises
from ..findings import WARNING, Finding, FixPlan
from .base import Rule


class EvalWithoutNoGrad(Rule):
    code = "TPF002"
    name = "eval-without-no-grad"
    severity = WARNING
    fix_safety = "safe"

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        trained = _trained_graphs(analysis)
        for facts in analysis.all_facts():
            if not _judged(analysis, facts):
                continue
            reported = set()
            for forward, reason in _recording_evaluation_forwards(analysis, facts, trained):
                site = forward.site
                scope = site.loops[-1] if site.loops else facts.func
                if scope in reported:
                    continue
                reported.add(scope)
                yield self._report(analysis, facts.func, forward, reason)
            yield from self._shared_forward_helpers(analysis, facts, trained, reported)

    def _report(self, analysis: FileAnalysis, func, forward, reason: str) -> Finding:
        fix, plan, unsafe = _fix(analysis, func, reason)
        return self.finding(
            forward.site,
            f"forward pass `{forward.text}` in evaluation code records autograd history",
            f"{reason}; not under `torch.no_grad()`/`inference_mode()`, no caller in this "
            f"file wraps it, and no backward runs there, so activations are kept for nothing",
            fix, plan=plan, no_autofix=unsafe)

    def _shared_forward_helpers(self, analysis, facts, trained, reported) -> Iterator[Finding]:
        """Evaluation code that runs its forward through a helper of the file it shares with
        training (`loss, logits = forward_step(model, batch)`): judged on this call path, at
        the call. The helper's own forward is not evaluation code (or feeds a backward on
        the training path), so it is not reported there; here nothing backwards."""
        func = facts.func
        for local in facts.local_calls:
            site = local.site
            scope = site.loops[-1] if site.loops else func
            if site.no_grad or scope in reported or unreachable(analysis, facts, site):
                continue
            reason = analysis.evaluation_reason(facts, site)
            if reason is None or analysis.scope_does(facts, site, Does.DIFFERENTIATE) \
                    or (func is not None and facts.returns.grad):
                continue
            if "by its name" in reason and _model_api(analysis, func):
                continue
            forward = _helper_forward(analysis, local.callee, trained, 0)
            if forward is None or _called_by_forward(analysis, func) \
                    or analysis.function_does(local.callee, Does.DIFFERENTIATE):
                continue
            reported.add(scope)
            fix, plan, unsafe = _fix(analysis, func, reason)
            yield self.finding(
                site,
                f"forward pass `{forward.text}` in `{local.callee.name}()`, called by evaluation "
                f"code, records autograd history",
                f"{reason}; `{local.callee.name}()` (called at line {site.line}) runs "
                f"`{forward.text}` at line {forward.site.line} with autograd on; this call is "
                f"not under `torch.no_grad()`/`inference_mode()`, no caller in this file wraps it, and no "
                f"backward runs on this path, so activations are kept for nothing",
                fix, plan=plan, no_autofix=unsafe)


def _trained_graphs(analysis: FileAnalysis) -> frozenset:
    """Lines of graphs that some backward in the file runs through."""
    trained = frozenset()
    for facts in analysis.all_facts():
        for backward in facts.backwards:
            trained = V.union_graphs(trained, backward.value.graphs)
    return trained


def _judged(analysis: FileAnalysis, facts) -> bool:
    """The scope is ours to judge: not a framework hook that disables grad itself (an HF
    evaluation override that skips `super()` is), not wrapped in `no_grad` by a caller of
    the file, not a pytest test."""
    func = facts.func
    owner = analysis.framework_owned(func)
    if owner and not (owner == "HF Trainer" and _own_hf_evaluation(facts)):
        return False
    if func is not None and analysis.wrapped_in_no_grad_by_caller(func):
        return False
    # a unit test's forward after `eval()` checks outputs, not memory
    return not (analysis.is_test_file and func is not None and _pytest_test(func))


def _recording_evaluation_forwards(analysis: FileAnalysis, facts, trained) -> Iterator:
    """(forward, why it is evaluation) for each forward of the scope that records autograd
    history in evaluation code, in source order."""
    func = facts.func
    calls = None
    for forward in facts.forwards:
        site = forward.site
        if site.no_grad or forward.module.has(V.LOSS_FN) or unreachable(analysis, facts, site):
            continue
        if forward.module.has(V.FROZEN) and not forward.value.grad:
            continue   # a frozen model (or one that runs its forward without grad) on graph-free inputs
        if forward.module.cls is not None and _parameter_free(analysis, forward.module.cls):
            if calls is None:
                calls = {id(c.node): c for c in facts.calls}
            call = calls.get(id(site.node))
            if call is None or not any(a.grad for a in call.args):
                continue   # a metric module on graph-free inputs records nothing
        reason = analysis.evaluation_reason(facts, site)
        if reason is None or analysis.scope_does(facts, site, Does.DIFFERENTIATE):
            continue
        if _warm_up(analysis, facts, forward):
            continue       # made-up input, output dropped: no evaluation, no graph kept
        if "by its name" in reason and _model_api(analysis, func):
            continue   # `Policy.evaluate_actions()`: its callers decide the grad mode
        if _feeds_training(forward, trained) or _called_by_forward(analysis, func):
            continue   # `predict_noise()` / `infer_logits()` feed a training loss
        yield forward, reason


def _warm_up(analysis: FileAnalysis, facts, forward) -> bool:
    """A warm-up (or shape-probe) forward: every argument is a tensor of made-up values
    (`torch.randn(1, 3, 224, 224)`, zeros) and the output is dropped (an expression
    statement, or bound to `_`). It evaluates nothing, and its graph is freed as soon as
    the call returns, so it keeps no activations; the evaluation itself is judged at its
    own forwards."""
    node = forward.site.node
    if not isinstance(node, ast.Call) or not (node.args or node.keywords):
        return False
    stmt = forward.site.stmt
    dropped = isinstance(stmt, ast.Expr) and stmt.value is node or (
        isinstance(stmt, ast.Assign) and stmt.value is node
        and all(isinstance(t, ast.Name) and t.id == "_" for t in stmt.targets))
    arguments = list(node.args) + [kw.value for kw in node.keywords]
    return dropped and all(synthetic_tensor(analysis, facts, a) for a in arguments)


def _fix(analysis: FileAnalysis, func, reason: str):
    """(advice, the decorator fix or None, why it is not applied automatically or None)."""
    if func is None or "by its name" not in reason:
        return ("wrap the evaluation loop in `with torch.no_grad():` (or "
                "`torch.inference_mode()`)", None, None)
    advice = f"decorate `{func.name}` with `@torch.no_grad()`"
    unproven = first_unproven(no_grad_premises(analysis, func))
    if unproven is not None:
        return advice, None, unproven.basis
    return advice, FixPlan("no_grad_decorator", func.node), None


def _parameter_free(analysis: FileAnalysis, cls, depth: int = 0) -> bool:
    """An nn.Module class of this file that holds no parameters or submodules (a metric, a
    parameter-free transform): its forward records nothing unless its inputs need grad."""
    if depth > 3 or not cls.is_module or cls.is_lightning:
        return False
    local = {base.name for base in cls.local_bases}
    for base in cls.bases:
        if base not in local and base not in ("torch.nn.Module", "torch.nn.modules.module.Module"):
            return False          # nn.Linear, a PreTrainedModel…: parameters of its own
    if not all(_parameter_free(analysis, base, depth + 1) for base in cls.local_bases):
        return False
    init = cls.methods.get("__init__")
    if init is None:
        return True
    facts = analysis.facts_for(init)
    if any(c.method in ("register_parameter", "add_module", "register_module")
           for c in facts.calls):
        return False
    for name, value in facts.env.items():
        if name.startswith("self.") and (value.has(V.MODULE) or value.grad or value.leaf):
            return False
    # `self.conv = GCNConv(...)`: a class of a library we do not model may well hold
    # parameters; not proven parameter-free
    return not any(call.unseen and assigns_self_attribute(call.site.stmt) for call in facts.calls)


def _model_api(analysis: FileAnalysis, func) -> bool:
    """A method of an `nn.Module` class: part of a model's interface (`inference()`,
    `predict_values()`, `evaluate_actions()`), which training code may call with autograd on
    and evaluation code under its own `no_grad`, often from another file."""
    return func is not None and func.cls is not None and module_like(analysis, func.cls)


def _pytest_test(func) -> bool:
    """`test_*` functions and methods of `Test*` classes (or the function they enclose)."""
    while func is not None:
        if func.name.startswith("test") or (func.cls is not None and func.cls.name.startswith("Test")):
            return True
        func = func.parent
    return False


def _helper_forward(analysis, func, trained, depth: int):
    """The first forward a helper runs with autograd on (itself, or a helper it calls, two
    deep) that its own judgement leaves unreported: not evaluation code there, or feeding a
    training backward. None when it has none, or disables grad itself."""
    if depth > 2 or func.no_grad_decorated or (func.cls is not None and func.name == "forward"):
        return None
    facts = analysis.facts_for(func)
    for forward in facts.forwards:
        if forward.site.no_grad or forward.module.has(V.LOSS_FN):
            continue
        if forward.module.cls is not None and _parameter_free(analysis, forward.module.cls):
            continue
        if analysis.evaluation_reason(facts, forward.site) and not _feeds_training(forward, trained):
            return None          # reported in the helper itself
        return forward
    for local in facts.local_calls:
        if not local.site.no_grad:
            found = _helper_forward(analysis, local.callee, trained, depth + 1)
            if found is not None:
                return found
    return None


def _feeds_training(forward, trained) -> bool:
    """The graph this very call makes reaches a backward of the file (`loss =
    mse(predict_noise(x), noise)`). Only the call's own line counts: the lines of the graphs
    its result also carries (the layers of the class's `forward`, an input's graph) are
    shared with every other call of the same model, the training step's among them."""
    return V.graphs_overlap(frozenset({forward.site.node.lineno}), trained)


def _called_by_forward(analysis: FileAnalysis, func) -> bool:
    """Some in-file caller is a module's `forward`: the function is part of the model."""
    if func is None:
        return False
    for caller, _ in analysis.callers(func):
        owner = caller.func
        if owner is not None and owner.name == "forward" and owner.cls is not None \
                and owner.cls.is_module:
            return True
    return False


_HF_EVAL_METHODS = frozenset({"evaluate", "prediction_step", "evaluation_loop", "predict"})


def _own_hf_evaluation(facts) -> bool:
    """An HF `Trainer` evaluation method overridden without delegating to `super()`: the
    Trainer's own `no_grad` (inside `prediction_step`) no longer applies to it."""
    func = facts.func
    if func is None or func.cls is None or func.name not in _HF_EVAL_METHODS:
        return False
    for call in facts.calls:
        target = call.node.func
        if call.method == func.name and isinstance(target, ast.Attribute) \
                and isinstance(target.value, ast.Call) \
                and getattr(target.value.func, "id", None) == "super":
            return False
    return True
