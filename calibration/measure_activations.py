"""Measure saved-activation bytes on CPU for small configs of each family and compare them with
vram_estimator's activation term.

Needs torch and transformers (not the project's dependencies): run it in a throwaway venv::

    python -m venv /tmp/venv-torch && /tmp/venv-torch/bin/pip install torch transformers
    PYTHONPATH=. /tmp/venv-torch/bin/python calibration/measure_activations.py [--fit]

What is measured: every tensor autograd saves for backward during one forward pass, seen through
``torch.autograd.graph.saved_tensors_hooks`` and counted once per storage (views and re-saves of
the same memory count once).  Parameters and the autocast casts of parameters are excluded
(they are the ``weights`` and ``autocast cache`` terms).  Checkpointing is measured with
reentrant ``torch.utils.checkpoint`` (it saves each block's inputs through the same hooks); the
one-block recompute during backward is not part of this number and is reported separately by
the estimator.

SDPA is measured without attention-probability dropout: on CUDA the flash / memory-efficient
kernels apply dropout without storing the probabilities, while the CPU math fallback would store
them; eager attention keeps the model's dropout (its mask is stored on any device).

Configs: fp32 and bf16 autocast (plus pure bf16 weights), eager and SDPA attention, with and
without checkpointing, for a Llama-style decoder, GPT-2, BERT, BART (encoder-decoder with
cross-attention), ViT, and ResNet-50 / ConvNeXt-T (CNN; eager only, no checkpointing).
``--fit`` refits the transformer coefficients on the "fit" configs and writes them to
vram_estimator/data/coefficients.json; every run writes calibration/activations.json with the
measured bytes, the estimate and the error of each config ("fit" and held-out "check" configs).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

import torch
import transformers as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from calibration.common import FAMILY, est_config, estimate_of, reestimate  # noqa: E402,F401
from calibration.saved_tensors import saved_during  # noqa: E402
from vram_estimator.costs import estimate as E  # noqa: E402

PRECISIONS = ("fp32", "bf16-mixed", "bf16")


def saved_bytes(model, make_input, precision, checkpointing):
    model.train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    inputs = make_input()
    total, out = saved_during(model, lambda: model(**inputs), autocast=precision == "bf16-mixed")
    del out
    return total


def llama(h, layers, heads, ff, kv, seq, batch, attention, hd=None):
    kw = dict(
        vocab_size=256,
        hidden_size=h,
        intermediate_size=ff,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=4096,
        attn_implementation=attention,
    )
    if hd:
        kw["head_dim"] = hd
    cfg = tf.LlamaConfig(**kw)
    model = tf.LlamaModel(cfg)
    ids = torch.randint(0, 256, (batch, seq))
    est_cfg = dict(hidden=h, layers=layers, heads=heads, kv_heads=kv, ff=ff, vocab=256, tied=False)
    if hd:
        est_cfg["head_dim"] = hd
    return model, (lambda: {"input_ids": ids}), "llama", est_cfg


def gpt2(h, layers, heads, ff, kv, seq, batch, attention, hd=None):
    cfg = tf.GPT2Config(
        n_embd=h,
        n_layer=layers,
        n_head=heads,
        n_inner=ff,
        vocab_size=256,
        n_positions=4096,
        attn_implementation=attention,
        attn_pdrop=0.1 if attention == "eager" else 0.0,
    )
    model = tf.GPT2Model(cfg)
    ids = torch.randint(0, 256, (batch, seq))
    return (
        model,
        (lambda: {"input_ids": ids}),
        "gpt2",
        dict(hidden=h, layers=layers, heads=heads, ff=ff, vocab=256, positions=4096),
    )


def bert(h, layers, heads, ff, kv, seq, batch, attention, hd=None):
    cfg = tf.BertConfig(
        hidden_size=h,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ff,
        vocab_size=256,
        max_position_embeddings=4096,
        attn_implementation=attention,
        attention_probs_dropout_prob=0.1 if attention == "eager" else 0.0,
    )
    model = tf.BertModel(cfg, add_pooling_layer=False)
    ids = torch.randint(0, 256, (batch, seq))
    return (
        model,
        (lambda: {"input_ids": ids}),
        "bert",
        dict(hidden=h, layers=layers, heads=heads, ff=ff, vocab=256, positions=4096),
    )


def bart(h, layers, heads, ff, dec_len, seq, batch, attention, hd=None):
    """BART; the grid's ``kv`` slot carries the decoder length for this family."""
    cfg = tf.BartConfig(
        d_model=h,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_ffn_dim=ff,
        decoder_ffn_dim=ff,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        vocab_size=256,
        max_position_embeddings=4096,
        attn_implementation=attention,
    )
    model = tf.BartModel(cfg)
    ids = torch.randint(3, 256, (batch, seq))
    dec = torch.randint(3, 256, (batch, dec_len))
    return (
        model,
        (lambda: {"input_ids": ids, "decoder_input_ids": dec}),
        "bart",
        dict(hidden=h, layers=layers, dec_layers=layers, heads=heads, ff=ff, vocab=256, positions=4096),
    )


