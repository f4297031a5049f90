"""Vision models: ViT, DINOv2, CLIP (two towers), the SigLIP tower of multimodal decoders, and
the CNNs (ResNet, ConvNeXt, EfficientNet)."""

from __future__ import annotations

import math
from typing import Any, Dict

from ..registry import DOWN, OUT, QKV, UP, Breakdown, Dims, Family, Linear, register
from .common import bert_layer, conv, dense, rename, transformer_dims

_VIT_TARGETS = ("query", "key", "value", "out", "fc1", "fc2")


def _block_targets(d: int, ff: int, names=_VIT_TARGETS):
    q, k, v, o, up, down = names
    return (
        Linear(q, d, d, QKV),
        Linear(k, d, d, QKV),
        Linear(v, d, d, QKV),
        Linear(o, d, d, OUT),
        Linear(up, d, ff, UP),
        Linear(down, ff, d, DOWN),
    )


def vit_tower(
    d: int, L: int, ff: int, patch: int, image: int, channels: int = 3, patch_bias: bool = True
) -> int:
    """Patch convolution, class token, learned positions, ``L`` pre-norm blocks."""
    n = (image // patch) ** 2 + 1
    return conv(channels, d, patch, bias=patch_bias) + d + n * d + L * bert_layer(d, ff)


def siglip_tower(v: Dict[str, Any], text_hidden: int) -> int:
    """SigLIP vision tower of Gemma 3 (patch conv with bias, learned positions without a class
    token, encoder blocks, post-LayerNorm, no pooling head) and the projector into the text
    width (a d_vision x d_text matrix and an RMSNorm)."""
    d, patch = v["hidden"], v["patch"]
    n = (v["image"] // patch) ** 2
    tower = conv(3, d, patch, bias=True) + n * d + v["layers"] * bert_layer(d, v["ff"]) + 2 * d
    return tower + d * text_hidden + d


def count_vit(c: Dict[str, Any]) -> Breakdown:
    """ViT classifier (torchvision ``vit_*`` / HF ``ViTForImageClassification``): patch conv
    with bias, class token, learned positions, pre-norm blocks, final LayerNorm, linear head."""
    d, L, ff = c["hidden"], c["layers"], c["ff"]
    classes = c.get("classes", 1000)
    head = dense(d, classes)
    linear = L * (4 * d * d + 2 * d * ff)
    total = vit_tower(d, L, ff, c["patch"], c.get("image", 224)) + 2 * d + head
    return Breakdown(
        total=total,
        head=head,
        linear=linear,
        cast=linear + head + conv(3, d, c["patch"]),
        lora_targets=_block_targets(d, ff),
        default_lora=("query", "value"),
    )


def count_dinov2(c: Dict[str, Any]) -> Breakdown:
    """DINOv2 backbone (``Dinov2Model``): class and mask tokens, positions for the pretraining
    resolution (518 px / 14 = 37 x 37 + 1), pre-norm blocks with two layer-scale vectors, a
    plain GELU MLP (``mlp_ratio``) or SwiGLU (giant: fused w12 of 2 x hidden, w3), final
    LayerNorm."""
    d, L, patch = c["hidden"], c["layers"], c["patch"]
    n = (c.get("image", 518) // patch) ** 2 + 1
    if c.get("swiglu"):
        hidden = (int(d * c.get("mlp_ratio", 4) * 2 / 3) + 7) // 8 * 8
        mlp = dense(d, 2 * hidden) + dense(hidden, d)
        ff = hidden
    else:
        ff = int(d * c.get("mlp_ratio", 4))
        mlp = dense(d, ff) + dense(ff, d)
    block = 2 * d + 4 * dense(d, d) + d + 2 * d + mlp + d
    embeddings = 2 * d + n * d + conv(3, d, patch, bias=True)
    linear = L * (4 * d * d + mlp)
    return Breakdown(
        total=embeddings + L * block + 2 * d,
        linear=linear,
        cast=linear + conv(3, d, patch),
        lora_targets=_block_targets(d, ff),
        default_lora=("query", "value"),
    )


def count_clip(c: Dict[str, Any]) -> Breakdown:
    """CLIP (``CLIPModel``): a text transformer (token + position embeddings, final LayerNorm),
    a vision transformer (bias-free patch conv, class embedding, pre- and post-LayerNorm), two
    bias-free projections and ``logit_scale``."""
    t, v = c["text"], c["vision"]
    proj = c["projection_dim"]
    text = (
        t["vocab"] * t["hidden"]
        + t["positions"] * t["hidden"]
        + t["layers"] * bert_layer(t["hidden"], t["ff"])
    )
    text += 2 * t["hidden"]
    vision = vit_tower(v["hidden"], v["layers"], v["ff"], v["patch"], v["image"], patch_bias=False)
    vision += 4 * v["hidden"]
    total = text + vision + v["hidden"] * proj + t["hidden"] * proj + 1
    linear = t["layers"] * (4 * t["hidden"] ** 2 + 2 * t["hidden"] * t["ff"])
    linear += v["layers"] * (4 * v["hidden"] ** 2 + 2 * v["hidden"] * v["ff"])
    return Breakdown(
        total=total,
        embed=t["vocab"] * t["hidden"],
        linear=linear,
        cast=linear + conv(3, v["hidden"], v["patch"]),
        lora_targets=_block_targets(
            v["hidden"], v["ff"], ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2")
        ),
        default_lora=("q_proj", "v_proj"),
    )


def _vit_dims(c: Dict[str, Any]) -> Dims:
    return transformer_dims(c, patch=c["patch"], image=c.get("image", 224))


def _clip_dims(c: Dict[str, Any]) -> Dims:
    t = c["text"]
    return transformer_dims(c["vision"], text_tokens=t["positions"])


_VIT_KEYS = {
    "hidden": (("hidden_size",), ...),
    "layers": (("num_hidden_layers",), ...),
    "heads": (("num_attention_heads",), ...),
    "ff": (("intermediate_size",), None),
    "patch": (("patch_size",), ...),
    "image": (("image_size",), 224),
}


def _labels(hf: Dict[str, Any], default: int = 1000) -> int:
    labels = hf.get("id2label")
    return len(labels) if isinstance(labels, dict) and labels else int(hf.get("num_labels", default))


def read_vit(hf: Dict[str, Any]) -> Dict[str, Any]:
    return dict(rename(hf, _VIT_KEYS), classes=_labels(hf))


def read_dinov2(hf: Dict[str, Any]) -> Dict[str, Any]:
    c = rename(hf, dict(_VIT_KEYS, image=(("image_size",), 518)))
    c.pop("ff", None)
    c["mlp_ratio"] = hf.get("mlp_ratio", 4)
    c["swiglu"] = bool(hf.get("use_swiglu_ffn"))
    return c


def read_clip(hf: Dict[str, Any]) -> Dict[str, Any]:
    t, v = hf["text_config"], hf["vision_config"]
    text = rename(
        t,
        {
            "hidden": (("hidden_size",), 512),
            "layers": (("num_hidden_layers",), 12),
            "heads": (("num_attention_heads",), 8),
            "ff": (("intermediate_size",), 2048),
            "vocab": (("vocab_size",), 49408),
            "positions": (("max_position_embeddings",), 77),
        },
    )
    vision = rename(
        v,
        {
            "hidden": (("hidden_size",), 768),
            "layers": (("num_hidden_layers",), 12),
            "heads": (("num_attention_heads",), 12),
            "ff": (("intermediate_size",), 3072),
            "patch": (("patch_size",), 32),
            "image": (("image_size",), 224),
        },
    )
    return dict(text=text, vision=vision, projection_dim=hf.get("projection_dim", 512))


register(
    Family(
        "vit",
        "vit",
        count_vit,
        _vit_dims,
        style="vit",
        hf_types=("vit",),
        hf_reader=read_vit,
        capabilities=frozenset({"layernorm", "patches"}),
        default_seq=0,
        summary="ViT classifiers",
    )
)
register(
    Family(
        "dinov2",
        "vit",
        count_dinov2,
        _vit_dims,
        style="vit",
        hf_types=("dinov2",),
        hf_reader=read_dinov2,
        capabilities=frozenset({"layernorm", "patches", "layer-scale"}),
        default_seq=0,
        summary="DINOv2 backbones (SwiGLU for giant)",
    )
)
register(
    Family(
        "clip",
        "clip",
        count_clip,
        _clip_dims,
        style="vit",
        hf_types=("clip",),
        hf_reader=read_clip,
        capabilities=frozenset({"layernorm", "patches", "two-towers"}),
        default_seq=0,
        summary="CLIP",
    )
)


# --------------------------------------------------------------------------- CNNs


def _cnn(total: int, head: int) -> Breakdown:
    """A CNN's convolutions are what autocast casts; there are no block linears to quantise."""
    return Breakdown(total=total, head=head, cast=total)


def count_resnet(c: Dict[str, Any]) -> Breakdown:
    """torchvision ResNet: 7x7 stem, BasicBlock (two 3x3) or Bottleneck (1x1, 3x3, 1x1;
    expansion 4) stages with a 1x1 projection where shape changes; BatchNorm weight+bias."""
    bottleneck = c["block"] == "bottleneck"
    width = c.get("width", 64)
    exp = 4 if bottleneck else 1
    total = conv(3, 64, 7) + 2 * 64
    cin = 64
    for i, n in enumerate(c["stages"]):
        planes = 64 * 2**i
        w = planes * width // 64
        for j in range(n):
            stride = 2 if (i > 0 and j == 0) else 1
            if bottleneck:
                total += (
                    conv(cin, w, 1)
                    + 2 * w
                    + conv(w, w, 3)
                    + 2 * w
                    + conv(w, planes * exp, 1)
                    + 2 * planes * exp
                )
            else:
                total += conv(cin, planes, 3) + 2 * planes + conv(planes, planes, 3) + 2 * planes
            if j == 0 and (stride != 1 or cin != planes * exp):
                total += conv(cin, planes * exp, 1) + 2 * planes * exp
            cin = planes * exp
    head = dense(cin, c.get("classes", 1000))
    return _cnn(total + head, head)


def count_convnext(c: Dict[str, Any]) -> Breakdown:
    """torchvision ConvNeXt: 4x4 patchify stem + LayerNorm; blocks of 7x7 depthwise conv,
    LayerNorm, 4x MLP and a layer-scale vector; LayerNorm + 2x2 conv between stages; LayerNorm +
    linear head."""
    dims, depths = c["dims"], c["depths"]
    total = conv(3, dims[0], 4, bias=True) + 2 * dims[0]
    for i, (dim, depth) in enumerate(zip(dims, depths)):
        if i > 0:
            total += 2 * dims[i - 1] + conv(dims[i - 1], dim, 2, bias=True)
        block = dim * 49 + dim + 2 * dim + dense(dim, 4 * dim) + dense(4 * dim, dim) + dim
        total += depth * block
    head = dense(dims[-1], c.get("classes", 1000))
    return _cnn(total + 2 * dims[-1] + head, head)


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


_EFFNET_STAGES = (  # expand, kernel, stride, in, out, layers (EfficientNet-B0)
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
)


def count_efficientnet(c: Dict[str, Any]) -> Breakdown:
    """torchvision EfficientNet-B*: MBConv blocks (1x1 expand, depthwise kxk, squeeze-excite
    with biases, 1x1 project; BatchNorm after each conv), width/depth multipliers with
    torchvision's rounding, 1x1 head conv to 4x the last width, linear classifier."""
    wm, dm = c["width_mult"], c["depth_mult"]
    first = _make_divisible(32 * wm)
    total = conv(3, first, 3) + 2 * first
    last_in = first
    for expand, k, _stride, cin, cout, n in _EFFNET_STAGES:
        cin, cout = _make_divisible(cin * wm), _make_divisible(cout * wm)
        for j in range(int(math.ceil(n * dm))):
            bin_ = cin if j == 0 else cout
            exp = _make_divisible(bin_ * expand)
            if exp != bin_:
                total += conv(bin_, exp, 1) + 2 * exp
            total += conv(exp, exp, k, groups=exp) + 2 * exp
            sq = max(1, bin_ // 4)
            total += dense(exp, sq) + dense(sq, exp)
            total += conv(exp, cout, 1) + 2 * cout
        last_in = cout
    last_out = 4 * last_in
    total += conv(last_in, last_out, 1) + 2 * last_out
    head = dense(last_out, c.get("classes", 1000))
    return _cnn(total + head, head)


def _cnn_dims(c: Dict[str, Any]) -> Dims:
    return Dims(image=c.get("image", 224))


def read_resnet(hf: Dict[str, Any]) -> Dict[str, Any]:
    block = "bottleneck" if hf.get("layer_type", "bottleneck") == "bottleneck" else "basic"
    return dict(block=block, stages=list(hf["depths"]), classes=_labels(hf), image=224)


def read_convnext(hf: Dict[str, Any]) -> Dict[str, Any]:
    return dict(dims=list(hf["hidden_sizes"]), depths=list(hf["depths"]), classes=_labels(hf), image=224)


for _name, _count, _types, _reader, _summary in (
    ("resnet", count_resnet, ("resnet",), read_resnet, "ResNet (torchvision / HF)"),
    ("convnext", count_convnext, ("convnext",), read_convnext, "ConvNeXt"),
    ("efficientnet", count_efficientnet, (), None, "EfficientNet-B* (torchvision)"),
):
    register(
        Family(
            _name,
            "cnn",
            _count,
            _cnn_dims,
            hf_types=_types,
            hf_reader=_reader,
            capabilities=frozenset({"convolutions"}),
            default_seq=0,
            summary=_summary,
        )
    )
