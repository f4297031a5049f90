"""What autograd keeps between forward and backward, per kind of model.

Where a family has a **traced table** (``data/activation_tables.json``, made by
``calibration/trace_activations.py`` from the library's own module code under saved-tensor hooks,
per precision class and attention kernel), a block's bytes are that table's: per layer per token
``a_h*h + a_ff*ff + a_q*q + a_kv*kv + a_hs*heads*s + a_heads*heads + a_s*s + a_e*experts + a_1``,
plus per token ``f_h*h + f_v*vocab + f_s*s + f_1``, per sequence position ``f_hd_pos*head_dim`` and
per input pixel ``f_pix``.  Families without one are **hand-priced**:

Coefficients (``data/coefficients.json``) are bytes per token per block fitted to saved-tensor
measurements of fully trainable stacks (``calibration/measure_activations.py``).  Two structural
corrections are applied on top, both from how autograd decides what to save:

* **frozen weights** (LoRA): a linear saves its input only for its weight's gradient, and a
  Python RMSNorm (``weight * x``) saves its normalised input only for the weight's gradient; so
  under LoRA the inputs of linears whose role (q/k/v, o, up/gate, down) has no adapter, the norm
  copies and the LM head's input are not kept;
* **KV heads**: flash and memory-efficient kernels save K and V at the model's KV heads, eager /
  math attention at the query heads (``repeat_kv``); the fit held KV = heads / 2.

Eager and math attention keep the score matrix (the ``s`` coefficient); flash / memory-efficient
kernels do not.  The kernel comes from :data:`KERNEL_KEEPS_SCORES`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Dict, FrozenSet, Optional, Tuple

from ..knowledge.registry import DOWN, OUT, QKV, UP, Dims  # noqa: F401
from ..knowledge.adapters import ADAPTER_DTYPE

# the package data lives in vram_estimator/data, one folder above this room
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# attention setting -> does the kernel keep the (batch, heads, s, s) probabilities for backward?
KERNEL_KEEPS_SCORES = {"eager": True, "math": True, "sdpa": False, "flash": False}
# ... and does it save K/V at the query heads (repeat_kv materialised)?
KERNEL_REPEATS_KV = {"eager": True, "math": True, "sdpa": False, "flash": False}

HALF = ("bf16", "fp16", "int8", "nf4")
MIXED = ("bf16-mixed", "fp16-mixed")


def precision_class(precision: str) -> str:
    """Which coefficient set applies: fp32, mixed (autocast over fp32 weights), half."""
    if precision in MIXED:
        return "mixed"
    if precision in HALF:
        return "half"
    return "fp32"


@lru_cache(maxsize=None)
def coefficients() -> Dict[str, Any]:
    path = os.path.join(_PACKAGE_DIR, "data", "coefficients.json")
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


@lru_cache(maxsize=None)
def traced_tables() -> Dict[str, Any]:
    """The traced activation tables (empty when the data file is absent)."""
    path = os.path.join(_PACKAGE_DIR, "data", "activation_tables.json")
    if not os.path.exists(path):
        return {"_provenance": {}, "families": {}}
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


# Families without a traced table, and why; their activations are priced by the fitted style
# coefficients or per-model measurements (docs/vram.md, Activations, lists them too).
HAND_PRICED = {
    "bart": "encoder-decoder: coefficients fitted on BART (calibration/measure_activations.py)",
    "t5": "encoder-decoder: BART's coefficients",
    "whisper": "encoder-decoder: BART's coefficients (the convolutional front end unpriced)",
    "clip": "two towers: ViT and BERT-style encoder coefficients",
    "resnet": "CNN: bytes per image measured for ResNet-18/50 (calibration/measure_cnn.py), else per "
    "parameter",
    "convnext": "CNN: bytes per image measured for ConvNeXt-T, else per parameter",
    "efficientnet": "CNN: bytes per parameter",
    "unet2d": "diffusers UNet: bytes per latent pixel from published SD-1.5 peaks",
    "flux": "diffusers DiT: BERT-style encoder coefficients over every stream",
    "sd3": "diffusers DiT: BERT-style encoder coefficients over every stream",
}

# an attention setting -> the traced kernel standing for it: SDPA's math kernel keeps the
# probabilities as eager attention does
_TRACED_KERNEL = {"eager": "eager", "math": "eager", "sdpa": "sdpa", "flash": "flash"}


def family_default_attention(family: str) -> Optional[str]:
    """What the library runs the family on when nothing is set (transformers: SDPA where the
    class supports it, else eager), or None for a family without a traced table."""
    entry = traced_tables()["families"].get(family)
    return entry.get("default_attention") if entry else None


def traced_table(family: str, pc: str, attention: str) -> Optional[Tuple[Dict[str, Any], str]]:
    """(table, where it comes from) for a family, precision class and attention setting; a
    kernel the family (or precision) does not run falls back to its SDPA table, then eager."""
    entry = traced_tables()["families"].get(family)
    if not entry or pc not in entry.get("tables", {}):
        return None
    tables = entry["tables"][pc]
    wanted = _TRACED_KERNEL.get(attention, attention)
    kernel = next((k for k in (wanted, "sdpa", "eager") if k in tables), None)
    if kernel is None:
        return None
    how = "derived from the SDPA path with flash_attn's save set" if kernel == "flash" else kernel
    if kernel != wanted:
        how += f" ({wanted} not run by this family at this precision)"
    return tables[kernel], f"traced from {entry['implementation']}, {how}"


def traced_layer_bytes(table: Dict[str, Any], shape: "Shape", s: int) -> float:
    """Saved bytes per token for one fully trainable block, from a traced table."""
    d = shape.dims
    features = dict(h=d.hidden, ff=d.ff, q=d.q_dim, kv=d.kv_dim, hs=d.heads * s, heads=d.heads, s=s,
                    e=shape.config.get("experts", 1) or 1, rep=d.q_dim if d.kv_heads < d.heads else 0)
    features["e_ff"] = features["e"] * shape.config.get("moe_ff", shape.config.get("ff", 0))
    features["1"] = 1
    return sum(c * features.get(k, 0.0) for k, c in table["layer"].items())


def traced_outside_bytes(table: Dict[str, Any], shape: "Shape", s: int, sequences: int) -> float:
    """Bytes outside the blocks (embeddings, final norm, rotary tables, masks, pixel input)
    for ``sequences`` sequences of ``s`` tokens."""
    d, co = shape.dims, table["outside"]
    per_token = co.get("h", 0.0) * d.hidden + co.get("v", 0.0) * d.vocab + co.get("s", 0.0) * s
    per_token += co.get("1", 0.0)
    per_position = co.get("hd_pos", 0.0) * d.head_dim + co.get("h_pos", 0.0) * d.hidden
    total = (per_token * sequences + per_position) * s
    return total + co.get("pix", 0.0) * 3 * shape.image**2 * sequences


@dataclass(frozen=True)
class Acts:
    """Stored bytes for backward, one block's working set, a note, and whether measured."""

    stored: float
    one_block: float
    note: str
    measured: bool
    source: str = ""  # where the bytes come from: a traced table, or hand-priced


