"""One function per memory term.  Each takes the resolved :class:`Setup` and returns a
:class:`Term` (bytes as ``lower, point, upper``) or None when the term does not apply.

Which phase of a step a term is alive in is in :data:`PHASES_OF`; the estimator sums each phase
and takes the maximum (see ``estimate.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Dict, FrozenSet, Optional, Tuple

from ..knowledge import db
from ..knowledge.adapters import DEFAULT_TARGET_ROLES, adapter_bytes, adapter_why
from .activations import Acts, Adapters, Shape, coefficients, precision_class

GIB = 1024**3

FORWARD, BACKWARD, STEP = "forward", "backward", "optimizer step"
_FSDP = ("fsdp", "fsdp2")
PREFILL, DECODE = "prefill", "decode"  # the two moments of generation


@dataclass
class Term:
    name: str
    lower: float
    point: float
    upper: float
    note: str = ""
    dynamic: bool = False  # allocated and freed every step: what the allocator fragments
    allocator: bool = False  # reserved by the caching allocator, not allocated to a tensor
    managed: bool = False  # CUDA managed memory outside torch's allocator (paged optimizer states)

    def scaled(self, lo: float, hi: float) -> "Term":
        return replace(self, lower=self.lower * lo, upper=self.upper * hi)

    def times(self, k: float) -> "Term":
        return replace(self, lower=self.lower * k, point=self.point * k, upper=self.upper * k)


def exact(name: str, value: float, note: str = "", spread: Tuple[float, float] = (1.0, 1.0), dynamic=False):
    return Term(name, value * spread[0], value, value * spread[1], note, dynamic)


@dataclass
class Setup:
    """Resolved inputs of one estimate, with what was guessed."""

    model: db.Model
    exact: bool
    mode: str
    precision: str
    batch: int
    seq: int
    dec_seq: int
    image: int
    world: int
    sharding: str
    offload: str
    checkpointing: bool
    attention: str
    lora: int
    lora_targets: Optional[Tuple[str, ...]]
    optimizer: str
    context_tokens: int
    foreach: bool = True  # torch's default multi-tensor optimizer step (fused / per-tensor: False)
    grads_persist: bool = False  # gradient accumulation, or zero_grad(set_to_none=False) (torch 1.x)
    lora_dropout: float = 0.0  # LoraConfig(lora_dropout=): a mask and a dropped copy per adapted input
    lora_impl: str = "peft"  # peft (fp32 adapters over half weights), torchtune, litgpt (model dtype)
    autocast_adapter_dtype: bool = True  # PEFT's upcast of half adapters to fp32 (get_peft_model's default)
    bnb_saves_input: bool = False  # bitsandbytes < 0.43.2: a 4-bit linear keeps its input (ctx.tensors)
    loss: str = "hf"  # the loss layout: hf (fp32 upcast) or a key of LOSS_LAYOUTS, liger-fused
    optimizer_in_bwd: bool = False  # torchtune: each parameter steps (and frees its grad) in backward
    grad_accum: int = 1  # micro-batches per optimizer step
    no_sync: bool = True  # accumulation without gradient sync (DDP/FSDP no_sync(), Fabric's default)
    reduce_bucket_size: float = 5e8  # DeepSpeed zero_optimization.reduce_bucket_size (HF "auto": h*h)
    fsdp_units: str = "separate"  # FSDP1 + LoRA: "separate" (PEFT's fsdp_auto_wrap_policy wraps the
    # adapters in their own units) or "block" (litgpt's Block policy: frozen and trainable share one)
    double_quant: bool = True  # bitsandbytes 4-bit with compress_statistics (absmax quantised)
    runtime: str = ""  # the training library when it decides memory (litgpt: see litgpt_quantised_embedding)
    kbit_fp32: bool = False  # PEFT prepare_model_for_kbit_training: bitsandbytes' unquantised params in fp32
    guessed: FrozenSet[str] = frozenset()  # settings that fell back to defaults
    notes: list = field(default_factory=list)

    @property
    def train(self) -> bool:
        return self.mode == "train"

    @property
    def pc(self) -> str:
        return precision_class(self.precision)

    @property
    def fsdp_half_compute(self) -> bool:
        """FSDP's ``MixedPrecision(param_dtype=bf16/fp16)`` (what Accelerate and the HF Trainer
        set for ``mixed_precision``/``bf16=True``) keeps fp32 shards but all-gathers each unit in
        half precision and runs it there: activations are half, autocast finds nothing to cast."""
        return self.fsdp and self.world > 1 and self.pc == "mixed"

    @property
    def fsdp(self) -> bool:
        """PyTorch FSDP: ``fsdp`` (FSDP1, flat parameters per wrapped unit) or ``fsdp2``
        (``fully_shard``, one DTensor per parameter)."""
        return self.sharding in _FSDP

    @property
    def compute_precision(self) -> str:
        """The precision activations and logits are computed in."""
        if self.fsdp_half_compute:
            return self.precision.split("-")[0]
        return self.precision

    @property
    def quantised(self) -> bool:
        return self.precision in ("int8", "nf4")

    @property
    def sharded_weights(self) -> bool:
        return self.sharding in ("zero3",) + _FSDP and self.world > 1

    @property
    def deepspeed(self) -> bool:
        return self.sharding in ("zero1", "zero2", "zero3")

    @property
    def sharded_states(self) -> bool:
        return self.sharding in ("zero1", "zero2", "zero3") + _FSDP and self.world > 1

    @property
    def sharded_grads(self) -> bool:
        return self.sharding in ("zero2", "zero3") + _FSDP and self.world > 1

    def chosen_lora(self):
        """The block linears LoRA adapts: the named ones, all of them, or the implementation's
        defaults."""
        bd = self.model.breakdown
        targets = self.lora_targets
        if targets and targets != ("all-linear",):
            names = {t.lower() for t in targets}
            return [
                t
                for t in bd.lora_targets
                if t.name.lower() in names or t.name.split(".")[-1].lower() in names
            ]
        if not targets:
            return self._default_lora()
        return list(bd.lora_targets)

    def _default_lora(self):
        """PEFT's default targets of the family; other implementations' own defaults (by role,
        restricted to the family's defaults: litgpt's q and v)."""
        bd = self.model.breakdown
        defaults = [t for t in bd.lora_targets if t.name in set(bd.default_lora)]
        roles = DEFAULT_TARGET_ROLES.get(self.lora_impl)
        return [t for t in defaults if t.role in roles] if roles else defaults

    @property
    def lora_params(self) -> int:
        if not self.lora:
            return 0
        d = self.model.dims
        layers = (d.layers + (d.dec_layers if "two-stacks" in self.model.traits else 0)) or 1
        return int(layers * sum(self.lora * (t.fan_in + t.fan_out) for t in self.chosen_lora()))

    @property
    def adapter_bytes(self) -> int:
        """Bytes per LoRA parameter, gradient and AdamW state element (knowledge/adapters.py)."""
        return adapter_bytes(self.lora_impl, self.pc == "half", self.quantised, self.autocast_adapter_dtype)

    @property
    def trainable(self) -> int:
        if not self.train:
            return 0
        return self.lora_params if self.lora else self.model.breakdown.total

    def adapters(self) -> Adapters:
        """The adapted and frozen block linears of a LoRA run, and how the library runs them."""
        if not (self.lora and self.train):
            return Adapters()
        chosen = self.chosen_lora()
        names = {t.name for t in chosen}
        frozen = [t for t in self.model.breakdown.lora_targets if t.name not in names]
        # bitsandbytes' 8-bit matmul keeps its input on ctx whenever it needs a grad; the 4-bit
        # one did too before 0.43.2 (bitsandbytes/autograd/_functions.py, MatMul8bitLt.forward /
        # MatMul4Bit.forward: ``ctx.tensors = (CAt, subA, A)`` / ``(A, B)``, now ``(None, B)``)
        keeps = self.precision == "int8" or (self.precision == "nf4" and self.bnb_saves_input)
        return Adapters(
            adapted=tuple((t.fan_in, t.role) for t in chosen),
            frozen=tuple((t.fan_in, t.role) for t in frozen),
            rank=self.lora,
            dropout=float(self.lora_dropout or 0.0),
            impl=self.lora_impl,
            quant_keeps_input=keeps,
        )

    def shape(self) -> Shape:
        frozen_roles: FrozenSet[str] = frozenset()
        if self.lora:
            targeted = {t.role for t in self.chosen_lora()}
            frozen_roles = frozenset({"qkv", "o", "up", "down"} - targeted)
        cnn = coefficients()["cnn"].get(self.model.key, {})
        measured_cnn = str(cnn.get("source", "")).startswith("measured")
        per_image = cnn.get(self.pc, 0.0) if cnn and (measured_cnn or "source" in cnn) else 0.0
        return Shape(
            dims=self.model.dims,
            style=self.model.family.style,
            capabilities=self.model.capabilities,
            config=self.model.config,
            batch=self.batch,
            seq=self.seq,
            image=self.image,
            precision=self.compute_precision,
            attention=self.attention,
            checkpointing=self.checkpointing and self.train,
            dec_seq=self.dec_seq,
            frozen_roles=frozen_roles,
            frozen=bool(self.lora) and self.train,
            per_image=per_image if measured_cnn else 0.0,
            params=self.model.breakdown.total,
            adapters=self.adapters() if self.model.kind in ("decoder", "encoder", "vit", "dit") else None,
            family=self.model.family.name,
        )


# --------------------------------------------------------------------------- static terms


def weights(s: Setup) -> Term:
    """Parameters as stored: fp32 (also under autocast), half, or 4/8-bit linears with the
    embeddings, norms and head in bf16 (fp32 after ``prepare_model_for_kbit_training``: the
    upper end); LoRA adapters in fp32; sharded by ZeRO-3/FSDP; 0 when offloaded."""
    bd = s.model.breakdown
    upper_extra = 0.0
    if s.quantised:
        per = 1.0 if s.precision == "int8" else 0.5 + nf4_scaler_bytes(s)
        if quant_state(s) is not None:
            per = 0.5  # the absmax is not sharded: its own term
        quantised = quantised_params(s)
        rest = bd.total - quantised
        value = per * quantised + (4.0 if kbit_fp32(s) else 2.0) * rest
        upper_extra = 2.0 * rest if (s.train and not kbit_fp32(s)) else 0.0
        note = f"{s.precision} linear layers, bf16 rest"
    else:
        value = (2.0 if s.pc == "half" else 4.0) * bd.total
        note = "fp32" if s.pc != "half" else s.precision
    if s.lora:
        value += s.adapter_bytes * s.lora_params
        note += f" + LoRA r={s.lora} ({s.lora_params / 1e6:.1f}M, {_adapter_note(s)})"
    if s.offload in ("param", "both") and s.sharding in ("zero3",) + _FSDP:
        return Term("weights", 0.0, 0.0, 0.0, "offloaded to the host")
    if s.sharded_weights:
        value, upper_extra = value / s.world, upper_extra / s.world
        note += f" /{s.world}"
    spread = (1.0, 1.0) if s.exact else (0.9, 1.1)
    return Term("weights", value * spread[0], value, (value + upper_extra) * spread[1], note)


def _adapter_note(s: Setup) -> str:
    """The adapters' dtype and, where the base weights are not fp32, why."""
    dtype = "fp32" if s.adapter_bytes == 4 else ("bf16" if s.quantised else s.precision)
    if s.pc != "half" and not s.quantised:
        return dtype
    return f"{dtype}: {adapter_why(s.lora_impl, s.quantised, s.autocast_adapter_dtype)}"


