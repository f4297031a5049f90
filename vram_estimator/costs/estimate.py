"""The cost model: resolved settings -> the terms of each phase of a step, the peak (the largest
phase, not the sum of terms that never coexist), an interval, and a verdict.

A training step has three moments that matter::

    backward start = static + autocast copies + activations + logits + head gradient
                     + one block's backward working set
    optimizer step = static + gradients + the optimizer's foreach temporaries
    static         = weights + optimizer state + fp32 master copy + DDP/ZeRO buffers
                     + gathered ZeRO-3/FSDP blocks

(the end of the forward pass is the backward start without the block's working set, and
during backward activations are freed as gradients appear, so neither exceeds the two above).
Inference and generation have one phase: weights, one block's working set, logits and the KV
cache.  Each phase adds the caching allocator's fragmentation of its dynamic terms.

Every term is a triple ``(lower, point, upper)`` in bytes; a phase's interval is the sum of its
triples and the estimate's interval is the largest phase's.  The usable capacity is the device
memory less the CUDA/HIP context and a 2 % reserve; the context has a spread per GPU
(``data/gpus.json``), and the verdict is ``fits`` only when the upper end fits beside the
largest context, ``oom`` only when the lower end does not fit beside the smallest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..knowledge import db
from ..knowledge.adapters import LORA_IMPL_OF_RUNTIME
from ..knowledge.losses import KEEPS as LOSS_KEEPS
from .activations import Acts, coefficients, inference_workspace, precision_class  # noqa: F401
from .activations import ACTIVATION_MODELS
from ..reading.config_comments import Value
from .terms import BACKWARD, DECODE, FORWARD, PREFILL, STEP, Setup, Term
from . import terms as T

GIB = 1024**3
MIB = 1024**2
RESERVE = 0.02  # of the card: what the allocator cannot hand out (rounding, small pools)


@dataclass
class Estimate:
    """One projection: the terms at its peak, every phase, the interval, capacity and verdict."""

    terms: List[Term]
    settings: Dict[str, Value]
    target: Optional[Dict[str, Any]]
    phases: Dict[str, List[Term]] = field(default_factory=dict)
    peak_phase: str = FORWARD
    capacity: float = 0.0
    context: float = 0.0
    context_range: Tuple[float, float] = (0.0, 0.0)
    reserve: float = 0.0
    notes: List[str] = field(default_factory=list)
    params_total: int = 0
    params_trainable: int = 0

    def _phase_sums(self, attr: str, allocated: bool = False, tensors: bool = False) -> float:
        """The largest phase's sum; ``allocated`` leaves out the allocator's slack, ``tensors``
        what lives outside torch's allocator (managed memory)."""
        sums = [
            sum(
                getattr(t, attr)
                for t in phase
                if not (allocated and t.allocator) and not ((allocated or tensors) and t.managed)
            )
            for phase in self.phases.values()
        ]
        return max(sums) if sums else 0.0

    @property
    def lower(self) -> float:
        return self._phase_sums("lower")

    @property
    def point(self) -> float:
        return self._phase_sums("point")

    @property
    def upper(self) -> float:
        return self._phase_sums("upper")

    def allocated(self) -> Tuple[float, float, float]:
        """What ``torch.cuda.max_memory_allocated`` would see (no allocator fragmentation, no
        managed memory)."""
        return tuple(self._phase_sums(a, allocated=True) for a in ("lower", "point", "upper"))

    def reserved(self) -> Tuple[float, float, float]:
        """What ``torch.cuda.max_memory_reserved`` would see: the estimate less managed memory
        (``lower``/``point``/``upper``, which the verdict uses, keep it: it occupies the card)."""
        return tuple(self._phase_sums(a, tensors=True) for a in ("lower", "point", "upper"))

    @property
    def usable(self) -> float:
        return max(0.0, self.capacity - self.context - self.reserve)

    @property
    def verdict(self) -> Optional[str]:
        """``fits`` (upper end within usable capacity even with the largest context), ``oom``
        (even the lower end exceeds it with the smallest context), otherwise ``tight``; None
        without a target."""
        if not self.target:
            return None
        ctx_lo, ctx_hi = self.context_range
        if self.upper <= self.capacity - ctx_hi - self.reserve:
            return "fits"
        if self.lower > self.capacity - ctx_lo - self.reserve:
            return "oom"
        return "tight"

    def term(self, name: str) -> Optional[Term]:
        for t in self.terms:
            if t.name == name:
                return t
        return None

    def get(self, key: str, default: Any = None) -> Any:
        v = self.settings.get(key)
        return v.value if v is not None else default


