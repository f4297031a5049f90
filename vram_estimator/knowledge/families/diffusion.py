"""Diffusion denoisers: the diffusers ``UNet2DConditionModel`` (SD 1.x/2.x, SDXL) and the
DiT-style transformers (Flux's double- and single-stream blocks, SD3's joint blocks)."""

from __future__ import annotations

from typing import Any, Dict, List

from ..registry import OUT, QKV, Breakdown, Dims, Family, Linear, register
from .common import conv, dense


def _unet_transformer(d: int, cross: int, layers: int) -> int:
    """Transformer2DModel: GroupNorm, proj_in/proj_out (1x1 conv or linear: the same count),
    ``layers`` blocks of self-attention, cross-attention to the text states and a GEGLU MLP."""
    block = 2 * d + 3 * d * d + dense(d, d)  # norm1, bias-free q/k/v, to_out
    block += 2 * d + d * d + 2 * cross * d + dense(d, d)  # norm2, cross-attention
    block += 2 * d + dense(d, 8 * d) + dense(4 * d, d)  # norm3, GEGLU MLP
    return 2 * d + 2 * dense(d, d) + layers * block


def _per_level(value: Any, levels: int) -> List[int]:
    return list(value) if isinstance(value, (list, tuple)) else [int(value)] * levels


def count_unet2d(c: Dict[str, Any]) -> Breakdown:
    """diffusers ``UNet2DConditionModel``: ResNet blocks (GroupNorm, 3x3 convs, time-embedding
    projection, 1x1 shortcut when widths differ), spatial transformers (``transformer_layers``
    per level: 1 for SD 1.x, [1, 2, 10] for SDXL), strided-conv down- and nearest+conv
    up-samplers, a time-embedding MLP and SDXL's added text-time embedding."""
    ch = c["block_out_channels"]
    lpb = c.get("layers_per_block", 2)
    cross = c["cross_attention_dim"]
    temb = 4 * ch[0]
    attn_down = c.get("attn_down", [True] * (len(ch) - 1) + [False])
    depth = _per_level(c.get("transformer_layers", 1), len(ch))

    def resnet(i: int, o: int) -> int:
        n = 2 * i + conv(i, o, 3, bias=True) + dense(temb, o) + 2 * o + conv(o, o, 3, bias=True)
        return n + (conv(i, o, 1, bias=True) if i != o else 0)

    total = conv(c.get("in_channels", 4), ch[0], 3, bias=True) + dense(ch[0], temb) + dense(temb, temb)
    if c.get("addition_embed_dim"):
        total += dense(c["addition_embed_dim"], temb) + dense(temb, temb)
    out = ch[0]
    for i, c_out in enumerate(ch):
        cin, out = out, c_out
        for j in range(lpb):
            total += resnet(cin if j == 0 else out, out)
            total += _unet_transformer(out, cross, depth[i]) if attn_down[i] else 0
        total += conv(out, out, 3, bias=True) if i < len(ch) - 1 else 0
    total += 2 * resnet(ch[-1], ch[-1]) + _unet_transformer(ch[-1], cross, depth[-1])
    rev, attn_up, depth_up = list(reversed(ch)), list(reversed(attn_down)), list(reversed(depth))
    out = rev[0]
    for i, c_out in enumerate(rev):
        prev, out = out, c_out
        skip_last = rev[min(i + 1, len(ch) - 1)]
        for j in range(lpb + 1):
            skip = skip_last if j == lpb else out
            total += resnet((prev if j == 0 else out) + skip, out)
            total += _unet_transformer(out, cross, depth_up[i]) if attn_up[i] else 0
        total += conv(out, out, 3, bias=True) if i < len(ch) - 1 else 0
    total += 2 * ch[0] + conv(ch[0], c.get("out_channels", 4), 3, bias=True)
    return Breakdown(
        total=total,
        cast=total,
        lora_targets=(Linear("to_q", ch[0], ch[0], QKV), Linear("to_v", ch[0], ch[0], QKV)),
        default_lora=("to_q", "to_v"),
    )