def nf4_absmax_bytes(double_quant: bool) -> float:
    """bitsandbytes' 4-bit absmax per weight: one fp32 per block of 64 (``quantize_4bit``,
    blocksize 64), or with ``compress_statistics`` (double quantisation) one uint8 per block plus an
    fp32 per 256 blocks (``quantize_blockwise`` of the absmax, blocksize 256)."""
    return 1.0 / 64 + 4.0 / (64 * 256) if double_quant else 4.0 / 64


# torchao's NF4Tensor (what torchtune's ``LoRALinear(quantize_base=True)`` holds,
# ``torchao/dtypes/nf4tensor.py``, ``to_nf4(tensor, block_size=64, scaler_block_size=256)``) always
# double-quantises: an int8 scaler per block of 64 (``quantized_scalers``) and one
# ``quantization_factor`` per 256 scalers in the weight's own dtype (bf16), plus one scalar mean.
TORCHAO_NF4_SCALER_BYTES = 1.0 / 64 + 2.0 / (64 * 256)
# Transient bytes per element of one 4-bit weight while a matmul dequantises it.  bitsandbytes:
# the half weight ``dequantize_4bit`` returns.  torchao's ``NF4Tensor.get_original_weight`` (what
# ``LinearNF4`` calls in forward and again in backward): two int64 code tensors of n/2 each
# (``(quantized_data >> 4).to(torch.long)``: 8 B), their bf16 look-ups (2 B), the two scaled halves
# (2 B) and the stacked weight (2 B) are alive together at the ``torch.stack``.
NF4_DEQUANT_BYTES = {"torchtune": 14.0}
NF4_DEQUANT_BYTES_DEFAULT = 2.0


