"""Activation tables traced from the implementations: what autograd keeps for backward in one
training forward pass of each family's real module code, per precision and attention kernel,
as bytes that grow with batch, sequence, widths and layers.

Needs torch and transformers (not the project's dependencies)::

    PYTHONPATH=. /work/venv-torch/bin/python calibration/trace_activations.py [--families llama,opt]

writes ``vram_estimator/data/activation_tables.json`` (the static path reads it, torch-free).

How: each family's Hugging Face class (the one ``model_type`` maps to) is built on the CPU from
small configurations (a seeded grid over hidden, MLP width, heads, head width, KV heads, layers,
batch, sequence and vocabulary), put in training mode, and run forward once under
``torch.autograd.graph.saved_tensors_hooks``; every saved storage counts once, parameters,
buffers and autocast's casts of parameters excluded (``calibration/saved_tensors.py``).  The
dimensions of each configuration are read back through the estimator's own family reader
(``db.model_from_hf_config``), so the fitted features are the ones the static path computes.

What the CPU would do differently from a GPU is replaced by what the CUDA kernels keep:

* ``F.dropout`` runs as ``torch.native_dropout`` (CUDA's layout: a bool mask per element; the CPU
  fallback keeps a mask in the input's dtype);
* ``F.scaled_dot_product_attention`` keeps what the kernel torch's CUDA dispatcher picks would keep
  (``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``): the flash kernel for half inputs
  without an explicit mask, else the memory-efficient one (masks and, on CUDA, GQA); both save q,
  k, v, the output (written as batch x seq x heads x dim, so the caller's transpose copies
  nothing) and the fp32 log-sum-exp (memory-efficient: rows padded to 32), plus the mask for the
  latter.  Dropout inside those kernels keeps nothing (the mask is regenerated from the RNG
  state).  Neither kernel materialises the probabilities; the CPU's own kernels differ.
* ``flash`` (``attn_implementation="flash_attention_2"``) cannot run on the CPU; its table is
  *derived* from the SDPA path: every SDPA call keeps the flash kernel's save set
  (``flash_attn_interface.FlashAttnFunc.forward``: q, k, v, out, softmax_lse; no probabilities)
  and no mask (the flash path takes none).  Flash kernels take fp16/bf16 only: no fp32 table.

The fit (relative least squares, exact on these integer byte counts up to rounding) is

    bytes = layers * b*s * (a_h*h + a_ff*ff + a_q*q + a_kv*kv + a_hs*heads*s + a_e*experts + a_1)
            + b*s * (f_h*h + f_v*vocab + f_1)

features that the grid cannot tell apart for a family (GPT-2's q = h) fold into the first one kept;
a larger held-out configuration checks each table.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import itertools
import json
import os
import random
import sys
import warnings

import numpy as np
import torch
import torch.nn.functional as F
import transformers as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from calibration.saved_tensors import saved_during  # noqa: E402
from vram_estimator.knowledge import db  # noqa: E402

OUT = os.path.join(ROOT, "vram_estimator", "data", "activation_tables.json")
PRECISIONS = ("fp32", "mixed", "half")
ATTENTIONS = ("eager", "sdpa", "flash")
LAYER_FEATURES = ("h", "ff", "q", "kv", "hs", "e", "1")
OUTSIDE_FEATURES = ("h", "v", "1")

_ORIG_SDPA = F.scaled_dot_product_attention
_ORIG_DROPOUT = F.dropout


# --------------------------------------------------------------------------- CUDA's save sets


class _KernelSaves(torch.autograd.Function):
    """The output of attention, saving what a fused CUDA kernel saves (no backward: the trace
    only counts)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, causal, scale, lse_rows, gqa):
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            out = _ORIG_SDPA(q, k, v, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=gqa)
        # both kernels write the output as (batch, seq, heads, dim) and return a transposed view,
        # so a caller's ``transpose(1, 2).contiguous()`` copies nothing
        out = out.transpose(1, 2).contiguous()
        lse = torch.empty(q.shape[0], q.shape[1], lse_rows, dtype=torch.float32)
        kept = [q, k, v, out, lse] + ([mask] if mask is not None else [])
        ctx.save_for_backward(*kept)
        return out.transpose(1, 2)

    @staticmethod
    def backward(ctx, *grads):  # pragma: no cover - never run
        raise NotImplementedError


