"""TPF009 sampler-epoch-not-set: a shuffling DistributedSampler replays one order every epoch.

## What it does
Reports a `DistributedSampler(...)` construction whose shuffling is on (`shuffle` left out or
`True`) when the sampler feeds a loader that an epoch loop trains on (directly, through a
training helper called per epoch, or through `self.train_loader`), and nothing in that
epoch loop, or in a helper it calls, calls `set_epoch(...)` on the sampler, on
`loader.sampler`, or on anything that could be them. The finding is on the sampler's
construction line (the object that needs the call; a `# noqa` there states the fixed
order is intended), and the evidence names the epoch loop where the call belongs.

## Why is this bad?
`DistributedSampler` seeds its shuffle with `seed + epoch`, and the epoch only changes when
`set_epoch` is called. Without it every epoch visits the data in exactly the same order on
every rank: the shuffling the code asks for never happens after the first epoch, which
hurts convergence in a way no metric points at.

## Example
```python
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=64, sampler=sampler)
for epoch in range(epochs):
    for x, y in loader:
        ...
```

## Use instead
```python
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=64, sampler=sampler)
for epoch in range(epochs):
    sampler.set_epoch(epoch)
    for x, y in loader:
        ...
```

## Fix safety
Unsafe (`tpf fix --unsafe-fixes`): one `sampler.set_epoch(epoch)` line as the first
statement of the epoch loop, when the sampler is bound once, unconditionally, to a name
before the loop in the same function (`sampler = DistributedSampler(dataset)`) and the loop
is `for epoch in ...`; otherwise the finding says why and the line is placed by hand.
Unsafe because it changes the order the data is read in from the second epoch on (a run
resumed from a checkpoint replays differently).

## Known limits
Quiet with `shuffle=False` (a literal, a name bound once to it, or a parameter every caller
in the file passes False for). A `shuffle=` the file does not fix (`shuffle=cfg.shuffle`) is
taken as on, and the message says so: the code is written to run with shuffling, and
`set_epoch` changes nothing when it is off. Quiet for loaders passed through
`accelerator.prepare`/`fabric.setup_dataloaders` (the framework sets the epoch), for
samplers handed to a loader built in a helper through a parameter (not followed), and when
any `set_epoch` call whose receiver cannot be told apart from this sampler runs in the epoch
loop. A sampler wrapped in torch's `BatchSampler` is followed. A helper whose backward runs
in an object it is handed (`loss_scaler(loss, optimizer)`) trains when a caller in the
linted file passes a project object whose `__call__` backwards (or a project function that
does); with no such caller, or one passing something unknown, it is not seen as training. A
`set_epoch` call outside the epoch loop does not count. Lightning and HF `Trainer` loops set
the epoch themselves and are not seen as epoch loops. Loaders of other packages
(`torch_geometric.loader.DataLoader`) and samplers of the project's own classes are not
modelled. The dataset does not matter: an unknown one, or one drawn at random once
(`TensorDataset(torch.randn(...))`, a class whose constructor draws its samples), is still
read in the one order the sampler replays. Quiet only over a project dataset whose
`__getitem__` never reads its index (it draws a fresh sample on every call): no order of
indices changes what it yields.
"""
from __future__ import annotations

import ast
from typing import Iterator, Optional, Tuple

from ..analysis import FileAnalysis
from ..analysis.core.astutil import store_count
from ..analysis.topics.distributed import (PROVEN, epoch_feeds, sampler_constructions,
                                           sampler_shuffle, sets_epoch)
from ..analysis.topics.shuffling import samples_ignore_their_index
from ..findings import WARNING, Finding, FixPlan
from .base import Rule


class SamplerEpochNotSet(Rule):
    code = "TPF009"
    name = "sampler-epoch-not-set"
    severity = WARNING
    fix_safety = "unsafe"

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for facts, call in sampler_constructions(analysis):
            shuffle = sampler_shuffle(analysis, facts, call)
            if shuffle is None or _samples_ignore_index(analysis, facts, call):
                continue
            feeds = epoch_feeds(analysis, call.node)
            if not feeds:
                continue
            missing = [f for f in feeds
                       if not sets_epoch(analysis, f.facts, f.epoch_loop, call.node)]
            if len(missing) < len(feeds) or not missing:
                continue   # some epoch loop sets it: the same sampler, handled there
            feed = missing[0]
            loader = feed.loader.node
            made = f"feeds the loader built at line {loader.lineno}" if loader is not None \
                else "feeds a loader"
            plan, why = _set_epoch_plan(analysis, facts, call, feed)
            yield self.finding(
                call.site,
                f"`DistributedSampler` {'shuffles' if shuffle == PROVEN else 'may shuffle'} "
                f"but its epoch is never set: every epoch replays the same order",
                f"{'shuffle is on' if shuffle == PROVEN else shuffle}; it {made}, which the "
                f"epoch loop at line "
                f"{feed.epoch_loop.lineno} trains on; no `set_epoch(...)` runs inside that "
                f"loop (directly or in a helper it calls)",
                f"call `sampler.set_epoch(epoch)` at the top of the loop at line "
                f"{feed.epoch_loop.lineno}", plan=plan, no_autofix=why)


def _set_epoch_plan(analysis, facts, call, feed) -> Tuple[Optional[FixPlan], Optional[str]]:
    """The unsafe fix: `<sampler>.set_epoch(<epoch>)` as the epoch loop's first statement,
    only for `sampler = DistributedSampler(...)` bound once, unconditionally, before the
    loop and in its function, and a `for <name> in ...` epoch loop."""
    loop, stmt = feed.epoch_loop, call.site.stmt
    if not isinstance(loop, ast.For) or not isinstance(loop.target, ast.Name):
        return None, "the epoch loop has no single loop variable to pass to `set_epoch`"
    bound = isinstance(stmt, ast.Assign) and stmt.value is call.node \
        and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
    if not bound:
        return None, ("the sampler is not bound to one local name of its own (it is built "
                      "inline, unpacked or stored on an attribute)")
    name = stmt.targets[0].id
    if facts.func is not feed.facts.func:
        return None, f"`{name}` is bound in another function than the epoch loop"
    if call.site.conds or call.site.loops:
        return None, (f"`{name}` is bound under a condition or in a loop: on another path it "
                      f"may be unbound or a sampler without `set_epoch`")
    scope = facts.func.node if facts.func is not None else analysis.tree
    if store_count(scope, name) != 1 or stmt.lineno > loop.lineno:
        return None, f"`{name}` is bound more than once, or after the loop"
    return FixPlan("set_epoch", loop, stmt.targets[0]), None


def _samples_ignore_index(analysis, facts, call) -> bool:
    """The sampler's dataset returns the same samples whatever index it is asked for: the
    order the sampler draws changes nothing. Any other dataset, unknown ones included, is
    read in the sampler's order."""
    node = call.node
    dataset = node.args[0] if node.args else next(
        (kw.value for kw in node.keywords if kw.arg == "dataset"), None)
    return dataset is not None and samples_ignore_their_index(analysis, facts, dataset)