def kbit_fp32(s: Setup) -> bool:
    """PEFT's ``prepare_model_for_kbit_training`` (``peft/utils/other.py``) casts every fp16/bf16
    parameter that is not a ``Params4bit`` to fp32 -- embeddings, norms, the LM head -- unless the
    model is GPTQ/AQLM/EETQ/HQQ/torchao quantised: a bitsandbytes run under transformers."""
    return s.kbit_fp32 and s.quantised and s.runtime not in ("torchtune", "litgpt")


def quantised_params(s: Setup) -> int:
    """Parameters stored in 4/8 bits.  torchtune quantises only the base weight of each
    ``LoRALinear(quantize_base=True)`` (``_create_weight_and_bias``: ``to_nf4(linear.weight)``);
    a block linear without an adapter stays an ``nn.Linear`` in the model's dtype.  bitsandbytes
    (transformers, litgpt) replaces every block linear, and under litgpt the head too."""
    bd = s.model.breakdown
    if s.runtime == "torchtune" and s.lora:
        d = s.model.dims
        return int((d.layers or 1) * sum(t.fan_in * t.fan_out for t in s.chosen_lora()))
    return bd.linear + (bd.head if _quantises_head(s) else 0)


def nf4_scaler_bytes(s: Setup) -> float:
    """Bytes per 4-bit weight beyond the packed half byte, for the runtime's NF4 layout."""
    if s.runtime == "torchtune":
        return TORCHAO_NF4_SCALER_BYTES
    return nf4_absmax_bytes(s.double_quant)


def quant_state(s: Setup) -> Optional[Term]:
    """Sharded 4-bit weights (FSDP / ZeRO-3 QLoRA, ``bnb_4bit_quant_storage``): the packed weight
    is a parameter and is sharded, but its absmax is not -- bitsandbytes keeps the layer's
    ``QuantState`` on the module (``Linear4bit.quant_state``) and puts it back on the weight
    every forward because "the quant state got lost when the parameter got converted. This
    happens for example for fsdp" (``bitsandbytes/nn/modules.py``,
    ``fix_4bit_weight_quant_state_from_module``).  So every rank holds every layer's absmax, also
    when the parameters are offloaded (it is not a parameter FSDP moves)."""
    offloaded = s.offload in ("param", "both") and s.sharding in ("zero3",) + _FSDP
    if not (s.precision == "nf4" and (s.sharded_weights or offloaded)):
        return None
    if s.runtime == "torchtune":
        # torchao's NF4Tensor shards its scalers with its data under FSDP2
        # (``fsdp_pre_all_gather``: quantized_scalers, quantization_factor, quantized_data)
        return None
    b = nf4_scaler_bytes(s) * quantised_params(s)
    return exact("quant state", b, "4-bit absmax of every layer on every rank (not a sharded parameter)")


