"""Encoder-only models (BERT, RoBERTa, DistilBERT) and encoder-decoders (T5, BART, Whisper)."""

from __future__ import annotations

from typing import Any, Dict

from ..registry import Breakdown, Dims, Family, register
from .common import attention_linears, bert_layer, dense, mlp_linears, rename, transformer_dims

_BERT_TARGETS = ("query", "key", "value", "attention.output.dense")


def count_bert(c: Dict[str, Any]) -> Breakdown:
    """BERT / RoBERTa encoders (the bare ``*Model`` with pooler): word, position and token-type
    embeddings + LayerNorm; per block q/k/v/o with biases, 2 LayerNorms, MLP with biases.
    DistilBERT is the same without token types or pooler."""
    d, L, V, ff = c["hidden"], c["layers"], c["vocab"], c["ff"]
    embed = V * d + c["positions"] * d + c.get("type_vocab", 2) * d
    pooler = dense(d, d) if c.get("pooler", True) else 0
    linear = L * (4 * d * d + 2 * d * ff)
    return Breakdown(
        total=embed + 2 * d + L * bert_layer(d, ff) + pooler,
        embed=embed,
        linear=linear,
        cast=linear + pooler,
        lora_targets=attention_linears(d, d, d, _BERT_TARGETS)
        + mlp_linears(d, ff, ("intermediate.dense",), "output.dense"),
        default_lora=("query", "value"),
    )


def count_distilbert(c: Dict[str, Any]) -> Breakdown:
    """DistilBERT: BERT blocks behind word + position embeddings; no token types, no pooler."""
    return count_bert(dict(c, type_vocab=0, pooler=False))


def _seq2seq_targets(d: int, inner: int, ff: int, names):
    q, k, v, o, up, down = names
    return attention_linears(d, inner, inner, (q, k, v, o)) + mlp_linears(d, ff, (up,), down)


def count_t5(c: Dict[str, Any]) -> Breakdown:
    """T5 (``T5ForConditionalGeneration``): shared embedding tied to the head (v1.0); no biases;
    RMS LayerNorm weights; relative-position bias table in the first block of each stack;
    decoder blocks add cross-attention; a gated MLP for v1.1 / Flan-T5."""
    d, V, ff = c["hidden"], c["vocab"], c["ff"]
    inner = c["heads"] * c["d_kv"]
    Le, Ld = c["layers"], c.get("dec_layers", c["layers"])
    rel = c.get("rel_buckets", 32) * c["heads"]
    mlp = (3 if c.get("gated") else 2) * d * ff
    embed = V * d
    head = 0 if c.get("tied", True) else V * d
    linear = Le * (4 * d * inner + mlp) + Ld * (8 * d * inner + mlp)
    total = (
        embed
        + head
        + Le * (4 * d * inner + mlp + 2 * d)
        + rel
        + d
        + Ld * (8 * d * inner + mlp + 3 * d)
        + rel
        + d
    )
    return Breakdown(
        total=total,
        embed=embed,
        head=head,
        linear=linear,
        cast=linear + V * d,
        lora_targets=_seq2seq_targets(d, inner, ff, ("q", "k", "v", "o", "wi", "wo")),
        default_lora=("q", "v"),
    )