@dataclass(frozen=True)
class Shape:
    """The inputs of the activation term."""

    dims: Dims
    style: Optional[str]
    capabilities: FrozenSet[str]
    config: Dict[str, Any]
    batch: int
    seq: int
    image: int
    precision: str
    attention: str
    checkpointing: bool
    dec_seq: int = 0
    frozen_roles: FrozenSet[str] = frozenset()  # roles of block linears without a gradient
    frozen: bool = False  # base weights (norms, head) frozen: a LoRA run
    per_image: float = 0.0  # CNNs: measured bytes per image at 224 px (0: per-parameter default)
    params: int = 0
    adapters: "Adapters" = None  # LoRA runs: what is adapted and how (None: the role table alone)
    family: str = ""  # the registry family: picks its traced table where there is one

    def __post_init__(self):
        if self.adapters is None:
            object.__setattr__(self, "adapters", Adapters())

    @property
    def pc(self) -> str:
        return precision_class(self.precision)

    @property
    def linear_input_bytes(self) -> int:
        """What a linear saves as its input: the autocast copy (2 B) or the fp32 activation."""
        return 4 if self.pc == "fp32" else 2

    @property
    def norm_bytes(self) -> int:
        return 2 if self.pc == "half" else 4


_ROLE_WIDTH = {QKV: "hidden", OUT: "q_dim", UP: "hidden", DOWN: "ff"}

