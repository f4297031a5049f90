"""TPF016 call-without-parentheses: a training call without `()`, or a context manager as a statement.

## What it does
Reports expression statements that name an action without performing it:

- `model.eval`, `model.train`, `optimizer.zero_grad`, `model.zero_grad`, `optimizer.step`,
  `scheduler.step`, `loss.backward` with no call (and `optimizer.train` / `optimizer.eval` of
  schedule-free optimizers): the receiver must be, for the analysis, a module (a loss module,
  `self` in a class with a `forward`), an optimizer, an LR scheduler or a value that carries a
  graph (a loss); a receiver the analysis knows nothing about counts when its name says what
  it is (`model`, `text_encoder`, `netG`, `model_engine`, `optimizer`, `opt_g`,
  `lr_scheduler`, `loss`);
- `torch.no_grad()`, `torch.inference_mode()`, `torch.enable_grad()` and `torch.autocast(...)`
  (also `torch.cuda.amp.autocast`, `torch.amp.autocast`) as statements, outside a `with`.

## Why is this bad?
A bare `model.eval` reads the bound method and throws it away: the model stays in training
mode, so evaluation runs with dropout on and updates batch-norm statistics. `optimizer.step`
never updates the weights, `scheduler.step` never changes the learning rate, `zero_grad`
never resets (gradients pile up), `loss.backward` computes nothing. `torch.no_grad()` on its
own line builds a context manager and discards it: autograd keeps recording, and
`torch.autocast(...)` leaves the code in full precision. Python runs all of them without a
word; a generic linter may at best call them pointless statements.

## Example
```python
model.eval
torch.no_grad()
for x, y in val_loader:
    correct += (model(x).argmax(1) == y).sum().item()
```

## Use instead
```python
model.eval()
with torch.no_grad():
    for x, y in val_loader:
        correct += (model(x).argmax(1) == y).sum().item()
```

## Fix safety
No autofix yet: adding the parentheses is mechanical for the methods; a context manager has
to wrap the code it was meant for, which only the author knows.

## Known limits
A receiver the analysis resolves to something else (a dataset, a config, an RL environment)
is never reported, whatever its name; an unknown receiver is reported only when its last
name part says what it is. Attributes reached through calls or subscripts
(`models[0].eval`) are not checked. `torch.set_grad_enabled(False)` as a statement is a real
call (it switches autograd off) and is not reported.
"""
from __future__ import annotations

from typing import Iterator

from ..analysis import FileAnalysis
from ..analysis.topics.bare_statements import (LOSS_KIND, MODULE_KIND, OPTIMIZER_KIND,
                                               OWN_METHOD_KIND, SCHEDULER_KIND, BareStatement,
                                               bare_statements)
from ..analysis.core.events import Site
from ..findings import ERROR, Finding
from ..analysis.core.provenance import proven
from .base import Rule

# (method, receiver kind) -> what silently does not happen
_EFFECTS = {
    ("eval", MODULE_KIND): "the model is not put into evaluation mode (dropout stays on, "
                           "batch-norm keeps updating its statistics)",
    ("train", MODULE_KIND): "the model is not put back into training mode (dropout stays off, "
                            "batch-norm statistics stay frozen)",
    ("eval", OPTIMIZER_KIND): "the optimizer is not switched to evaluation (a schedule-free "
                              "optimizer keeps its training weights in the model)",
    ("train", OPTIMIZER_KIND): "the optimizer is not switched back to training (a schedule-free "
                               "optimizer keeps its averaged weights in the model)",
    ("zero_grad", OPTIMIZER_KIND): "gradients are never reset and pile up across steps",
    ("zero_grad", MODULE_KIND): "gradients are never reset and pile up across steps",
    ("step", OPTIMIZER_KIND): "the weights are never updated",
    ("step", SCHEDULER_KIND): "the learning rate never follows the schedule",
    ("backward", LOSS_KIND): "no gradients are computed",
}
_KIND_WORDS = {MODULE_KIND: "a model", OPTIMIZER_KIND: "an optimizer",
               SCHEDULER_KIND: "an LR scheduler", LOSS_KIND: "a loss that carries a graph"}
_CONTEXT_EFFECTS = {
    "autocast": "the code after it runs in full precision",
    "enable_grad": "autograd stays as it was",
}


class CallWithoutParentheses(Rule):
    code = "TPF016"
    name = "call-without-parentheses"
    severity = ERROR
    # the premises every finding of this rule rests on (each proven by the search named)
    chain = (proven("the statement names a callable without calling it",
                    "the object's kind was seen built or resolved"),)

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for item in bare_statements(analysis):
            site = Site(item.stmt, item.stmt, (), (), False, False, False)
            if item.kind == "method":
                yield self._method(site, item)
            else:
                yield self._context(site, item)

    def _method(self, site: Site, item: BareStatement) -> Finding:
        written = f"{item.receiver_text}.{item.name}"
        if item.receiver_kind == OWN_METHOD_KIND:
            return self.finding(
                site, f"`{written}` without parentheses does nothing: the class's own "
                f"`{item.name}()` is never run",
                f"the statement at line {site.line} reads the method and throws it away; the "
                f"class of `self` defines `{item.name}()`", f"call it: `{written}()`")
        kind = _KIND_WORDS[item.receiver_kind]
        what_it_is = (f"is, by its name, {kind} (the analysis knows nothing else about it)"
                      if item.by_name else f"holds {kind}")
        return self.finding(
            site,
            f"`{written}` without parentheses does nothing: "
            f"{_EFFECTS[(item.name, item.receiver_kind)]}",
            f"the statement at line {site.line} reads the method and throws it away; "
            f"`{item.receiver_text}` {what_it_is}",
            f"call it: `{written}()`")

    def _context(self, site: Site, item: BareStatement) -> Finding:
        last = item.name.rsplit(".", 1)[-1]
        effect = _CONTEXT_EFFECTS.get(last, "autograd keeps recording")
        called = item.receiver_text if item.receiver_text.endswith(")") else item.receiver_text + "()"
        return self.finding(
            site,
            f"`{item.receiver_text}` as a statement does nothing: {effect}",
            f"the statement at line {site.line} {'builds' if called == item.receiver_text else 'names'} "
            f"the context manager and discards it; only `with {called}:` or the decorator form "
            f"applies it",
            f"wrap the code it is meant for: `with {called}:`")