def gathered_params(s: Setup) -> Optional[Term]:
    """ZeRO-3/FSDP: the current and the prefetched block gathered in full."""
    offloaded = s.offload in ("param", "both") and s.sharding in ("zero3",) + _FSDP
    if not (s.sharded_weights or offloaded):
        return None
    per_param = 2.0 if (s.pc == "half" or s.fsdp_half_compute) else 4.0
    block = per_param * s.model.breakdown.total / max(1, s.model.dims.layers or 1)
    return Term("gathered params", block, 2 * block, 3 * block, "ZeRO-3/FSDP working set")


def _gradient_bytes(s: Setup) -> float:
    """Gradients are in their parameters' dtype: the adapters' under LoRA."""
    if s.lora:
        return float(s.adapter_bytes)
    return 2.0 if (s.pc == "half" and not s.quantised) else 4.0


def _largest_parameter(s: Setup) -> int:
    bd = s.model.breakdown
    if s.lora:
        return max((s.lora * max(t.fan_in, t.fan_out) for t in s.chosen_lora()), default=0)
    linear = max((t.fan_in * t.fan_out for t in bd.lora_targets), default=0)
    return max(bd.embed, bd.head, linear)


def fsdp_offloaded(s: Setup) -> bool:
    """FSDP with ``CPUOffload(offload_params=True)`` (FSDP2: ``CPUOffloadPolicy``): the shards of
    parameters and gradients, and so the optimizer's states and step, live on the host."""
    return s.fsdp and s.offload in ("param", "both")


def gradients(s: Setup) -> Optional[Term]:
    """Trainable gradients.  With ``optimizer_in_bwd`` (torchtune's
    ``register_optim_in_bwd_hooks``: a post-accumulate-grad hook steps each parameter and frees
    its gradient) only about one parameter's gradient exists at a time.  Under FSDP's CPU
    offload the gradient shards are copied to the host (:func:`offloaded_unit_gradients`)."""
    if not s.train:
        return None
    if fsdp_offloaded(s):
        return Term("gradients", 0.0, 0.0, 0.0, "shards on the host (FSDP CPU offload)")
    per = _gradient_bytes(s)
    spread = (1.0, 1.0) if s.exact else (0.9, 1.1)
    if s.optimizer_in_bwd:
        g = 2.0 * per * _largest_parameter(s) / (s.world if s.sharded_grads else 1)
        note = "optimizer in backward: two parameters' gradients at a time"
        return exact("gradients", g, note, spread, True)
    g = per * s.trainable / (s.world if s.sharded_grads else 1)
    return exact("gradients", g, f"{per:.0f} B x {s.trainable / 1e6:,.1f}M trainable", spread, dynamic=True)


def frozen_gradients(s: Setup) -> Optional[Term]:
    """FSDP1 with LoRA: frozen and trainable weights of a block share one flat parameter
    (``use_orig_params=True``), which requires grad, so autograd computes the gradient of every
    block weight (PyTorch's FSDP docs: "the gradient memory usage will be higher than expected
    (namely, equivalent to not freezing those parameters)").  It is reduce-scattered to a shard
    after each backward, unless gradients accumulate under ``no_sync()`` (DDP/FSDP ``no_sync``,
    Lightning Fabric's ``no_backward_sync``, Accelerate's ``accumulate``): then every rank keeps
    the whole unsharded gradient.  FSDP2 (``fully_shard``) keeps one tensor per parameter, so
    frozen weights get none, and neither do they where the adapters are their own units (PEFT's
    ``fsdp_auto_wrap_policy``, what Accelerate uses with PEFT: ``fsdp_units="separate"``)."""
    shared_units = s.fsdp_units in ("block", "litgpt")
    if not (s.train and s.lora and s.sharding == "fsdp" and s.world > 1 and shared_units):
        return None
    bd = s.model.breakdown
    blocks = max(0, bd.total - bd.embed - bd.head)
    per = 2.0 if (s.pc == "half" or s.fsdp_half_compute) else 4.0
    unsharded = s.grad_accum > 1 and s.no_sync
    g = per * blocks / (1 if unsharded else s.world)
    note = "FSDP1 flat parameters: frozen block weights get gradients" + (
        " (unsharded under no_sync accumulation)" if unsharded else ""
    )
    if s.fsdp_units == "litgpt":
        # a litgpt config alone does not say the release: FSDP2 (0.5.5 on) keeps none (lower end)
        return Term("frozen gradients", 0.0, g, g, note + "; litgpt <= 0.5.4 (none from 0.5.5, FSDP2)", True)
    return exact("frozen gradients", g, note, dynamic=True)