# LoRA implementations keep their adapters in the dtype of knowledge/adapters.ADAPTER_DTYPE. PEFT
# (``peft.tuners.lora.layer.Linear.forward``) keeps fp32 adapters over bf16/fp16 base weights and
# casts each adapted linear's input to them (``_cast_input_dtype``): every adapted linear keeps its
# own fp32 copy of its input.  torchtune and litgpt keep adapters in the model's dtype and apply
# them to the input as it is.
# bytes per element of the dropout mask on CUDA: ``native_dropout`` keeps a bool mask
# (aten/src/ATen/native/cuda/Dropout.cu); on the CPU dropout is ``input * noise`` and keeps the
# noise in the input's dtype (what calibration/runtime.json measured)
DROPOUT_MASK_BYTES = 1


@dataclass(frozen=True)
class Adapters:
    """What a LoRA run adapts and how its implementation runs the adapters."""

    adapted: tuple = ()  # (fan_in, role) of each adapted block linear
    frozen: tuple = ()  # (fan_in, role) of each block linear without an adapter
    rank: int = 0
    dropout: float = 0.0
    impl: str = "peft"
    quant_keeps_input: bool = False  # frozen quantised linears keep their input for backward
    mask_bytes: int = DROPOUT_MASK_BYTES


def _adapter_cast(shape: "Shape") -> bool:
    """Does the adapter branch copy its input to another dtype (PEFT's fp32 adapters over half
    weights)?  Under autocast the input is already fp32 like the adapters."""
    over_half, _ = ADAPTER_DTYPE.get(shape.adapters.impl, ADAPTER_DTYPE["peft"])
    return shape.pc == "half" and over_half == "fp32"


def _adapter_input_bytes(shape: "Shape") -> int:
    """The dtype of what the adapter branch receives: fp32 under PEFT's cast, fp32 under autocast
    (fp32 residual stream), else the model's."""
    return 4 if (_adapter_cast(shape) or shape.pc != "half") else 2


def _role_inputs_saving(shape: "Shape") -> float:
    """Linear inputs not kept because their weights are frozen.  Under autocast each linear keeps
    its own half copy of its input (autocast casts activations per call), so each frozen linear
    saves its copy; otherwise the linears of a role share one input, kept while any linear of the
    role keeps it: an adapter that reads it as it is, or a quantised base layer that keeps it."""
    ad, d = shape.adapters, shape.dims
    if shape.pc == "mixed":
        return 0.0 if ad.quant_keeps_input else sum(2.0 * fan_in for fan_in, _ in ad.frozen)
    saving = 0.0
    cast = _adapter_cast(shape)
    for role, width in _ROLE_WIDTH.items():
        adapted = any(r == role for _, r in ad.adapted)
        frozen = any(r == role for _, r in ad.frozen)
        reads_as_is = adapted and not cast and ad.dropout <= 0  # lora_A keeps the shared input
        kept = reads_as_is or (frozen and ad.quant_keeps_input)
        if (adapted or frozen) and not kept:
            saving += getattr(d, width) * shape.linear_input_bytes
    return saving


