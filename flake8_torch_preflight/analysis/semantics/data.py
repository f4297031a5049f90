"""`torch.utils.data`: loaders and samplers, and what a loader yields."""
from __future__ import annotations

from typing import Optional

from .. import torchapi as api
from .. import values as V
from ..values import Value
from .registry import Access, Call, other_attributes, qualified


@qualified(*api.DATALOADER_NAMES)
def _data_loader(call: Call) -> Value:
    """A loader, remembering its dataset and sampler (TPF008/TPF009 ask for them)."""
    fields = []
    sampler = call.kwargs.get("sampler") or call.kwargs.get("batch_sampler")
    if sampler is not None:
        fields.append(("sampler", sampler))
    dataset = call.kwargs.get("dataset") or (call.args[0] if call.args else None)
    if dataset is not None:
        fields.append(("dataset", dataset))
    return Value(tags=frozenset({V.LOADER}), node=call.node, fields=tuple(fields))


@qualified(*api.DISTRIBUTED_SAMPLERS)
def _distributed_sampler(call: Call) -> Value:
    return Value.of(V.DIST_SAMPLER, V.SAMPLER, node=call.node)


@other_attributes(V.LOADER)
def _loader_field(access: Access) -> Optional[Value]:
    """`loader.sampler`, `loader.dataset`: what the loader was built with."""
    return access.base.field(access.attr)


def batch_of(loader: Value) -> Value:
    """What iterating a loader yields: batches of tensors, on the GPU if the loader is."""
    return Value(tags=frozenset({V.TENSOR}) | (loader.tags & {V.CUDA_DEVICE}))
