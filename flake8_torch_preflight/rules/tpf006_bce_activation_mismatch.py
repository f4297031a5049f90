"""TPF006 bce-activation-mismatch: sigmoid/logit mix-up with binary cross-entropy.

## What it does
Reports a call of `nn.BCEWithLogitsLoss` / `F.binary_cross_entropy_with_logits` whose input
(first argument) is `sigmoid` output (a function, a tensor method, an `nn.Sigmoid` module, a
model whose `forward` returns sigmoid output, or an `nn.Sequential` ending with
`nn.Sigmoid`), and a call of `nn.BCELoss` / `F.binary_cross_entropy` whose input has no
sigmoid in its provenance and comes straight from a model or linear layer: an `nn.Linear`,
an `nn.Sequential` ending with one, or a class of this file whose `forward` returns such a
layer's output unchanged. Also reports either loss fed the `softmax` / `log_softmax` of a
single score (`F.softmax(out, dim=-1)` where `out` comes from an `nn.Linear(h, 1)`, a
`Sequential` ending in one, or a class of this file whose forward returns one): that input
is the constant 1.0 (0.0) for every sample.

## Why is this bad?
`BCEWithLogitsLoss` applies the sigmoid itself. Fed probabilities, it squashes them again
into `[0.5, 0.73]`: the loss stays high, gradients vanish and the model learns very little,
with no error. `BCELoss` expects probabilities in `[0, 1]`; fed raw scores it produces
nonsense or NaN (and on CUDA may fail only for some batches). A softmax over one unit is
1.0 whatever the score: the loss no longer depends on the model, so nothing trains.

## Example
```python
criterion = nn.BCEWithLogitsLoss()
for x, y in loader:
    optimizer.zero_grad()
    probs = torch.sigmoid(model(x))
    loss = criterion(probs, y)
    loss.backward()
    optimizer.step()
```

## Use instead
```python
criterion = nn.BCEWithLogitsLoss()
for x, y in loader:
    optimizer.zero_grad()
    logits = model(x)
    loss = criterion(logits, y)
    loss.backward()
    optimizer.step()
```

## Fix safety
No autofix: whether to drop the sigmoid or switch the loss class depends on what else uses
the probabilities (metrics, thresholds, a focal weight).

## Known limits
Only the first argument is judged, so a focal loss that computes `p = logits.sigmoid()` for
its weight while the loss gets the raw `logits` is quiet, as are soft targets. For
`BCELoss`, a model whose output the analysis cannot see (a parameter, a pretrained or
imported model, a forward that post-processes its scores) is not called "raw": quiet. Values
that are a sigmoid on one branch only are quiet. The softmax of a single score is an error
with `dim=-1`, and a warning with `dim=1` (the scores are taken as `(batch, 1)`); any
reshaping between the layer and the softmax, or a softmax module, is quiet.
"""
from __future__ import annotations

from typing import Iterator

from ..analysis import FileAnalysis
from ..analysis.topics import losses as L
from ..analysis.core import values as V
from ..analysis.core.astutil import short
from ..findings import ERROR, WARNING, Finding
from ..analysis.core.provenance import proven
from .base import Rule


_SOFTMAXES = ({V.SOFTMAX}, {V.LOG_SOFTMAX})


class BceActivationMismatch(Rule):
    code = "TPF006"
    name = "bce-activation-mismatch"
    severity = ERROR
    # the premises every finding of this rule rests on (each proven by the search named)
    chain = (proven("the BCE loss gets an input whose activation the analysis resolved",
                    "the loss class and the activation were seen built"),)

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for facts in analysis.all_facts():
            for loss in L.loss_calls(analysis, facts):
                tags = loss.input.tags & V.ACTIVATION_TAGS
                arg = short(loss.input_node)
                made = f" (made at line {loss.made_at})" if loss.made_at else ""
                if loss.kind == L.BCE_WITH_LOGITS and tags == {V.SIGMOID}:
                    source = L.activation_source(analysis, facts, loss.input_node, loss.input,
                                                 V.SIGMOID)
                    yield self.finding(
                        loss.call.site,
                        f"`{loss.spelled}` gets sigmoid output: the sigmoid is applied twice",
                        f"{'its input' if source.startswith(f'`{arg}`') else f'its input `{arg}`'} "
                        f"is {source}; `{loss.spelled}`{made} applies "
                        f"`sigmoid` itself, so probabilities are squashed into [0.5, 0.73] and "
                        f"gradients vanish",
                        f"pass the logits (before the sigmoid) to `{loss.spelled}`, or keep the "
                        f"sigmoid and use `nn.BCELoss`")
                elif loss.kind in (L.BCE, L.BCE_WITH_LOGITS) and tags in _SOFTMAXES:
                    found = L.softmax_of_one_unit(analysis, facts, loss.input_node, loss.input)
                    if found is not None:
                        yield self._one_unit_softmax(loss, found, arg, made)
                elif loss.kind == L.BCE:
                    source = L.raw_logits_source(analysis, facts, loss.input_node, loss.input)
                    if source is None:
                        continue
                    yield self.finding(
                        loss.call.site,
                        f"`{loss.spelled}` gets raw logits: it expects probabilities in [0, 1]",
                        f"its input `{arg}`: {source}, with no sigmoid after it; "
                        f"`{loss.spelled}`{made} takes `log` of its input",
                        "use `nn.BCEWithLogitsLoss` (numerically stable) on the logits, or "
                        "apply `torch.sigmoid` first")

    def _one_unit_softmax(self, loss, found, arg: str, made: str) -> Finding:
        name = found.softmax.method or found.softmax.qualname.rsplit(".", 1)[-1]
        constant = "1.0" if name == "softmax" else "0.0"
        dim = "" if found.proven else " (taking the scores as (batch, 1): `dim=1` is their " \
            "last axis)"
        return self.finding(
            loss.call.site,
            f"`{loss.spelled}` gets the {name} of a single score: its input is the constant "
            f"{constant}",
            f"its input `{arg}` is `{short(found.softmax.node)}` (line "
            f"{found.softmax.site.line}) over the one-unit axis; {found.source}{dim}; a "
            f"{name} over one value is {constant} for every sample, so `{loss.spelled}`{made} "
            f"sends no gradient to the model",
            "use `torch.sigmoid` on the single score with `nn.BCELoss`, or pass the raw score "
            "to `nn.BCEWithLogitsLoss`", None if found.proven else WARNING)