# --------------------------------------------------------------------------- settings


def setting(settings: Dict[str, Value], key: str, default: Any = None) -> Any:
    v = settings.get(key)
    return v.value if v is not None else default


def is_default(settings: Dict[str, Value], key: str) -> bool:
    v = settings.get(key)
    return v is None or v.source.startswith("default")


_GUESSABLE = ("batch", "seq", "context", "optimizer", "attention", "decoder_seq")
# settings the model side reads beyond the comment keys: decoder_seq (encoder-decoder target
# length), grad_accum (micro-batches per step), set_to_none (zero_grad), optimizer_foreach


# bounds on user numbers: far past any real run, far inside float range, so no arithmetic on
# them can overflow; a value past its bound is estimated at the bound, with a note
_BOUNDS = {
    "batch": 1 << 24,
    "seq": 1 << 24,
    "decoder_seq": 1 << 24,
    "image": 1 << 16,
    "world": 1 << 16,
    "context": 1 << 26,
    "lora": 1 << 16,
    "grad_accum": 1 << 20,
}


def _number(settings: Dict[str, Value], key: str, default: int, notes: List[str]) -> int:
    raw = setting(settings, key, default)
    try:
        value = int(raw or 0)
    except (TypeError, ValueError, OverflowError):
        notes.append(f"{key}={str(raw)[:20]} is not a number; estimated with {default}")
        return default
    bound = _BOUNDS[key]
    if value > bound:
        notes.append(f"{key} past the estimator's bound {bound}; estimated at the bound")
        return bound
    return max(0, value)


def _flag(settings: Dict[str, Value], key: str, default: bool) -> bool:
    raw = setting(settings, key, default)
    if isinstance(raw, str):
        return raw.strip().lower() in ("on", "true", "yes", "1")
    return bool(raw)


def _lora_impl(settings: Dict[str, Value]) -> str:
    """The LoRA implementation: read, else the one of the runtime (litgpt's LoRALinear under a
    litgpt config or script), else PEFT."""
    runtime = str(setting(settings, "runtime", "") or "")
    return str(setting(settings, "lora_impl", LORA_IMPL_OF_RUNTIME.get(runtime, "peft")) or "peft")


