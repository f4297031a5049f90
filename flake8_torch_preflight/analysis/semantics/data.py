"""`torch.utils.data`: loaders and samplers, and what a loader yields."""
from __future__ import annotations

from typing import Optional

from . import torchapi as api
from ..core import values as V
from ..core.values import Value
from .registry import Access, Call, other_attributes, qualified


@qualified(*api.DATALOADER_NAMES)
def _data_loader(call: Call) -> Value:
    """A loader, remembering its dataset and sampler (TPF008/TPF009 ask for them)."""
    fields = []
    sampler = call.kwargs.get("sampler") or _drawn_from(call.kwargs.get("batch_sampler"))
    if sampler is not None:
        fields.append(("sampler", sampler))
    dataset = call.kwargs.get("dataset") or (call.args[0] if call.args else None)
    if dataset is not None:
        fields.append(("dataset", dataset))
    return Value(tags=frozenset({V.LOADER}), node=call.node, fields=tuple(fields))


@qualified(*api.PROGRESS_WRAPPERS)
def _progress_bar(call: Call) -> Optional[Value]:
    """`tqdm(loader)`: iterating the bar iterates the loader, so the bar stands for it (the
    loop `for b in bar` under `with tqdm(loader) as bar:` trains on that loader). A bar over
    a parameter stands for the parameter, so a helper's loop over it is followed to the
    loaders its callers pass (`def train(net, loader): with tqdm(loader) as bar: ...`)."""
    wrapped = call.args[0] if call.args else call.kwargs.get("iterable")
    if wrapped is None or not (wrapped.has(V.LOADER) or wrapped.params):
        return None
    return wrapped


@qualified(*api.DISTRIBUTED_SAMPLERS)
def _distributed_sampler(call: Call) -> Value:
    return Value.of(V.DIST_SAMPLER, V.SAMPLER, node=call.node)


@qualified(*api.BATCH_SAMPLERS)
def _batch_sampler(call: Call) -> Value:
    """`BatchSampler(sampler, batch_size, drop_last)`: remembers the sampler it batches."""
    inner = call.args[0] if call.args else call.kwargs.get("sampler")
    fields = (("sampler", inner),) if inner is not None else ()
    return Value(tags=frozenset({V.SAMPLER}), node=call.node, fields=fields)


def _drawn_from(batch_sampler: Optional[Value]) -> Optional[Value]:
    """The sampler whose order a loader's `batch_sampler=` follows: the one a `BatchSampler`
    batches, else the batch sampler itself."""
    if batch_sampler is None:
        return None
    inner = batch_sampler.field("sampler") if batch_sampler.has(V.SAMPLER) else None
    return inner if inner is not None else batch_sampler


@other_attributes(V.LOADER)
def _loader_field(access: Access) -> Optional[Value]:
    """`loader.sampler`, `loader.dataset`: what the loader was built with."""
    return access.base.field(access.attr)


def batch_of(loader: Value) -> Value:
    """What iterating a loader yields: batches of tensors, on the GPU if the loader is."""
    return Value(tags=frozenset({V.TENSOR}) | (loader.tags & {V.CUDA_DEVICE}))


# ------------------------------------------------------------------------ dataset kinds
# What TPF018 needs to know about a dataset: map-style (indexable, a `DataLoader` walks it in
# index order unless it shuffles) or iterable (no order to shuffle). Read in torch's
# `torch.utils.data` docs ("Dataset Types": a map-style dataset implements `__getitem__` and
# `__len__`; an iterable-style one subclasses `IterableDataset` and implements `__iter__`).

# Map-style datasets of torch and torchvision.
MAP_STYLE = api.TENSOR_DATASETS | frozenset({
    "torch.utils.data.Subset", "torch.utils.data.dataset.Subset",
    "torch.utils.data.ConcatDataset", "torch.utils.data.dataset.ConcatDataset",
    "torch.utils.data.StackDataset",
})
MAP_STYLE_PREFIXES = ("torchvision.datasets.",)
ITERABLE_BASES = frozenset({
    "torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset",
    "torch.utils.data.IterDataPipe", "torch.utils.data.datapipes.datapipe.IterDataPipe",
    "torchdata.datapipes.iter.IterDataPipe", "datasets.IterableDataset",
})
# Hugging Face `datasets` (its "Loading methods" reference: `load_dataset(...)` returns a
# `Dataset` or `DatasetDict`, and with `streaming=True` an `IterableDataset`; its
# "Stream" guide: the streamed one is "not the classic map-style `datasets.Dataset`").
# Constructors of a map-style `Dataset` / `DatasetDict` (unless `streaming=`):
HF_DATASET_SOURCES = frozenset({
    "datasets.load_dataset", "datasets.load_from_disk", "datasets.Dataset.from_dict",
    "datasets.Dataset.from_pandas", "datasets.Dataset.from_list", "datasets.Dataset.from_csv",
    "datasets.Dataset.from_json", "datasets.Dataset.from_parquet", "datasets.Dataset.from_generator"})
# Functions of several `Dataset`s that return one `Dataset` holding their rows in the given
# order (`concatenate_datasets`: the rows of the first, then of the next, …).
HF_DATASET_COMBINERS = frozenset({"datasets.concatenate_datasets"})
# Methods that return a `Dataset` (or `DatasetDict`) of the same rows in the same order:
# row-wise transforms, column edits, formats, and `select`/`filter` (a subset, order kept).
HF_ORDER_KEEPING = frozenset({
    "map", "filter", "remove_columns", "rename_column", "rename_columns", "select_columns",
    "with_format", "set_format", "with_transform", "set_transform", "cast", "cast_column",
    "flatten", "select", "add_column"})
# Methods that keep a map-style `Dataset` map-style but draw its order once (`.shuffle(seed=
# ...)`, `.train_test_split()`, which shuffles by default): the order is random, and then the
# same every epoch, like a `random_split` part or a sampler whose epoch is never set (TPF009).
# `.to_iterable_dataset()` is in neither table: it makes the dataset iterable.
HF_ONE_TIME_ORDER = frozenset({"shuffle", "train_test_split", "flatten_indices"})

# Random draws inside a dataset class (by qualified-name prefix) ...
RANDOM_DRAW_PREFIXES = ("random.", "numpy.random.", "torch.rand", "torch.randperm",
                        "torch.multinomial", "torch.normal", "torch.bernoulli")
# ... of which these return real numbers: augmentation parameters (a flip's coin, a crop's
# scale), never an index into the data. A class that draws only these and picks its sample
# by `__getitem__`'s index keeps the index order.
REAL_VALUED_DRAWS = frozenset({
    "random.random", "random.uniform", "random.gauss", "random.normalvariate",
    "random.triangular", "random.betavariate", "random.expovariate",
    "numpy.random.rand", "numpy.random.randn", "numpy.random.random", "numpy.random.uniform",
    "numpy.random.normal", "numpy.random.random_sample", "numpy.random.beta",
    "numpy.random.standard_normal",
    "torch.rand", "torch.randn", "torch.rand_like", "torch.randn_like", "torch.normal",
    "torch.bernoulli"})
# Methods of a random generator object (`rng = np.random.default_rng(); rng.integers(...)`,
# `random.Random(0).randint(...)`) that draw integers or pick elements: possible indices.
INTEGER_DRAW_METHODS = frozenset({"integers", "randint", "randrange", "choice", "choices",
                                  "sample", "permutation", "shuffle"})