def offloaded_unit_gradients(s: Setup) -> Optional[Term]:
    """FSDP with CPU offload still makes each unit's gradient on the GPU.  torch's FSDP1
    (``torch/distributed/fsdp/_runtime_utils.py``, ``_post_backward_hook``): autograd writes the
    unit's whole unsharded gradient (``flat_param.grad``, in the compute dtype under
    ``MixedPrecision``), ``_reduce_grad`` reduce-scatters it into a new shard on the GPU
    (``torch.empty_like(chunks[0])``), and only then ``_offload_grad`` copies the shard to the
    pinned host buffer (``_cpu_grad``).  So one block unit's full gradient and its shard are
    alive at a time (the next unit's gathered parameters, prefetched by ``BACKWARD_PRE``, are in
    ``gathered params``), and the root unit (embeddings, final norm, head) reduces last: its
    whole gradient is alive through backward.  FSDP2 (``fully_shard`` with
    ``CPUOffloadPolicy``) does the same per parameter group."""
    if not (s.train and fsdp_offloaded(s)):
        return None
    bd = s.model.breakdown
    layers = max(1, s.model.dims.layers or 1)
    per = 2.0 if (s.pc == "half" or s.fsdp_half_compute or s.quantised) else 4.0
    if s.lora:
        block, root = s.lora_params / layers, 0.0
    else:
        block, root = max(0, bd.total - bd.embed - bd.head) / layers, float(bd.embed + bd.head)
    g = per * (block * (1.0 + 1.0 / s.world) + root)
    note = "one unit's unsharded gradient and its shard before the copy to the host" + (
        "; the root unit's (embeddings, head) through backward" if root else ""
    )
    return Term("unit gradients", g * 0.5, g, g * 1.5, note, dynamic=True)


def unsharded_root(s: Setup) -> Optional[Term]:
    """FSDP wraps each block as a unit; the embeddings, the final norm and the head stay in the
    root unit, which is gathered at the first forward and not resharded before backward
    (``fully_shard``'s ``reshard_after_forward``: "the root FSDP state has its value specially set
    to False"; FSDP1 keeps the root's flat parameter unsharded between forward and backward): the
    whole embedding and head on every rank through backward, in the compute dtype."""
    if not (s.train and s.fsdp and s.world > 1):
        return None
    bd = s.model.breakdown
    root = bd.embed + bd.head
    if not root:
        return None
    per = 2.0 if (s.pc == "half" or s.fsdp_half_compute) else 4.0
    resident = 0.0 if fsdp_offloaded(s) else 1 / s.world  # offloaded: the own shard is on the host
    return exact("unsharded root", per * root * (1 - resident), "embeddings and head gathered in full")


def optimizer_bytes(optimizer: str, state_bytes: int, hidden: int) -> float:
    """Optimizer state bytes per trainable parameter."""
    return _STATE_BYTES.get(optimizer, lambda b, h: 0.0)(state_bytes, hidden)


_STATE_BYTES = {
    "adamw": lambda b, h: 2.0 * b,
    "adamw-fused": lambda b, h: 2.0 * b,  # torch's fused=True kernel: same states, no foreach lists
    "adam": lambda b, h: 2.0 * b,
    "paged-adamw": lambda b, h: 2.0 * b,
    "adamw-8bit": lambda b, h: 2.0 + 8.0 / 2048,  # two uint8 states + an fp32 absmax per 2048 values each
    "paged-adamw-8bit": lambda b, h: 2.0 + 8.0 / 2048,
    "lion": lambda b, h: float(b),
    "lion-8bit": lambda b, h: 1.0,
    "sgd-momentum": lambda b, h: float(b),
    "adafactor": lambda b, h: 4.0 * 2.0 / max(h, 64),  # factored second moment: a row and a column
}

# transient state-sized lists of torch's foreach implementations during step() (fraction of the
# states' dtype x trainable): AdamW's sqrt(exp_avg_sq) list; Adam with weight decay also copies
# the gradients.  Fused / bitsandbytes / DeepSpeed optimizers work per tensor (lower end 0).
_STEP_TEMPORARIES = {
    "adamw": (0.0, 1.0, 1.0),
    "adam": (0.0, 1.0, 2.0),
    "paged-adamw": (0.0, 1.0, 1.0),
    "sgd-momentum": (0.0, 0.0, 1.0),
    "sgd": (0.0, 0.0, 1.0),
}


def _state_bytes(s: Setup) -> int:
    """AdamW's states are ``zeros_like`` the parameter: the adapters' dtype under LoRA."""
    if s.lora and not s.deepspeed:
        return s.adapter_bytes
    return 2 if (s.pc == "half" and not s.lora and not s.deepspeed) else 4


def optimizer_state(s: Setup) -> Optional[Term]:
    if not s.train:
        return None
    o = optimizer_bytes(s.optimizer, _state_bytes(s), s.model.dims.hidden or 1024) * s.trainable
    if s.sharded_states:
        o /= s.world
    if s.offload in ("optimizer", "both") or fsdp_offloaded(s):
        o = 0.0  # FSDP's parameter offload steps on the host shards: the states are made there
    lower = 0.25 if "optimizer" in s.guessed else 1.0  # a default optimizer might be an 8-bit one
    if s.optimizer.startswith("paged"):
        lower = 0.0  # paged states can be evicted to host memory under pressure
    spread = 1.0 if s.exact else 1.1
    # bitsandbytes' paged optimizers allocate their states with cudaMallocManaged
    # (bitsandbytes/functional.py, ``get_paged`` / GlobalPageManager): on the device while resident,
    # but outside torch's caching allocator, so max_memory_allocated/reserved never see them
    paged = s.optimizer.startswith("paged")
    note = s.optimizer + (" (managed memory, outside torch's allocator)" if paged else "")
    return Term("optimizer state", o * lower / spread, o, o * spread, note, managed=paged)