def count_bart(c: Dict[str, Any]) -> Breakdown:
    """BART (``BartForConditionalGeneration``): shared token embedding tied to the head, learned
    positions (offset 2) and an embedding LayerNorm per stack, biases everywhere; the logits
    bias is a buffer."""
    d, V, ff = c["hidden"], c["vocab"], c["ff"]
    Le, Ld = c["layers"], c.get("dec_layers", c["layers"])
    P = c.get("positions", 1024) + 2
    attn = 4 * dense(d, d)
    mlp = dense(d, ff) + dense(ff, d)
    enc = P * d + 2 * d + Le * (attn + mlp + 4 * d)
    dec = P * d + 2 * d + Ld * (2 * attn + mlp + 6 * d)
    linear = Le * (4 * d * d + 2 * d * ff) + Ld * (8 * d * d + 2 * d * ff)
    return Breakdown(
        total=V * d + enc + dec,
        embed=V * d + 2 * P * d,
        linear=linear,
        cast=linear + V * d,
        lora_targets=_seq2seq_targets(d, d, ff, ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2")),
        default_lora=("q_proj", "v_proj"),
    )


def count_whisper(c: Dict[str, Any]) -> Breakdown:
    """Whisper (``WhisperForConditionalGeneration``): two 1-D convolutions over mel bins,
    sinusoid positions stored as embedding parameters, attention with k_proj bias-free,
    LayerNorms with bias, a decoder with cross-attention; output projection tied."""
    d, V, ff = c["hidden"], c["vocab"], c["ff"]
    Le, Ld = c["layers"], c.get("dec_layers", c["layers"])
    mels = c.get("mels", 80)
    attn = 4 * d * d + 3 * d
    mlp = dense(d, ff) + dense(ff, d)
    convs = mels * d * 3 + d + d * d * 3 + d
    enc = convs + c.get("source_positions", 1500) * d + Le * (attn + mlp + 4 * d) + 2 * d
    dec = V * d + c.get("target_positions", 448) * d + Ld * (2 * attn + mlp + 6 * d) + 2 * d
    linear = Le * (4 * d * d + 2 * d * ff) + Ld * (8 * d * d + 2 * d * ff)
    return Breakdown(
        total=enc + dec,
        embed=V * d,
        linear=linear,
        cast=linear + V * d + convs,
        lora_targets=_seq2seq_targets(d, d, ff, ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2")),
        default_lora=("q_proj", "v_proj"),
    )


def _t5_dims(c: Dict[str, Any]) -> Dims:
    return transformer_dims(c, head_dim=c["d_kv"])


def _t5_extra(hf: Dict[str, Any]) -> Dict[str, Any]:
    """v1.1 / Flan-T5 configs say ``feed_forward_proj: gated-gelu``: a gated MLP (wi_0, wi_1)."""
    return {"gated": True} if str(hf.get("feed_forward_proj", "relu")).startswith("gated") else {}


def _family(
    name,
    kind,
    count,
    style,
    hf_types,
    keys,
    summary,
    caps,
    fixed=None,
    dims=transformer_dims,
    seq=512,
    extra=None,
):
    def reader(hf: Dict[str, Any]) -> Dict[str, Any]:
        c = rename(hf, keys)
        c.update(fixed or {})
        c.update(extra(hf) if extra else {})
        return c

    return register(
        Family(
            name=name,
            kind=kind,
            count=count,
            dims=dims,
            style=style,
            hf_types=hf_types,
            hf_reader=reader,
            capabilities=frozenset(caps),
            default_seq=seq,
            summary=summary,
        )
    )


_BERT_KEYS = {
    "hidden": (("hidden_size",), ...),
    "layers": (("num_hidden_layers",), ...),
    "heads": (("num_attention_heads",), ...),
    "ff": (("intermediate_size",), ...),
    "vocab": (("vocab_size",), ...),
    "positions": (("max_position_embeddings",), 512),
    "type_vocab": (("type_vocab_size",), 2),
}
_family(
    "bert",
    "encoder",
    count_bert,
    "encoder",
    ("bert", "roberta", "xlm-roberta"),
    _BERT_KEYS,
    "BERT, RoBERTa",
    ("layernorm", "learned-positions"),
)
_family(
    "distilbert",
    "encoder",
    count_distilbert,
    "encoder",
    ("distilbert",),
    {
        "hidden": (("dim",), ...),
        "layers": (("n_layers",), ...),
        "heads": (("n_heads",), ...),
        "ff": (("hidden_dim",), ...),
        "vocab": (("vocab_size",), ...),
        "positions": (("max_position_embeddings",), 512),
    },
    "DistilBERT",
    ("layernorm", "learned-positions"),
)
_SEQ2SEQ_KEYS = {
    "hidden": (("d_model",), ...),
    "layers": (("encoder_layers",), ...),
    "dec_layers": (("decoder_layers",), None),
    "heads": (("encoder_attention_heads",), ...),
    "ff": (("encoder_ffn_dim",), ...),
    "vocab": (("vocab_size",), ...),
}
_family(
    "t5",
    "encdec",
    count_t5,
    "encdec",
    ("t5", "mt5"),
    {
        "hidden": (("d_model",), ...),
        "layers": (("num_layers",), ...),
        "dec_layers": (("num_decoder_layers",), None),
        "heads": (("num_heads",), ...),
        "d_kv": (("d_kv",), 64),
        "ff": (("d_ff",), ...),
        "vocab": (("vocab_size",), ...),
        "rel_buckets": (("relative_attention_num_buckets",), 32),
        "tied": (("tie_word_embeddings",), True),
    },
    "T5, Flan-T5, mT5",
    ("rmsnorm", "relative-positions"),
    dims=_t5_dims,
    extra=_t5_extra,
)
_family(
    "bart",
    "encdec",
    count_bart,
    "encdec",
    ("bart",),
    dict(_SEQ2SEQ_KEYS, positions=(("max_position_embeddings",), 1024)),
    "BART",
    ("layernorm",),
)
_family(
    "whisper",
    "encdec",
    count_whisper,
    "encdec",
    ("whisper",),
    dict(
        _SEQ2SEQ_KEYS,
        mels=(("num_mel_bins",), 80),
        source_positions=(("max_source_positions",), 1500),
        target_positions=(("max_target_positions",), 448),
    ),
    "Whisper (encoder over 30 s of audio: 1500 frames)",
    ("layernorm", "conv-frontend", "audio-input"),
    seq=1500,
)
