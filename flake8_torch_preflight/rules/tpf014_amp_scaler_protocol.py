"""TPF014 amp-scaler-protocol: the AMP GradScaler used out of order.

## What it does
In a loop that backwards a loss scaled by `torch.amp.GradScaler` / `torch.cuda.amp.GradScaler`
(`scaler.scale(loss).backward()`, in the loop or in a helper it calls), or in the straight-line
body of a step function that does (`def run_batch(...)`, called per batch), reports:

- a gradient clip (`clip_grad_norm_`, `clip_grad_value_`, a wrapped model's
  `clip_grad_norm_`) with no `scaler.unscale_(optimizer)` before it in the iteration;
- `optimizer.step()` with no `scaler.step(optimizer)` or `scaler.unscale_()` anywhere in the
  loop: the scaled gradients are applied as they are (a `scaler.update()` there unscales
  nothing; with no inf check recorded it raises once the scaler is enabled);
- `scaler.unscale_(optimizer)` on every micro-step of a gradient-accumulation window (the
  windows of TPF004, `analysis/accumulation.py`) while the step runs once per window.

A missing `scaler.update()` after `scaler.step()` is not reported: it raises at the next step.

## Why is this bad?
The scaler multiplies the loss, hence every gradient, by its loss scale (2**16 at the
start). A clip before `unscale_` compares gradients × 65,536 with `max_norm`: it clips every
step to a tiny fraction of the intended norm, and the update shrinks by the same factor.
`optimizer.step()` without the scaler applies gradients × 65,536 (and steps on inf/NaN
gradients the scaler would have skipped). `unscale_` may run once per optimizer between two
`update()` calls (`torch/amp/grad_scaler.py`: "unscale_() has already been called on this
optimizer since the last update()"): on every micro-step, the run crashes on the second one,
but only once someone switches accumulation on.

## Example
```python
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
```

## Use instead
```python
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
```

## Fix safety
No autofix: where `unscale_` goes depends on the accumulation gate and on which optimizer
owns the clipped parameters.

## Known limits
Checked against `torch/amp/grad_scaler.py` (PyTorch's `GradScaler`: `unscale_` raises on a
second call before `update()`; `enabled=False` makes every method a no-op) and the AMP
examples ("Working with Unscaled Gradients"). Quiet for `GradScaler(enabled=False)` written
literally, when the clip and the scaled backward sit on opposite branches of one `if`, when
the scaler is handed to a function the analysis cannot follow (it may unscale or step), and
in Lightning and HF `Trainer` code and with Accelerate, DeepSpeed or Fabric, which own the
scaler (they create none in user code). Order is judged by line within one iteration; an
unscale in a helper counts wherever the helper is called before the clip.
"""
from __future__ import annotations

from typing import Iterator, Optional

from ..analysis import FileAnalysis
from ..analysis.topics.accumulation import every_micro_step, windows
from ..analysis.topics.amp import (CLIP, SCALE, SCALER_STEP, UNSCALE, UPDATE, Event, ScaledLoop,
                                   exclusive, opaque, scaled_loops)
from ..analysis.core.astutil import short
from ..findings import ERROR, Finding
from ..analysis.core.provenance import proven
from .base import Rule