def master_copy(s: Setup) -> Optional[Term]:
    """DeepSpeed keeps fp32 master weights beside bf16/fp16 parameters."""
    if not (s.train and s.pc == "half" and not s.lora and not s.quantised and s.deepspeed):
        return None
    if s.offload in ("optimizer", "both"):
        return None
    m = 4.0 * s.trainable / (s.world if s.sharded_states else 1)
    return exact("fp32 master copy", m, "mixed-precision optimizer")


def fp32_grad_partition(s: Setup) -> Optional[Term]:
    """DeepSpeed's mixed-precision optimizer steps on fp32 gradients: before ``step()`` it
    converts the partition's half gradients to an fp32 copy (ZeRO-1/2: the whole partition;
    ZeRO-3: one ``sub_group_size`` group at a time, 1e9 elements by default)."""
    if not (s.train and s.deepspeed and s.pc == "half" and not s.quantised):
        return None
    if s.offload in ("optimizer", "both"):
        return None
    elements = s.trainable / (s.world if s.sharded_states else 1)
    if s.sharding == "zero3":
        elements = min(elements, 1e9)
    return exact(
        "fp32 gradients", 4.0 * elements, "DeepSpeed's fp32 copy of the partition's gradients", dynamic=True
    )


def step_temporaries(s: Setup) -> Optional[Term]:
    """Foreach optimizer temporaries during ``step()`` (absent under DeepSpeed's fused Adam)."""
    share = _STEP_TEMPORARIES.get(s.optimizer)
    if not s.train or share is None or not s.foreach or s.deepspeed or s.offload in ("optimizer", "both"):
        return None
    if fsdp_offloaded(s):
        return None
    if s.optimizer_in_bwd:  # one parameter steps at a time
        return None
    base = _state_bytes(s) * s.trainable / (s.world if s.sharded_states else 1)
    lo, pt, hi = (base * k for k in share)
    if hi <= 0:
        return None
    return Term("optimizer temporaries", lo, pt, hi, f"foreach {s.optimizer} step lists", dynamic=True)


def autocast_copies(s: Setup) -> Optional[Term]:
    """Half-precision copies autocast makes of fp32 weights it feeds to matmuls and convolutions
    (block linears, the LM head even when tied, convolutions), kept for backward; trainable ones
    also sit in autocast's cache.  Under checkpointing frozen copies live one block at a time."""
    if s.pc != "mixed" or not s.train or s.fsdp_half_compute:
        return None
    cast = 2.0 * s.model.breakdown.cast / (s.world if s.sharded_weights else 1)
    if s.checkpointing and s.lora:
        cast /= max(1, s.model.dims.layers or 1)
    return Term(
        "autocast copies", cast * 0.8, cast, cast, "half-precision copies of matmul/conv weights", True
    )


def runtime_buffers(s: Setup, gpu_figures: Dict[str, Any]) -> Term:
    """What a running model allocates beside its tensors of record: cuBLAS/cuDNN workspaces
    (allocated through the caching allocator), per-model buffers (rotary tables, causal masks),
    generation bookkeeping.  Not modelled term by term: a share of the stored weights, calibrated
    on the fit set (``data/gpus.json`` ``runtime_buffers``: lower, point, upper)."""
    lo, pt, hi = gpu_figures.get("runtime_buffers", (0.0, 0.0, 0.0))
    w = weights(s).point
    return Term("runtime buffers", w * lo, w * pt, w * hi, "workspaces, model buffers (calibrated share)")


def sharding_buffers(s: Setup) -> Optional[Term]:
    """DDP's bucket copy of the gradients; ZeRO's reduce/all-gather buckets.  ZeRO-3 allocates its
    contiguous-gradient bucket (``reduce_bucket_size`` elements per gradient dtype) when the
    optimizer is built, on one GPU too (deepspeed/runtime/zero/stage3.py,
    ``DeepSpeedZeroOptimizer_Stage3.__init__``: ``bucket.buffer = torch.empty(self.reduce_bucket_size,
    ...)`` under ``contiguous_gradients``, the default)."""
    if not s.train:
        return None
    if s.world <= 1:
        if s.sharding != "zero3" or not s.trainable:
            return None
        buf = _gradient_bytes(s) * min(float(s.trainable), s.reduce_bucket_size)
        return exact("zero buffers", buf, f"contiguous-gradient bucket ({s.reduce_bucket_size:.0e} elements)")
    g = _gradient_bytes(s) * s.trainable
    if s.sharding == "ddp":
        return Term("ddp buckets", 0.0, g, g, "gradient bucket copy (gradient_as_bucket_view=False)")
    if s.sharding in ("zero2", "zero3"):
        buf = min(g, 2 * 5e8 * 2)
        return Term("zero buffers", 0.0, buf, buf, "reduce/allgather buckets (5e8 elements)")
    return None


def litgpt_quantised_embedding(s: Setup) -> Optional[Term]:
    """litgpt's finetune scripts under ``BitsandbytesPrecision`` (``litgpt/finetune/lora.py``,
    ``main``) replace the embedding with bitsandbytes' ``StableEmbedding`` after the optimizer
    is built: ``old_embedding = model.transformer.wte`` stays referenced by ``main`` for the
    whole of ``fit()`` (a second vocab x hidden matrix in the compute dtype), and the new
    embedding's weight is a fresh ``nn.Parameter`` (``requires_grad=True``) that the optimizer
    never sees, so its gradient is written in every backward and never zeroed."""
    if not (s.train and s.quantised and s.runtime == "litgpt"):
        return None
    emb = 2.0 * s.model.breakdown.embed
    return exact("replaced embedding", 2 * emb, "litgpt StableEmbedding: the old one kept + a gradient")


