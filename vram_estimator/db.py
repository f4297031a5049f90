"""Model and GPU databases, and the exact parameter-count formulas.

The databases are package data (``data/models.json``, ``data/gpus.json``); this module only
loads them and derives numbers from them.  Each architecture stores its *published
configuration* (the hyperparameters of its Hugging Face / torchvision config), its family, the
published parameter count, and aliases (Hugging Face ids, torchvision names).  Parameter counts
are always *computed* from the configuration by the family formula below; the stored
``params`` is the published number that a test compares against.

Counting conventions (those of ``sum(p.numel() for p in model.parameters())``): tied
embeddings count once; buffers (rotary caches, ``final_logits_bias``) do not count; norms
count their weight (RMSNorm) or weight+bias (LayerNorm, BatchNorm).

Besides the total, every formula returns the parts the cost model needs:

* ``embed``   - input embedding tables (not matmul weights: never quantised, not autocast),
* ``head``    - an untied output projection (LM head / classifier),
* ``linear``  - weights of the linear layers inside the blocks (what int8/nf4 quantise),
* ``active``  - parameters touched per token (differs from total only for MoE),
* ``lora_targets`` - per-block list of ``(name, in_features, out_features)`` linears.
"""

from __future__ import annotations

import json
import math
import os
import re
from functools import lru_cache
from typing import Any, Dict, List, Optional, Tuple

GIB = 1024**3


# --------------------------------------------------------------------------- loading


@lru_cache(maxsize=None)
def _load(name: str) -> Dict[str, Any]:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", name)
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def normalise_name(text: str) -> str:
    """Lower-case and drop separators so that ``Llama-3-8B``, ``llama_3_8b``, ``llama3 8b`` meet."""
    return re.sub(r"[^a-z0-9.]", "", text.lower()).replace(".", "")


# --------------------------------------------------------------------------- models


def models() -> Dict[str, Dict[str, Any]]:
    """All architectures, keyed by canonical name."""
    return _load("models.json")["models"]


@lru_cache(maxsize=None)
def _model_index() -> Dict[str, str]:
    index: Dict[str, str] = {}
    for key, entry in models().items():
        names = [key] + list(entry.get("aliases", []))
        for name in names:
            index[normalise_name(name)] = key
            # a Hugging Face id also resolves by its last path part
            if "/" in name:
                index.setdefault(normalise_name(name.rsplit("/", 1)[1]), key)
    return index


def find_model(name: str) -> Optional[str]:
    """Canonical model key for a name or Hugging Face id, or None."""
    if not name:
        return None
    index = _model_index()
    norm = normalise_name(name)
    if norm in index:
        return index[norm]
    if "/" in name:
        tail = normalise_name(name.rsplit("/", 1)[1])
        if tail in index:
            return index[tail]
        # fine-tunes keep their base's shape: "org/llama-2-7b-chat-hf-custom" -> strip suffixes
    for suffix in ("hf", "chathf", "instruct", "chat", "base", "it"):
        if norm.endswith(suffix) and norm[: -len(suffix)] in index:
            return index[norm[: -len(suffix)]]
    return None


def model_entry(key: str) -> Dict[str, Any]:
    return models()[key]


# --------------------------------------------------------------------------- formulas


