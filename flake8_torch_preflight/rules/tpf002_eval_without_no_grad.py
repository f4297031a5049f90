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
Safe for functions named as evaluation: `@torch.no_grad()` only stops recording. Elsewhere
the fix is a `with torch.no_grad():` block placed by hand.

## Known limits
Quiet in Lightning `validation_step`/`test_step`/`predict_step` and other LightningModule
hooks (Lightning disables grad), in HF `Trainer` subclasses' evaluation methods, when any
caller in the same file wraps the call in `no_grad` (one level up), when the scope runs a
backward, and for `test_*` functions with no loop (model-file smoke tests). Only one finding
per evaluation scope.
"""
from __future__ import annotations

from typing import Iterator

from ..analysis import FileAnalysis
from ..analysis import values as V
from ..findings import WARNING, Finding
from .base import Rule


class EvalWithoutNoGrad(Rule):
    code = "TPF002"
    name = "eval-without-no-grad"
    severity = WARNING
    fix_safety = "safe"

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for facts in analysis.all_facts():
            func = facts.func
            if analysis.framework_owned(func):
                continue
            if func is not None and analysis.wrapped_in_no_grad_by_caller(func):
                continue
            reported = set()
            for forward in facts.forwards:
                site = forward.site
                if site.no_grad or forward.module.has(V.LOSS_FN):
                    continue
                reason = analysis.evaluation_reason(facts, site)
                if reason is None or analysis.scope_does(facts, site, "backward"):
                    continue
                scope = site.loops[-1] if site.loops else func
                if scope in reported:
                    continue
                reported.add(scope)
                yield self.finding(
                    site,
                    f"forward pass `{forward.text}` in evaluation code records autograd history",
                    f"{reason}; not under `torch.no_grad()`/`inference_mode()`, no caller wraps "
                    f"it, and no backward runs there, so activations are kept for nothing",
                    self._fix(func, reason))

    @staticmethod
    def _fix(func, reason: str) -> str:
        if func is not None and "by its name" in reason:
            return f"decorate `{func.name}` with `@torch.no_grad()`"
        return "wrap the evaluation loop in `with torch.no_grad():` (or `torch.inference_mode()`)"