def _fraction(settings: Dict[str, Value], key: str) -> float:
    """A probability setting (``lora_dropout``) in [0, 1); anything else is 0."""
    try:
        value = float(setting(settings, key, 0.0) or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return value if 0.0 <= value < 1.0 else 0.0


def _model(settings: Dict[str, Value]) -> Tuple[db.Model, bool]:
    ref = setting(settings, "model")
    if ref:
        return _with_head(db.spec(ref), setting(settings, "head")), True
    return db.generic_decoder(int(setting(settings, "params", 1) or 1)), False


def _with_head(model: db.Model, head: Any) -> db.Model:
    """The model with its LM head tied or untied as the implementation builds it (``head``): litgpt
    builds its own ``lm_head`` and copies a tied checkpoint's embedding into it
    (``litgpt/scripts/convert_hf_checkpoint.py``), so a tied Hugging Face model trains there with
    two vocab-sized matrices.  Only families whose formula reads ``tied`` change."""
    reads_tied = "tied" in model.config or model.family.style == "decoder_gated"
    if head not in ("tied", "untied") or not reads_tied:
        return model
    tied = head == "tied"
    if bool(model.config.get("tied")) == tied:
        return model
    return db.Model(
        key=model.key,
        family=model.family,
        config=dict(model.config, tied=tied),
        aliases=model.aliases,
        max_positions=model.max_positions,
        source=model.source,
    )


def _bucket(settings: Dict[str, Value], model: db.Model) -> float:
    """DeepSpeed's ``reduce_bucket_size``: a number, ``auto`` (what the HF integration sets:
    hidden x hidden), or DeepSpeed's default 5e8."""
    raw = setting(settings, "reduce_bucket_size", 5e8)
    if isinstance(raw, str) and raw.strip().lower() == "auto":
        return float((model.dims.hidden or 1024) ** 2)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return 5e8
    return value if 0 < value < 1e12 else 5e8


def setup(settings: Dict[str, Value]) -> Setup:
    """The estimator's view of resolved settings (see :func:`api.resolve`)."""
    model, known = _model(settings)
    notes: List[str] = []
    mode = setting(settings, "mode", "train")
    train = mode == "train"
    seq = max(1, _number(settings, "seq", 512, notes))
    world = max(1, _number(settings, "world", 1, notes))
    s = Setup(
        model=model,
        exact=known,
        mode=mode,
        precision=setting(settings, "precision", "fp32"),
        batch=max(1, _number(settings, "batch", 1, notes)),
        seq=seq,
        dec_seq=_number(settings, "decoder_seq", 0, notes) or max(1, min(seq, 128)),
        image=max(1, _number(settings, "image", model.native_image or 224, notes)),
        world=world,
        sharding=setting(settings, "sharding", "ddp" if world > 1 else "none"),
        offload=setting(settings, "offload", "none"),
        checkpointing=setting(settings, "checkpointing", "off") == "on" and train,
        attention=setting(settings, "attention", "sdpa"),
        lora=_number(settings, "lora", 0, notes),
        lora_targets=tuple(setting(settings, "lora_targets") or ()) or None,
        optimizer=setting(settings, "optimizer", "adamw") if train else "none",
        context_tokens=_number(settings, "context", 0, notes),
        foreach=setting(settings, "optimizer_foreach", True) not in (False, "off", "false"),
        grads_persist=_number(settings, "grad_accum", 1, notes) > 1
        or setting(settings, "set_to_none", True) in (False, "off", "false"),
        lora_dropout=_fraction(settings, "lora_dropout"),
        lora_impl=_lora_impl(settings),
        autocast_adapter_dtype=_flag(settings, "autocast_adapter_dtype", True),
        # litgpt pins bitsandbytes 0.42.0 ("LitGPT only supports bitsandbytes v0.42.0"), whose
        # MatMul4Bit.forward keeps its input (ctx.tensors = (A, B))
        bnb_saves_input=_flag(settings, "bnb_saves_input", setting(settings, "runtime") == "litgpt"),
        runtime=str(setting(settings, "runtime", "") or ""),
        double_quant=_flag(settings, "double_quant", True),
        kbit_fp32=_flag(settings, "kbit_fp32", False),
        loss=str(setting(settings, "loss", "hf") or "hf"),
        optimizer_in_bwd=_flag(settings, "optimizer_in_bwd", False) and train,
        grad_accum=max(1, _number(settings, "grad_accum", 1, notes)),
        no_sync=_flag(settings, "no_sync", True),
        fsdp_units=str(setting(settings, "fsdp_units", "separate") or "separate"),
        reduce_bucket_size=_bucket(settings, model),
        guessed=frozenset(k for k in _GUESSABLE if is_default(settings, k)),
        notes=notes,
    )
    if s.quantised and train and not s.lora:
        s.lora = 8
        s.notes.append("quantised weights train only through adapters: assumed LoRA r=8 (PEFT default)")
    return s


# --------------------------------------------------------------------------- phases


def _prompt(s: Setup) -> int:
    """Generation: the prompt's tokens (what the prefill runs over)."""
    return max(1, min(s.seq, s.context_tokens) if s.context_tokens else s.seq)


def _activations(s: Setup) -> Tuple[Acts, Optional[float]]:
    shape = s.shape()
    if s.mode == "generate":  # prefill: the prompt through one block at a time
        shape = type(shape)(**dict(shape.__dict__, seq=_prompt(s), checkpointing=False))
    acts = ACTIVATION_MODELS[s.model.kind](shape)
    workspace = None if s.train else inference_workspace(s.model.kind, shape)
    return acts, workspace


def _early_gradients(s: Setup) -> Optional[Term]:
    """Gradients alive during backward: all of them when they persist between steps or
    micro-batches (gradient accumulation, ``zero_grad(set_to_none=False)``), else the LM head's,
    the first one backward writes (an untied head, full tuning)."""
    if s.train and s.grads_persist:
        return T.gradients(s)
    head = s.model.breakdown.head
    if not (s.train and head and not s.lora) or T.fsdp_offloaded(s):
        return None  # under FSDP's CPU offload the head's gradient is the root unit's (unit gradients)
    g = (2.0 if s.pc == "half" else 4.0) * head / (s.world if s.sharded_grads else 1)
    return T.exact("head gradient", g, "written first in backward", dynamic=True)


def phases(s: Setup, figures: Optional[Dict[str, Any]] = None) -> Dict[str, List[Term]]:
    """The terms alive at each moment of a step that can be its peak."""
    acts, workspace = _activations(s)
    static = [
        T.weights(s),
        T.quant_state(s),
        T.gathered_params(s),
        T.optimizer_state(s),
        T.master_copy(s),
        T.sharding_buffers(s),
        T.runtime_buffers(s, figures if figures is not None else gpu_figures(None)),
    ]
    activations = T.activations(s, acts, workspace)
    if s.mode == "generate" and "lm-head" in s.model.traits:
        # prefill: the prompt's cache fills while one block works on the whole prompt;
        # decode: the cache grows to the full context, one token's working set at a time
        prefill = static + [activations, T.logits(s), T.kv_cache(s, _prompt(s)), T.dequant_buffer(s)]
        decode = static + [T.logits(s), T.kv_cache(s), T.dequant_buffer(s)]
        return {PREFILL: [t for t in prefill if t is not None], DECODE: [t for t in decode if t is not None]}
    if not s.train:
        forward = static + [activations, T.logits(s), T.kv_cache(s), T.dequant_buffer(s)]
        return {FORWARD: [t for t in forward if t is not None]}
    backward = static + [
        T.autocast_copies(s),
        activations,
        T.logits(s),
        _early_gradients(s),
        T.backward_block(s, acts),
        T.dequant_buffer(s),
        T.litgpt_quantised_embedding(s),
        T.unsharded_root(s),
        T.offloaded_unit_gradients(s),
        T.frozen_gradients(s) if s.grad_accum > 1 else None,  # kept from the earlier micro-batches
    ]
    step = static + [T.gradients(s), T.frozen_gradients(s), T.step_temporaries(s), T.fp32_grad_partition(s),
                     T.litgpt_quantised_embedding(s)]
    return {BACKWARD: [t for t in backward if t is not None], STEP: [t for t in step if t is not None]}


def gpu_figures(target: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """Context (MiB) and fragmentation triples for a target: the GPU's own where measured,
    else its vendor's, else the default."""
    cal = db.calibration()
    figures = dict(cal["default"])
    if target:
        figures.update(cal["by_vendor"].get(target.get("vendor", "nvidia"), {}))
        figures.update(cal["by_gpu"].get(target.get("gpu") or "", {}))
    return figures


def context_mib(figures: Dict[str, Any], world: int) -> Tuple[float, float, float]:
    """The per-process memory outside the allocator (MiB): the CUDA/HIP context, plus the
    collective library's buffers (NCCL channels per peer) when the run has more than one rank."""
    lo, pt, hi = figures["context_mib"]
    if world > 1:
        c_lo, c_pt, c_hi = figures.get("communicator_mib", (0, 0, 0))
        lo, pt, hi = lo + c_lo, pt + c_pt, hi + c_hi
    return lo, pt, hi


def _with_fragmentation(terms: List[Term], figures: Dict[str, Any]) -> List[Term]:
    dyn = [t for t in terms if t.dynamic]
    total = Term("dynamic", sum(t.lower for t in dyn), sum(t.point for t in dyn), sum(t.upper for t in dyn))
    return terms + [T.fragmentation(total, figures)]


def _peak_terms(by_phase: Dict[str, List[Term]], peak: str) -> List[Term]:
    """The peak phase's terms, then the others' at zero with where they peak instead."""
    shown = list(by_phase[peak])
    names = {t.name for t in shown}
    for phase, items in by_phase.items():
        for t in items:
            if t.name not in names and t.point > 0:
                names.add(t.name)
                shown.append(
                    Term(t.name, 0.0, 0.0, 0.0, f"not at the peak: {t.point / GIB:.1f} GiB during {phase}")
                )
    return shown


def estimate(settings: Dict[str, Value], target: Optional[Dict[str, Any]] = None) -> Estimate:
    """Project the per-device peak for resolved ``settings`` (see :func:`api.resolve`)."""
    s = setup(settings)
    figures = gpu_figures(target)
    by_phase = {name: _with_fragmentation(items, figures) for name, items in phases(s, figures).items()}
    peak = max(by_phase, key=lambda p: sum(t.point for t in by_phase[p]))
    est = Estimate(
        terms=_peak_terms(by_phase, peak),
        settings=settings,
        target=target,
        phases=by_phase,
        peak_phase=peak,
        notes=list(s.notes),
        params_total=s.model.breakdown.total,
        params_trainable=s.trainable,
    )
    if s.model.source.startswith("architecture inferred"):
        est.notes.append(f"model: {s.model.source}; pass its config.json folder to count it exactly")
    if len(by_phase) > 1:
        est.notes.append(f"peak during the {peak}")
    if s.train and "lm-head" in s.model.traits:
        est.notes.append(f"loss {s.loss}: {LOSS_KEEPS.get(s.loss, s.loss)}")
    if s.train and s.grads_persist:
        est.notes.append("gradients persist through forward and backward (accumulation or set_to_none=False)")
    if target:
        lo, pt, hi = context_mib(figures, s.world)
        est.capacity = float(target["memory_bytes"])
        est.context = float(pt) * MIB
        est.context_range = (float(lo) * MIB, float(hi) * MIB)
        est.reserve = RESERVE * est.capacity
    return est


def optimizer_bytes(optimizer: str, state_bytes: int, hidden: int) -> float:
    """Optimizer state bytes per trainable parameter (kept here for the runtime guard)."""
    return T.optimizer_bytes(optimizer, state_bytes, hidden)


def activation_bytes(
    model: db.ModelRef,
    batch: int,
    seq: int,
    image: int = 224,
    precision: str = "fp32",
    attention: str = "sdpa",
    checkpointing: bool = False,
    dec_seq: Optional[int] = None,
) -> Acts:
    """The activation term alone for a fully trainable model (what calibration compares with
    saved-tensor measurements)."""
    given = dict(
        model=model,
        batch=batch,
        seq=seq,
        image=image,
        precision=precision,
        attention=attention,
        checkpointing="on" if checkpointing else "off",
        decoder_seq=dec_seq,
        mode="train",
    )
    s = setup({k: Value(v, "calibration") for k, v in given.items() if v is not None})
    return ACTIVATION_MODELS[s.model.kind](s.shape())
