"""TPF005 softmax-before-cross-entropy: probabilities fed to a loss that normalises itself.

## What it does
Reports a call of `nn.CrossEntropyLoss` / `F.cross_entropy` whose input (first argument) is
the output of `softmax` or `log_softmax`, and a call of `nn.NLLLoss` / `F.nll_loss` whose
input is `softmax` output (not `log_softmax`). The activation may be a function
(`F.softmax`, `torch.softmax`), a tensor method (`x.softmax(1)`), an `nn.Softmax` /
`nn.LogSoftmax` module, a model whose `forward` returns one (a class of this file, or one
imported from a file next to it), or an `nn.Sequential` that ends with one; the model may be
a local, a `self.model` attribute, or a parameter that every caller in the file fills with
such a model.

## Why is this bad?
`cross_entropy` applies `log_softmax` itself. Fed probabilities, it normalises them again:
the outputs are squeezed into `[0, 1]`, the loss cannot go below about `log(C) - 1`, and the
gradients shrink by orders of magnitude, so training stalls with no error. `nll_loss`
expects log-probabilities; fed probabilities, it maximises a linear function of them and the
"loss" goes negative. `log_softmax` before `cross_entropy` is reported as a **note**: it
computes the same loss and gradients as the logits would (log-softmax is idempotent), so it
only costs a second normalisation and says the author expected `nll_loss`.

## Example
```python
criterion = nn.CrossEntropyLoss()
for x, y in loader:
    optimizer.zero_grad()
    probs = F.softmax(model(x), dim=1)
    loss = criterion(probs, y)
    loss.backward()
    optimizer.step()
```

## Use instead
```python
criterion = nn.CrossEntropyLoss()
for x, y in loader:
    optimizer.zero_grad()
    logits = model(x)
    loss = criterion(logits, y)
    loss.backward()
    optimizer.step()
```

## Fix safety
Safe when the softmax call is written directly as the loss's argument
(`criterion(F.softmax(out, dim=1), y)` becomes `criterion(out, y)`): the message then says
"unwrap". When the softmax happens elsewhere (a model's `forward`, an earlier line whose
result is also used for metrics), no autofix: move the softmax to inference code by hand.

## Known limits
Quiet when the activation is not certain: softmax on one branch only (`x if self.training
else x.softmax(1)`), a model passed in from outside the file, a model class imported from a
module that is not a file next to the linted one, a loss object whose class the analysis
cannot see (a `criterion` parameter some caller fills with something else). Only the first
(input) argument is judged: soft targets (`F.softmax(teacher / T)` as the target) are fine.
"""
from __future__ import annotations

from typing import Iterator

from ..analysis import FileAnalysis
from ..analysis.topics import losses as L
from ..analysis.core import values as V
from ..analysis.core.astutil import short
from ..findings import ERROR, NOTE, Finding, FixPlan
from ..analysis.core.provenance import proven
from .base import Rule


class SoftmaxBeforeCrossEntropy(Rule):
    code = "TPF005"
    name = "softmax-before-cross-entropy"
    severity = ERROR
    # the premises every finding of this rule rests on (each proven by the search named)
    chain = (proven("the loss gets the softmax output of a layer or call the analysis resolved",
                    "the loss class and the activation were seen built"),)
    fix_safety = "safe"

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for facts in analysis.all_facts():
            for loss in L.loss_calls(analysis, facts):
                if loss.kind not in (L.CROSS_ENTROPY, L.NLL):
                    continue
                tags = loss.input.tags & V.ACTIVATION_TAGS
                if tags == {V.SOFTMAX}:
                    tag = V.SOFTMAX
                elif tags == {V.LOG_SOFTMAX} and loss.kind == L.CROSS_ENTROPY:
                    tag = V.LOG_SOFTMAX
                else:
                    continue
                yield self._finding(analysis, facts, loss, tag)

    def _finding(self, analysis, facts, loss: L.LossCall, tag: str) -> Finding:
        word = "log-softmax" if tag == V.LOG_SOFTMAX else "softmax"
        source = L.activation_source(analysis, facts, loss.input_node, loss.input, tag)
        producer = L.producer(facts, loss.input_node, loss.input)
        direct = (producer is not None and producer.node is loss.input_node
                  and L.is_direct_activation_call(analysis, producer, tag))
        made = f" (made at line {loss.made_at})" if loss.made_at else ""
        arg = short(loss.input_node)
        subject = "its input" if source.startswith(f"`{arg}`") else f"its input `{arg}`"
        if loss.kind == L.NLL:
            what = f"`{loss.spelled}` gets softmax probabilities, not log-probabilities"
            evidence = (f"{subject} is {word} output: {source}; `{loss.spelled}`{made} "
                        f"expects `log_softmax` output, so the loss is a linear function of "
                        f"the probabilities")
            fix = ("replace the softmax with `F.log_softmax(...)`, or drop it and use "
                   "`nn.CrossEntropyLoss` on the logits")
            if direct:
                fix = f"unwrap `{short(producer.node)}` to `F.log_softmax(...)` on the same logits"
            return self.finding(loss.call.site, what, evidence, fix)
        what = f"`{loss.spelled}` gets {word} output, but it applies log-softmax itself"
        # log_softmax is idempotent: the loss and its gradients are those of the logits, so
        # the second normalisation is redundant work, not a wrong loss (a note).
        severity = ERROR if tag == V.SOFTMAX else NOTE
        consequence = ("the probabilities are normalised twice and the gradients shrink, so "
                       "training stalls" if tag == V.SOFTMAX else
                       "log-softmax of log-softmax output changes nothing, so the loss and "
                       "gradients are right and the normalisation runs twice for nothing "
                       "(`log_softmax` output belongs in `nn.NLLLoss`)")
        evidence = f"{subject} is {source}; `{loss.spelled}`{made}: {consequence}"
        inner = L.unwrapped_activation(analysis, facts, loss.input_node)
        if inner is not None:
            fix = f"unwrap `{short(loss.input_node)}`: pass the logits `{short(inner)}` directly"
            plan = FixPlan("unwrap", loss.input_node, replacement=inner)
            return self.finding(loss.call.site, what, evidence, fix, severity, plan=plan)
        fix = (f"pass the logits (the output before the {word}) to `{loss.spelled}` and "
               f"apply {word} only for predictions/metrics")
        if tag == V.LOG_SOFTMAX:
            fix += ", or keep the log-softmax and use `nn.NLLLoss`"
        return self.finding(loss.call.site, what, evidence, fix, severity)