def adapter_bytes(shape: "Shape") -> float:
    """Bytes per token per block the adapter branches keep beyond the base model's inputs: PEFT's
    fp32 input copy of each adapted linear, the adapter's rank-wide intermediate (the input of
    ``lora_B``), and with ``lora_dropout > 0`` the dropped copy where it is a new tensor.  The
    dropout mask is :func:`dropout_mask_bytes` (it exists only where the input needs a grad)."""
    ad = shape.adapters
    if not ad.adapted:
        return 0.0
    fan_ins = sum(fan_in for fan_in, _ in ad.adapted)
    in_bytes = _adapter_input_bytes(shape)
    extra = (4.0 if _adapter_cast(shape) else 0.0) * fan_ins
    extra += ad.rank * (4 if in_bytes == 4 and shape.pc != "mixed" else 2) * len(ad.adapted)
    if ad.dropout > 0 and not _adapter_cast(shape) and shape.pc != "mixed":
        extra += in_bytes * fan_ins  # the dropped copy, which lora_A keeps instead of a shared input
    return extra


_ROLE_ORDER = (QKV, OUT, UP, DOWN)  # the order a block runs its linears in


def dropout_mask_bytes(shape: "Shape", first_block: bool = False) -> float:
    """Per token per block: the dropout mask of each adapted linear's input (``lora_dropout``).
    Dropout keeps a mask only where its input needs a gradient: in the first block of a LoRA run
    only behind the first adapted role (nothing before it trains)."""
    ad = shape.adapters
    if ad.dropout <= 0 or not ad.adapted:
        return 0.0
    mask = ad.mask_bytes if ad.mask_bytes else _adapter_input_bytes(shape)
    first = min(_ROLE_ORDER.index(r) for _, r in ad.adapted) if first_block else -1
    return mask * sum(fan_in for fan_in, r in ad.adapted if _ROLE_ORDER.index(r) > first)


def frozen_saving(shape: Shape) -> float:
    """Bytes per token per block not kept because weights are frozen, less what the adapters
    keep (see the module doc and :func:`adapter_bytes`)."""
    if not shape.frozen:
        return 0.0
    d = shape.dims
    if shape.adapters.adapted or shape.adapters.frozen:
        saving = _role_inputs_saving(shape) - adapter_bytes(shape)
    else:
        saving = sum(getattr(d, _ROLE_WIDTH[r]) for r in shape.frozen_roles) * shape.linear_input_bytes
    if "rmsnorm" in shape.capabilities:
        saving += shape.config.get("norms_per_layer", 2) * d.hidden * shape.norm_bytes
    return saving


def _gqa_correction(shape: Shape) -> float:
    """K and V at the KV heads under flash / memory-efficient kernels, vs the fit's KV = H/2."""
    if shape.style != "decoder_gated" or KERNEL_REPEATS_KV.get(shape.attention, False):
        return 0.0
    ratio = coefficients()["transformer"]["decoder_gated"].get("kv_ratio_fit", 0.5)
    return 2.0 * shape.linear_input_bytes * (shape.dims.kv_dim - ratio * shape.dims.q_dim)


# bytes per hidden element one RMSNorm keeps with half weights: Llama's (``LlamaRMSNorm``: the
# fp32 input copy and the half normalised input of the weight multiply) and Gemma's
# (``Gemma2RMSNorm``: ``_norm(x.float()) * (1.0 + weight.float())`` keeps the fp32 normalised output
# instead).  The gated-decoder coefficients were fitted on Llama's two norms per block.
NORM_BYTES_HALF = {"llama": 6.0, "gemma": 8.0}


def _norm_correction(shape: Shape) -> float:
    """Per token per block: norms beyond the fitted two, and Gemma's heavier norm, with half
    weights (measured on Gemma 2 in calibration/runtime.json: the rest of its gap is open)."""
    norms = shape.config.get("norms_per_layer", 2)
    style = "gemma" if "gemma-norm" in shape.capabilities else "llama"
    if shape.style != "decoder_gated" or (norms == 2 and style == "llama") or shape.pc != "half":
        return 0.0
    heavier = NORM_BYTES_HALF[style] - NORM_BYTES_HALF["llama"]
    return ((norms - 2) * NORM_BYTES_HALF["llama"] + norms * heavier) * shape.dims.hidden