class AmpScalerProtocol(Rule):
    code = "TPF014"
    name = "amp-scaler-protocol"
    severity = ERROR
    # the premises every finding of this rule rests on (each proven by the search named)
    chain = (proven("the GradScaler protocol is broken in the iteration",
                    "the scaler's scale/unscale/step calls of the iteration were searched"),)

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        reported = set()
        for scaled in scaled_loops(analysis):
            for finding in self._clips_before_unscale(analysis, scaled):
                if finding.line not in reported:
                    reported.add(finding.line)
                    yield finding
            finding = self._step_bypasses_scaler(analysis, scaled)
            if finding is not None:
                yield finding
        yield from self._unscale_per_micro_step(analysis)

    # -------------------------------------------------------------- clip on scaled gradients
    def _clips_before_unscale(self, analysis, scaled: ScaledLoop) -> Iterator[Finding]:
        for clip in scaled.of(CLIP):
            if not scaled.owns(clip.site):
                continue      # judged with the loop it runs in
            scales = [s for s in scaled.of(SCALE)
                      if s.site.line < clip.site.line and not exclusive(s.site, clip.site)]
            if not scales:
                continue
            earlier = [u for u in scaled.of(UNSCALE, SCALER_STEP)
                       if u.site.line < clip.site.line and not exclusive(u.site, clip.site)]
            if earlier or opaque(analysis, scaled):
                continue
            later = [u for u in scaled.of(UNSCALE) if u.site.line > clip.site.line]
            after = (f"; the `unscale_` at line {later[0].site.line} comes after it"
                     if later else "")
            yield self.finding(
                clip.site,
                "gradients are clipped while still scaled by the GradScaler: the threshold "
                "applies to gradients × the loss scale (65,536 at the start)",
                f"{_where(scales[0])} scales the loss in {scaled.where}; {_shown(clip)} at line "
                f"{clip.site.line} runs with no `scaler.unscale_(optimizer)` before it in the "
                f"iteration{after}, so it fires on "
                f"every step and cuts the real gradients to about a 65,536th of its threshold",
                "call `scaler.unscale_(optimizer)` right before the clip (once per optimizer "
                "step)")

    # -------------------------------------------------------------- step around the scaler
    def _step_bypasses_scaler(self, analysis, scaled: ScaledLoop) -> Optional[Finding]:
        # `scaler.update()` alone unscales nothing: the step still applies scaled gradients
        # (and, with no `scaler.step`/`unscale_` recorded, `update()` raises once enabled).
        if not scaled.optimizer_steps or scaled.of(SCALER_STEP, UNSCALE) \
                or opaque(analysis, scaled):
            return None
        scales = scaled.of(SCALE)
        updates = scaled.of(UPDATE)
        update = (f"; the `scaler.update()` at line {updates[0].site.line} finds no inf "
                  f"checks recorded and raises AssertionError whenever the scaler is enabled"
                  if updates else "")
        for step in scaled.optimizer_steps:
            if not scaled.owns(step.site):
                continue      # judged with the loop it runs in
            if all(exclusive(s.site, step.site) for s in scales):
                continue
            return self.finding(
                step.site,
                "the optimizer steps on scaled gradients: `optimizer.step()` bypasses the "
                "GradScaler",
                f"{_where(scales[0])} multiplies the loss by the loss scale (65,536 "
                f"at the start); `{short(step.site.node, 40)}` at line {step.site.line} in "
                f"{scaled.where} applies the gradients as they are, and nothing there calls "
                f"`scaler.step(optimizer)` or `scaler.unscale_()`{update}",
                "replace `optimizer.step()` with `scaler.step(optimizer)` followed by "
                "`scaler.update()`")
        return None

    # -------------------------------------------------------------- unscale_ per micro-step
    def _unscale_per_micro_step(self, analysis) -> Iterator[Finding]:
        by_loop = {(s.facts, s.loop): s for s in scaled_loops(analysis)}
        for window in windows(analysis):
            scaled = by_loop.get((window.facts, window.loop))
            if window.gated_by is not None or scaled is None:
                continue
            for unscale in scaled.of(UNSCALE):
                if unscale.helper is not None or not every_micro_step(analysis, window,
                                                                      unscale.site):
                    continue
                yield self.finding(
                    unscale.site,
                    "`scaler.unscale_` runs on every micro-step of an accumulation window: "
                    "the second micro-step raises RuntimeError",
                    f"`{short(unscale.node, 40)}` at line {unscale.site.line} runs on every "
                    f"iteration of the loop at line {window.loop.lineno}, while the optimizer "
                    f"steps {window.gate.describe()}; `unscale_` may run once per optimizer "
                    f"between two `scaler.update()` calls, so the run fails as soon as more "
                    f"than one micro-batch is accumulated",
                    "move `scaler.unscale_` (and the clip after it) under the accumulation "
                    "gate, right before `scaler.step`")


def _shown(event: Event) -> str:
    if event.helper is not None:
        return f"`{event.helper}()` (which clips)"
    return f"`{short(event.node, 40)}`" if event.node is not None else "the clip"


def _where(scale: Event) -> str:
    if scale.helper is not None:
        return f"`{scale.helper}()` (line {scale.site.line}, via `scaler.scale`)"
    return f"`scaler.scale(...)` at line {scale.site.line}"