MODE = {"attention": "sdpa"}  # "flash": every SDPA call keeps flash_attn's save set


def _cuda_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """torch's CUDA kernel choice (sdp_utils.cpp: flash for half inputs without a mask, else the
    memory-efficient kernel, which takes masks and GQA on CUDA), with that kernel's saved tensors."""
    if torch.is_autocast_enabled("cpu"):  # CUDA autocast runs SDPA in the low dtype (its fp16 list)
        low = torch.get_autocast_dtype("cpu")
        q, k, v = q.to(low), k.to(low), v.to(low)
    half = q.dtype in (torch.float16, torch.bfloat16)
    s = q.shape[-2]
    if MODE["attention"] == "flash" or (half and attn_mask is None and q.shape[-1] <= 256):
        return _KernelSaves.apply(q, k, v, None, is_causal, scale, s, enable_gqa)
    rows = -(-s // 32) * 32
    return _KernelSaves.apply(q, k, v, attn_mask, is_causal, scale, rows, enable_gqa)


def _cuda_dropout(input, p=0.5, training=True, inplace=False):
    """CUDA's dropout: ``native_dropout`` keeps a bool mask (the CPU fallback keeps a mask in the
    input's dtype)."""
    if not training or p <= 0.0 or input.numel() == 0:
        return input
    if p >= 1.0:
        return input * 0.0
    return torch.native_dropout(input, p, True)[0]


def cuda_layouts(on: bool) -> None:
    F.scaled_dot_product_attention = _cuda_sdpa if on else _ORIG_SDPA
    F.dropout = _cuda_dropout if on else _ORIG_DROPOUT


# --------------------------------------------------------------------------- families


def _gated(sz, **extra):
    kw = dict(hidden_size=sz["h"], intermediate_size=sz["ff"], num_attention_heads=sz["heads"],
              num_key_value_heads=sz["kv"], head_dim=sz["hd"], num_hidden_layers=sz["L"],
              vocab_size=sz["v"], max_position_embeddings=512, tie_word_embeddings=False, pad_token_id=0)
    kw.update(extra)
    return kw


def _moe(sz, **extra):
    return _gated(sz, num_local_experts=sz["e"], num_experts_per_tok=2, **extra)


def _qwen3_moe(sz):
    return _gated(sz, num_experts=sz["e"], num_experts_per_tok=2, moe_intermediate_size=sz["ff"],
                  decoder_sparse_step=1, mlp_only_layers=[])


def _llama4(sz):
    kw = _gated(sz, num_local_experts=sz["e"], num_experts_per_tok=1, intermediate_size_mlp=sz["ff"],
                interleave_moe_layer_step=1, attention_chunk_size=4096, no_rope_layers=[1] * sz["L"])
    return kw


def _deepseek(sz):
    kw = _gated(sz, n_routed_experts=sz["e"], num_experts_per_tok=2, moe_intermediate_size=sz["ff"],
                first_k_dense_replace=0, n_shared_experts=1, n_group=1, topk_group=1,
                q_lora_rank=sz["h"] // 2, kv_lora_rank=sz["h"] // 4, qk_nope_head_dim=sz["hd"],
                qk_rope_head_dim=sz["hd"] // 2, v_head_dim=sz["hd"])
    kw.pop("head_dim")
    kw["num_key_value_heads"] = sz["heads"]  # MLA expands K and V to every head
    return kw


def _gpt_oss(sz):
    return _gated(sz, num_local_experts=sz["e"], num_experts_per_tok=2, sliding_window=128,
                  layer_types=["full_attention"] * sz["L"])


def _gemma3(sz):
    return _gated(sz, sliding_window=16, layer_types=None)


def _gpt2(sz, **extra):
    kw = dict(n_embd=sz["h"], n_inner=sz["ff"], n_head=sz["heads"], n_layer=sz["L"], vocab_size=sz["v"],
              n_positions=512)
    kw.update(extra)
    return kw


def _neox(sz):
    return dict(hidden_size=sz["h"], intermediate_size=sz["ff"], num_attention_heads=sz["heads"],
                num_hidden_layers=sz["L"], vocab_size=sz["v"], max_position_embeddings=512)


def _opt(sz):
    return dict(hidden_size=sz["h"], ffn_dim=sz["ff"], num_attention_heads=sz["heads"],
                num_hidden_layers=sz["L"],
                vocab_size=sz["v"], word_embed_proj_dim=sz["h"], max_position_embeddings=512)


def _phi(sz):
    return dict(hidden_size=sz["h"], intermediate_size=sz["ff"], num_attention_heads=sz["heads"],
                num_key_value_heads=sz["kv"], num_hidden_layers=sz["L"], vocab_size=sz["v"],
                max_position_embeddings=512)


def _falcon(sz):
    # falcon-7b: multi-query, parallel attention and MLP, the old decoder layout, MLP 4h (what the
    # estimator reads)
    return dict(hidden_size=sz["h"], ffn_hidden_size=4 * sz["h"], num_attention_heads=sz["heads"],
                num_hidden_layers=sz["L"], vocab_size=sz["v"], multi_query=True, parallel_attn=True,
                new_decoder_architecture=False, max_position_embeddings=512)


def _bert(sz):
    return dict(hidden_size=sz["h"], intermediate_size=sz["ff"], num_attention_heads=sz["heads"],
                num_hidden_layers=sz["L"], vocab_size=sz["v"], max_position_embeddings=512)


def _distilbert(sz):
    return dict(dim=sz["h"], hidden_dim=sz["ff"], n_heads=sz["heads"], n_layers=sz["L"], vocab_size=sz["v"],
                max_position_embeddings=512)


def _vit(sz):
    return dict(hidden_size=sz["h"], intermediate_size=sz["ff"], num_attention_heads=sz["heads"],
                num_hidden_layers=sz["L"], patch_size=sz["patch"], image_size=sz["image"])


def _dinov2(sz):
    # the estimator reads DINOv2's MLP as 4h (every released size but giant's SwiGLU)
    return dict(hidden_size=sz["h"], mlp_ratio=4, num_attention_heads=sz["heads"],
                num_hidden_layers=sz["L"], patch_size=sz["patch"], image_size=sz["image"])


# family -> (model_type, class, config maker, what varies); "tokens": text ids, "pixels": images
FAMILIES = {
    "llama": ("llama", "LlamaForCausalLM", _gated, "gqa"),
    "smollm3": ("smollm3", "SmolLM3ForCausalLM", _gated, "gqa"),
    "mistral": ("mistral", "MistralForCausalLM", _gated, "gqa"),
    "mixtral": ("mixtral", "MixtralForCausalLM", _moe, "moe"),
    "qwen2": ("qwen2", "Qwen2ForCausalLM", _gated, "gqa"),
    "qwen3": ("qwen3", "Qwen3ForCausalLM", _gated, "gqa"),
    "qwen3_moe": ("qwen3_moe", "Qwen3MoeForCausalLM", _qwen3_moe, "moe"),
    "gemma": ("gemma", "GemmaForCausalLM", _gated, "gqa"),
    "gemma2": ("gemma2", "Gemma2ForCausalLM", _gated, "gqa"),
    "gemma3": ("gemma3_text", "Gemma3ForCausalLM", _gemma3, "gqa"),
    "phi3": ("phi3", "Phi3ForCausalLM", _gated, "gqa"),
    "llama4": ("llama4_text", "Llama4ForCausalLM", _llama4, "moe"),
    "deepseek_v3": ("deepseek_v3", "DeepseekV3ForCausalLM", _deepseek, "moe"),
    "gpt_oss": ("gpt_oss", "GptOssForCausalLM", _gpt_oss, "moe"),
    "gpt2": ("gpt2", "GPT2LMHeadModel", _gpt2, "mha"),
    "gpt_bigcode": ("gpt_bigcode", "GPTBigCodeForCausalLM", lambda sz: _gpt2(sz, multi_query=True), "mha"),
    "neox": ("gpt_neox", "GPTNeoXForCausalLM", _neox, "mha"),
    "opt": ("opt", "OPTForCausalLM", _opt, "mha"),
    "phi": ("phi", "PhiForCausalLM", _phi, "mha"),  # phi-1/1.5/2: as many KV heads as heads
    "falcon": ("falcon", "FalconForCausalLM", _falcon, "mha"),
    "bert": ("bert", "BertModel", _bert, "mha"),
    "distilbert": ("distilbert", "DistilBertModel", _distilbert, "mha"),
    "vit": ("vit", "ViTModel", _vit, "pixels"),
    "dinov2": ("dinov2", "Dinov2Model", _dinov2, "pixels"),
}


# --------------------------------------------------------------------------- grid and trace


def _grid(variant, seed=0):
    """A seeded sample of small configurations in which every feature varies on its own, and a
    larger held-out one."""
    rng = random.Random(seed)
    if variant == "pixels":
        full = [dict(h=h, ff=int(h * r), heads=n, hd=h // n, kv=n, L=L, b=b, image=im, patch=p, v=0, e=1)
                for h, r, n, L, b, im, p in itertools.product((64, 128), (2, 4), (2, 4), (1, 2), (2, 3),
                                                              (32, 64), (8, 16))]
        check = dict(h=192, ff=576, heads=6, hd=32, kv=6, L=3, b=2, image=96, patch=16, v=0, e=1)
    else:
        full = []
        # batch >= 2 and KV heads >= 2: with one sequence or one KV head some views need no copy
        # (a single-sequence run keeps up to one K/V-sized tensor per block less than the table)
        for h, ff, n, hd, kvs, L, b, s, v, e in itertools.product(
                (64, 128), (96, 256), (4, 8), (16, 32), ("some", "all"), (1, 2), (2, 3), (32, 64), (96, 160),
                (4, 8)):
            if variant in ("mha", "pixels"):
                hd = h // n
            kv = n if kvs == "all" or variant == "mha" else 2
            e = e if variant == "moe" else 1
            full.append(dict(h=h, ff=ff, heads=n, hd=hd, kv=kv, L=L, b=b, s=s, v=v, e=e))
        check = dict(h=192, ff=320, heads=6, hd=32, kv=2, L=3, b=2, s=96, v=128,
                     e=4 if variant == "moe" else 1)
        if variant == "mha":
            check["kv"] = 6
    rng.shuffle(full)
    unique = []
    for sz in full:
        if sz not in unique:
            unique.append(sz)
    return unique[:28], check


def build(family, sz, attention):
    """(model, inputs, static Model) of one configuration, or raise ValueError if unsupported."""
    model_type, cls_name, maker, variant = FAMILIES[family]
    kw = maker(sz)
    config = tf.AutoConfig.for_model(model_type, **kw)
    cls = getattr(tf, cls_name)
    impl = "sdpa" if attention == "flash" else attention
    torch.manual_seed(0)
    model = cls._from_config(config, attn_implementation=impl)
    ours = db.model_from_hf_config(dict(config.to_dict(), model_type=model_type))
    if ours is None:
        raise ValueError(f"{family}: the estimator does not read this config")
    if variant == "pixels":
        inputs = {"pixel_values": torch.randn(sz["b"], 3, sz["image"], sz["image"])}
    else:
        inputs = {"input_ids": torch.randint(0, sz["v"], (sz["b"], sz["s"]))}
    return model, inputs, ours


def features(sz, ours, variant):
    """Totals of each feature over one forward: per-layer ones times layers and tokens."""
    d = ours.dims
    if variant == "pixels":
        tokens_per = (sz["image"] // sz["patch"]) ** 2 + 1
    else:
        tokens_per = sz["s"]
    T, L = sz["b"] * tokens_per, d.layers
    experts = ours.config.get("experts", 1)
    per_layer = dict(h=d.hidden, ff=d.ff, q=d.q_dim, kv=d.kv_dim, hs=d.heads * tokens_per, s=tokens_per,
                     heads=d.heads, rep=d.q_dim if d.kv_heads < d.heads else 0, e=experts,
                     e_ff=experts * ours.config.get("moe_ff", ours.config.get("ff", 0)), one=1)
    out = {f"layer.{k if k != 'one' else '1'}": L * T * v for k, v in per_layer.items()}
    out.update({"outside.h": T * d.hidden, "outside.v": T * d.vocab, "outside.1": T,
                "outside.s": T * tokens_per,
                "outside.hd_pos": tokens_per * d.head_dim, "outside.h_pos": tokens_per * d.hidden})
    if variant == "pixels":
        out["outside.pix"] = sz["b"] * 3 * sz["image"] ** 2
    return out


def trace(family, sz, precision, attention):
    """Saved bytes of one training forward, and the features of the configuration."""
    model, inputs, ours = build(family, sz, attention)
    if precision == "half":
        model = model.to(torch.bfloat16)
        inputs = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in inputs.items()}
    model.train()
    MODE["attention"] = "flash" if attention == "flash" else "sdpa"
    total, out = saved_during(model, lambda: model(**inputs), autocast=precision == "mixed")
    del out
    model = None  # noqa: F841  (free it before collecting)
    gc.collect()  # the autograd graphs of ~700 traces hold reference cycles
    return total, features(sz, ours, FAMILIES[family][3])


# --------------------------------------------------------------------------- fit


def fit(rows):
    """Relative least squares over the features the grid can tell apart (greedy by rank, in
    the order of ``ORDER``); returns ({feature: bytes}, largest relative residual)."""
    names = [n for n in ORDER if any(r[1].get(n) for r in rows)]
    X = np.array([[r[1].get(n, 0.0) for n in names] for r in rows], dtype=float)
    y = np.array([r[0] for r in rows], dtype=float)
    X, y = X / y[:, None], np.ones_like(y)
    kept = []
    for j in range(len(names)):
        if np.linalg.matrix_rank(X[:, kept + [j]], tol=1e-9) > len(kept):
            kept.append(j)
    coef, *_ = np.linalg.lstsq(X[:, kept], y, rcond=None)
    residual = float(np.max(np.abs(X[:, kept] @ coef - 1.0)))
    return {names[j]: round(float(c), 4) for j, c in zip(kept, coef) if abs(c) > 1e-3}, residual


ORDER = ("layer.h", "layer.ff", "layer.hs", "layer.q", "layer.kv", "layer.heads", "layer.rep", "layer.1",
         "layer.e", "layer.s", "layer.e_ff",
         "outside.h", "outside.v", "outside.pix", "outside.1", "outside.hd_pos", "outside.h_pos", "outside.s")


def predict(coef, feats):
    return sum(c * feats.get(n, 0.0) for n, c in coef.items())


def table(family, precision, attention):
    """One fitted table, checked on the held-out configuration."""
    variant = FAMILIES[family][3]
    grid, check = _grid(variant)
    rows = [trace(family, sz, precision, attention) for sz in grid]
    coef, residual = fit(rows)
    measured, feats = trace(family, check, precision, attention)
    predicted = predict(coef, feats)
    split = {"layer": {}, "outside": {}}
    for name, c in coef.items():
        part, feature = name.split(".")
        split[part][feature] = c
    return dict(split, fit_configs=len(rows), fit_max_residual_pct=round(100 * residual, 3),
                check=dict(config=check, measured=measured, predicted=round(predicted),
                           error_pct=round(100 * (predicted - measured) / measured, 3)))


def supports(cls, attention, precision="fp32"):
    if attention == "eager":
        return True
    if attention == "flash" and precision == "fp32":
        return False  # flash kernels take fp16/bf16 only
    return bool(getattr(cls, "_supports_sdpa", False))


def family_entry(family):
    model_type, cls_name, _, _ = FAMILIES[family]
    cls = getattr(tf, cls_name)
    entry = dict(model_type=model_type, implementation=f"transformers {tf.__version__} {cls_name}",
                 default_attention="sdpa" if supports(cls, "sdpa") else "eager",
                 derived={"flash": "SDPA path with flash_attn's save set (not runnable on the CPU)"},
                 tables={})
    for precision in PRECISIONS:
        entry["tables"][precision] = {}
        for attention in ATTENTIONS:
            if not supports(cls, attention, precision):
                continue
            entry["tables"][precision][attention] = table(family, precision, attention)
    return entry


def provenance(argv):
    return dict(library="transformers", library_version=tf.__version__, torch_version=torch.__version__,
                command="PYTHONPATH=. python calibration/trace_activations.py " + " ".join(argv),
                date=datetime.date.today().isoformat(),
                method=__doc__.split("\n\n")[1].replace("\n", " "),
                layer_features="per layer per token: h hidden, ff MLP width (MoE: the active experts' "
                               "widths), "
                               "q = heads x head_dim, kv = KV heads x head_dim, hs = heads x sequence, "
                               "heads (the kernels' log-sum-exp), rep = q when KV heads are fewer than heads "
                               "(repeat_kv "
                               "copies), s sequence, e = experts, e_ff = experts x expert width (an "
                               "implementation that runs every expert on every token), 1",
                outside_features="per token: h hidden, v vocabulary (logit-side saves such as a soft-cap's "
                                 "tanh; "
                                 "the loss is not traced), s sequence (a mask per sequence pair), 1; "
                                 "hd_pos / h_pos: head_dim / hidden per sequence position (rotary tables, "
                                 "interpolated position embeddings: shared by the batch); pix: per input "
                                 "pixel value (vision)",
                cuda_layouts="F.dropout as native_dropout (bool mask); F.scaled_dot_product_attention with "
                             "the save set of the CUDA kernel torch would pick",
                not_traced="checkpointing (block inputs, hand-priced), the loss and its logits "
                           "(the logits term), encoder-decoders, CLIP, CNNs and diffusion models "
                           "(hand-priced)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="", help="comma-separated subset (default: all)")
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    tf.logging.set_verbosity_error()
    chosen = [f for f in args.families.split(",") if f] or list(FAMILIES)
    shown = ["--families", args.families] if args.families else []
    doc = {"_provenance": provenance(shown), "families": {}}
    if os.path.exists(args.out) and args.families:  # redo some families, keep the rest
        with open(args.out, encoding="utf-8") as handle:
            earlier = json.load(handle)
        doc["families"] = earlier.get("families", {})
        doc["_provenance"] = dict(earlier.get("_provenance", {}) or doc["_provenance"])
        doc["_provenance"].setdefault("updated", []).append(provenance(shown)["command"] + " on "
                                                            + datetime.date.today().isoformat())
    cuda_layouts(True)
    try:
        for family in chosen:
            try:
                doc["families"][family] = family_entry(family)
            except Exception as exc:  # a family the library cannot build at these sizes
                print(f"{family}: not traced ({type(exc).__name__}: {exc})", file=sys.stderr)
                continue
            worst = max(abs(t["check"]["error_pct"]) for p in doc["families"][family]["tables"].values()
                        for t in p.values())
            print(f"{family}: held-out check within {worst:.2f} %", file=sys.stderr)
    finally:
        cuda_layouts(False)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=1, sort_keys=True)
        handle.write("\n")


if __name__ == "__main__":
    main()
