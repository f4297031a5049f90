"""TPF018 training-loader-not-shuffled: a map-style training set read in the same order every epoch.

## What it does
Reports the `DataLoader(...)` that a training loop of the file iterates (directly, through a
helper it is passed to, through a progress bar over it, or after `accelerator.prepare`),
that a training loop of a helper in another project file iterates (`train_one_epoch(model,
train_loader, ...)` imported from `engine.py`, within two helpers of that file), that
Composer's `Trainer(train_dataloader=...)` is given (directly or in a `DataSpec`), or that
a LightningModule's / LightningDataModule's `train_dataloader()` returns under a
single-device `Trainer`, when:

- it has no `shuffle=True`, no `sampler=` / `batch_sampler=` and no `**kwargs`;
- its dataset is provably map-style: `TensorDataset`, `Subset`, `ConcatDataset`, a
  `torchvision.datasets` class (not `train=False` / a test split), a Hugging Face dataset
  or split (`load_dataset(...)` without `streaming=`, `Dataset.from_*`,
  `concatenate_datasets` of such, `ds["train"]`, through `.map`, `.filter`, `.select`,
  `.with_transform`, `.rename_column`, `.shuffle`, `.train_test_split`, … but not
  `.to_iterable_dataset`; a `ds["train"] = ...` elsewhere in the file must keep it map-style
  too), a dataset class of the project (this file or another, within the cross-file depth)
  that defines `__getitem__` and no `__iter__` and derives from no `IterableDataset`, a
  `range(...)` or a tensor (a loader over indices), or what a plain function of the project
  returns when every `return` of it is one of these (`make_train_dataset(args)`); a Hugging
  Face split also through a project function that returns the dataset it is handed through
  order-keeping methods (`ds = prepare_train_dataset(ds)`, `return ds.with_transform(...)`),
  and as a parameter of a function of the file that every caller of the file fills with one;
- nothing shuffles by other means: the dataset class neither shuffles nor draws an order
  (`random.shuffle`, `np.random.permutation`, `randperm`, `np.random.choice`, a
  `.shuffle()` / `.permutation()` method) in any method, and if it draws random numbers at
  all, its `__getitem__` reads its sample with the index it is given, never rebinds it and
  subscripts nothing with a random integer (random augmentation of the indexed sample, a
  flip's coin or a random prompt template, keeps the order); no `shuffle` / `permutation` /
  `set_epoch` call in the training loop or the loops around it. An order drawn once is one
  order read every epoch, like a sampler whose epoch is never set (TPF009): a Hugging Face
  `.shuffle(seed=...)` or `.train_test_split()` before the loader, a `Subset` over permuted
  indices, and a part of `random_split(ds, ...)` (a `Subset` of `ds`, map-style when `ds`
  is) are judged like the dataset they reorder;
- the data is not random noise: a `TensorDataset` of fresh `torch.randn` draws (directly or
  from a helper), or a dataset class whose `__getitem__` reads only attributes drawn at
  random in its `__init__` (`self.x = torch.randn(n, d)`, labels computed from them), reads
  the same in any order;
- there are epochs: a loader read in one pass (no loop around the loop that reads it, in
  module code or in a function the file calls exactly once, outside any loop, from code
  that runs once) sees no order twice;
- the training is not order-dependent: no forward in the loop takes a carried state
  (`model(x, hidden)`, `mems`, `past_key_values`).

## Why is this bad?
Without shuffling a DataLoader walks the dataset in index order: every epoch presents the
same batches in the same sequence. Datasets stored by class, by time or by source (folders,
concatenated shards) then give batches of one class at a time, and SGD fits the last
classes it saw; even well-mixed data loses the batch-to-batch variety that stochastic
gradients rely on. Training runs, the loss goes down, and the model generalises worse.

## Example
```python
train_set = TensorDataset(features, labels)
train_loader = DataLoader(train_set, batch_size=64, num_workers=4)
for epoch in range(epochs):
    for x, y in train_loader:
        ...
```

## Use instead
```python
train_set = TensorDataset(features, labels)
train_loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=4)
for epoch in range(epochs):
    for x, y in train_loader:
        ...
```

## Fix safety
No autofix: `shuffle=True` is right for a plain loader, but under DDP the fix is a
`DistributedSampler` (TPF008), and a deliberate order (curriculum, sorted-by-length
bucketing) only the author can confirm.

## Known limits
Frameworks that shuffle for the user are left alone: HF `Trainer` builds its training loader
with a `RandomSampler` (`Trainer._get_train_sampler` in transformers' `trainer.py`), DeepSpeed
builds its own from `training_data`. Composer's `Trainer` keeps the loader's own sampler (it
only calls `set_epoch` on a `DistributedSampler` the loader has: `_get_distributed_sampler`
in its `trainer/trainer.py`; its "DataLoaders" guide builds the loader with `shuffle=True`
itself), so a loader it is given is judged. Lightning replaces the training loader's sampler only
when it runs distributed (`_requires_distributed_sampler` checks `use_distributed_sampler`
and `is_distributed`; for the training stage it passes `shuffle=True` to the
`DistributedSamplerWrapper`; read in the `trainer/connectors/data_connector.py` of
Lightning 2.x and in its 1.x `replace_sampler_ddp` docs), so a `train_dataloader()` hook is
reported only when every `Trainer(...)` of the file is provably one process (`devices=1`,
`accelerator="cpu"`, or `use_distributed_sampler=False`); a Trainer in another file is not
seen. Accelerate's `prepare` keeps the loader's own order and does not silence the rule. A
DDP file's unsharded loader is left to TPF008. A loader handed to a call that rebinds it
(`model, opt, loader =
privacy_engine.make_private(..., data_loader=loader)`) may be replaced and is not judged.
Iterable datasets, datasets of unknown kind (from another package, a method, or a factory
with a `return` we cannot judge), graph loaders (PyG, DGL), loaders iterated through
`iter()`/`next()`, loaders returned to a caller whose loop is not seen (`load_data_*()`
factories), loaders of a training loop the analysis does not see as one (a JAX/Flax step
whose gradient is `jax.value_and_grad`, RPC `dist_autograd.backward`), a loader reaching a
helper of another file through a tuple or a method of a project object, and shuffling done
by a project helper called elsewhere are not judged.
A Hugging Face split shuffled once on some path (`if args.max_train_samples:
dataset["train"] = dataset["train"].shuffle(seed=...).select(...)`, the pattern of the
diffusers examples) is reported: on every path the loader reads one order every epoch.
What was read for the dataset kinds: torch's `torch.utils.data` docs ("Dataset Types": a
map-style dataset implements `__getitem__` and `__len__`, an iterable one subclasses
`IterableDataset` and implements `__iter__`; the default sampler of an unshuffled loader is
sequential); Hugging Face `datasets`' "Loading methods" reference (`load_dataset` returns a
`Dataset` or `DatasetDict`, `streaming: bool = False`) and its "Stream" guide (a streamed
dataset is an `IterableDataset`, "not the classic map-style `datasets.Dataset`").
"""
from __future__ import annotations

from typing import Iterator

from ..analysis import FileAnalysis
from ..analysis.topics.distributed import assigned_name
from ..analysis.topics.shuffling import unshuffled_training_loaders
from ..findings import WARNING, Finding
from .base import Rule


class TrainingLoaderNotShuffled(Rule):
    code = "TPF018"
    name = "training-loader-not-shuffled"
    severity = WARNING

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for loader in unshuffled_training_loaders(analysis):
            name = assigned_name(loader.call) or "DataLoader(...)"
            yield self.finding(
                loader.call.site,
                f"training loader `{name}` never shuffles: every epoch sees the samples in "
                f"the same order",
                f"the loader at line {loader.call.site.line} has no `shuffle=True` and no "
                f"sampler; its dataset is {loader.dataset}; it feeds {loader.fed_to}, and "
                f"nothing else reorders the data",
                "pass `shuffle=True` (or a `RandomSampler`; under DDP a `DistributedSampler` "
                "with `set_epoch` each epoch)")