def layer_bytes(co: Dict[str, float], shape: Shape, s: int) -> float:
    """Saved bytes per token for one fully trainable block, corrected for kernel, KV heads and
    the family's norms."""
    d = shape.dims
    per = co["h"] * d.hidden + co["ff"] * d.ff + co.get("q", 0.0) * d.q_dim + _norm_correction(shape)
    if KERNEL_KEEPS_SCORES.get(shape.attention, False):
        per += co["s"] * d.heads * s + co.get("eq", 0.0) * d.q_dim
    else:
        per += co.get("sq", 0.0) * d.q_dim + _gqa_correction(shape)
    return per


def _block_and_final(shape: Shape, style: str, tokens: int, s: int, traced: bool) -> Tuple[float, float, str]:
    """(saved bytes per token of one fully trainable block, bytes outside the blocks, source):
    the family's traced table where there is one, else the style's fitted coefficients."""
    found = traced_table(shape.family, shape.pc, shape.attention) if traced else None
    if found:
        table, source = found
        outside = traced_outside_bytes(table, shape, s, max(1, tokens // max(1, s)))
        return traced_layer_bytes(table, shape, s), outside, source
    co = coefficients()["transformer"][style][shape.pc]
    final = (co.get("final", 0.0) * shape.dims.hidden + co.get("tok", 0.0)) * tokens
    return layer_bytes(co, shape, s), final, f"hand-priced ({style} coefficients fitted on stand-in models)"


def _stack(shape: Shape, style: str, layers: int, tokens: int, s: int, traced: bool = True) -> Acts:
    """Every block's saved bytes plus what lies outside the blocks (``traced=False``: the style's
    coefficients even where the family has a table, e.g. a DiT priced as an encoder)."""
    d = shape.dims
    block, outside, source = _block_and_final(shape, style, tokens, s, traced)
    per_layer = max(0.0, block - frozen_saving(shape))
    one = per_layer * tokens
    # the dropout masks of adapter inputs: only where the input needs a gradient, i.e. not in the
    # first block of a LoRA run (nothing before it trains) unless checkpointing makes its input
    # require grad (``enable_input_require_grads``)
    masks = dropout_mask_bytes(shape) * tokens
    first_masks = dropout_mask_bytes(shape, first_block=shape.frozen) * tokens
    if shape.checkpointing:
        co = coefficients()["transformer"][style][shape.pc]
        ss = co.get("ckpt_ss", 0.0) + (
            co.get("eager_ckpt_ss", 0.0) if KERNEL_KEEPS_SCORES.get(shape.attention) else 0.0
        )
        resid = 2 if shape.pc == "half" else 4
        stored = layers * (co.get("ckpt", resid) * d.hidden + ss * s) * tokens
        stored += (co.get("ckpt_final", co.get("final", 0.0)) * d.hidden + co.get("ckpt_tok", 0.0)) * tokens
        if shape.frozen and "rmsnorm" in shape.capabilities:  # the frozen final norm keeps no weight input
            stored -= shape.norm_bytes * d.hidden * tokens
        return Acts(stored, one + masks, "", True, source + "; checkpointed block inputs hand-priced")
    head_input = shape.linear_input_bytes * d.hidden * tokens if shape.frozen else 0.0
    stored = layers * one + max(0, layers - 1) * masks + first_masks
    stored += max(0.0, outside - head_input - _first_norm_saving(shape, source) * tokens)
    return Acts(stored, one + masks, "", True, source)


def _first_norm_saving(shape: Shape, source: str) -> float:
    """Per token: under LoRA the embeddings are frozen, so the first block's input needs no
    gradient and its first norm keeps nothing (a traced table counts its input, in fp32 for
    RMSNorm, which computes in fp32, and its statistics); measured on the CPU stacks of
    calibration/runtime.json (two-block models: 4-6 % of the stack)."""
    if not (shape.frozen and source.startswith("traced")):
        return 0.0
    wide = 4 if (shape.pc != "half" or "rmsnorm" in shape.capabilities) else 2
    return wide * shape.dims.hidden + 4


def _decoder(shape: Shape) -> Acts:
    tokens = shape.batch * shape.seq
    a = _stack(shape, shape.style or "decoder_gated", shape.dims.layers, tokens, shape.seq)
    note = f"{shape.dims.layers} blocks x {shape.batch}x{shape.seq} tokens"
    return Acts(a.stored, a.one_block, note, True, a.source)


def _encoder(shape: Shape) -> Acts:
    tokens = shape.batch * shape.seq
    a = _stack(shape, "encoder", shape.dims.layers, tokens, shape.seq)
    note = f"{shape.dims.layers} blocks x {shape.batch}x{shape.seq} tokens"
    return Acts(a.stored, a.one_block, note, True, a.source)


def _encdec(shape: Shape) -> Acts:
    """Fitted on BART: per-token terms of each stack (the encoder's cross-attention K/V folded
    into the encoder term), self- and cross-attention score terms under eager/math kernels."""
    co = coefficients()["encdec"][shape.pc]
    d = shape.dims
    S, D, b = shape.seq, shape.dec_seq, shape.batch
    Le, Ld, te, td = d.layers, d.dec_layers, b * S, b * D
    cut = frozen_saving(shape)
    enc_layer = co["enc_h"] * d.hidden + co["enc_ff"] * d.ff - cut
    dec_layer = co["dec_h"] * d.hidden + co["dec_ff"] * d.ff - 1.5 * cut  # + the cross-attention linears
    if KERNEL_KEEPS_SCORES.get(shape.attention, False):
        enc_layer += co.get("enc_s", 0.0) * d.heads * S
        dec_layer += co.get("dec_s", 0.0) * d.heads * D + co.get("x_s", 0.0) * d.heads * S
    enc_layer, dec_layer = max(0.0, enc_layer), max(0.0, dec_layer)
    one = max(enc_layer * te, dec_layer * td)
    if shape.checkpointing:
        stored = co["ckpt"] * d.hidden * (Le * te + Ld * td)
        stored += (co.get("ckpt_tok", 0.0) + co.get("ckpt_final", 0.0) * d.hidden) * (te + td)
        return Acts(stored, one, "encoder + decoder block inputs", True, _ENCDEC_SOURCE)
    stored = Le * te * enc_layer + Ld * td * dec_layer + (co["tok"] + co["final"] * d.hidden) * (te + td)
    return Acts(stored, one, f"{Le}+{Ld} blocks x {b}x{S}/{D} tokens", True, _ENCDEC_SOURCE)


_ENCDEC_SOURCE = "hand-priced (encoder-decoder coefficients fitted on BART)"


def _patches(shape: Shape) -> int:
    return (shape.image // shape.dims.patch) ** 2 + 1


def _vit(shape: Shape) -> Acts:
    n = _patches(shape)
    a = _stack(shape, "vit", shape.dims.layers, shape.batch * n, n)
    note = f"{shape.dims.layers} blocks x {shape.batch}x{n} patches"
    return Acts(a.stored, a.one_block, note, True, a.source)


def _clip(shape: Shape) -> Acts:
    """The vision tower as a ViT plus the 77-token text tower as an encoder."""
    vision = _vit(shape)
    t = shape.config["text"]
    text_dims = Dims(hidden=t["hidden"], heads=t["heads"], head_dim=t["hidden"] // t["heads"], ff=t["ff"])
    text_shape = Shape(
        text_dims,
        "encoder",
        shape.capabilities,
        t,
        shape.batch,
        t["positions"],
        0,
        shape.precision,
        shape.attention,
        shape.checkpointing,
    )
    co = coefficients()["transformer"]["encoder"][shape.pc]
    per = layer_bytes(co, text_shape, t["positions"]) * shape.batch * t["positions"]
    stored = vision.stored + per * (1 if shape.checkpointing else t["layers"])
    note = vision.note + f" + text {t['layers']} blocks x {shape.batch}x{t['positions']}"
    return Acts(stored, vision.one_block, note, True, "hand-priced (ViT and BERT-style encoder coefficients)")


def _cnn(shape: Shape) -> Acts:
    """Measured bytes per image at 224 px scaled by pixels; unmeasured CNNs use bytes per
    parameter (wider interval).  Checkpointing over stages keeps stage inputs."""
    table = coefficients()["cnn"]
    per_image = shape.per_image or table["_default_per_param"][shape.pc] * (shape.params or 25e6)
    stored = per_image * (shape.image / 224.0) ** 2 * shape.batch
    note = f"{shape.batch} images at {shape.image}px"
    source = "measured per image (calibration/measure_cnn.py)"
    if not shape.per_image:
        source = "hand-priced (bytes per parameter)"
    if shape.checkpointing:
        return Acts(stored * 0.35, stored * 0.25, note, bool(shape.per_image), source)
    return Acts(stored, stored * 0.25, note, bool(shape.per_image), source)


def _unet(shape: Shape) -> Acts:
    """Bytes per latent pixel estimated from published SD-1.5 fine-tuning peaks (unmeasured)."""
    latent = (shape.image // shape.config.get("latent_factor", 8)) ** 2
    stored = coefficients()["unet"][shape.pc] * latent * shape.batch
    note = f"{shape.batch} latents at {shape.image}px"
    source = "hand-priced (bytes per latent pixel from published SD-1.5 peaks)"
    if shape.checkpointing:
        return Acts(stored * 0.3, stored * 0.15, note, False, source)
    return Acts(stored, stored * 0.15, note, False, source)


def _dit(shape: Shape) -> Acts:
    """Image tokens of the latent ((image / 8 / patch)^2) plus the text tokens, through every
    stream of every block with the encoder coefficients (GELU MLP, LayerNorm); unmeasured."""
    tokens_per_sample = (shape.image // 8 // max(1, shape.dims.patch)) ** 2 + shape.dims.text_tokens
    tokens = shape.batch * tokens_per_sample
    a = _stack(shape, "encoder", shape.dims.layers, tokens, tokens_per_sample, traced=False)
    note = f"{shape.dims.layers} block streams x {shape.batch}x{tokens_per_sample} tokens"
    return Acts(a.stored, a.one_block, note, False, "hand-priced (BERT-style encoder coefficients)")


ACTIVATION_MODELS: Dict[str, Callable[[Shape], Acts]] = {
    "decoder": _decoder,
    "encoder": _encoder,
    "encdec": _encdec,
    "vit": _vit,
    "clip": _clip,
    "cnn": _cnn,
    "unet": _unet,
    "dit": _dit,
}

# kinds whose no-grad working set is one transformer block at a time
_BLOCK_KINDS = {"decoder": "seq", "encoder": "seq", "encdec": "seq", "vit": "patches", "clip": "patches"}


def inference_workspace(kind: str, shape: Shape) -> Optional[float]:
    """Transient bytes of one block under no_grad, the larger of its two halves (their
    tensors are never alive together): attention (block input, normed input, q, k, v and the
    attention output; under eager / math attention the fp32 score matrix and its half copy)
    and MLP (block input, normed input, the MLP intermediates: 3 ff-wide tensors for a gated
    MLP, 2 otherwise, and its output).  None for kinds without blocks."""
    tokens_from = _BLOCK_KINDS.get(kind)
    if tokens_from is None:
        return None
    seq = _patches(shape) if tokens_from == "patches" else shape.seq
    d = shape.dims
    ab = 4 if shape.pc == "fp32" else 2
    ff_tensors = 3 if "gated-mlp" in shape.capabilities else 2
    attention = ab * (2 * d.hidden + 2 * d.q_dim + 2 * d.kv_dim)
    if KERNEL_KEEPS_SCORES.get(shape.attention, False):
        attention += (4 + ab) * d.heads * seq
    mlp = ab * (3 * d.hidden + ff_tensors * d.ff)
    return max(attention, mlp) * shape.batch * seq