def _attention_targets(d: int):
    """diffusers attention projections (what its LoRA recipes target)."""
    return tuple(Linear(n, d, d, QKV) for n in ("to_q", "to_k", "to_v")) + (Linear("to_out.0", d, d, OUT),)


def _timestep_mlp(d: int, cin: int = 256) -> int:
    return dense(cin, d) + dense(d, d)


def count_flux(c: Dict[str, Any]) -> Breakdown:
    """diffusers ``FluxTransformer2DModel``: ``double`` blocks (image and text streams, each
    with an AdaLayerNormZero (6 x d), joint attention with RMS QK-norm, a 4x GELU MLP) and
    ``single`` blocks (AdaLayerNormZeroSingle (3 x d), fused attention + MLP input, one output
    projection over both), timestep / guidance / pooled-text embeddings, AdaLayerNormContinuous
    out."""
    d = c["heads"] * c["head_dim"]
    hd = c["head_dim"]
    qkv = 3 * dense(d, d)
    mlp = dense(d, 4 * d) + dense(4 * d, d)
    double = 2 * dense(d, 6 * d) + 2 * qkv + 4 * hd + 2 * dense(d, d) + 2 * mlp
    single = dense(d, 3 * d) + dense(d, 4 * d) + dense(5 * d, d) + qkv + 2 * hd
    embeds = dense(c["in_channels"], d) + dense(c["joint_dim"], d)
    embeds += _timestep_mlp(d) * (2 if c.get("guidance") else 1) + dense(c["pooled_dim"], d) + dense(d, d)
    out = dense(d, 2 * d) + dense(d, c.get("patch", 1) ** 2 * c.get("out_channels", c["in_channels"]))
    linear = c["double"] * (double - 4 * hd) + c["single"] * (single - 2 * hd)
    return Breakdown(
        total=embeds + c["double"] * double + c["single"] * single + out,
        linear=linear,
        cast=linear,
        lora_targets=_attention_targets(d),
        default_lora=("to_q", "to_k", "to_v", "to_out.0"),
    )


def count_sd3(c: Dict[str, Any]) -> Breakdown:
    """diffusers ``SD3Transformer2DModel``: patch embedding conv (the positional table is a
    buffer), timestep + pooled-text embeddings, a context embedder, ``layers`` joint blocks (the
    last one context-pre-only: an AdaLayerNormContinuous context norm, no context output or
    MLP), optional RMS QK-norm, AdaLayerNormContinuous out."""
    d = c["heads"] * c["head_dim"]
    patch, cin = c.get("patch", 2), c["in_channels"]
    qkv = 3 * dense(d, d)
    mlp = dense(d, 4 * d) + dense(4 * d, d)
    qk = 4 * c["head_dim"] if c.get("qk_norm") else 0
    joint = 2 * dense(d, 6 * d) + 2 * qkv + 2 * dense(d, d) + 2 * mlp + qk
    last = dense(d, 6 * d) + dense(d, 2 * d) + 2 * qkv + dense(d, d) + mlp + qk
    dual = len(c.get("dual_layers", ())) * (qkv + dense(d, d) + (2 * c["head_dim"] if qk else 0))
    embeds = conv(cin, d, patch, bias=True) + _timestep_mlp(d) + dense(c["pooled_dim"], d) + dense(d, d)
    embeds += dense(c["joint_dim"], c.get("caption_dim", d))
    out = dense(d, 2 * d) + dense(d, patch * patch * c.get("out_channels", cin))
    blocks = (c["layers"] - 1) * joint + last + dual
    return Breakdown(
        total=embeds + blocks + out,
        linear=blocks,
        cast=blocks,
        lora_targets=_attention_targets(d),
        default_lora=("to_q", "to_k", "to_v", "to_out.0"),
    )


def _unet_dims(c: Dict[str, Any]) -> Dims:
    return Dims(image=c.get("image", 512))


