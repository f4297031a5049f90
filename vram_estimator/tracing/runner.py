"""One training (or inference) step of a transformers model built from its configuration on
fake tensors, under PyTorch's own memory tracker.  Imports torch and transformers: reached only
through :func:`vram_estimator.tracing.compare.traced_estimate`, after
:func:`vram_estimator.tracing.missing` found both installed.

* The model is built inside ``FakeTensorMode`` with the run's default dtype: every tensor has a
  shape, dtype and storage size but no memory; nothing is downloaded.
* ``MemTracker`` (``torch.distributed._tools.mem_tracker``) sees every storage the step creates
  and frees and keeps the largest total with its breakdown (parameters, buffers, gradients,
  activations, backward temporaries, optimizer states).
* A fake tensor has no values, so a Python branch on one has none either: a scalar the code reads
  (``.item()``, ``bool(t)``: a mask check, a layer-drop draw) reads False (no layer dropped,
  the mask kept) or 1 (an optimizer's step count), and a mixture-of-experts layer routes
  tokens evenly (see :mod:`.moe`).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Dict, Iterator

import torch
from torch.distributed._tools.mem_tracker import _TOTAL_KEY, MemTracker, _MemRefType
from torch.utils._python_dispatch import TorchDispatchMode
from torch._subclasses.fake_tensor import FakeTensorMode

from .architectures import build_for
from .moe import even_routing
from .plan import Plan, Traced

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_SCALAR_READS = (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default)


class _ScalarDefaults(TorchDispatchMode):
    """Under fake tensors, a scalar read from a tensor (``.item()``, ``bool()``) has no value.
    A truth value reads False: the branch a real run takes for a layer-drop draw below its
    probability and the conservative one for a mask check (the mask is kept).  A number reads
    1: an optimizer's step count (its bias correction divides by ``1 - beta ** step``; any
    positive count allocates the same bytes)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in _SCALAR_READS:
            return False if args[0].dtype == torch.bool or func is _SCALAR_READS[1] else 1
        return func(*args, **(kwargs or {}))


class _Tracker(MemTracker):
    """``MemTracker`` hooks every parameter to see its gradient, and torch refuses a hook on a
    frozen one (a LoRA run's base weights): the hooks go on the trainable ones only."""

    def _track_module_params_and_buffers(self, module: torch.nn.Module, install_grad_hooks: bool = True):
        sizes = super()._track_module_params_and_buffers(module, install_grad_hooks=False)
        if not install_grad_hooks:
            return sizes
        for param in module.parameters():
            if param.requires_grad and self._param_to_grad_hook_handles.get(param, None) is None:
                self._param_to_grad_hook_handles[param] = (
                    param.register_hook(self._gradient),
                    param.register_post_accumulate_grad_hook(lambda p: self._gradient(p.grad)),
                )
        return sizes

    def _gradient(self, grad: torch.Tensor) -> None:
        self._update_and_maybe_create_winfos(grad, _MemRefType.GRAD)

    def _update_peak_stats(self, peak_state: Any) -> None:
        """The step's peak only: ``MemTracker`` also updates every active module's own peak
        after every operator (a loop over all modules per operator, most of a large model's
        trace time), which the estimate does not use."""
        for dev, snap in self._curr_mem_snap.items():
            if self._peak_mem.get(dev, 0) < snap[_TOTAL_KEY]:
                self._peak_mem[dev] = snap[_TOTAL_KEY]
                self._peak_mem_snap[dev] = dict(snap)


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def build_model(plan: Plan) -> torch.nn.Module:
    """The transformers model of ``plan`` from its config (under the caller's fake mode)."""
    import transformers

    build = build_for(plan.family)
    config = getattr(transformers, build.config_class)(**build.kwargs(plan.config))
    config.use_cache = not plan.train  # a forward without labels returns its KV cache by default
    if (getattr(config, "pad_token_id", None) or 0) >= getattr(config, "vocab_size", 1 << 62):
        config.pad_token_id = None  # a config class's default pad id past a small vocabulary: no memory in it
    attention = "eager" if plan.attention == "eager" else "sdpa"
    cls = getattr(transformers, build.model_class)
    return cls._from_config(config, attn_implementation=attention)