def _quantises_head(s: Setup) -> bool:
    """Lightning's ``BitsandbytesPrecision`` (what litgpt's ``--quantize`` uses) replaces every
    ``nn.Linear`` without ``ignore_modules``, the LM head too (``_convert_layers`` / the
    ``torch.nn.Linear`` class replacement in ``init_context``); transformers' bitsandbytes
    integration keeps ``lm_head`` in the compute dtype (``llm_int8_skip_modules``)."""
    return s.quantised and s.runtime == "litgpt"


def dequant_buffer(s: Setup) -> Optional[Term]:
    """bitsandbytes dequantises one 4/8-bit weight at a time for the matmul (``MatMul4Bit``:
    ``F.dequantize_4bit(B, quant_state).to(A.dtype)``).  The dequantised tensor has the dtype the
    weight was quantised from: Lightning's ``_Linear4bit._quantize_weight`` quantises
    ``weight.to(dtype=torch.half)``, so under litgpt an fp16 copy and its bf16 cast exist
    together, and the largest weight is the quantised head."""
    if not s.quantised:
        return None
    bd = s.model.breakdown
    largest = max((t.fan_in * t.fan_out for t in bd.lora_targets), default=0)
    copies = 1.0
    if _quantises_head(s):
        largest, copies = max(largest, bd.head or bd.embed), 2.0
    per = NF4_DEQUANT_BYTES.get(s.runtime, NF4_DEQUANT_BYTES_DEFAULT) if s.precision == "nf4" else 2.0
    b = per * copies * largest
    note = "one linear dequantised to half" + (f" ({per:g} B per weight in flight)" if per != 2.0 else "")
    return Term("dequantised weight", b * 0.5, b, 2 * b, note, True)


# --------------------------------------------------------------------------- token terms


def _token_spread(s: Setup, measured: bool, kind: str = "acts") -> Tuple[float, float]:
    """How much a token-proportional term can differ from its point: the model's own error and
    what was guessed (defaulted batch or sequence, an unknown model)."""
    lo, hi = {"acts": (0.9, 1.1) if measured else (0.7, 1.4), "logits": (0.8, 1.2), "kv": (0.95, 1.05)}[kind]
    if not s.exact:
        lo, hi = lo * 0.6, hi * 1.6
    if "batch" in s.guessed and s.train:
        lo, hi = lo * 0.5, hi * 2.0
    if "seq" in s.guessed and ("context" in s.guessed or s.train) and "text-tokens" in s.model.traits:
        lo, hi = lo * 0.5, hi * 1.5
    if "decoder_seq" in s.guessed and "two-stacks" in s.model.traits and s.train:
        lo, hi = lo * 0.8, hi * 1.5
    return lo, hi


def activations(s: Setup, acts: Acts, workspace: Optional[float]) -> Term:
    """Training: everything saved for backward (checkpointing: block inputs plus one block
    recomputed); inference and prefill: one block's working set."""
    if s.train:
        point = acts.stored
        note = acts.note + (" (checkpointed: block inputs)" if s.checkpointing else "")
        note += f"; {acts.source}" if acts.source else ""
    else:
        point = acts.one_block if workspace is None else workspace
        note = "one block at a time (no grad): " + acts.note
    lo, hi = _token_spread(s, acts.measured)
    return Term("activations", point * lo, point, point * hi, note, dynamic=True)


def backward_block(s: Setup, acts: Acts) -> Optional[Term]:
    """During backward one block's gradients of activations (and, under checkpointing, its
    recomputed activations) exist at a time."""
    if not s.train:
        return None
    k = 2.0 if s.checkpointing else 1.0
    b = k * acts.one_block
    lo, hi = _token_spread(s, acts.measured)
    return Term("backward working set", b * lo * 0.5, b, b * hi, "one block's backward", dynamic=True)