def _dit_dims(c: Dict[str, Any]) -> Dims:
    d = c["heads"] * c["head_dim"]
    layers = (
        c.get("double", 0) * 2 + c.get("single", 0) + c.get("layers", 0) * 2
    )  # a double/joint block = 2 streams
    return Dims(
        hidden=d,
        heads=c["heads"],
        head_dim=c["head_dim"],
        kv_heads=c["heads"],
        ff=4 * d,
        layers=layers,
        patch=c.get("patch", 2),
        image=c.get("image", 1024),
        text_tokens=c.get("text_tokens", 512),
    )


def read_unet(hf: Dict[str, Any]) -> Dict[str, Any]:
    types = hf.get("down_block_types") or ["CrossAttnDownBlock2D"] * 3 + ["DownBlock2D"]
    c = dict(
        block_out_channels=list(hf["block_out_channels"]),
        layers_per_block=hf.get("layers_per_block", 2),
        cross_attention_dim=hf["cross_attention_dim"],
        in_channels=hf.get("in_channels", 4),
        out_channels=hf.get("out_channels", 4),
        attn_down=["CrossAttn" in t for t in types],
        transformer_layers=hf.get("transformer_layers_per_block", 1),
        image=int(hf.get("sample_size", 64)) * 8,
        latent_factor=8,
    )
    if hf.get("addition_embed_type") == "text_time":
        c["addition_embed_dim"] = hf["projection_class_embeddings_input_dim"]
    return c


def read_flux(hf: Dict[str, Any]) -> Dict[str, Any]:
    return dict(
        double=hf.get("num_layers", 19),
        single=hf.get("num_single_layers", 38),
        heads=hf.get("num_attention_heads", 24),
        head_dim=hf.get("attention_head_dim", 128),
        in_channels=hf.get("in_channels", 64),
        out_channels=hf.get("out_channels") or hf.get("in_channels", 64),
        joint_dim=hf.get("joint_attention_dim", 4096),
        pooled_dim=hf.get("pooled_projection_dim", 768),
        guidance=bool(hf.get("guidance_embeds", False)),
        patch=hf.get("patch_size", 1),
        image=1024,
        text_tokens=512,
    )


def read_sd3(hf: Dict[str, Any]) -> Dict[str, Any]:
    return dict(
        layers=hf.get("num_layers", 18),
        heads=hf.get("num_attention_heads", 18),
        head_dim=hf.get("attention_head_dim", 64),
        in_channels=hf.get("in_channels", 16),
        out_channels=hf.get("out_channels") or 16,
        joint_dim=hf.get("joint_attention_dim", 4096),
        caption_dim=hf.get("caption_projection_dim"),
        pooled_dim=hf.get("pooled_projection_dim", 2048),
        patch=hf.get("patch_size", 2),
        qk_norm=bool(hf.get("qk_norm")),
        dual_layers=list(hf.get("dual_attention_layers") or ()),
        image=int(hf.get("sample_size", 128)) * 8,
        text_tokens=333,
    )


register(
    Family(
        "unet2d",
        "unet",
        count_unet2d,
        _unet_dims,
        hf_types=("UNet2DConditionModel",),
        hf_reader=read_unet,
        capabilities=frozenset({"convolutions", "cross-attention"}),
        default_seq=0,
        summary="Stable Diffusion UNets (1.x, 2.x, SDXL)",
    )
)
register(
    Family(
        "flux",
        "dit",
        count_flux,
        _dit_dims,
        style="encoder",
        hf_types=("FluxTransformer2DModel",),
        hf_reader=read_flux,
        capabilities=frozenset({"joint-attention", "qk-norm", "adaln"}),
        default_seq=0,
        summary="Flux.1 transformers (double + single stream)",
    )
)
register(
    Family(
        "sd3",
        "dit",
        count_sd3,
        _dit_dims,
        style="encoder",
        hf_types=("SD3Transformer2DModel",),
        hf_reader=read_sd3,
        capabilities=frozenset({"joint-attention", "adaln"}),
        default_seq=0,
        summary="Stable Diffusion 3 / 3.5 MMDiT",
    )
)