def _already_there(to: Any):
    """``Module.to`` for a module built on fake tensors: PEFT moves each new adapter to its base
    layer's device and dtype, and ``Module.to`` cannot swap a fake parameter even for a move
    that changes nothing.  The adapters are built in the default dtype (the base layer's) on
    the fake CPU device, so such a move is skipped; any other goes to ``to``."""

    def move(self: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
        device, dtype, _blocking, _format = torch._C._nn._parse_to(*args, **kwargs)
        for t in list(self.parameters()) + list(self.buffers()):
            if device is not None and t.device != device:
                return to(self, *args, **kwargs)
            if dtype is not None and t.is_floating_point() and t.dtype != dtype:
                return to(self, *args, **kwargs)
        return self

    return move


def _with_lora(model: torch.nn.Module, plan: Plan) -> torch.nn.Module:
    """PEFT's ``get_peft_model`` with the run's rank, targets (PEFT's per-model defaults when
    none were read) and dropout; adapters upcast to fp32 over half weights, as PEFT does."""
    import peft

    targets: Any = list(plan.lora_targets) if plan.lora_targets else None
    if targets == ["all-linear"]:
        targets = "all-linear"
    config = peft.LoraConfig(
        r=plan.lora, lora_alpha=2 * plan.lora, target_modules=targets, lora_dropout=plan.lora_dropout
    )
    to = torch.nn.Module.to
    torch.nn.Module.to = _already_there(to)  # type: ignore[method-assign]
    try:
        return peft.get_peft_model(model, config)
    finally:
        torch.nn.Module.to = to  # type: ignore[method-assign]


def _optimizer(model: torch.nn.Module, plan: Plan):
    params = [p for p in model.parameters() if p.requires_grad]
    name = plan.optimizer
    if name in ("adamw", "adam"):
        cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
        return cls(params, lr=1e-5, foreach=plan.foreach, fused=False)
    if name in ("sgd", "sgd-momentum"):
        momentum = 0.9 if name == "sgd-momentum" else 0.0
        return torch.optim.SGD(params, lr=1e-3, momentum=momentum, foreach=plan.foreach)
    if name == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(params, lr=1e-3, relative_step=False, scale_parameter=False)
    return None


def _prepare(plan: Plan) -> torch.nn.Module:
    model = build_model(plan)
    even_routing(model)
    if plan.lora:
        model = _with_lora(model, plan)
    if plan.checkpointing:
        model.gradient_checkpointing_enable()  # the library's default (reentrant) checkpointing
        if plan.lora:
            model.enable_input_require_grads()
    model.train(plan.train)
    return model


def _steady_state(model: torch.nn.Module, optimizer: Any, grads_persist: bool) -> None:
    """Create the optimizer's states before the traced step, as every step after a run's first
    finds them: one step on zero gradients outside the tracker, so the traced forward and
    backward run beside the states, as they do from the second step on.  The gradients are
    dropped, unless they persist (gradient accumulation, ``zero_grad(set_to_none=False)``):
    then the traced micro-batch finds them, as the later micro-batches of a step do."""
    if optimizer is None:
        return
    trainable = [p for p in model.parameters() if p.requires_grad]
    for p in trainable:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    if not grads_persist:
        optimizer.zero_grad(set_to_none=True)


def _labels(ids: torch.Tensor, plan: Plan) -> torch.Tensor:
    """The loss's targets: the tokens for a language model, one class per example otherwise."""
    if build_for(plan.family).labels == "class":
        return torch.zeros((ids.shape[0],), dtype=torch.long)
    return ids


def _phase_peak(mt: _Tracker) -> Dict[str, int]:
    """The breakdown at the largest total since the last call, and a fresh start for the next
    phase (``MemTracker`` keeps one peak for its whole context; it is reset between phases so
    each phase's peak is compared with the static phase of the same name)."""
    peak = _snapshot(mt.get_tracker_snapshot("peak"))
    mt._peak_mem_snap = mt.get_tracker_snapshot("current")
    mt._peak_mem = {dev: snap.get("Total", 0) for dev, snap in mt._peak_mem_snap.items()}
    return peak


def _step(model: torch.nn.Module, optimizer: Any, ids: torch.Tensor, plan: Plan, mt: _Tracker) -> Dict:
    """Forward, backward and optimizer step: each phase's peak breakdown, and the breakdown
    after each step of the way."""
    peaks: Dict[str, Any] = {}
    after: Dict[str, Any] = {}
    autocast = (
        torch.autocast("cpu", dtype=_DTYPES[plan.autocast])
        if plan.autocast
        else contextlib.nullcontext()
    )
    grad = contextlib.nullcontext() if plan.train else torch.no_grad()
    with grad, autocast:
        out = model(input_ids=ids, labels=_labels(ids, plan) if plan.train else None)
    after["forward"] = _snapshot(mt.get_tracker_snapshot("current"))
    if not plan.train:
        peaks["forward"] = _phase_peak(mt)
        return dict(peaks=peaks, after=after)
    out.loss.backward()
    del out
    peaks["backward"] = _phase_peak(mt)
    after["backward"] = _snapshot(mt.get_tracker_snapshot("current"))
    if optimizer is not None:
        optimizer.step()
        peaks["optimizer step"] = _phase_peak(mt)
        after["optimizer step"] = _snapshot(mt.get_tracker_snapshot("current"))
        optimizer.zero_grad(set_to_none=True)
    return dict(peaks=peaks, after=after)


def _snapshot(snap: Dict[Any, Dict[Any, int]]) -> Dict[str, int]:
    """One device's breakdown as {category name: bytes} (``Total`` included)."""
    out: Dict[str, int] = {}
    for dev_snap in snap.values():
        for key, value in dev_snap.items():
            name = getattr(key, "value", str(key))
            out[name] = out.get(name, 0) + int(value)
    return out


def trace(plan: Plan) -> Traced:
    """Build ``plan``'s model on fake tensors and run one step under ``MemTracker``."""
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with warnings.catch_warnings(), fake, _ScalarDefaults(), _default_dtype(_DTYPES[plan.dtype]):
        # the libraries' warnings (deprecations, ModTracker's skipped hooks for modules freed
        # before backward) say nothing about the run's memory: not shown in the report
        warnings.simplefilter("ignore")
        model = _prepare(plan)
        optimizer = _optimizer(model, plan) if plan.train else None
        _steady_state(model, optimizer, plan.grads_persist)
        ids = torch.zeros((plan.batch, plan.seq), dtype=torch.long)
        mt = _Tracker()
        mt.track_external(model, optimizer, ids)
        with mt:
            phases = _step(model, optimizer, ids, plan, mt)
    return Traced(plan=plan, peaks=phases["peaks"], after=phases["after"])


def versions() -> Dict[str, str]:
    """The libraries the trace ran, for the report."""
    import transformers

    out = {"torch": torch.__version__, "transformers": transformers.__version__}
    try:
        import peft

        out["peft"] = peft.__version__
    except ImportError:
        pass
    return out
