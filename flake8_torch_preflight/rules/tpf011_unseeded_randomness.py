"""TPF011 unseeded-randomness: only some random generators are seeded, or none.

## What it does
Looks at entry-point training scripts: a file with an `if __name__ == "__main__":` guard,
or module-level code that trains (a top-level training loop or a top-level call of a
function that trains), and that trains through a loop or a framework's `fit`/`train`:

- **warning**: some generators are seeded and others the script uses are not. Reported at
  the first unseeded draw when `np.random.*` or `random.*` is used while other generators
  are seeded, and at the seeding call when torch's generator (weight init, dropout, loader
  shuffling) is left unseeded while `random`/`numpy` (or only CUDA) are seeded.
- **note**: nothing is seeded at all. Reported on the `if __name__ == "__main__":` line,
  or, without one, on the first training loop.

Seeding counts when done through `torch.manual_seed`, `np.random.seed`, `random.seed`, a
library helper that seeds everything (`lightning.seed_everything`, `fabric.seed_everything`,
`transformers.set_seed`, `accelerate.utils.set_seed`, `enable_full_determinism`, an imported
helper named for seeding and given a seed, like `utils.random_seed(seed, rank)`), a launcher
or trainer given `seed=` (`colossalai.launch_from_torch(..., seed=s)`; not a sampler or
generator, which seed only themselves), ColossalAI's launchers (`launch_from_torch()` and
the others seed every generator with their default `seed=1024` unless given `seed=None`),
Lightning's `LightningCLI` (unless `seed_everything_default=False`), building an HF/TRL
`Trainer` or a subclass of one (it seeds from `TrainingArguments.seed`), or a helper or
base-class `__init__` that does any of these — in the file or in another file of the
project (followed through calls; a class whose methods train counts as built). A function
passed as a value counts as called by what receives it
(`benchmark(functools.partial(prepare_run, fused=True))`, `init_fn=prepare_run`, a lambda's
calls), and the module-level code of a project module the script imports runs at import
(`np.random.seed(12345)` at the top of `reading_data.py` seeds NumPy for the script; code
under that module's own `__main__` guard does not run).
`torch.use_deterministic_algorithms` and cuDNN flags do not seed anything.

## Why is this bad?
A script that seeds torch but shuffles or augments with `np.random` gives different data
order and augmentations on every run, so two runs with "the same seed" disagree and a
regression cannot be told from noise. Seeding only Python's `random` leaves weight
initialisation and dropout unseeded.

## Example
```python
import numpy as np
import torch

torch.manual_seed(0)
for epoch in range(10):
    order = np.random.permutation(len(dataset))
    for i in order:
        loss = criterion(model(dataset[i][0]), dataset[i][1])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
```

## Use instead
```python
import numpy as np
import torch

torch.manual_seed(0)
np.random.seed(0)
for epoch in range(10):
    order = np.random.permutation(len(dataset))
    for i in order:
        loss = criterion(model(dataset[i][0]), dataset[i][1])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
```

## Fix safety
No autofix: where the seed comes from (a flag, a config) is the script's choice.

## Known limits
The order of seeding and drawing is not checked (a seed anywhere in the file counts, even
under an `if`), seeds set in a library are only seen through a helper whose name says it
seeds (`set_seed`, `random_seed`, `init_seeds`, …, assumed to seed everything) or a
`seed=` argument, other project files are followed as far as their imports resolve (a base class
whose file cannot be found counts as not seeding), and generator objects
(`np.random.default_rng(seed)`, `torch.Generator`) are not tracked.
The note ("nothing is seeded") is quiet while a call the analysis cannot see into may seed:
a function of the project it cannot read (a relative import, or a module that is a file or
package folder of the project), a library entry point named for setting a run up
(`detectron2.engine.default_setup`), or a call of a function parameter (`init_fn()`,
annotated `Callable` or given a function by a caller) that some caller fills with
something else than a function it reads (a registry lookup, a variable), or that no call
in the file fills. Other library calls (`gym.make`, `wandb.init`,
`deepspeed.init_distributed`) are judged by the seeding tables alone.
Modules that only define training functions for another script (no `__main__` guard and
no module-level code that trains, like `engine.py` beside `main.py`) are skipped: the seed
is usually set by the script that imports them.
"""
from __future__ import annotations

from typing import Iterator, Optional, Tuple

from ..analysis import Does, FileAnalysis
from ..analysis.core.astutil import dotted, short
from ..analysis.topics.distributed import ddp_wraps
from ..analysis.topics.seeding import (NUMPY, RANDOM, TORCH, TORCH_CUDA, file_seeds, main_guard,
                                       random_draws, unseen_setup_call)
from ..findings import NOTE, WARNING, Finding
from .base import Rule

_NAMES = {NUMPY: "NumPy's global generator", RANDOM: "Python's `random`",
          TORCH: "torch's generator", TORCH_CUDA: "CUDA's generator"}
_FIX = {NUMPY: "np.random.seed(seed)", RANDOM: "random.seed(seed)", TORCH: "torch.manual_seed(seed)"}