def _llama(c: Dict[str, Any]) -> Dict[str, Any]:
    """Llama-style decoders: Llama 2/3, Mistral, Mixtral, Qwen2, Gemma, Gemma 2, Phi-3, TinyLlama.

    Per block: q/k/v/o projections (q,k,v biases for Qwen2), a gated MLP (gate, up, down), and
    ``norms_per_layer`` RMSNorm weights (2; Gemma 2 has 4).  MoE blocks hold ``experts`` MLPs and
    a router ``d x experts``; ``experts_active`` of them run per token.
    """
    d, L, V, ff = c["hidden"], c["layers"], c["vocab"], c["ff"]
    heads = c["heads"]
    kv = c.get("kv_heads", heads)
    hd = c.get("head_dim", d // heads)
    q_dim, kv_dim = heads * hd, kv * hd
    experts = c.get("experts", 1)
    k_active = c.get("experts_active", experts)
    attn = d * q_dim + 2 * d * kv_dim + q_dim * d
    if c.get("qkv_bias"):
        attn += q_dim + 2 * kv_dim
    mlp_one = 3 * d * ff
    router = d * experts if experts > 1 else 0
    norms = c.get("norms_per_layer", 2) * d
    block = attn + experts * mlp_one + router + norms
    embed = V * d
    head = 0 if c.get("tied", False) else V * d
    total = L * block + embed + head + d
    active = total - L * (experts - k_active) * mlp_one
    targets = [("q_proj", d, q_dim), ("k_proj", d, kv_dim), ("v_proj", d, kv_dim), ("o_proj", q_dim, d)] + [
        ("gate_proj", d, ff),
        ("up_proj", d, ff),
        ("down_proj", ff, d),
    ] * experts
    return dict(
        total=total,
        embed=embed,
        head=head,
        linear=L * (attn + experts * mlp_one),
        active=active,
        lora_targets=targets,
        default_lora=("q_proj", "v_proj"),
    )


def _gpt2(c: Dict[str, Any]) -> Dict[str, Any]:
    """GPT-2: learned positions, fused c_attn with bias, 4d MLP with biases, 2 LayerNorms per
    block, final LayerNorm, LM head tied to the token embedding."""
    d, L, V, P = c["hidden"], c["layers"], c["vocab"], c["positions"]
    ff = c.get("ff", 4 * d)
    attn = d * 3 * d + 3 * d + d * d + d
    mlp = d * ff + ff + ff * d + d
    block = attn + mlp + 4 * d
    embed = V * d + P * d
    total = L * block + embed + 2 * d
    return dict(
        total=total,
        embed=embed,
        head=0,
        linear=L * (4 * d * d + 2 * d * ff),
        active=total,
        lora_targets=[("c_attn", d, 3 * d), ("c_proj", d, d), ("c_fc", d, ff), ("mlp.c_proj", ff, d)],
        default_lora=("c_attn",),
    )


def _neox(c: Dict[str, Any]) -> Dict[str, Any]:
    """GPT-NeoX / Pythia: fused qkv with bias, 4d MLP with biases, 2 LayerNorms, untied head."""
    d, L, V = c["hidden"], c["layers"], c["vocab"]
    ff = c.get("ff", 4 * d)
    block = 3 * d * d + 3 * d + d * d + d + d * ff + ff + ff * d + d + 4 * d
    embed = V * d
    head = V * d
    total = L * block + embed + head + 2 * d
    return dict(
        total=total,
        embed=embed,
        head=head,
        linear=L * (4 * d * d + 2 * d * ff),
        active=total,
        lora_targets=[
            ("query_key_value", d, 3 * d),
            ("dense", d, d),
            ("dense_h_to_4h", d, ff),
            ("dense_4h_to_h", ff, d),
        ],
        default_lora=("query_key_value",),
    )


def _opt(c: Dict[str, Any]) -> Dict[str, Any]:
    """OPT: learned positions with an offset of 2, q/k/v/out with biases, fc1/fc2 with biases,
    2 LayerNorms per block, a final LayerNorm, head tied."""
    d, L, V, ff = c["hidden"], c["layers"], c["vocab"], c["ff"]
    P = c.get("positions", 2048) + 2
    block = 4 * (d * d + d) + d * ff + ff + ff * d + d + 4 * d
    embed = V * d + P * d
    total = L * block + embed + 2 * d
    return dict(
        total=total,
        embed=embed,
        head=0,
        linear=L * (4 * d * d + 2 * d * ff),
        active=total,
        lora_targets=[
            ("q_proj", d, d),
            ("k_proj", d, d),
            ("v_proj", d, d),
            ("out_proj", d, d),
            ("fc1", d, ff),
            ("fc2", ff, d),
        ],
        default_lora=("q_proj", "v_proj"),
    )


def _phi(c: Dict[str, Any]) -> Dict[str, Any]:
    """Phi-2: parallel attention/MLP behind one LayerNorm, biases everywhere, untied head with
    bias, final LayerNorm."""
    d, L, V, ff = c["hidden"], c["layers"], c["vocab"], c["ff"]
    block = 2 * d + 4 * (d * d + d) + d * ff + ff + ff * d + d
    embed = V * d
    head = V * d + V
    total = L * block + embed + head + 2 * d
    return dict(
        total=total,
        embed=embed,
        head=head,
        linear=L * (4 * d * d + 2 * d * ff),
        active=total,
        lora_targets=[
            ("q_proj", d, d),
            ("k_proj", d, d),
            ("v_proj", d, d),
            ("dense", d, d),
            ("fc1", d, ff),
            ("fc2", ff, d),
        ],
        default_lora=("q_proj", "v_proj"),
    )


def _falcon(c: Dict[str, Any]) -> Dict[str, Any]:
    """Falcon (7B layout): multi-query fused qkv, parallel attention/MLP behind one LayerNorm,
    no linear biases, head tied."""
    d, L, V = c["hidden"], c["layers"], c["vocab"]
    heads = c["heads"]
    kv = c.get("kv_heads", 1)
    hd = d // heads
    ff = c.get("ff", 4 * d)
    qkv = d * (d + 2 * kv * hd)
    block = 2 * d + qkv + d * d + 2 * d * ff
    embed = V * d
    total = L * block + embed + 2 * d
    return dict(
        total=total,
        embed=embed,
        head=0,
        linear=L * (qkv + d * d + 2 * d * ff),
        active=total,
        lora_targets=[
            ("query_key_value", d, d + 2 * kv * hd),
            ("dense", d, d),
            ("dense_h_to_4h", d, ff),
            ("dense_4h_to_h", ff, d),
        ],
        default_lora=("query_key_value",),
    )


def _bert_layer(d: int, ff: int) -> int:
    return 4 * (d * d + d) + 2 * d + d * ff + ff + ff * d + d + 2 * d


def _bert(c: Dict[str, Any]) -> Dict[str, Any]:
    """BERT / RoBERTa encoders (the bare ``*Model`` with pooler): word, position and token-type
    embeddings + LayerNorm; per block q/k/v/o with biases, 2 LayerNorms, MLP with biases."""
    d, L, V, ff = c["hidden"], c["layers"], c["vocab"], c["ff"]
    P, T = c["positions"], c.get("type_vocab", 2)
    embed = V * d + P * d + T * d
    pooler = d * d + d if c.get("pooler", True) else 0
    total = embed + 2 * d + L * _bert_layer(d, ff) + pooler
    return dict(
        total=total,
        embed=embed,
        head=0,
        linear=L * (4 * d * d + 2 * d * ff),
        active=total,
        lora_targets=[
            ("query", d, d),
            ("key", d, d),
            ("value", d, d),
            ("attention.output.dense", d, d),
            ("intermediate.dense", d, ff),
            ("output.dense", ff, d),
        ],
        default_lora=("query", "value"),
    )


def _distilbert(c: Dict[str, Any]) -> Dict[str, Any]:
    """DistilBERT: word + position embeddings + LayerNorm, BERT blocks, no token types or pooler."""
    c2 = dict(c, type_vocab=0, pooler=False)
    return _bert(c2)


def _t5(c: Dict[str, Any]) -> Dict[str, Any]:
    """T5 (v1.0, ``T5ForConditionalGeneration``): shared embedding tied to the head; no biases;
    RMS LayerNorm weights; relative-position bias table in the first block of each stack;
    decoder blocks add cross-attention."""
    d, V, ff = c["hidden"], c["vocab"], c["ff"]
    inner = c["heads"] * c["d_kv"]
    Le, Ld = c["layers"], c.get("dec_layers", c["layers"])
    rel = c.get("rel_buckets", 32) * c["heads"]
    mlp = (3 if c.get("gated") else 2) * d * ff
    enc_block = 4 * d * inner + mlp + 2 * d
    dec_block = 8 * d * inner + mlp + 3 * d
    embed = V * d
    head = 0 if c.get("tied", True) else V * d
    total = embed + head + Le * enc_block + rel + d + Ld * dec_block + rel + d
    return dict(
        total=total,
        embed=embed,
        head=head,
        linear=Le * (4 * d * inner + mlp) + Ld * (8 * d * inner + mlp),
        active=total,
        lora_targets=[
            ("q", d, inner),
            ("k", d, inner),
            ("v", d, inner),
            ("o", inner, d),
            ("wi", d, ff),
            ("wo", ff, d),
        ],
        default_lora=("q", "v"),
    )


def _bart(c: Dict[str, Any]) -> Dict[str, Any]:
    """BART (``BartForConditionalGeneration``): shared token embedding tied to the head, learned
    positions (offset 2) and an embedding LayerNorm per stack, biases everywhere; the logits
    bias is a buffer."""
    d, V, ff = c["hidden"], c["vocab"], c["ff"]
    Le, Ld = c["layers"], c.get("dec_layers", c["layers"])
    P = c.get("positions", 1024) + 2
    attn = 4 * (d * d + d)
    mlp = d * ff + ff + ff * d + d
    enc = P * d + 2 * d + Le * (attn + mlp + 4 * d)
    dec = P * d + 2 * d + Ld * (2 * attn + mlp + 6 * d)
    embed = V * d
    total = embed + enc + dec
    return dict(
        total=total,
        embed=embed + 2 * P * d,
        head=0,
        linear=Le * (4 * d * d + 2 * d * ff) + Ld * (8 * d * d + 2 * d * ff),
        active=total,
        lora_targets=[
            ("q_proj", d, d),
            ("k_proj", d, d),
            ("v_proj", d, d),
            ("out_proj", d, d),
            ("fc1", d, ff),
            ("fc2", ff, d),
        ],
        default_lora=("q_proj", "v_proj"),
    )


def _whisper(c: Dict[str, Any]) -> Dict[str, Any]:
    """Whisper (``WhisperForConditionalGeneration``): two 1-D convolutions over mel bins, sinusoid
    positions stored as embedding parameters, attention with k_proj bias-free, LayerNorms with
    bias, a decoder with cross-attention; output projection tied."""
    d, V, ff = c["hidden"], c["vocab"], c["ff"]
    Le, Ld = c["layers"], c.get("dec_layers", c["layers"])
    mels = c.get("mels", 80)
    attn = 4 * d * d + 3 * d
    mlp = d * ff + ff + ff * d + d
    enc = mels * d * 3 + d + d * d * 3 + d + c.get("source_positions", 1500) * d
    enc += Le * (attn + mlp + 4 * d) + 2 * d
    dec = V * d + c.get("target_positions", 448) * d + Ld * (2 * attn + mlp + 6 * d) + 2 * d
    total = enc + dec
    return dict(
        total=total,
        embed=V * d,
        head=0,
        linear=Le * (4 * d * d + 2 * d * ff) + Ld * (8 * d * d + 2 * d * ff),
        active=total,
        lora_targets=[
            ("q_proj", d, d),
            ("k_proj", d, d),
            ("v_proj", d, d),
            ("out_proj", d, d),
            ("fc1", d, ff),
            ("fc2", ff, d),
        ],
        default_lora=("q_proj", "v_proj"),
    )


def _vit_tower(
    d: int, L: int, ff: int, patch: int, image: int, channels: int = 3, patch_bias: bool = True
) -> int:
    n = (image // patch) ** 2 + 1
    return channels * patch * patch * d + (d if patch_bias else 0) + d + n * d + L * _bert_layer(d, ff)


def _vit(c: Dict[str, Any]) -> Dict[str, Any]:
    """ViT classifier (torchvision ``vit_*`` / HF ``ViTForImageClassification``): patch conv with
    bias, class token, learned positions, pre-norm blocks, final LayerNorm, linear head."""
    d, L, ff = c["hidden"], c["layers"], c["ff"]
    classes = c.get("classes", 1000)
    body = _vit_tower(d, L, ff, c["patch"], c.get("image", 224))
    head = d * classes + classes
    total = body + 2 * d + head
    return dict(
        total=total,
        embed=0,
        head=head,
        linear=L * (4 * d * d + 2 * d * ff),
        active=total,
        lora_targets=[
            ("query", d, d),
            ("key", d, d),
            ("value", d, d),
            ("out", d, d),
            ("fc1", d, ff),
            ("fc2", ff, d),
        ],
        default_lora=("query", "value"),
    )


def _clip(c: Dict[str, Any]) -> Dict[str, Any]:
    """CLIP (``CLIPModel``): a text transformer (token + position embeddings, final LayerNorm),
    a vision transformer (bias-free patch conv, class embedding, pre- and post-LayerNorm), two
    bias-free projections and ``logit_scale``."""
    t, v = c["text"], c["vision"]
    proj = c["projection_dim"]
    text = (
        t["vocab"] * t["hidden"]
        + t["positions"] * t["hidden"]
        + t["layers"] * _bert_layer(t["hidden"], t["ff"])
    )
    text += 2 * t["hidden"]
    vision = _vit_tower(v["hidden"], v["layers"], v["ff"], v["patch"], v["image"], patch_bias=False)
    vision += 4 * v["hidden"]
    total = text + vision + v["hidden"] * proj + t["hidden"] * proj + 1
    linear = t["layers"] * 6 * t["hidden"] ** 2 + v["layers"] * 12 * v["hidden"] ** 2
    return dict(
        total=total,
        embed=t["vocab"] * t["hidden"],
        head=0,
        linear=linear,
        active=total,
        lora_targets=[("q_proj", v["hidden"], v["hidden"]), ("v_proj", v["hidden"], v["hidden"])],
        default_lora=("q_proj", "v_proj"),
    )


def _conv(cin: int, cout: int, k: int, bias: bool = False, groups: int = 1) -> int:
    return cin // groups * cout * k * k + (cout if bias else 0)


def _resnet(c: Dict[str, Any]) -> Dict[str, Any]:
    """torchvision ResNet: 7x7 stem, BasicBlock (two 3x3) or Bottleneck (1x1, 3x3, 1x1; expansion
    4) stages with a 1x1 projection where shape changes; BatchNorm weight+bias; linear head."""
    layers = c["stages"]
    bottleneck = c["block"] == "bottleneck"
    width = c.get("width", 64)
    exp = 4 if bottleneck else 1
    total = _conv(3, 64, 7) + 2 * 64
    cin = 64
    for i, n in enumerate(layers):
        planes = 64 * 2**i
        w = planes * width // 64
        for j in range(n):
            stride = 2 if (i > 0 and j == 0) else 1
            if bottleneck:
                total += (
                    _conv(cin, w, 1)
                    + 2 * w
                    + _conv(w, w, 3)
                    + 2 * w
                    + _conv(w, planes * exp, 1)
                    + 2 * planes * exp
                )
            else:
                total += _conv(cin, planes, 3) + 2 * planes + _conv(planes, planes, 3) + 2 * planes
            if j == 0 and (stride != 1 or cin != planes * exp):
                total += _conv(cin, planes * exp, 1) + 2 * planes * exp
            cin = planes * exp
    classes = c.get("classes", 1000)
    head = cin * classes + classes
    total += head
    return dict(total=total, embed=0, head=head, linear=0, active=total, lora_targets=[], default_lora=())


def _convnext(c: Dict[str, Any]) -> Dict[str, Any]:
    """torchvision ConvNeXt: 4x4 patchify stem + LayerNorm; blocks of 7x7 depthwise conv,
    LayerNorm, 4x MLP and a layer-scale vector; LayerNorm + 2x2 conv between stages; LayerNorm +
    linear head."""
    dims, depths = c["dims"], c["depths"]
    total = _conv(3, dims[0], 4, bias=True) + 2 * dims[0]
    for i, (dim, depth) in enumerate(zip(dims, depths)):
        if i > 0:
            total += 2 * dims[i - 1] + _conv(dims[i - 1], dim, 2, bias=True)
        block = dim * 49 + dim + 2 * dim + dim * 4 * dim + 4 * dim + 4 * dim * dim + dim + dim
        total += depth * block
    classes = c.get("classes", 1000)
    head = dims[-1] * classes + classes
    total += 2 * dims[-1] + head
    return dict(total=total, embed=0, head=head, linear=0, active=total, lora_targets=[], default_lora=())


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


_EFFNET_STAGES = [  # expand, kernel, stride, in, out, layers (EfficientNet-B0)
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
]


def _efficientnet(c: Dict[str, Any]) -> Dict[str, Any]:
    """torchvision EfficientNet-B*: MBConv blocks (1x1 expand, depthwise kxk, squeeze-excite with
    biases, 1x1 project; BatchNorm after each conv), width/depth multipliers with torchvision's
    rounding, 1x1 head conv to 4x the last width, linear classifier."""
    wm, dm = c["width_mult"], c["depth_mult"]
    first = _make_divisible(32 * wm)
    total = _conv(3, first, 3) + 2 * first
    last_in = first
    for expand, k, _stride, cin, cout, n in _EFFNET_STAGES:
        cin, cout = _make_divisible(cin * wm), _make_divisible(cout * wm)
        for j in range(int(math.ceil(n * dm))):
            bin_ = cin if j == 0 else cout
            exp = _make_divisible(bin_ * expand)
            if exp != bin_:
                total += _conv(bin_, exp, 1) + 2 * exp
            total += _conv(exp, exp, k, groups=exp) + 2 * exp
            sq = max(1, bin_ // 4)
            total += exp * sq + sq + sq * exp + exp
            total += _conv(exp, cout, 1) + 2 * cout
        last_in = cout
    last_out = 4 * last_in
    total += _conv(last_in, last_out, 1) + 2 * last_out
    classes = c.get("classes", 1000)
    head = last_out * classes + classes
    total += head
    return dict(total=total, embed=0, head=head, linear=0, active=total, lora_targets=[], default_lora=())


def _unet2d(c: Dict[str, Any]) -> Dict[str, Any]:
    """diffusers ``UNet2DConditionModel`` (Stable Diffusion 1.x layout): ResNet blocks (GroupNorm,
    3x3 convs, time-embedding projection, 1x1 shortcut when widths differ), spatial transformers
    (GroupNorm, 1x1 conv in/out, self-attention, cross-attention to the text states, GEGLU MLP),
    strided-conv down- and nearest+conv up-samplers, a time-embedding MLP."""
    ch = c["block_out_channels"]
    lpb = c.get("layers_per_block", 2)
    cross = c["cross_attention_dim"]
    cin_ = c.get("in_channels", 4)
    cout_ = c.get("out_channels", 4)
    temb = 4 * ch[0]
    attn_down = c.get("attn_down", [True, True, True, False])
    attn_up = list(reversed(attn_down))

    def resnet(i: int, o: int) -> int:
        n = 2 * i + _conv(i, o, 3, bias=True) + temb * o + o + 2 * o + _conv(o, o, 3, bias=True)
        if i != o:
            n += _conv(i, o, 1, bias=True)
        return n

    def transformer(d: int) -> int:
        n = 2 * d + _conv(d, d, 1, bias=True) * 2
        n += 2 * d + 3 * d * d + d * d + d  # self-attention
        n += 2 * d + d * d + 2 * cross * d + d * d + d  # cross-attention
        n += 2 * d + d * 8 * d + 8 * d + 4 * d * d + d  # GEGLU MLP
        return n

    total = _conv(cin_, ch[0], 3, bias=True) + ch[0] * temb + temb + temb * temb + temb
    out = ch[0]
    for i, c_out in enumerate(ch):
        cin = out
        out = c_out
        for j in range(lpb):
            total += resnet(cin if j == 0 else out, out)
            if attn_down[i]:
                total += transformer(out)
        if i < len(ch) - 1:
            total += _conv(out, out, 3, bias=True)
    mid = ch[-1]
    total += 2 * resnet(mid, mid) + transformer(mid)
    rev = list(reversed(ch))
    out = rev[0]
    for i, c_out in enumerate(rev):
        prev = out
        out = c_out
        inp = rev[min(i + 1, len(ch) - 1)]
        for j in range(lpb + 1):
            skip = inp if j == lpb else out
            rin = prev if j == 0 else out
            total += resnet(rin + skip, out)
            if attn_up[i]:
                total += transformer(out)
        if i < len(ch) - 1:
            total += _conv(out, out, 3, bias=True)
    total += 2 * ch[0] + _conv(ch[0], cout_, 3, bias=True)
    return dict(
        total=total,
        embed=0,
        head=0,
        linear=0,
        active=total,
        lora_targets=[("to_q", ch[0], ch[0]), ("to_v", ch[0], ch[0])],
        default_lora=("to_q", "to_v"),
    )


FORMULAS = {
    "llama": _llama,
    "gpt2": _gpt2,
    "neox": _neox,
    "opt": _opt,
    "phi": _phi,
    "falcon": _falcon,
    "bert": _bert,
    "distilbert": _distilbert,
    "t5": _t5,
    "bart": _bart,
    "whisper": _whisper,
    "vit": _vit,
    "clip": _clip,
    "resnet": _resnet,
    "convnext": _convnext,
    "efficientnet": _efficientnet,
    "unet2d": _unet2d,
}

# which activation model each formula family uses
KIND = {
    "llama": "decoder",
    "gpt2": "decoder",
    "neox": "decoder",
    "opt": "decoder",
    "phi": "decoder",
    "falcon": "decoder",
    "bert": "encoder",
    "distilbert": "encoder",
    "t5": "encdec",
    "bart": "encdec",
    "whisper": "encdec",
    "vit": "vit",
    "clip": "clip",
    "resnet": "cnn",
    "convnext": "cnn",
    "efficientnet": "cnn",
    "unet2d": "unet",
}


def param_breakdown(family: str, config: Dict[str, Any]) -> Dict[str, Any]:
    """Exact parameter counts (total, embed, head, linear, active) from a published config."""
    return FORMULAS[family](config)


def count_params(key: str) -> int:
    entry = model_entry(key)
    return param_breakdown(entry["family"], entry["config"])["total"]


# --------------------------------------------------------------------------- GPUs


def gpus() -> Dict[str, Dict[str, Any]]:
    return _load("gpus.json")["gpus"]


def instances() -> Dict[str, Dict[str, Any]]:
    return _load("gpus.json")["instances"]


@lru_cache(maxsize=None)
def _gpu_index() -> Dict[str, str]:
    index: Dict[str, str] = {}
    for key, entry in gpus().items():
        for name in [key] + list(entry.get("aliases", [])):
            index[normalise_name(name)] = key
    return index


@lru_cache(maxsize=None)
def _instance_index() -> Dict[str, str]:
    index: Dict[str, str] = {}
    for key, entry in instances().items():
        for name in [key] + list(entry.get("aliases", [])):
            index[normalise_name(name)] = key
    return index


_CAPACITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(gib|gb|g|mib|mb)?\s*$", re.I)
_MULTI = re.compile(r"^\s*(\d+)\s*[x*]\s*(.+)$", re.I)


def resolve_target(text: str) -> Optional[Dict[str, Any]]:
    """Resolve ``gpu=`` text: a GPU name, an instance type, ``8xa100-80gb``, or a capacity.

    Returns ``{"name", "gpu" (key or None), "memory_bytes", "bf16", "count", "instance"}`` or None.
    """
    if not text:
        return None
    norm = normalise_name(text)
    if norm in _gpu_index():
        key = _gpu_index()[norm]
        g = gpus()[key]
        return dict(
            name=key,
            gpu=key,
            memory_bytes=int(g["memory_mib"]) * 1024**2,
            bf16=g["bf16"],
            count=1,
            instance=None,
            vendor=g.get("vendor", "nvidia"),
        )
    if norm in _instance_index():
        ikey = _instance_index()[norm]
        inst = instances()[ikey]
        g = gpus()[inst["gpu"]]
        return dict(
            name=ikey,
            gpu=inst["gpu"],
            memory_bytes=int(g["memory_mib"]) * 1024**2,
            bf16=g["bf16"],
            count=int(inst["count"]),
            instance=ikey,
            vendor=g.get("vendor", "nvidia"),
        )
    m = _MULTI.match(text)
    if m:
        inner = resolve_target(m.group(2))
        if inner and inner["instance"] is None:
            return dict(inner, count=int(m.group(1)), name=f"{m.group(1)}x{inner['name']}")
        return None
    m = _CAPACITY.match(text)
    if m:
        value = float(m.group(1))
        unit = (m.group(2) or "gib").lower()
        scale = {"gib": GIB, "g": GIB, "gb": 1000**3, "mib": 1024**2, "mb": 1000**2}[unit]
        if value <= 0:
            return None
        return dict(
            name=text.strip(),
            gpu=None,
            memory_bytes=int(value * scale),
            bf16=True,
            count=1,
            instance=None,
            vendor="nvidia",
        )
    return None


def gpu_names() -> List[str]:
    return sorted(gpus())


def instance_names() -> List[str]:
    return sorted(instances())


def model_names() -> List[str]:
    return sorted(models())


def suggestions(text: str, names: List[str], limit: int = 3) -> List[str]:
    """Closest known names, for error messages."""
    import difflib

    norm = {normalise_name(n): n for n in names}
    hits = difflib.get_close_matches(normalise_name(text or ""), list(norm), n=limit, cutoff=0.5)
    return [norm[h] for h in hits]


def parse_params(text: str) -> Optional[int]:
    """``7B``, ``1.5b``, ``350M``, ``124439808`` -> an integer count, or None."""
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([kmbt]?)\s*$", text or "", re.I)
    if not m:
        return None
    scale = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[m.group(2).lower()]
    value = int(float(m.group(1)) * scale)
    return value if value > 0 else None


def generic_decoder(params: int) -> Tuple[str, Dict[str, Any]]:
    """A Llama-shaped stand-in for an unknown model of ``params`` parameters (``params=7B``).

    Hidden size follows the usual depth/width ratio (d ~ 128 * layers at 7B); the shape only
    drives the activation and KV-cache terms, which carry a wide interval for it.
    """
    layers = max(4, int(round((params / 6.5e9) ** (1 / 3) * 32)))
    hidden = max(256, int(round(math.sqrt(params / (12.5 * layers)) / 128)) * 128)
    return "llama", dict(
        hidden=hidden,
        layers=layers,
        heads=max(1, hidden // 128),
        kv_heads=max(1, hidden // 128),
        ff=int(hidden * 8 / 3) // 256 * 256 or 256,
        vocab=32000,
        tied=False,
    )
