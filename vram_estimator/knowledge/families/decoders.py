"""Decoder-only language models: the gated (Llama-style) decoder with its variants (GQA, q/k/v
bias, QK-norm, four norms per block, MoE with shared experts and dense layers, DeepSeek's MLA,
gpt-oss's attention sinks and expert biases, a Gemma 3 SigLIP tower), and the GELU decoders
(GPT-2, StarCoder, GPT-NeoX, OPT, Phi-2, Falcon).

Counting conventions are those of ``sum(p.numel() for p in model.parameters())``: tied
embeddings count once, buffers (rotary caches, DeepSeek's router correction bias) do not.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Dict, Tuple

from ..registry import DOWN, OUT, QKV, UP, Breakdown, Dims, Family, Linear, register
from .common import attention_linears, dense, mlp_linears, pick, rename, transformer_dims
from .vision import siglip_tower

# --------------------------------------------------------------------------- gated decoders


def _attention(c: Dict[str, Any]) -> Tuple[int, int, Tuple[Linear, ...]]:
    """(linear weights, other parameters, LoRA targets) of one attention block."""
    d, heads = c["hidden"], c["heads"]
    if c.get("kv_lora"):
        return _mla(c)
    kv = c.get("kv_heads", heads)
    hd = c.get("head_dim", d // heads)
    q_dim, kv_dim = heads * hd, kv * hd
    weights = d * q_dim + 2 * d * kv_dim + q_dim * d
    if c.get("qkv_bias"):
        weights += q_dim + 2 * kv_dim
    if c.get("o_bias"):
        weights += d
    other = (2 * hd if c.get("qk_norm") else 0) + (heads if c.get("sinks") else 0)
    names = c.get("attn_names", ("q_proj", "k_proj", "v_proj", "o_proj"))
    if len(names) == 2:  # fused q/k/v (Phi-3)
        targets: Tuple[Linear, ...] = (
            Linear(names[0], d, q_dim + 2 * kv_dim, QKV),
            Linear(names[1], q_dim, d, OUT),
        )
    else:
        targets = attention_linears(d, q_dim, kv_dim, names)
    return weights, other, targets


def _mla(c: Dict[str, Any]) -> Tuple[int, int, Tuple[Linear, ...]]:
    """DeepSeek multi-head latent attention: low-rank q (q_a, norm, q_b), a shared compressed
    k/v latent with a decoupled rotary key (kv_a_proj_with_mqa, norm, kv_b), o_proj."""
    d, heads = c["hidden"], c["heads"]
    qk = c["qk_nope"] + c["qk_rope"]
    q_lora, kv_lora = c.get("q_lora", 0), c["kv_lora"]
    if q_lora:
        q = [Linear("q_a_proj", d, q_lora, QKV), Linear("q_b_proj", q_lora, heads * qk)]
    else:
        q = [Linear("q_proj", d, heads * qk, QKV)]
    targets = tuple(q) + (
        Linear("kv_a_proj_with_mqa", d, kv_lora + c["qk_rope"], QKV),
        Linear("kv_b_proj", kv_lora, heads * (c["qk_nope"] + c["v_head"])),
        Linear("o_proj", heads * c["v_head"], d, OUT),
    )
    weights = sum(t.fan_in * t.fan_out for t in targets)
    return weights, q_lora + kv_lora, targets


def _mlp(d: int, ff: int, c: Dict[str, Any]) -> int:
    return 3 * d * ff + ((2 * ff + d) if c.get("mlp_bias") else 0)


def _is_moe_layer(c: Dict[str, Any], i: int) -> bool:
    if c.get("experts", 1) <= 1 or i < c.get("first_dense", 0):
        return False
    return (i + 1) % c.get("moe_every", 1) == 0


def _moe(c: Dict[str, Any]) -> Tuple[int, int, int]:
    """(routed expert weights, shared expert + router weights, one expert's weights)."""
    d = c["hidden"]
    width = c.get("moe_ff", c["ff"])
    one = _mlp(d, width, c)
    shared = c.get("shared_experts", 0) * _mlp(d, c.get("shared_ff", width), c)
    router = d * c["experts"] + (c["experts"] if c.get("router_bias") else 0)
    return c["experts"] * one, shared + router, one


def _norms(c: Dict[str, Any]) -> int:
    return c.get("norms_per_layer", 2) * c["hidden"]


def count_gated(c: Dict[str, Any]) -> Breakdown:
    """Llama-style decoders (Llama 2/3/4, Mistral, Mixtral, Qwen2/3 dense and MoE, Gemma 1-3,
    Phi-3/4, SmolLM, DeepSeek-V3, gpt-oss): per block an attention (GQA / MLA), a gated MLP or
    an MoE layer (routed experts, shared experts, router), RMSNorm weights."""
    d, L, V = c["hidden"], c["layers"], c["vocab"]
    attn_w, attn_other, attn_targets = _attention(c)
    dense_mlp = _mlp(d, c["ff"], c)
    routed, shared_router, one_expert = _moe(c) if c.get("experts", 1) > 1 else (0, 0, 0)
    linear = total_blocks = idle = 0
    for i in range(L):
        mlp = routed + shared_router if _is_moe_layer(c, i) else dense_mlp
        linear += attn_w + mlp
        total_blocks += attn_w + attn_other + mlp + _norms(c)
        if _is_moe_layer(c, i):
            idle += (c["experts"] - c.get("experts_active", c["experts"])) * one_expert
    embed = V * d
    head = 0 if c.get("tied") else V * d
    vision = siglip_tower(c["vision"], d) if c.get("vision") else 0
    total = total_blocks + embed + head + d + vision
    ff = c["ff"]
    mlp_names = c.get("mlp_names", ("gate_proj", "up_proj", "down_proj"))
    if len(mlp_names) == 2:  # fused gate/up (Phi-3)
        mlp_targets: Tuple[Linear, ...] = (
            Linear(mlp_names[0], d, 2 * ff, UP),
            Linear(mlp_names[1], ff, d, DOWN),
        )
    else:
        mlp_targets = mlp_linears(d, ff, mlp_names[:2], mlp_names[2])
    return Breakdown(
        total=total,
        embed=embed,
        head=head,
        linear=linear,
        cast=linear + V * d,
        active=total - idle,
        lora_targets=attn_targets + mlp_targets,
        default_lora=c.get("default_lora", ("q_proj", "v_proj")),
    )


def dims_gated(c: Dict[str, Any]) -> Dims:
    """MoE layers contribute ``experts_active`` expert widths (+ shared experts) per token; a
    model with dense and MoE layers uses the layer-weighted mean width.  MLA keeps full per-head
    K and V in Hugging Face's cache (decompressed), so that is the cached size."""
    L = c["layers"]
    moe_layers = sum(_is_moe_layer(c, i) for i in range(L))
    width = c["ff"]
    if moe_layers:
        per_token = c.get("experts_active", 1) * c.get("moe_ff", c["ff"])
        per_token += c.get("shared_experts", 0) * c.get("shared_ff", c.get("moe_ff", c["ff"]))
        width = (moe_layers * per_token + (L - moe_layers) * c["ff"]) // L
    if c.get("kv_lora"):
        heads = c["heads"]
        qk = c["qk_nope"] + c["qk_rope"]
        return transformer_dims(
            c,
            ff=width,
            head_dim=qk,
            kv_heads=heads,
            kv_cache_dim=heads * (qk + c["v_head"]) // 2,
            experts_active=1,
        )
    return transformer_dims(c, ff=width, experts_active=1)


_GATED_KEYS = {
    "hidden": (("hidden_size",), ...),
    "layers": (("num_hidden_layers",), ...),
    "heads": (("num_attention_heads",), ...),
    "kv_heads": (("num_key_value_heads",), None),
    "head_dim": (("head_dim",), None),
    "ff": (("intermediate_size_mlp", "intermediate_size"), ...),
    "vocab": (("vocab_size",), ...),
    "experts": (("num_local_experts", "num_experts", "n_routed_experts"), None),
    "experts_active": (("num_experts_per_tok", "experts_per_token"), None),
    "moe_ff": (("moe_intermediate_size",), None),
    "shared_experts": (("n_shared_experts",), None),
    "first_dense": (("first_k_dense_replace",), None),
    "moe_every": (("interleave_moe_layer_step", "decoder_sparse_step", "moe_layer_freq"), None),
    "q_lora": (("q_lora_rank",), None),
    "kv_lora": (("kv_lora_rank",), None),
    "qk_nope": (("qk_nope_head_dim",), None),
    "qk_rope": (("qk_rope_head_dim",), None),
    "v_head": (("v_head_dim",), None),
    "max_positions": (("max_position_embeddings",), None),
}


def read_gated(hf: Dict[str, Any], fixed: Dict[str, Any], tied_default: bool = False) -> Dict[str, Any]:
    """Our config from a Hugging Face ``config.json`` of a gated decoder.  ``fixed`` holds what
    the family's modeling code hard-wires (Qwen2's q/k/v bias, Gemma 2's four norms, ...)."""
    text = hf.get("text_config") or hf
    c = rename(text, _GATED_KEYS)
    c["tied"] = bool(pick(text, ("tie_word_embeddings",), pick(hf, ("tie_word_embeddings",), tied_default)))
    if text.get("attention_bias"):
        c["qkv_bias"] = c["o_bias"] = True
    if text.get("mlp_bias"):
        c["mlp_bias"] = True
    if "intermediate_size_mlp" in text:  # Llama 4: experts and the shared expert use intermediate_size
        c["moe_ff"] = text["intermediate_size"]
    c.update(fixed)
    if c.get("shared_experts") == 0:
        del c["shared_experts"]
    if c.get("experts") in (0, 1):
        for key in ("experts", "experts_active", "moe_ff", "moe_every", "first_dense"):
            c.pop(key, None)
    vision = hf.get("vision_config")
    if vision and fixed.get("vision_tower") == "siglip":
        c["vision"] = dict(
            hidden=vision["hidden_size"],
            layers=vision["num_hidden_layers"],
            ff=vision["intermediate_size"],
            patch=vision["patch_size"],
            image=vision["image_size"],
        )
    c.pop("vision_tower", None)
    return c


def _gated(
    name: str,
    hf_types: Tuple[str, ...],
    summary: str,
    fixed: Dict[str, Any] = None,
    tied_default: bool = False,
    caps: Tuple[str, ...] = (),
) -> Family:
    fixed = dict(fixed or {})
    return register(
        Family(
            name=name,
            kind="decoder",
            count=count_gated,
            dims=dims_gated,
            style="decoder_gated",
            hf_types=hf_types,
            hf_reader=partial(read_gated, fixed=fixed, tied_default=tied_default),
            capabilities=frozenset(("gated-mlp", "rmsnorm", "rope") + caps),
            summary=summary,
        )
    )


LLAMA = _gated("llama", ("llama",), "Llama 2/3/3.1/3.2, TinyLlama, SmolLM/SmolLM2")
_gated("smollm3", ("smollm3",), "SmolLM3 (Llama layout, NoPE layers have no parameters)", tied_default=True)
_gated("mistral", ("mistral", "ministral"), "Mistral 7B, Mistral Nemo, Mistral Small")
_gated("mixtral", ("mixtral",), "Mixtral MoE")
_gated("qwen2", ("qwen2",), "Qwen2/2.5 (q/k/v bias)", fixed=dict(qkv_bias=True))
_gated("qwen3", ("qwen3",), "Qwen3 dense (QK-norm)", fixed=dict(qk_norm=True), caps=("qk-norm",))
_gated(
    "qwen3_moe",
    ("qwen3_moe",),
    "Qwen3 MoE (QK-norm, 128 experts)",
    fixed=dict(qk_norm=True),
    caps=("qk-norm",),
)
_gated("gemma", ("gemma",), "Gemma (head_dim 256, tied)", tied_default=True, caps=("gemma-norm",))
_gated(
    "gemma2",
    ("gemma2",),
    "Gemma 2 (four norms per block)",
    fixed=dict(norms_per_layer=4),
    tied_default=True,
    caps=("gemma-norm", "attn-softcap"),
)
_gated(
    "gemma3",
    ("gemma3", "gemma3_text"),
    "Gemma 3 (four norms, QK-norm; 4B+ with the SigLIP vision tower)",
    fixed=dict(norms_per_layer=4, qk_norm=True, vision_tower="siglip"),
    tied_default=True,
    caps=("qk-norm", "gemma-norm"),
)
_gated(
    "phi3",
    ("phi3",),
    "Phi-3, Phi-4 (fused qkv_proj and gate_up_proj)",
    fixed=dict(
        attn_names=("qkv_proj", "o_proj"), mlp_names=("gate_up_proj", "down_proj"), default_lora=("qkv_proj",)
    ),
)
_gated(
    "llama4",
    ("llama4", "llama4_text"),
    "Llama 4 text model (MoE with a shared expert)",
    fixed=dict(shared_experts=1),
)
_gated("deepseek_v3", ("deepseek_v3", "deepseek_v2"), "DeepSeek-V2/V3 (MLA + MoE with shared experts)")
_gated(
    "gpt_oss",
    ("gpt_oss",),
    "gpt-oss (attention sinks, biased experts and router)",
    fixed=dict(qkv_bias=True, o_bias=True, sinks=True, mlp_bias=True, router_bias=True),
    caps=("attention-sinks",),
)


# --------------------------------------------------------------------------- GELU decoders


def _gelu_decoder(
    d: int,
    L: int,
    block: int,
    linear_per_block: int,
    embed: int,
    head: int,
    V: int,
    targets: Tuple[Linear, ...],
    default: Tuple[str, ...],
    final: int,
) -> Breakdown:
    total = L * block + embed + head + final
    return Breakdown(
        total=total,
        embed=embed,
        head=head,
        linear=L * linear_per_block,
        cast=L * linear_per_block + V * d,
        lora_targets=targets,
        default_lora=default,
    )


def count_gpt2(c: Dict[str, Any]) -> Breakdown:
    """GPT-2 / StarCoder (GPTBigCode): learned positions, fused c_attn with bias (multi-query
    for StarCoder: q plus one head of k and v), MLP with biases, 2 LayerNorms, tied head."""
    d, L, V, P = c["hidden"], c["layers"], c["vocab"], c["positions"]
    ff = c.get("ff", 4 * d)
    kv_dim = c.get("kv_heads", c["heads"]) * (d // c["heads"])
    qkv = dense(d, d + 2 * kv_dim)
    linear = qkv + dense(d, d) + dense(d, ff) + dense(ff, d)
    targets = (
        Linear("c_attn", d, d + 2 * kv_dim, QKV),
        Linear("c_proj", d, d, OUT),
        Linear("c_fc", d, ff, UP),
        Linear("mlp.c_proj", ff, d, DOWN),
    )
    return _gelu_decoder(d, L, linear + 4 * d, linear, V * d + P * d, 0, V, targets, ("c_attn",), 2 * d)


def count_neox(c: Dict[str, Any]) -> Breakdown:
    """GPT-NeoX / Pythia: fused qkv with bias, 4d MLP with biases, 2 LayerNorms, untied head."""
    d, L, V = c["hidden"], c["layers"], c["vocab"]
    ff = c.get("ff", 4 * d)
    linear = dense(d, 3 * d) + dense(d, d) + dense(d, ff) + dense(ff, d)
    targets = (
        Linear("query_key_value", d, 3 * d, QKV),
        Linear("dense", d, d, OUT),
        Linear("dense_h_to_4h", d, ff, UP),
        Linear("dense_4h_to_h", ff, d, DOWN),
    )
    return _gelu_decoder(d, L, linear + 4 * d, linear, V * d, V * d, V, targets, ("query_key_value",), 2 * d)


def count_opt(c: Dict[str, Any]) -> Breakdown:
    """OPT: learned positions with an offset of 2, q/k/v/out and fc1/fc2 with biases, 2
    LayerNorms per block, a final LayerNorm, head tied."""
    d, L, V, ff = c["hidden"], c["layers"], c["vocab"], c["ff"]
    P = c.get("positions", 2048) + 2
    linear = 4 * dense(d, d) + dense(d, ff) + dense(ff, d)
    targets = attention_linears(d, d, d, ("q_proj", "k_proj", "v_proj", "out_proj")) + mlp_linears(
        d, ff, ("fc1",), "fc2"
    )
    return _gelu_decoder(
        d, L, linear + 4 * d, linear, V * d + P * d, 0, V, targets, ("q_proj", "v_proj"), 2 * d
    )


# PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING["phi"] (peft/utils/constants.py):
# the MLP too, unlike its other decoders
PHI_PEFT_DEFAULT = ("q_proj", "v_proj", "fc1", "fc2")


def count_phi(c: Dict[str, Any]) -> Breakdown:
    """Phi-2: parallel attention/MLP behind one LayerNorm, biases everywhere, untied head with
    bias, final LayerNorm."""
    d, L, V, ff = c["hidden"], c["layers"], c["vocab"], c["ff"]
    linear = 4 * dense(d, d) + dense(d, ff) + dense(ff, d)
    targets = attention_linears(d, d, d, ("q_proj", "k_proj", "v_proj", "dense")) + mlp_linears(
        d, ff, ("fc1",), "fc2"
    )
    return _gelu_decoder(
        d, L, linear + 2 * d, linear, V * d, V * d + V, V, targets, PHI_PEFT_DEFAULT, 2 * d
    )


def count_falcon(c: Dict[str, Any]) -> Breakdown:
    """Falcon (7B layout): multi-query fused qkv, parallel attention/MLP behind one LayerNorm,
    no linear biases, head tied."""
    d, L, V = c["hidden"], c["layers"], c["vocab"]
    hd = d // c["heads"]
    kv = c.get("kv_heads", 1)
    ff = c.get("ff", 4 * d)
    linear = d * (d + 2 * kv * hd) + d * d + 2 * d * ff
    targets = (
        Linear("query_key_value", d, d + 2 * kv * hd, QKV),
        Linear("dense", d, d, OUT),
        Linear("dense_h_to_4h", d, ff, UP),
        Linear("dense_4h_to_h", ff, d, DOWN),
    )
    return _gelu_decoder(d, L, linear + 2 * d, linear, V * d, 0, V, targets, ("query_key_value",), 2 * d)


def _gelu_family(name: str, count, hf_types, keys, summary, caps=(), kv_default=None) -> Family:
    def reader(hf: Dict[str, Any]) -> Dict[str, Any]:
        c = rename(hf, keys)
        if kv_default is not None:
            c.setdefault("kv_heads", kv_default(hf))
        return c

    def dims(c: Dict[str, Any]) -> Dims:
        if kv_default is not None:
            return transformer_dims(dict(c, kv_heads=c.get("kv_heads", 1)))
        return transformer_dims(c)

    return register(
        Family(
            name=name,
            kind="decoder",
            count=count,
            dims=dims,
            style="decoder_gelu",
            hf_types=hf_types,
            hf_reader=reader,
            capabilities=frozenset(("layernorm",) + caps),
            summary=summary,
        )
    )


_HF_BASE = {
    "hidden": (("hidden_size",), ...),
    "layers": (("num_hidden_layers",), ...),
    "heads": (("num_attention_heads",), ...),
    "vocab": (("vocab_size",), ...),
}
_GPT2_KEYS = {
    "hidden": (("n_embd", "hidden_size"), ...),
    "layers": (("n_layer", "num_hidden_layers"), ...),
    "heads": (("n_head", "num_attention_heads"), ...),
    "ff": (("n_inner",), None),
    "vocab": (("vocab_size",), ...),
    "positions": (("n_positions", "max_position_embeddings"), ...),
}
_gelu_family("gpt2", count_gpt2, ("gpt2",), _GPT2_KEYS, "GPT-2", caps=("learned-positions", "tied-head"))
_gelu_family(
    "gpt_bigcode",
    count_gpt2,
    ("gpt_bigcode",),
    _GPT2_KEYS,
    "StarCoder / OctoCoder / SantaCoder (GPT-2 layout, multi-query attention)",
    caps=("learned-positions", "tied-head"),
    kv_default=lambda hf: 1 if hf.get("multi_query", True) else hf["n_head"],
)
_gelu_family(
    "neox",
    count_neox,
    ("gpt_neox",),
    dict(_HF_BASE, ff=(("intermediate_size",), None)),
    "GPT-NeoX, Pythia",
)
_gelu_family(
    "opt",
    count_opt,
    ("opt",),
    dict(_HF_BASE, ff=(("ffn_dim",), ...), positions=(("max_position_embeddings",), 2048)),
    "OPT",
    caps=("learned-positions", "tied-head"),
)
_gelu_family(
    "phi",
    count_phi,
    ("phi",),
    dict(_HF_BASE, ff=(("intermediate_size",), ...)),
    "Phi-1/1.5/2 (parallel attention and MLP)",
)
_gelu_family(
    "falcon",
    count_falcon,
    ("falcon",),
    _HF_BASE,
    "Falcon 7B layout (multi-query)",
    caps=("mqa",),
    kv_default=lambda hf: 1 if hf.get("multi_query", True) else hf["num_attention_heads"],
)
