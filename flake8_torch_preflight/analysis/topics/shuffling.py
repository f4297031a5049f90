"""Training loaders that visit a map-style dataset in the same order every epoch (TPF018).

A `DataLoader` shuffles only when told to (`shuffle=True`, or a sampler that does). This
module finds the loaders a training loop of the file iterates (the same question TPF008
asks, through `epochs.iterated_loaders`, loaders passed through `accelerator.prepare`
included: Accelerate keeps the loader's own sampler) and the loaders a LightningModule's or
LightningDataModule's `train_dataloader` hook returns, and decides, lenient towards silence:

- does the loader shuffle, or may it (`shuffle=` anything but a literal False, a sampler or
  batch sampler, `**kwargs`)?
- is its dataset *provably* map-style (the tables of `semantics.data`: torch / torchvision
  constructors, Hugging Face datasets and their order-keeping methods; a class of the
  project that defines `__getitem__` and no `__iter__`; a `range` or tensor of indices; a
  project function whose every `return` is one of these), or iterable / unknown?
- does the dataset, or the training code, shuffle by itself (an order drawn in the dataset
  class, or random draws with a `__getitem__` that does not read by its index; a
  `shuffle`/`permutation`/`set_epoch` call in the loop; an order drawn once with
  `random_split`/`randperm`/`Dataset.shuffle`)? Is it random noise (synthetic data)?
- does the training carry state from one batch to the next (truncated BPTT:
  `model(x, hidden)`), so that order is the point?

Lightning swaps in a shuffling `DistributedSampler` for the training loader only under
distributed training (see TPF018's docstring for what was checked): a hook's loader is
judged only when a `Trainer(...)` of the same file is provably single-device. Memoised.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Dict, List, Optional

from ..semantics import torchapi as api
from ..core import values as V
from ..core.astutil import dotted, is_const, iterated_expr, keyword, short, target_texts
from .distributed import (all_calls, ddp_wraps, evaluation_loader, loader_constructions, scope_of,
                          sharding_reason, synthetic_data, unpacked_may_carry)
from .epochs import argument_for, iterated_loaders, returned_expressions
from ..core.events import CallSite, FunctionFacts
from ..project.index import VAL_LOADER_RE, ClassInfo, FunctionInfo
from ..core.memo import per_file
from ..project.resolution import is_project_name, library_named_project, resolve, resolve_class
from ..semantics.data import (HF_DATASET_COMBINERS, HF_DATASET_SOURCES, HF_ONE_TIME_ORDER,
                              HF_ORDER_KEEPING,
                              INTEGER_DRAW_METHODS, ITERABLE_BASES, MAP_STYLE, MAP_STYLE_PREFIXES,
                              RANDOM_DRAW_PREFIXES, REAL_VALUED_DRAWS)

# An order drawn once (`random_split`, a permuted index list): random, if fixed.
ONE_TIME_SHUFFLES = frozenset({"torch.utils.data.random_split", "torch.randperm",
                               "numpy.random.permutation", "numpy.random.shuffle",
                               "random.shuffle", "random.sample", "sklearn.utils.shuffle",
                               "sklearn.model_selection.train_test_split"})
# Hugging Face methods whose result is map-style when their receiver is: the order-keeping
# ones, and those that draw one order (read the same every epoch afterwards).
HF_MAP_STYLE_KEEPING = HF_ORDER_KEEPING | HF_ONE_TIME_ORDER
RANDOM_SPLIT = "torch.utils.data.random_split"
# Draws inside a dataset class that pick an order or a sample (beyond the one-time shuffles).
ORDER_DRAWS = ONE_TIME_SHUFFLES | frozenset({"numpy.random.choice", "random.choices",
                                             "torch.multinomial"})
# Calls in the training code that reorder the data for the next epoch.
RESHUFFLE_NAMES = frozenset({"shuffle", "permutation", "randperm", "set_epoch", "reshuffle",
                             "shuffle_", "on_epoch_end"})
# Arguments of a forward that carry state across batches (truncated BPTT, memories).
_CARRIED_STATE = re.compile(r"^(hidden|hid|hiddens|h0|hx|hc|state|states|mems|memory|memories"
                            r"|carry|past_key_values|past|cache)$")
_EVAL_SPLIT = re.compile(r"^(val|valid|validation|test|eval|dev)", re.IGNORECASE)

LIGHTNING_DATAMODULES = frozenset({
    "lightning.LightningDataModule", "lightning.pytorch.LightningDataModule",
    "pytorch_lightning.LightningDataModule", "pytorch_lightning.core.LightningDataModule",
    "pytorch_lightning.core.datamodule.LightningDataModule",
    "lightning.pytorch.core.datamodule.LightningDataModule"})
LIGHTNING_TRAINERS = frozenset({
    "lightning.Trainer", "lightning.pytorch.Trainer", "pytorch_lightning.Trainer",
    "pytorch_lightning.trainer.Trainer", "pytorch_lightning.trainer.trainer.Trainer",
    "lightning.pytorch.trainer.Trainer"})
# Trainers that iterate the training loader they are given in its own order, never swapping
# its sampler: (qualified name, keyword that takes the training loader). Composer's `Trainer`
# only calls `set_epoch` on a `DistributedSampler` the loader already has (read in its
# `trainer/trainer.py`, `_get_distributed_sampler`); its "DataLoaders" guide passes a loader
# built with `shuffle=True` itself.
ORDER_KEEPING_TRAINERS = {
    "composer.Trainer": "train_dataloader",
    "composer.trainer.Trainer": "train_dataloader",
    "composer.trainer.trainer.Trainer": "train_dataloader",
}
# Wrappers of a loader for those trainers (Composer's `DataSpec(dataloader, ...)`).
LOADER_SPECS = frozenset({"composer.DataSpec", "composer.core.DataSpec",
                          "composer.core.data_spec.DataSpec"})
# `Trainer(...)` keywords that decide whether Lightning swaps in a distributed sampler:
# flags that, literally False, keep the training loader's own (2.x name, 1.x name);
# strategies that run one process; the keywords that give the device count.
TRAINER_KEEPS_SAMPLER_FLAGS = ("use_distributed_sampler", "replace_sampler_ddp")
TRAINER_ONE_PROCESS_STRATEGIES = ("auto", "single_device")
TRAINER_DEVICE_KEYWORDS = ("devices", "gpus")
# `DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, …)`: the arguments that
# may make it shuffle, with their positions.
LOADER_SHUFFLE_ARGUMENT = (2, "shuffle")
LOADER_SAMPLER_ARGUMENTS = ((3, "sampler"), (4, "batch_sampler"))


@dataclass(frozen=True)
class Unshuffled:
    facts: FunctionFacts
    call: CallSite            # the DataLoader(...) construction
    dataset: str              # what the dataset is, for the message
    fed_to: str               # "the training loop at line N" / "`train_dataloader()` …"


@per_file("shuffling")
def unshuffled_training_loaders(analysis) -> List[Unshuffled]:
    """The training loaders of the file that never shuffle a map-style dataset, by line."""
    found: Dict[ast.AST, Unshuffled] = {}
    feeds = _training_feeds(analysis)
    if feeds:
        by_node = {c.node: (f, c) for f, c in loader_constructions(analysis)}
        for node, fed_to, loop_owner, loop_facts, loop in feeds:
            hit = by_node.get(node)
            if hit is None or node in found:
                continue
            facts, call = hit
            dataset = _judge(analysis, facts, call, loop_owner, loop_facts, loop)
            if dataset is not None:
                found[node] = Unshuffled(facts, call, dataset, fed_to)
    return sorted(found.values(), key=lambda u: u.call.site.line)


# ---------------------------------------------------------------------------- what trains
def _training_feeds(analysis) -> list:
    """(loader construction node, how it is fed, the analysis of the loop's file, loop facts,
    loop) for each loader a training loop iterates (of this file, or of a helper of another
    project file it is passed to) or a single-device Lightning hook returns."""
    feeds = []
    for facts in analysis.all_facts():
        if analysis.framework_owned(facts.func):
            continue
        for loop in analysis.training_loops(facts):
            for value in iterated_loaders(analysis, facts, loop):
                if isinstance(value.node, ast.Call):
                    feeds.append((value.node, f"the training loop at line {loop.lineno}",
                                  analysis, facts, loop))
        feeds.extend(_fed_to_helpers_of_other_files(analysis, facts))
        feeds.extend(_fed_to_order_keeping_trainers(analysis, facts))
    if analysis.uses_framework("lightning") and _lightning_trains_on_one_device(analysis):
        for cls in analysis.index.classes.values():
            hook = cls.methods.get("train_dataloader")
            if hook is None or not (cls.is_lightning or _is_datamodule(cls)):
                continue
            returned = analysis.facts_for(hook).returns
            if returned.has(V.LOADER) and isinstance(returned.node, ast.Call):
                feeds.append((returned.node, f"`{cls.name}.train_dataloader()`, which a "
                              f"single-device Lightning `Trainer` trains on", analysis, None, None))
    return feeds


# How deep a parameter is followed through the helpers of the other file (`train(model,
# loader)` calling `train_one_epoch(model, loader)`).
_HELPER_DEPTH = 2


def _fed_to_helpers_of_other_files(analysis, facts) -> list:
    """Loaders built here and passed to a function of another project file whose training
    loop iterates that parameter (`train_model(model, train_loader, ...)` imported from
    `engine.py`). Same-file helpers are found from their loops (`iterated_loaders`); a loop
    of another file is not among this file's, so it is asked from the call. The call must
    not sit in a loop that reshuffles (`for epoch ...: data.shuffle(); train(...)`)."""
    feeds = []
    for call in facts.local_calls:
        home = call.callee.home
        if home is None or home is analysis or _site_reshuffles(analysis, facts, call.site):
            continue
        for index, loop_facts, loop in _parameter_training_loops(home, call.callee, _HELPER_DEPTH):
            arg = argument_for(call.callee, call.node, index)
            value = facts.value(arg) if arg is not None else None
            if value is not None and value.has(V.LOADER) and isinstance(value.node, ast.Call):
                where = analysis.where(loop_facts.func, loop.lineno)
                feeds.append((value.node, f"the training loop at {where} (`{call.callee.name}()`, "
                              f"passed the loader at line {call.site.line})", home, loop_facts, loop))
    return feeds


def _fed_to_order_keeping_trainers(analysis, facts) -> list:
    """Loaders given to a trainer that iterates them as they are (Composer's
    `Trainer(train_dataloader=loader)`, directly or in a `DataSpec`)."""
    feeds = []
    for call in facts.calls:
        keyword_name = ORDER_KEEPING_TRAINERS.get(call.qualname or "")
        given = keyword(call.node, keyword_name) if keyword_name else None
        if isinstance(given, ast.Call) and analysis.imports.qualname(given.func) in LOADER_SPECS:
            given = given.args[0] if given.args else keyword(given, "dataloader")
        value = facts.value(given) if given is not None else None
        if value is not None and value.has(V.LOADER) and isinstance(value.node, ast.Call):
            feeds.append((value.node, f"the `{short(call.node.func, 40)}(...)` at line "
                          f"{call.site.line}, which trains on it in its own order",
                          analysis, None, None))
    return feeds


def _parameter_training_loops(home, func, depth: int) -> list:
    """(parameter index, loop facts, loop) for each training loop of `func` (in its own file
    `home`) that iterates one of `func`'s parameters by name, directly or in a helper of
    that file the parameter is passed to unchanged."""
    if depth <= 0:
        return []
    facts = home.facts_for(func)
    found = []
    for loop in home.training_loops(facts):
        index = _iterated_parameter(func, iterated_expr(loop))
        if index is not None:
            found.append((index, facts, loop))
    for call in facts.local_calls:
        for inner, loop_facts, loop in _parameter_training_loops(home, call.callee, depth - 1):
            index = _iterated_parameter(func, argument_for(call.callee, call.node, inner))
            if index is not None:
                found.append((index, loop_facts, loop))
    return found


def _iterated_parameter(func, expr) -> Optional[int]:
    """The index of the parameter `expr` names (`loader` of `def train(model, loader)`)."""
    if isinstance(expr, ast.Name) and expr.id in func.params:
        return func.params.index(expr.id)
    return None


def _site_reshuffles(analysis, facts, site) -> bool:
    """A loop around the call reorders the data each time round (`set_epoch`, `shuffle`)."""
    return any(_reshuffles(analysis, facts, loop) for loop in site.loops[-1:])


def _is_datamodule(cls) -> bool:
    return any(b in LIGHTNING_DATAMODULES for b in cls.bases)


@per_file("shuffling_trainers")
def _lightning_trains_on_one_device(analysis) -> bool:
    """Every Lightning `Trainer(...)` of the file provably runs one process (or never swaps
    in a distributed sampler), and there is one."""
    trainers = [c for f in analysis.all_facts() for c in f.calls
                if c.qualname in LIGHTNING_TRAINERS]
    return bool(trainers) and all(_single_process(t.node) for t in trainers)


def _single_process(node: ast.Call) -> bool:
    if any(kw.arg is None for kw in node.keywords):
        return False
    if any(is_const(keyword(node, flag), False) for flag in TRAINER_KEEPS_SAMPLER_FLAGS):
        return True       # the training loader is never replaced
    strategy = keyword(node, "strategy")
    if strategy is not None and not (isinstance(strategy, ast.Constant)
                                     and strategy.value in TRAINER_ONE_PROCESS_STRATEGIES):
        return False
    nodes = keyword(node, "num_nodes")
    if nodes is not None and not (isinstance(nodes, ast.Constant) and nodes.value == 1):
        return False
    devices = next((keyword(node, name) for name in TRAINER_DEVICE_KEYWORDS
                    if keyword(node, name) is not None), None)
    if devices is not None:
        return _one_device(devices)
    accelerator = keyword(node, "accelerator")
    return isinstance(accelerator, ast.Constant) and accelerator.value == "cpu"


def _one_device(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Constant):
        return expr.value == 1 or (isinstance(expr.value, str) and expr.value.strip() in ("1", "0,"))
    return isinstance(expr, (ast.List, ast.Tuple)) and len(expr.elts) == 1


# ---------------------------------------------------------------------------- one loader
def _judge(analysis, facts, call: CallSite, loop_owner, loop_facts, loop) -> Optional[str]:
    """What the map-style dataset of this never-shuffling training loader is, or None
    (`loop_owner`: the analysis of the file the training loop is in)."""
    node = call.node
    if _may_shuffle(analysis, facts, node) or evaluation_loader(call):
        return None
    dataset = keyword(node, "dataset") or (node.args[0] if node.args else None)
    if dataset is None or _named_for_evaluation(dataset):
        return None
    kind = _dataset_kind(analysis, facts, dataset, depth=2)
    if kind is None or synthetic_data(analysis, scope_of(analysis, facts), dataset, depth=6):
        return None           # random noise in any order is the same noise
    if loop is not None and (_carries_state(loop_owner, loop_facts, loop)
                             or _reshuffles(loop_owner, loop_facts, loop)
                             or read_in_one_pass(loop_owner, loop_facts, loop)):
        return None           # no epochs to see the same order twice
    if ddp_wraps(analysis) and sharding_reason(analysis, facts, call) is None:
        return None           # TPF008 reports this loader (its fix shuffles too)
    if _replaced_by_unknown_call(analysis, call):
        return None
    return kind


# Keywords of `DataLoader` that may make it shuffle, when passed through `**kwargs`.
SHUFFLING_KEYWORDS = frozenset({"shuffle", "sampler", "batch_sampler"})


def _may_shuffle(analysis, facts, node: ast.Call) -> bool:
    if any(kw.arg is None and unpacked_may_carry(facts, scope_of(analysis, facts), kw.value,
                                                 SHUFFLING_KEYWORDS)
           for kw in node.keywords):
        return True
    shuffle = _loader_argument(node, *LOADER_SHUFFLE_ARGUMENT)
    if shuffle is not None and not is_const(shuffle, False):
        return True
    for index, name in LOADER_SAMPLER_ARGUMENTS:
        sampler = _loader_argument(node, index, name)
        if sampler is not None and not is_const(sampler, None):
            return True
    return False


def _loader_argument(node: ast.Call, index: int, name: str) -> Optional[ast.expr]:
    """The argument given as `name=` or at position `index`, if any."""
    found = keyword(node, name)
    if found is None and len(node.args) > index:
        found = node.args[index]
    return found


# Calls that hand a loader back with its order unchanged: Accelerate's `prepare` keeps the
# loader's sampler; Fabric's `setup_dataloaders` shuffles a distributed sampler only when the
# original sampler shuffled.
ORDER_KEEPING_METHODS = frozenset({"prepare", "prepare_data_loader", "setup_dataloaders"})


def _replaced_by_unknown_call(analysis, construction: CallSite) -> bool:
    """The loader is passed to a call we cannot read whose result is bound back to the
    loader's own name (`model, opt, train_loader = privacy_engine.make_private(...,
    data_loader=train_loader)`): the loader trained on may be another, with its own sampler."""
    target = _bound_name(construction)
    if target is None:
        return False
    for facts, call in all_calls(analysis):
        if call.method in ORDER_KEEPING_METHODS or call is construction:
            continue
        stmt = call.site.stmt
        if not (isinstance(stmt, ast.Assign) and stmt.value is call.node
                and target in {t for each in stmt.targets for t in target_texts(each)}):
            continue
        passed = list(call.node.args) + [kw.value for kw in call.node.keywords]
        if any(facts.value(arg).node is construction.node for arg in passed):
            return True
    return False


def _bound_name(call: CallSite) -> Optional[str]:
    stmt = call.site.stmt
    if isinstance(stmt, ast.Assign) and stmt.value is call.node and len(stmt.targets) == 1:
        return dotted(stmt.targets[0])
    return None


def _named_for_evaluation(expr: ast.expr) -> bool:
    text = dotted(expr)
    last = text.rsplit(".", 1)[-1] if text else ""
    return bool(last) and (bool(VAL_LOADER_RE.match(last)) or bool(_EVAL_SPLIT.match(last)))


def _dataset_kind(analysis, facts, expr: ast.expr, depth: int) -> Optional[str]:
    """A description of a provably map-style dataset that does not reorder itself, else None."""
    if isinstance(expr, ast.Call):
        if analysis.imports.qualname(expr.func) == RANDOM_SPLIT:
            return _random_split_kind(analysis, facts, expr, depth)
        return (_constructed_kind(analysis, facts, expr)
                or _hf_kind(analysis, facts, expr)
                or _index_kind(analysis, facts, expr)
                or _returned_kind(analysis, facts, expr, depth))
    if isinstance(expr, ast.Subscript):
        if isinstance(expr.value, ast.Call):     # `random_split(ds, [n, m])[0]`
            split = _random_split_kind(analysis, facts, expr.value, depth)
            if split is not None:
                return split
        return _hf_kind(analysis, facts, expr)   # other indexing: no
    text = dotted(expr)
    if text is None:
        return None
    producers = [p for p in _producers(analysis, facts, text) if not is_const(p, None)]
    if producers:
        kinds = [_dataset_kind(analysis, facts, rhs, depth) for rhs in producers]
        return kinds[0] if kinds and all(k is not None for k in kinds) else None
    if facts.func is not None and text in facts.func.params and depth > 0:
        return _kind_from_callers(analysis, facts, facts.func.params.index(text), depth)
    return None


def _kind_from_callers(analysis, facts, index: int, depth: int) -> Optional[str]:
    """A dataset parameter: map-style when every caller of the file passes one."""
    kinds = []
    for caller_facts, local in analysis.callers(facts.func):
        arg = argument_for(facts.func, local.node, index)
        kinds.append(_dataset_kind(analysis, caller_facts, arg, depth - 1)
                     if arg is not None else None)
    return kinds[0] if kinds and all(k is not None for k in kinds) else None


def _random_split_kind(analysis, facts, call: ast.Call, depth: int) -> Optional[str]:
    """`random_split(ds, [n, m])` of a map-style `ds`: its parts are `Subset`s, map-style,
    read in the one order the split drew, the same every epoch (the split draws which
    samples go where; it shuffles nothing later)."""
    if analysis.imports.qualname(call.func) != RANDOM_SPLIT or not call.args:
        return None
    inner = _dataset_kind(analysis, facts, call.args[0], depth)
    return f"a `random_split` subset of {inner}" if inner is not None else None


# How many names, combinations and splits a Hugging Face dataset is followed through
# (`precomputed = concatenate_datasets([train.map(...), ...])`, `train = ds["train"]...`,
# `ds = load_dataset(...)`): each step is one producer lookup.
_HF_DEPTH = 6


def _hf_kind(analysis, facts, expr: ast.expr) -> Optional[str]:
    """`ds["train"]`, `ds["train"].with_transform(...)`, `load_dataset(..., split="train")`:
    a map-style Hugging Face dataset of a training split, described; else None."""
    if not _hf_dataset(analysis, facts, expr, _HF_DEPTH):
        return None
    split = _split_of(expr)
    if split is None:
        return "a map-style Hugging Face `Dataset`"
    if _EVAL_SPLIT.match(split):
        return None
    return f"a map-style Hugging Face `Dataset` (split `{split}`)"


def _index_kind(analysis, facts, call: ast.Call) -> Optional[str]:
    """`DataLoader(range(n))`, `DataLoader(torch.arange(n))`, `DataLoader(train_idx)` of a
    tensor: a sequence is map-style (it has `__getitem__` and `__len__`), so the loader
    yields its elements, the batches of indices a loop then gathers, in the same order."""
    if isinstance(call.func, ast.Name) and call.func.id == "range" \
            and analysis.imports.qualname(call.func) is None \
            and analysis.index.function_named("range", facts.func) is None:
        return "a `range` of indices"
    if facts.value(call).has(V.TENSOR):
        return "a tensor (a loader yields its rows in order)"
    return None


def _split_of(expr: ast.expr) -> Optional[str]:
    """The split a dataset expression names: `ds["train"]`, `load_dataset(..., split="train")`,
    through an order-keeping chain."""
    while True:
        if isinstance(expr, ast.Subscript):
            key = expr.slice
            return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
        if not isinstance(expr, ast.Call):
            return None
        split = keyword(expr, "split")
        if isinstance(split, ast.Constant) and isinstance(split.value, str):
            return split.value
        if not (isinstance(expr.func, ast.Attribute) and expr.func.attr in HF_MAP_STYLE_KEEPING):
            return None
        expr = expr.func.value


def _returned_kind(analysis, facts, call: ast.Call, depth: int) -> Optional[str]:
    """`make_train_dataset(args, tokenizer)`: a function of the project (this file or another,
    within the cross-file depth) whose every `return` gives a map-style dataset."""
    if depth <= 0:
        return None
    found = _project_function(analysis, facts, call)
    if found is None:
        return None
    owner, func = found
    returns = returned_expressions(owner, func)
    if not returns:
        return None
    func_facts = owner.facts_for(func)
    kinds = [_dataset_kind(owner, func_facts, value, depth - 1) for value in returns]
    if not all(kinds):
        return None
    return f"{kinds[0]}, returned by `{func.name}()`"


def _project_function(analysis, facts, call: ast.Call):
    """(the defining file's analysis, FunctionInfo) for a call of a plain function of the
    project, or None (methods, classes, libraries)."""
    if isinstance(call.func, ast.Name):
        local = analysis.index.function_named(call.func.id, facts.func)
        if local is not None:
            return (analysis, local) if not local.is_method else None
    qual = analysis.imports.qualname(call.func)
    if qual is None or not is_project_name(qual):
        return None
    found = resolve(analysis, qual)
    return found if found is not None and isinstance(found[1], FunctionInfo) else None


def _hf_dataset(analysis, facts, expr: ast.expr, depth: int) -> bool:
    """`expr` is a Hugging Face `Dataset`/`DatasetDict` in its stored order: built by
    `load_dataset(...)` (not streaming), `Dataset.from_*` or `concatenate_datasets` of such,
    through order-keeping methods (`.map`, `.filter`, `.with_transform`, …); `.shuffle()`,
    `.train_test_split()` and `.to_iterable_dataset()` are not (a one-time order, an
    iterable)."""
    if depth < 0:
        return False
    if isinstance(expr, ast.Call):
        qual = analysis.imports.qualname(expr.func)
        if qual in HF_DATASET_SOURCES:
            return keyword(expr, "streaming") is None    # any `streaming=` may stream
        if qual in HF_DATASET_COMBINERS:
            parts = expr.args[0] if expr.args else keyword(expr, "dsets")
            return isinstance(parts, (ast.List, ast.Tuple)) and bool(parts.elts) and all(
                _hf_dataset(analysis, facts, part, depth - 1) for part in parts.elts)
        func = expr.func
        if qual is None and isinstance(func, ast.Attribute) and func.attr in HF_MAP_STYLE_KEEPING:
            return _hf_dataset(analysis, facts, func.value, depth)
        return _hf_returned(analysis, facts, expr, depth - 1)
    if isinstance(expr, ast.Subscript):
        return _hf_dataset(analysis, facts, expr.value, depth)
    text = dotted(expr)
    return text is not None and _hf_named(analysis, facts, text, depth)


def _hf_named(analysis, facts, text: str, depth: int) -> bool:
    """`_hf_dataset` of a name (or attribute chain), judged by what binds it."""
    if not _splits_keep_order(analysis, facts, text, depth):
        return False
    producers = [p for p in _producers(analysis, facts, text) if not is_const(p, None)]
    # `ds = ds.rename_column(...)` keeps whatever `ds` was: judged by the other producers
    others = [p for p in producers if _order_kept_from(p) != text
              and not _transforms_argument(analysis, facts, p, text)]
    if not others and facts.func is not None and text in facts.func.params:
        # a parameter, perhaps transformed in place of itself (`dataset = dataset.with_transform(...)`)
        return _hf_from_callers(analysis, facts, facts.func.params.index(text), depth - 1)
    return bool(others) and all(_hf_dataset(analysis, facts, p, depth - 1) for p in others)


def _hf_returned(analysis, facts, call: ast.Call, depth: int) -> bool:
    """`make_train_dataset(args)`, `prepare_train_dataset(ds)`: a plain function of the project
    whose every `return` is a Hugging Face dataset in its stored order (the diffusers scripts
    build and transform their split in such a helper)."""
    found = _project_function(analysis, facts, call) if depth >= 0 else None
    if found is None:
        return False
    owner, func = found
    returns = returned_expressions(owner, func)
    func_facts = owner.facts_for(func)
    return bool(returns) and all(_hf_dataset(owner, func_facts, value, depth) for value in returns)


def _transforms_argument(analysis, facts, expr: ast.expr, text: str) -> bool:
    """`ds = prepare_train_dataset(ds, accelerator)`: a plain function of the project that
    returns the dataset it is given through order-keeping methods only (`dataset =
    dataset.with_transform(...)`; `return dataset`) keeps whatever `ds` was before."""
    if not isinstance(expr, ast.Call):
        return False
    found = _project_function(analysis, facts, expr)
    if found is None:
        return False
    owner, func = found
    index = next((i for i, param in enumerate(func.params)
                  if dotted(argument_for(func, expr, i) or ast.Constant(None)) == text), None)
    if index is None:
        return False
    name = func.params[index]
    returns = returned_expressions(owner, func)
    producers = _producers(owner, owner.facts_for(func), name)
    return bool(returns) and all(_order_kept_from(value) == name for value in returns) \
        and all(_order_kept_from(value) == name for value in producers)


def _hf_from_callers(analysis, facts, index: int, depth: int) -> bool:
    """A parameter of a function of this file: a Hugging Face dataset in its stored order when
    every caller of the file passes one (`def prepare_train_dataset(dataset, ...)`)."""
    callers = analysis.callers(facts.func) if depth >= 0 else []
    passed = [(caller_facts, argument_for(facts.func, local.node, index))
              for caller_facts, local in callers]
    return bool(passed) and all(arg is not None and _hf_dataset(analysis, caller_facts, arg, depth)
                                for caller_facts, arg in passed)


def _splits_keep_order(analysis, facts, name: str, depth: int) -> bool:
    """Every `name[...] = value` of the file keeps the rows' order: `ds["train"] =
    ds["train"].select(range(n))` and `ds["train"] = load_dataset(..., split="train")` do,
    `ds["train"] = ds["train"].shuffle(seed=0)` does not (a one-time order; the rule leaves it
    alone)."""
    return all(_order_kept_from(value) == name or _hf_dataset(analysis, facts, value, depth - 1)
               for value in _split_stores(analysis).get(name, []))


@per_file("shuffling_split_stores")
def _split_stores(analysis) -> Dict[str, List[ast.expr]]:
    """name -> the values assigned to `name[...]` anywhere in the file."""
    stores: Dict[str, List[ast.expr]] = {}
    for node in ast.walk(analysis.tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript):
                    base = dotted(target.value)
                    if base:
                        stores.setdefault(base, []).append(node.value)
    return stores


def _order_kept_from(expr: ast.expr) -> Optional[str]:
    """`ds` for `ds.map(...).rename_column(...)` or `ds["train"].select(...)`: the dataset an
    order-keeping chain starts from."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) \
            and expr.func.attr in HF_MAP_STYLE_KEEPING:
        expr = expr.func.value
    if isinstance(expr, ast.Subscript):
        expr = expr.value
    return dotted(expr)


def _producers(analysis, facts, text: str) -> List[ast.expr]:
    scope = scope_of(analysis, facts)
    found = scope.producers.get(text, [])
    if found or facts.func is None:
        return found
    if text.startswith("self.") and facts.func.cls is not None:
        init = facts.func.cls.method("__init__")
        found = scope_of(analysis, analysis.facts_for(init)).producers.get(text, []) \
            if init is not None else []
        # a LightningDataModule builds its datasets in `setup()`, not `__init__`: every
        # method's `self.x = ...` is a producer then
        return found or _attribute_producers(analysis, facts.func.cls, text)
    if text not in facts.func.params:
        return scope_of(analysis, analysis.module_facts).producers.get(text, [])
    return []


def _attribute_producers(analysis, cls, text: str) -> List[ast.expr]:
    """What any method of a Lightning class `cls` (of this file) assigns to `self.<attr>`."""
    if not (_is_datamodule(cls) or cls.is_lightning):
        return []
    found: List[ast.expr] = []
    for method in cls.methods.values():
        if method.home in (None, analysis):
            found.extend(scope_of(analysis, analysis.facts_for(method)).producers.get(text, []))
    return found


def _constructed_kind(analysis, facts, call: ast.Call) -> Optional[str]:
    qual = analysis.imports.qualname(call.func)
    if qual is not None and (qual in MAP_STYLE or qual.startswith(MAP_STYLE_PREFIXES)):
        if _evaluation_split(call):
            return None
        return f"a map-style `{short(call.func, 40)}`"
    cls, owner = _project_class(analysis, call, qual)
    if cls is None:
        return None
    if not _map_style_class(owner, cls) or _class_draws_randomness(owner, cls) \
            or _samples_drawn_in_constructor(owner, cls):
        return None
    return f"`{cls.name}`, a map-style dataset (it defines `__getitem__`)"


def _evaluation_split(call: ast.Call) -> bool:
    """`CIFAR10(root, train=False)`, `ImageNet(root, split="val")`."""
    if is_const(keyword(call, "train"), False):
        return True
    split = keyword(call, "split")
    return isinstance(split, ast.Constant) and isinstance(split.value, str) and bool(
        _EVAL_SPLIT.match(split.value))


def _project_class(analysis, call: ast.Call, qual: Optional[str]):
    """(ClassInfo, FileAnalysis that holds it) for a dataset class of the project."""
    if isinstance(call.func, ast.Name) and call.func.id in analysis.index.classes:
        return analysis.index.classes[call.func.id], analysis
    if qual and is_project_name(qual):
        resolved = resolve_class(analysis, qual)
        if resolved is not None:
            return resolved[1], resolved[0]
    found = library_named_project(analysis, qual)   # the project's own `datasets.py`
    if found is not None and isinstance(found[1], ClassInfo):
        return found[1], found[0]
    return None, None


def _map_style_class(analysis, cls) -> bool:
    """Defines (or inherits from a class of its file) `__getitem__` and no `__iter__`, and
    derives from nothing iterable."""
    todo, seen = [cls], set()
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if any(b in ITERABLE_BASES for b in current.bases):
            return False
        todo.extend(current.local_bases)
    return cls.method("__getitem__") is not None and cls.method("__iter__") is None


def _class_draws_randomness(analysis, cls) -> bool:
    """The dataset class may reorder itself: some method shuffles or draws an order (an index
    shuffled per epoch or once), or it draws random numbers and `__getitem__` does not pick
    its sample by the index it is given (random windows of a stream, random samples). Random
    augmentation of the indexed sample (a flip's coin, a crop's offsets, a random prompt
    template) keeps the order: the rule judges it."""
    draws = False
    for method in cls.methods.values():
        for call in analysis.facts_for(method).calls:
            qual = call.qualname or ""
            if qual in ORDER_DRAWS or call.method in RESHUFFLE_NAMES:
                return True
            draws = draws or qual.startswith(RANDOM_DRAW_PREFIXES)
    return draws and not _getitem_reads_its_index(analysis, cls)


def _getitem_reads_its_index(analysis, cls) -> bool:
    """`__getitem__(self, i)` of the class itself reads its sample with `i` (`self.paths[i %
    n]`, `self.load(i)`), never rebinds `i`, and indexes nothing by a random integer."""
    getitem = cls.methods.get("__getitem__")
    if getitem is None or len(getitem.params) < 2:
        return False
    index = getitem.params[1]
    random_names = _names_bound_to_draws(analysis, getitem, cls)
    random_names.discard(index)
    read = False
    for node in ast.walk(getitem.node):
        if isinstance(node, ast.Name) and node.id == index and isinstance(node.ctx, (ast.Store, ast.Del)):
            return False
        if isinstance(node, ast.Subscript):
            names = {n.id for n in ast.walk(node.slice) if isinstance(n, ast.Name)}
            if names & random_names or _draws_in(analysis, node.slice, cls):
                return False
            read = read or index in names
        elif isinstance(node, ast.Call) and any(
                isinstance(n, ast.Name) and n.id == index
                for arg in list(node.args) + [kw.value for kw in node.keywords]
                for n in ast.walk(arg)):
            read = True
    return read


def _names_bound_to_draws(analysis, func, cls) -> set:
    """Names `__getitem__` binds from an integer draw (`j = random.randint(0, n)`)."""
    names = set()
    for node in ast.walk(func.node):
        if isinstance(node, ast.Assign) and _draws_in(analysis, node.value, cls):
            for target in node.targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def _draws_in(analysis, expr: ast.expr, cls) -> bool:
    """`expr` draws a random number that may be an index: any draw but a real-valued one,
    directly or through a method of the class that draws."""
    for node in ast.walk(expr):
        if not isinstance(node, ast.Call):
            continue
        qual = analysis.imports.qualname(node.func) or ""
        if qual.startswith(RANDOM_DRAW_PREFIXES) and qual not in REAL_VALUED_DRAWS:
            return True
        func = node.func
        if not qual and isinstance(func, ast.Attribute) and func.attr in INTEGER_DRAW_METHODS:
            return True
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                and func.value.id == "self" and func.attr in cls.methods:
            helper = analysis.facts_for(cls.methods[func.attr])
            if any((c.qualname or "").startswith(RANDOM_DRAW_PREFIXES)
                   and c.qualname not in REAL_VALUED_DRAWS for c in helper.calls):
                return True
    return False


def _samples_drawn_in_constructor(analysis, cls) -> bool:
    """A synthetic dataset: everything `__getitem__` reads of `self` was drawn at random
    when the object was built (`self.data = torch.randn(n, d)` in `__init__`, labels computed
    from those draws), so every sample is an independent draw and any order reads the same
    noise. Real data mixed in (`data + torch.randn_like(data)`, a loaded file) does not
    count: only draws, literals, the constructor's parameters as sizes, and other drawn
    attributes may make up such an attribute."""
    getitem = cls.methods.get("__getitem__")
    init = cls.methods.get("__init__")
    if getitem is None or init is None or not getitem.params:
        return False
    read = {node.attr for node in ast.walk(getitem.node)
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Name) and node.value.id == getitem.params[0]}
    drawn = _drawn_attributes(analysis, cls, init)
    return bool(read) and read <= drawn


def _drawn_attributes(analysis, cls, init) -> set:
    """Attributes of `self` stored only in `__init__`, each time from random draws alone."""
    stores: Dict[str, List[ast.expr]] = {}
    for method in cls.methods.values():
        for node in ast.walk(method.node):
            for target, value in _attribute_assignments(node, method):
                stores.setdefault(target, []).append(value if method is init else None)
    drawn: set = set()
    for _ in range(3):      # labels computed from the drawn features come after them
        drawn |= {attr for attr, values in stores.items()
                  if all(v is not None and _only_draws(analysis, v, drawn, init) for v in values)}
    return drawn


def _attribute_assignments(node: ast.AST, method):
    """(attribute, value) for each `self.x = value` / `self.x += value` statement in `node`;
    (attribute, None) where the value is not one expression of its own (tuple unpacking)."""
    receiver = method.params[0] if method.params else None
    if isinstance(node, ast.Assign):
        targets, value = node.targets, node.value
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets, value = [node.target], None
    else:
        return []
    out = []
    for target in targets:
        for sub in ast.walk(target):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) \
                    and sub.value.id == receiver and isinstance(sub.ctx, ast.Store):
                out.append((sub.attr, value if sub is target else None))
    return out


def _only_draws(analysis, expr: ast.expr, drawn: set, init) -> bool:
    """`expr` is made of random draws: a draw call (its arguments are sizes), arithmetic
    and methods of draws (`torch.randn(n, d).float()`, `(x.sum(1) > 0).long()`), literals
    and attributes already proven drawn; no other name, no other call's result."""
    if isinstance(expr, ast.Constant):
        return True
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) \
            and expr.value.id == init.params[0]:
        return expr.attr in drawn
    if isinstance(expr, ast.Call):
        qual = analysis.imports.qualname(expr.func) or ""
        if qual in api.TORCH_DRAWS or qual.startswith("numpy.random.") and qual not in ORDER_DRAWS:
            return True
        func = expr.func
        if isinstance(func, ast.Attribute) and qual == "":
            return _only_draws(analysis, func.value, drawn, init) or (
                func.attr in api.TENSOR_INPLACE_DRAWS)
        return False
    if isinstance(expr, ast.BinOp):
        return _only_draws(analysis, expr.left, drawn, init) and \
            _only_draws(analysis, expr.right, drawn, init)
    if isinstance(expr, (ast.Compare, ast.UnaryOp)):
        parts = [expr.operand] if isinstance(expr, ast.UnaryOp) else [expr.left, *expr.comparators]
        return all(_only_draws(analysis, part, drawn, init) for part in parts)
    return False


# ---------------------------------------------------------------------------- the loop
def _carries_state(analysis, facts, loop) -> bool:
    """A forward in the loop takes a state the loop carries over (`model(x, hidden)`): the
    batches form one sequence, their order is the point (truncated BPTT)."""
    for forward in analysis.in_loop(facts, "forwards", loop):
        node = forward.site.node
        if not isinstance(node, ast.Call):
            continue
        for arg in list(node.args) + [kw.value for kw in node.keywords]:
            text = dotted(arg)
            if text and _CARRIED_STATE.match(text.rsplit(".", 1)[-1]):
                return True
    return False


# How many callers up a function is followed to prove it runs once.
_ONCE_DEPTH = 3


def read_in_one_pass(analysis, facts, loop) -> bool:
    """The loop runs once in the program: no loop encloses it in its function, and the
    function runs once (module code; or a function of this file called exactly once, outside
    any loop, from code that runs once, and named nowhere else: not handed on as a value).
    A function the file never calls may be called per epoch from elsewhere: not once."""
    if facts.loop_parents.get(loop) is not None:
        return False
    return _runs_once(analysis, facts.func, _ONCE_DEPTH)


def _runs_once(analysis, func, depth: int) -> bool:
    if func is None:
        return True           # module code runs once
    callers = analysis.callers(func)
    if depth <= 0 or len(callers) != 1 or _named(analysis, func.name) != 1:
        return False      # called twice (`train(loader)` again to fine-tune) is two passes
    caller, call = callers[0]
    return not call.site.loops and _runs_once(analysis, caller.func, depth - 1)


def _named(analysis, name: str) -> int:
    """How often the file names `name` (as a variable or an attribute), calls included."""
    return _name_counts(analysis).get(name, 0)


@per_file("shuffling_name_counts")
def _name_counts(analysis) -> Dict[str, int]:
    """name -> how often the file names it as a variable or an attribute: one walk of the
    file, whatever the number of functions asked about."""
    counts: Dict[str, int] = {}
    for node in ast.walk(analysis.tree):
        name = node.id if isinstance(node, ast.Name) else (
            node.attr if isinstance(node, ast.Attribute) else None)
        if name is not None:
            counts[name] = counts.get(name, 0) + 1
    return counts


def _reshuffles(analysis, facts, loop) -> bool:
    """Something in the training loop, or in a loop around it, reorders the data per epoch."""
    loops = [loop]
    parent = facts.loop_parents.get(loop)
    while parent is not None:
        loops.append(parent)
        parent = facts.loop_parents.get(parent)
    for each in loops:
        for call in analysis.in_loop(facts, "calls", each):
            name = call.method or (call.qualname or "").rsplit(".", 1)[-1] or (
                call.node.func.id if isinstance(call.node.func, ast.Name) else "")
            if name in RESHUFFLE_NAMES:
                return True
    return False


__all__ = ["Unshuffled", "unshuffled_training_loaders", "samples_ignore_their_index", "MAP_STYLE",
           "ITERABLE_BASES", "LIGHTNING_DATAMODULES", "LIGHTNING_TRAINERS"]


def samples_ignore_their_index(analysis, facts, expr: ast.expr) -> bool:
    """The dataset is an instance of a project class whose `__getitem__` never reads the
    index it is given (each call draws a fresh random sample, or returns the same one):
    whatever order a sampler draws the indices in, the samples are the same (TPF009). A
    dataset drawn at random once and then read by its index (`TensorDataset(torch.randn(n,
    d))`, `self.x[i]`) is read in the sampler's order like any other."""
    cls = facts.value(expr).cls
    getitem = cls.method("__getitem__") if cls is not None else None
    if getitem is None or len(getitem.params) < 2 or getitem.node.args.vararg is not None:
        return False
    index = getitem.params[1]
    return not any(isinstance(node, ast.Name) and node.id in (index, "locals", "vars")
                   for node in ast.walk(getitem.node))