# Bytes per logit a training loss keeps, by layout: (saved for backward, held alive beside it,
# the loss's own backward working set per logit).  Saved bytes measured on the CPU
# (calibration/runtime.json, ``kind: loss``); the rest from the code:
# * torchtune ``CEWithChunkedOutputLoss`` (8 chunks, each ``.float()`` before its cross-entropy):
#   fp32 log-softmax of every chunk saved; the recipe deletes the half logits before backward;
#   backward works one chunk at a time (fp32 + half gradient of a chunk);
# * litgpt ``chunked_cross_entropy`` with ``lm_head_chunk_size=128``: cross-entropy on the half
#   chunks (fp32 under autocast, which runs log_softmax in fp32), the list of chunks held by the
#   training step until backward.
# * ``plain`` (``F.cross_entropy`` on the logits as they come): the logits held by the output and
#   the log-softmax it saves, both in the compute dtype (fp32 under autocast's log_softmax);
# * torchtune ``LinearCrossEntropyLoss``: the chunks are projected inside the loss and upcast like
#   ``CEWithChunkedOutputLoss``'s (torchtune/modules/loss/ce_chunked_output_loss.py and
#   linear_ce_loss.py: ``logits_chunk.float()`` then ``F.cross_entropy``); no half logits held.
LOSS_LAYOUTS = {
    "torchtune-chunked": {"half": (4.0, 0.0, 0.75), "mixed": (4.0, 0.0, 0.75), "fp32": (4.0, 0.0, 1.0)},
    "torchtune-linear": {"half": (4.0, 0.0, 0.75), "mixed": (4.0, 0.0, 0.75), "fp32": (4.0, 0.0, 1.0)},
    "litgpt-chunked": {"half": (2.0, 2.0, 0.1), "mixed": (4.0, 2.0, 0.1), "fp32": (4.0, 4.0, 0.1)},
    "plain": {"half": (2.0, 2.0, 0.0), "mixed": (4.0, 2.0, 0.0), "fp32": (4.0, 4.0, 0.0)},
}
# Liger's fused linear cross-entropy (liger_kernel/ops/fused_linear_cross_entropy.py,
# ``fused_linear_cross_entropy_forward``): ``chunk_size = next_power_of_2(cdiv(BT, cdiv(V, H)))``
# rows at a time, so one chunk's logits hold about tokens x hidden values (in the compute dtype,
# upcast to fp32 inside the kernel); ``grad_input = torch.zeros_like(_input)`` (tokens x hidden)
# is filled in the forward and saved for backward.  Bytes per token per hidden unit: the saved
# input gradient, the input it reads, one chunk's logits and its fp32 working copy.
LIGER_BYTES_PER_HIDDEN = {"half": 2.0 + 2.0 + 2.0 + 4.0, "mixed": 2.0 + 2.0 + 2.0 + 4.0, "fp32": 4.0 * 4}


def loss_bytes_per_logit(layout: str, pc: str) -> float:
    saved, held, working = LOSS_LAYOUTS[layout][pc]
    return saved + held + working


def _liger_logits(s: Setup, toks: int, pc: str) -> Term:
    """Liger's fused linear cross-entropy: no logits; about tokens x hidden values per piece."""
    b = toks * (s.model.dims.hidden or 1024) * LIGER_BYTES_PER_HIDDEN[pc]
    lo, hi = _token_spread(s, False, "logits")
    lo, hi = lo * 0.6, hi * 1.25  # not measured here: the chunk rounds to a power of two
    note = f"{toks:,} tokens: fused head + loss (Liger), no logits"
    return Term("logits buffer", b * lo, b, b * hi, note, dynamic=True)


def logits(s: Setup) -> Optional[Term]:
    """Training: half logits held by the output, the fp32 upcast and the saved log-softmax;
    inference: the logits; generation: last-token logits only."""
    V = s.model.dims.vocab if "lm-head" in s.model.traits else 0
    if not V:
        return None
    co = coefficients()["logits"]
    if s.mode == "generate":
        return exact("logits buffer", s.batch * V * 8.0, "last-token logits (fp32)", dynamic=True)
    toks = s.batch * (s.dec_seq if "two-stacks" in s.model.traits else s.seq)
    # an fp32 head (kbit_fp32) makes fp32 logits: the loss's upcast has nothing left to copy
    pc = "fp32" if kbit_fp32(s) else precision_class(s.compute_precision)
    per = co["train"][pc] if s.train else co["inference"][pc]
    if s.train and s.loss == "liger-fused":
        return _liger_logits(s, toks, pc)
    if s.train and s.loss in LOSS_LAYOUTS:
        per = loss_bytes_per_logit(s.loss, pc)
    lb = toks * V * per
    lo, hi = _token_spread(s, True, "logits")
    how = f" ({s.loss} loss)" if s.train else ""
    return Term("logits buffer", lb * lo, lb, lb * hi, f"{toks:,} tokens x {V:,} vocab{how}", dynamic=True)


def kv_cache(s: Setup, tokens: Optional[int] = None) -> Optional[Term]:
    """Generation: K and V per layer per token (KV heads, or MLA's cached size) for ``tokens``
    (default: the whole context); encoder-decoders add the cross-attention cache of the encoder
    output."""
    if s.mode != "generate" or "lm-head" not in s.model.traits:
        return None
    d = s.model.dims
    nbytes = 4 if s.pc == "fp32" else 2
    context = tokens or s.context_tokens or s.seq
    two_stacks = "two-stacks" in s.model.traits
    layers = d.dec_layers if two_stacks else d.layers
    kv = 2.0 * layers * d.kv_cache_dim * context * s.batch * nbytes
    if two_stacks:
        kv += 2.0 * layers * d.hidden * s.seq * s.batch * nbytes
    lo, hi = _token_spread(s, True, "kv")
    note = f"2 x {layers} layers x {d.kv_cache_dim} per K/V x {context} tokens x {s.batch}"
    return Term("KV cache", kv * lo, kv, kv * hi, note, dynamic=True)


def fragmentation(dynamic: Term, gpu_figures: Dict[str, Any]) -> Term:
    """What the caching allocator reserves beyond what is allocated: a share of the terms
    allocated and freed every step, and at the upper end the blocks it still holds from loading
    and initialisation (``reset_peak_memory_stats`` does not release them; per-GPU figures,
    ``data/gpus.json`` calibration)."""
    lo, pt, hi = gpu_figures["fragmentation"]
    cached = gpu_figures.get("cached_mib", 0.0) * 1024**2
    return Term(
        "fragmentation",
        dynamic.lower * lo,
        dynamic.point * pt,
        dynamic.upper * hi + cached,
        "caching-allocator slack (upper end: plus blocks kept from loading)",
        allocator=True,
    )
