"""Runtime guard (optional extra ``vram_estimator[guard]``; needs torch).

Given a live model, its optimizer and an example input shape, it measures what the static
estimator can only project:

* parameters, gradients (trainable parameters, in their dtype) and optimizer state exactly
  (existing state tensors are counted; an optimizer that has not stepped yet is projected
  from its class: Adam/AdamW two states, SGD with momentum one, 8-bit optimizers two bytes),
* activations by one forward pass of a copy of the model on the **meta** device inside
  ``torch.autograd.graph.saved_tensors_hooks``: every tensor autograd saves is counted once
  per storage; nothing is allocated on any real device.

:func:`check` raises :class:`VramError` only when even the optimistic end (exact terms +
measured activations) exceeds the target's usable memory; when only the pessimistic end
(allocator slack, transients) does, it warns.  :func:`measured_peak` reads the real peak after
a run so it can be printed beside the projection.

torch is imported inside the functions only, so importing this module is free.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Sequence, Union

from .knowledge import db
from .costs.estimate import RESERVE, gpu_figures, optimizer_bytes

GIB = 1024**3


class VramError(RuntimeError):
    """Raised when the optimistic end of the projection does not fit the target."""


@dataclass
class GuardReport:
    parameters: int
    gradients: int
    optimizer: int
    activations: int
    capacity: Optional[int] = None
    usable: Optional[int] = None
    slack: float = 0.15
    notes: list = field(default_factory=list)

    @property
    def lower(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.activations

    @property
    def upper(self) -> int:
        return int(self.lower + self.slack * (self.activations + self.gradients))

    @property
    def verdict(self) -> Optional[str]:
        if self.usable is None:
            return None
        if self.upper <= self.usable:
            return "fits"
        if self.lower > self.usable:
            return "oom"
        return "tight"

    def __str__(self) -> str:
        parts = [
            f"params {self.parameters / GIB:.2f} GiB",
            f"grads {self.gradients / GIB:.2f} GiB",
            f"optimizer {self.optimizer / GIB:.2f} GiB",
            f"activations {self.activations / GIB:.2f} GiB",
            f"peak {self.lower / GIB:.2f}–{self.upper / GIB:.2f} GiB",
        ]
        if self.usable is not None:
            parts.append(f"usable {self.usable / GIB:.2f} GiB: {self.verdict}")
        return "; ".join(parts)


def _unique_params(model: Any):
    seen = set()
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            yield p


def optimizer_state_bytes(model: Any, optimizer: Any) -> int:
    """Exact bytes of existing optimizer state, or a projection by class for a fresh optimizer."""
    import torch

    if optimizer is None:
        return 0
    total = 0
    for state in getattr(optimizer, "state", {}).values():
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                total += value.numel() * value.element_size()
    if total:
        return total
    name = type(optimizer).__name__.lower()
    trainable = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    numel = sum(p.numel() for p in trainable)
    elem = trainable[0].element_size() if trainable else 4
    if "8bit" in name:
        kind = "adamw-8bit"
    elif "adafactor" in name:
        kind = "adafactor"
    elif "lion" in name:
        kind = "lion"
    elif "adam" in name:
        kind = "adamw"
    elif name == "sgd":
        momentum = any(g.get("momentum", 0) for g in optimizer.param_groups)
        kind = "sgd-momentum" if momentum else "sgd"
    else:
        kind = "adamw"
    return int(optimizer_bytes(kind, elem, 1024) * numel)


def activation_bytes(
    model: Any,
    example: Union[Sequence[int], Dict[str, Any], Any],
    dtype: Any = None,
    forward: Optional[Callable[[Any, Any], Any]] = None,
) -> int:
    """Bytes autograd saves in one forward pass, measured on a meta-device copy of ``model``.

    ``example`` is an input shape (float input; ``dtype`` picks it), a dict of shapes or
    tensors (``{"input_ids": (4, 512)}``: integer for ``*ids``/``*mask`` keys), or a tensor.
    """
    import torch

    meta_model = copy.deepcopy(model).to("meta")
    if dtype is not None and dtype in (torch.float16, torch.bfloat16):
        meta_model = meta_model.to(dtype)
    meta_model.train()
    params = {p.untyped_storage()._cdata for p in meta_model.parameters()}

    def as_meta(name: str, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to("meta")
        if isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
            if any(k in name for k in ("ids", "mask", "labels", "token_type")):
                return torch.zeros(tuple(value), dtype=torch.long, device="meta")
            return torch.empty(tuple(value), dtype=dtype or torch.float32, device="meta")
        return value

    if isinstance(example, dict):
        inputs: Any = {k: as_meta(k, v) for k, v in example.items()}
    else:
        inputs = as_meta("x", example)
    seen: Dict[int, int] = {}

    def pack(t: Any) -> Any:
        st = t.untyped_storage()
        if st._cdata not in params:
            seen[st._cdata] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if forward is not None:
            out = forward(meta_model, inputs)
        elif isinstance(inputs, dict):
            out = meta_model(**inputs)
        else:
            out = meta_model(inputs)
    del out
    return int(sum(seen.values()))


def measure(
    model: Any,
    optimizer: Any = None,
    example: Any = None,
    dtype: Any = None,
    forward: Optional[Callable[[Any, Any], Any]] = None,
) -> GuardReport:
    params = list(_unique_params(model))
    p_bytes = sum(p.numel() * p.element_size() for p in params)
    g_bytes = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    o_bytes = optimizer_state_bytes(model, optimizer)
    a_bytes = activation_bytes(model, example, dtype=dtype, forward=forward) if example is not None else 0
    return GuardReport(parameters=p_bytes, gradients=g_bytes, optimizer=o_bytes, activations=a_bytes)


def check(
    model: Any,
    optimizer: Any = None,
    example: Any = None,
    gpu: Optional[str] = None,
    dtype: Any = None,
    forward: Optional[Callable[[Any, Any], Any]] = None,
) -> GuardReport:
    """Measure and judge against ``gpu`` (a name, instance or capacity; default: the current
    CUDA device).  Raises :class:`VramError` only when the optimistic end does not fit."""
    import torch

    report = measure(model, optimizer, example, dtype=dtype, forward=forward)
    capacity = target = None
    if gpu:
        target, why = db.parse_target(gpu)
        if target is None:
            raise ValueError(f"{why}; see `vram-estimate gpus`")
        capacity = target["memory_bytes"]
    elif torch.cuda.is_available():
        capacity = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    if capacity is not None:
        context = gpu_figures(target)["context_mib"][1] * 1024**2  # the GPU's calibrated point
        report.capacity = int(capacity)
        report.usable = int(capacity - context - RESERVE * capacity)
        if report.verdict == "oom":
            raise VramError(
                f"even the optimistic peak {report.lower / GIB:.1f} GiB exceeds usable "
                f"{report.usable / GIB:.1f} GiB ({report})"
            )
        if report.verdict == "tight":
            warnings.warn(f"projected peak may not fit: {report}", ResourceWarning, stacklevel=2)
    return report


def measured_peak() -> Optional[int]:
    """The real peak allocated on the current CUDA device, or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.max_memory_allocated())