def vit(h, layers, heads, ff, kv, seq, batch, attention, hd=None):
    image = {16: 64, 32: 96, 64: 128}.get(seq, 64)
    cfg = tf.ViTConfig(
        hidden_size=h,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ff,
        patch_size=16,
        image_size=image,
        attn_implementation=attention,
    )
    model = tf.ViTModel(cfg, add_pooling_layer=False)
    px = torch.randn(batch, 3, image, image)
    return (
        model,
        (lambda: {"pixel_values": px}),
        "vit",
        dict(hidden=h, layers=layers, heads=heads, ff=ff, patch=16, image=image, classes=1000),
    )


BUILDERS = {"decoder_gated": llama, "decoder_gelu": gpt2, "encoder": bert, "encdec": bart, "vit": vit}


def grid(style):
    """A seeded fractional factorial over hidden, MLP width, heads, layers, sequence and batch
    (MLP width and heads vary independently of hidden so that every coefficient is identifiable),
    and three larger held-out "check" configs."""
    import random

    rng = random.Random(0)
    full = list(itertools.product((64, 128), (2.0, 4.0), (2, 4), (1, 2), (32, 64), (1, 2)))
    rng.shuffle(full)
    fit = []
    for h, ratio, heads, layers, seq, batch in full[:24]:
        fit.append(
            dict(
                h=h,
                heads=heads,
                ff=int(h * ratio),
                kv=heads if style != "decoder_gated" else max(1, heads // 2),
                layers=layers,
                seq=seq,
                batch=batch,
            )
        )
    check = []
    for h, heads, layers, seq, batch in ((192, 6, 3, 48, 3), (256, 8, 2, 96, 2), (96, 3, 4, 40, 1)):
        check.append(
            dict(
                h=h,
                heads=heads,
                ff=(int(h * 3.5) if style == "decoder_gated" else 4 * h),
                kv=heads if style != "decoder_gated" else heads // 3 or 1,
                layers=layers,
                seq=seq,
                batch=batch,
            )
        )
    if style == "encdec":  # the kv slot carries the decoder length: S or S/2
        for i, c in enumerate(fit + check):
            c["kv"] = c["seq"] if i % 2 == 0 else c["seq"] // 2
    # for ViT, seq selects the image side: 16 -> 64px (17 tokens), 32 -> 96px (37), 64 -> 128px (65)
    if style == "vit":
        for c in fit + check:
            c["seq"] = {32: 16, 64: 32, 48: 32, 96: 64, 40: 16}[c["seq"]]
    return fit, check


def run(style, attention, precision, ckpt, c):
    builder = BUILDERS[style]
    torch.manual_seed(0)
    model, make_input, family, est_cfg = builder(
        c["h"], c["layers"], c["heads"], c["ff"], c["kv"], c["seq"], c["batch"], attention
    )
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    measured = saved_bytes(model, make_input, precision, ckpt)
    image = est_cfg.get("image", 224)
    estimate = estimate_of(family, est_cfg, c["batch"], c["seq"], image, precision, attention, ckpt)
    return measured, estimate


def features(style, c):
    """Regressors matching estimate._layer_bytes (summed over layers and tokens)."""
    if style == "vit":
        n = (({16: 64, 32: 96, 64: 128}[c["seq"]]) // 16) ** 2 + 1
        tokens, s = c["batch"] * n, n
    else:
        tokens, s = c["batch"] * c["seq"], c["seq"]
    L = c["layers"]
    return dict(
        h=L * tokens * c["h"],
        ff=L * tokens * c["ff"],
        s=L * tokens * c["heads"] * s,
        ss=L * tokens * s,
        final=tokens * c["h"],
        tok=tokens,
    )


def _lstsq(rows, names, style, target):
    import numpy as np

    X = np.array([[features(style, r["config"])[n] for n in names] for r in rows], float)
    y = np.array([target(r) for r in rows], float)
    w = 1.0 / np.array([r["measured"] for r in rows], float)  # relative error: every config weighs the same
    sol, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
    out = {n: round(float(v), 4) for n, v in zip(names, sol)}
    negative = [n for n in names if out[n] < 0 and n in ("ss", "tok", "final")]
    if negative:  # a negative storage term is noise: drop it and refit the rest
        kept = [n for n in names if n not in negative]
        out = dict(_lstsq(rows, kept, style, target), **{n: 0.0 for n in negative})
        return {n: out[n] for n in names}
    if any(v < 0 for v in out.values()):
        print(f"note: negative coefficient in {style} {names}: {out}", file=sys.stderr)
    return out


def enc_features(c):
    """Regressors of the encoder-decoder activation model (decoder length in c['kv'])."""
    L, b, S, D, h, ff, heads = c["layers"], c["batch"], c["seq"], c["kv"], c["h"], c["ff"], c["heads"]
    return dict(
        enc_h=L * b * S * h, enc_ff=L * b * S * ff, dec_h=L * b * D * h, dec_ff=L * b * D * ff,
        tok=b * (S + D), final=b * (S + D) * h, enc_s=L * b * S * heads * S,
        dec_s=L * b * D * heads * D, x_s=L * b * D * heads * S, ckpt=L * b * (S + D) * h,
    )


def fit_encdec(rows):
    """Encoder-decoder coefficients per precision: SDPA (per-token terms of each stack, the
    encoder's cross-attention K/V folded into enc_h), eager (self and cross score terms on the
    SDPA residual), checkpointed (stored block inputs of both stacks)."""
    import numpy as np

    def lsq(sel, names, target):
        X = np.array([[enc_features(r["config"])[n] for n in names] for r in sel], float)
        y = np.array([target(r) for r in sel], float)
        w = 1.0 / np.array([r["measured"] for r in sel], float)
        sol, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
        return {n: round(float(v), 4) for n, v in zip(names, sol)}

    coeffs = {}
    for precision in PRECISIONS:
        pc = E.precision_class(precision)
        sel = [r for r in rows if r["precision"] == precision and r["split"] == "fit"]
        sdpa = [r for r in sel if r["attention"] == "sdpa" and not r["checkpointing"]]
        eager = [r for r in sel if r["attention"] == "eager" and not r["checkpointing"]]
        ckpt = [r for r in sel if r["checkpointing"]]
        base = lsq(sdpa, ["enc_h", "enc_ff", "dec_h", "dec_ff", "tok", "final"], lambda r: r["measured"])

        def rest(r):
            f = enc_features(r["config"])
            return r["measured"] - sum(base[n] * f[n] for n in base)

        e = lsq(eager, ["enc_s", "dec_s", "x_s"], rest) if eager else {}
        k = lsq(ckpt, ["ckpt", "tok", "final"], lambda r: r["measured"]) if ckpt else {}
        coeffs[pc] = dict(
            base, **e, ckpt=k.get("ckpt", 4.0), ckpt_tok=k.get("tok", 0.0), ckpt_final=k.get("final", 0.0),
            source="fitted to calibration/activations.json (BART)",
        )
    return coeffs


def fit_style(style, rows):
    """Three fits per precision: SDPA (per-token h and ff terms, the after-the-stack term), eager
    (the score term on the SDPA residual), checkpointed (stored block inputs, a per-block
    sequence-squared mask term, and the after-the-stack term)."""
    coeffs = {}
    for precision in PRECISIONS:
        pc = E.precision_class(precision)
        out = dict(E.coefficients()["transformer"][style][pc])
        sel = [r for r in rows if r["precision"] == precision and r["split"] == "fit"]
        sdpa = [r for r in sel if r["attention"] == "sdpa" and not r["checkpointing"]]
        eager = [r for r in sel if r["attention"] == "eager" and not r["checkpointing"]]
        ckpt = [r for r in sel if r["checkpointing"] and r["attention"] == "sdpa"]
        base = _lstsq(sdpa, ["h", "ff", "final", "tok"], style, lambda r: r["measured"])
        out.update(h=base["h"], ff=base["ff"], sq=0.0, q=0.0, eq=0.0, final=base["final"], tok=base["tok"])

        def rest(r):
            f = features(style, r["config"])
            return r["measured"] - sum(base[n] * f[n] for n in ("h", "ff", "final", "tok"))

        if eager:
            e = _lstsq(eager, ["s", "h"], style, rest)
            out.update(s=e["s"], eq=e["h"])  # eq multiplies q_dim (= hidden in these classes)
        if ckpt:
            k = _lstsq(ckpt, ["h", "ss", "final", "tok"], style, lambda r: r["measured"])
            out.update(ckpt=k["h"], ckpt_ss=k["ss"], ckpt_final=k["final"], ckpt_tok=k["tok"])
            ckpt_eager = [r for r in sel if r["checkpointing"] and r["attention"] == "eager"]

            def ck_rest(r):  # eager attention also stores a materialised mask with each block input
                f = features(style, r["config"])
                return r["measured"] - (
                    k["h"] * f["h"] + k["ss"] * f["ss"] + k["final"] * f["final"] + k["tok"] * f["tok"]
                )

            if ckpt_eager:
                out["eager_ckpt_ss"] = _lstsq(ckpt_eager, ["ss"], style, ck_rest)["ss"]
        out["source"] = "fitted to calibration/activations.json"
        coeffs[pc] = out
    return coeffs


def refit():
    """Refit every fitted family from the committed measurements (no new measurement)."""
    path = os.path.join(ROOT, "calibration", "activations.json")
    with open(path) as handle:
        doc = json.load(handle)
    cpath = os.path.join(ROOT, "vram_estimator", "data", "coefficients.json")
    with open(cpath) as handle:
        co = json.load(handle)
    for style in ("decoder_gated", "decoder_gelu", "encoder", "vit"):
        co["transformer"][style] = fit_style(style, [r for r in doc["rows"] if r["style"] == style])
    with open(cpath, "w") as handle:
        json.dump(co, handle, indent=1)
    reestimate(doc["rows"])
    with open(path, "w") as handle:
        json.dump(doc, handle, indent=0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--styles", default="decoder_gated,decoder_gelu,encoder,vit,encdec")
    ap.add_argument("--refit-only", action="store_true", help="refit from calibration/activations.json")
    args = ap.parse_args()
    if args.refit_only:
        refit()
        return
    rows = []
    t0 = time.time()
    styles = args.styles.split(",")
    path = os.path.join(ROOT, "calibration", "activations.json")
    for style in styles:
        fit, check = grid(style)
        for split, configs in (("fit", fit), ("check", check)):
            for c in configs:
                for precision in PRECISIONS:
                    for attention in ("eager", "sdpa"):
                        for ckpt in (False, True):
                            try:
                                measured, estimate = run(style, attention, precision, ckpt, c)
                            except Exception as exc:  # a combination this transformers build does not support
                                print(
                                    f"skip {style} {attention} {precision} ckpt={ckpt}: {exc}",
                                    file=sys.stderr,
                                )
                                continue
                            rows.append(
                                dict(
                                    style=style,
                                    split=split,
                                    config=c,
                                    precision=precision,
                                    attention=attention,
                                    checkpointing=ckpt,
                                    measured=measured,
                                    estimate=estimate,
                                )
                            )
        if args.fit and style == "encdec":
            co = json.load(open(os.path.join(ROOT, "vram_estimator", "data", "coefficients.json")))
            co["encdec"] = fit_encdec([r for r in rows if r["style"] == style])
            with open(os.path.join(ROOT, "vram_estimator", "data", "coefficients.json"), "w") as handle:
                json.dump(co, handle, indent=1)
            E.coefficients.cache_clear()
        if args.fit and style != "encdec":
            co = json.load(open(os.path.join(ROOT, "vram_estimator", "data", "coefficients.json")))
            co["transformer"][style] = fit_style(style, [r for r in rows if r["style"] == style])
            with open(os.path.join(ROOT, "vram_estimator", "data", "coefficients.json"), "w") as handle:
                json.dump(co, handle, indent=1)
            E.coefficients.cache_clear()
        print(
            f"{style}: {len([r for r in rows if r['style'] == style])} configs, {time.time() - t0:.0f}s",
            file=sys.stderr,
        )
    if os.path.exists(path):  # keep the other families' rows from an earlier run
        with open(path) as handle:
            rows = [r for r in json.load(handle)["rows"] if r["style"] not in styles] + rows
    reestimate(rows)
    with open(path, "w") as handle:
        json.dump(dict(torch=torch.__version__, transformers=tf.__version__, rows=rows), handle, indent=0)
    worst = max(abs(r["error_pct"]) for r in rows)
    print(f"{len(rows)} configs, worst |error| {worst:.1f}%", file=sys.stderr)


if __name__ == "__main__":
    main()