class UnseededRandomness(Rule):
    code = "TPF011"
    name = "unseeded-randomness"
    severity = WARNING

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        if analysis.is_test_file:
            return
        guard = main_guard(analysis)
        loop = _first_training_loop(analysis)
        fit = _framework_fit(analysis) if guard is not None else None
        if loop is None and fit is None or not _entry_point(analysis, guard):
            return
        trains = f"the training loop at line {loop.lineno}" if loop is not None else \
            f"`{fit[1]}` at line {fit[0]}"
        seeds = file_seeds(analysis)
        draws = random_draws(analysis)
        if not seeds:
            if unseen_setup_call(analysis) is None:
                yield self._nothing_seeded(analysis, guard if guard is not None else loop,
                                           trains, draws)
            return
        seeded = _seeded_text(seeds)
        yield from self._unseeded_draws(seeds, draws, seeded, trains)
        if TORCH not in seeds:
            yield self._torch_unseeded(analysis, seeds, draws, seeded, trains)

    def _nothing_seeded(self, analysis, where, trains: str, draws) -> Finding:
        used = ", ".join(f"`{short(draws[g][1].node, 30)}` line {draws[g][1].site.line}"
                         for g in (NUMPY, RANDOM, TORCH) if g in draws)
        return Finding(
            where.lineno, where.col_offset, self.code, NOTE,
            "no random generator is seeded: runs are not reproducible",
            f"entry point with {trains}; no `torch.manual_seed`, `seed_everything` or "
            f"`set_seed` anywhere in the file" + (f"; draws: {used}" if used else ""),
            "seed every generator the script uses at startup (`torch.manual_seed(seed)`, "
            "plus `random.seed`/`np.random.seed`), or call `lightning.seed_everything(seed)` "
            "/ `transformers.set_seed(seed)`" + _per_rank_advice(analysis))

    def _unseeded_draws(self, seeds, draws, seeded: str, trains: str) -> Iterator[Finding]:
        """NumPy or `random` drawn from while the script seeds other generators."""
        for gen in (NUMPY, RANDOM):
            if gen in draws and gen not in seeds:
                facts, call = draws[gen]
                yield self.finding(
                    call.site, f"`{short(call.node, 30)}` draws from {_NAMES[gen]}, which is "
                               "never seeded",
                    f"the script seeds {seeded} but not {_NAMES[gen]}; {trains}",
                    f"add `{_FIX[gen]}` next to the other seeding", WARNING)

    def _torch_unseeded(self, analysis, seeds, draws, seeded: str, trains: str) -> Finding:
        """Other generators are seeded, torch's CPU generator is not."""
        line, text, where = min(seeds.values())
        named = f"`{text}`"
        if where != f"line {line}":
            named += f" ({where})"    # run at the import of another project file
        if TORCH_CUDA in seeds:
            what = (f"{named} seeds only CUDA: weight init and shuffling use torch's CPU "
                    "generator, which stays unseeded")
        else:
            what = ("torch's generator (weight init, dropout, loader shuffling) is never "
                    f"seeded, though {named} seeds another one")
        draw = draws.get(TORCH)
        extra = f"; torch draws at line {draw[1].site.line}" if draw else ""
        return Finding(
            line, _col(analysis, line), self.code, WARNING, what,
            f"the script seeds {seeded} and trains ({trains}){extra}",
            "add `torch.manual_seed(seed)` (it seeds CPU and every CUDA device)"
            + _per_rank_advice(analysis))


def _seeded_text(seeds) -> str:
    """`torch's generator (`torch.manual_seed(0)` line 3), ...` for the evidence."""
    parts = []
    for g in (TORCH, TORCH_CUDA, NUMPY, RANDOM):
        if g in seeds and not (g == TORCH_CUDA and TORCH in seeds):
            _, text, where = seeds[g]
            parts.append(f"{_NAMES[g]} (`{text}` {where})")
    return ", ".join(parts)


def _per_rank_advice(analysis) -> str:
    """In data-parallel code one fixed seed gives every rank the same dropout masks,
    augmentations and noise; DDP broadcasts rank 0's initial weights, so the seed can take
    the rank."""
    if not ddp_wraps(analysis):
        return ""
    return ("; in this data-parallel script add the rank (`torch.manual_seed(seed + rank)`) so "
            "ranks draw different dropout masks and augmentations (DDP broadcasts rank 0's "
            "initial weights)")


def _entry_point(analysis, guard) -> bool:
    """A script that runs when executed: a `__main__` guard, or module-level code that
    trains (a loop, or a top-level call of a function that trains). A module that only
    defines `train_one_epoch()` for another script is not one: that script seeds."""
    if guard is not None:
        return True
    facts = analysis.module_facts
    return bool(analysis.training_loops(facts)) or any(
        analysis.function_does(call.callee, Does.BACKWARD) for call in facts.local_calls)


def _first_training_loop(analysis):
    best = None
    for facts in analysis.all_facts():
        for loop in analysis.training_loops(facts):
            if best is None or loop.lineno < best.lineno:
                best = loop
    return best


def _framework_fit(analysis) -> Optional[Tuple[int, str]]:
    """(line, text) of `trainer.fit(...)` / `trainer.train()` in a script that trains through
    a framework (Lightning, HF Trainer, Fabric)."""
    if not analysis.imports.imports_any("lightning", "pytorch_lightning", "transformers", "trl"):
        return None
    for facts in analysis.all_facts():
        for call in facts.calls:
            if call.qualname is not None or call.method not in ("fit", "train"):
                continue
            text = dotted(call.node.func.value) or ""
            if call.method == "fit" or text.lower().endswith("trainer"):
                return call.site.line, short(call.node, 30)
    return None


def _col(analysis, line: int) -> int:
    for facts in analysis.all_facts():
        for call in facts.calls:
            if call.site.line == line:
                return getattr(call.site.stmt, "col_offset", 0)
    return 0
