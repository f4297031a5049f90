"""TPF008 ddp-without-sharding: DDP/FSDP training on a loader that every rank reads whole.

## What it does
In a file that wraps a model in `DistributedDataParallel`, `FullyShardedDataParallel`/`FSDP`
or `fully_shard`, reports the training `DataLoader(...)` (the loader a training loop
iterates, following helper arguments; or, when no loop shows it, the file's only loader not
named for validation) when nothing shards it by rank: no `DistributedSampler`, no other
`sampler=`/`batch_sampler=` that may know the rank, no dataset that splits itself by rank
(a dataset class of the file that reads the rank or world size, `split_dataset_by_node`, a
dataset built or `.shard()`-ed with rank arguments), and no `accelerator.prepare(...)` /
`fabric.setup_dataloaders(...)` over it. Opacus's `DifferentiallyPrivateDistributedDataParallel`
and `FSDP2Wrapper` count as wraps. Also, in any file, reports a loader (not named for
evaluation) built beside a `DistributedSampler` over the same dataset that the function
binds to a name and never reads: the sampler proves the code runs distributed, and the
loader was meant to take it (`sampler = DistributedSampler(ds) if num_gpus > 1 else None`,
then `DataLoader(ds, ...)` without it).

## Why is this bad?
DDP only averages gradients; it does not split data. Every process iterates the same
batches, so N GPUs compute N copies of the same gradient: an epoch costs as much as on one
GPU, the effective batch does not grow, and the learning-rate scaling tuned for N× data is
wrong. Nothing fails and the loss curve looks normal.

## Example
```python
model = DDP(model.cuda(local_rank), device_ids=[local_rank])
loader = DataLoader(dataset, batch_size=64, shuffle=True)
for epoch in range(epochs):
    for x, y in loader:
        ...
```

## Use instead
```python
model = DDP(model.cuda(local_rank), device_ids=[local_rank])
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=64, sampler=sampler)
for epoch in range(epochs):
    sampler.set_epoch(epoch)
    for x, y in loader:
        ...
```

## Fix safety
No autofix: the sampler replaces `shuffle=True`, needs its own name and `set_epoch` every
epoch (TPF009), and a dataset that already splits itself must not get one; placed by hand.

## Known limits
Lenient towards silence: any sampler that is not a plain `RandomSampler`,
`SequentialSampler` or `WeightedRandomSampler` built without rank arguments counts as
rank-aware, as does a dataset whose construction, helper or class mentions the rank or world
size anywhere (`create_prompt_dataset(args.local_rank, ...)`, even where the rank only picks
who writes a cache), a loader built with `**kwargs` (unless `kwargs` is a dict of the function
with known keys, none a sampler, never changed in place or handed to a call), and a dataset
passed in as a parameter that no caller in the file supplies. A loader given to Opacus's
`make_private(...)` is re-sampled by rank unless `poisson_sampling=False`; where no training
loop shows the loader, that keeps it quiet. Loaders are told apart for evaluation by name
(`val_loader`, `data_loader_val`; not `train_val_loader`). A forgotten sampler is seen only
when built directly (not returned by a helper) and bound to a local name. Loaders built by
imported factories are not seen. Files that use Accelerate, Fabric or a Lightning `Trainer`
without wrapping the model themselves are out of scope: the framework shards the data.
Quiet for a dataset of fresh random draws (`TensorDataset(torch.randn(...), ...)`,
`torchvision.datasets.FakeData`, also built by a helper of the file): a synthetic benchmark
has nothing to shard. A wrap under an `if` that
can never run is not a wrap: tests are folded over names bound once, to a literal, in
their function (`world_size = 1` then `if world_size > 1:`); anything else may run.
"""
from __future__ import annotations

from typing import Iterator

from ..analysis import FileAnalysis
from ..analysis.topics.distributed import (ForgottenSampler, assigned_name, ddp_wraps,
                                           loaders_beside_unused_sampler, sharding_reason,
                                           training_loaders)
from ..findings import ERROR, Finding
from ..analysis.core.provenance import proven
from .base import Rule


class DdpWithoutSharding(Rule):
    code = "TPF008"
    name = "ddp-without-sharding"
    severity = ERROR
    # the premises every finding of this rule rests on (each proven by the search named)
    chain = (proven("the training loader is not sharded across ranks",
                    "searched its sampler, its dataset, and every prepare/setup call of the file"),)

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        reported = set()
        for forgotten in loaders_beside_unused_sampler(analysis):
            reported.add(id(forgotten.call.node))
            yield self._forgotten_sampler(forgotten)
        wraps = ddp_wraps(analysis)
        if not wraps:
            return
        wrap = min(wraps, key=lambda w: w.site.line)
        for loader in training_loaders(analysis):
            if id(loader.call.node) in reported or \
                    sharding_reason(analysis, loader.facts, loader.call) is not None:
                continue
            how = (f"iterated by the training loop at line {loader.loop_line}"
                   if loader.loop_line else "the file's only training loader")
            name = assigned_name(loader.call) or "DataLoader(...)"
            yield self.finding(
                loader.call.site,
                f"training loader `{name}` is not sharded across ranks",
                f"the model is made data-parallel by {wrap.name} at line {wrap.site.line}; this "
                f"loader is {how}; it has no DistributedSampler or rank-aware sampler, its "
                f"dataset is not split by rank and it is not passed to "
                f"`accelerator.prepare`/`fabric.setup_dataloaders`, so every rank trains on "
                f"the same batches",
                "pass `sampler=DistributedSampler(dataset)` (instead of `shuffle=True`) and call "
                "`sampler.set_epoch(epoch)` at the top of each epoch")

    def _forgotten_sampler(self, forgotten: ForgottenSampler) -> Finding:
        name = assigned_name(forgotten.call) or "DataLoader(...)"
        sampler = forgotten.sampler_name
        return self.finding(
            forgotten.call.site,
            f"loader `{name}` does not use the DistributedSampler `{sampler}` built for its "
            f"dataset",
            f"`{sampler}` is built over the same dataset at line {forgotten.sampler_line} and "
            f"nothing reads it; this loader takes no sampler and its dataset is not split by "
            f"rank, so every rank iterates the whole dataset",
            f"pass `sampler={sampler}` to the loader (and drop `shuffle=True`; the sampler "
            f"shuffles)")
