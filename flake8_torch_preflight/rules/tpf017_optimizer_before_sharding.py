"""TPF017 optimizer-before-sharding: the optimizer is built before the model it trains is sharded.

## What it does
Reports an optimizer built from a model's parameters (`AdamW(model.parameters())`, param
groups of the model, a name bound to them, the groups a project helper builds from the
`named_parameters()` of a module it is handed (`AdamW(get_param_groups(model, wd))`), a
file-local helper that builds an optimizer for the model it is passed, or the model's own
method (`model.configure_optimizers(...)`)) when, later in the same function, that model (or a module it
contains, or the module it belongs to) is sharded by a wrapper that re-creates parameters:

- FSDP1 `FullyShardedDataParallel(model, …)` without `use_orig_params=True` (it flattens
  the parameters into `FlatParameter`s);
- FSDP2 `fully_shard(model)` (it replaces them with DTensor parameters);

directly or through a file-local helper that wraps its argument, with no optimizer built
again after the wrap.

## Why is this bad?
The optimizer keeps references to the tensors it was given. After the wrap the model
computes with, and puts gradients on, other tensors, so `optimizer.step()` updates
parameters nothing uses any more (or finds no gradients on them): the loss does not go down
and nothing raises. PyTorch's FSDP docs say it outright: "The optimizer must be initialized
after the module has been wrapped with FSDP since FSDP will shard and transform the module's
parameters in a way that may not preserve the original parameter variables"
(`torch.distributed.fsdp.FullyShardedDataParallel`); for FSDP2, "fully_shard converts
model.parameters() from plain torch.Tensor to DTensor in-place… the optimizer must be
initialized with the DTensor model.parameters()" (`torch.distributed.fsdp.fully_shard`).

## Example
```python
model = Transformer(cfg).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
model = FSDP(model, auto_wrap_policy=policy, device_id=local_rank)
```

## Use instead
```python
model = Transformer(cfg).cuda()
model = FSDP(model, auto_wrap_policy=policy, device_id=local_rank)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
```

## Fix safety
No autofix: the construction has to move below the wrap, with whatever computes its
arguments.

## Known limits
Order is judged within one function: an optimizer built in `__init__` and a wrap in another
method are not compared. `use_orig_params=` set to anything but a literal `False` (or
`**kwargs` on the wrap) counts as keeping the parameters: with `use_orig_params=True` FSDP1
keeps the original `nn.Parameter` objects, so the optimizer still holds what the model
trains (PyTorch PR #87413 describes how). DDP, `torch.compile`, `model.to(device)` and
`model.half()` keep the parameter objects and are not reported; DeepSpeed and Accelerate take
the optimizer along with the model and are not reported either. Other sharding libraries
(fairscale, torch_xla FSDP) are not modelled yet.
"""
from __future__ import annotations

from typing import Iterator

from ..analysis import FileAnalysis
from ..analysis.core.astutil import short
from ..analysis.topics.sharding_order import FSDP1, FSDP2, EarlyOptimizer, early_optimizers
from ..findings import ERROR, Finding
from ..analysis.core.provenance import proven
from .base import Rule

_EFFECT = {
    FSDP1: "flattens its parameters into FlatParameters (no `use_orig_params=True`)",
    FSDP2: "replaces its parameters with DTensor parameters",
}


class OptimizerBeforeSharding(Rule):
    code = "TPF017"
    name = "optimizer-before-sharding"
    severity = ERROR
    # the premises every finding of this rule rests on (each proven by the search named)
    chain = (proven("the optimizer holds the parameters that the sharding wrapper replaces",
                    "its construction and the wrap were seen in order"),)

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for early in early_optimizers(analysis):
            yield self._report(early)

    def _report(self, early: EarlyOptimizer) -> Finding:
        wrap = early.wrap
        how = f"`{wrap.helper}()`, which calls `{wrap.family}`," if wrap.helper else f"`{wrap.family}`"
        return self.finding(
            early.optimizer.site,
            f"the optimizer is built from `{early.model}`'s parameters before the model is "
            f"sharded: it will update tensors the model no longer uses",
            f"`{short(early.optimizer.node, 40)}` at line {early.optimizer.site.line} takes the "
            f"parameters of `{early.model}`; {how} at line {wrap.site.line} then wraps "
            f"`{wrap.wrapped}` and {_EFFECT[wrap.family]}, and no optimizer is built after it, "
            f"so the steps never reach the weights the model trains",
            f"build the optimizer after line {wrap.site.line}, from the wrapped model's "
            f"`parameters()`")
