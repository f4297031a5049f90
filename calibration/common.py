"""Torch-free helpers shared by the calibration scripts and the calibration tests: the
estimator's view of a calibration config, and re-estimation of measured rows."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from vram_estimator.costs import activations as A  # noqa: E402
from vram_estimator.knowledge import db  # noqa: E402
from vram_estimator.costs import estimate as E  # noqa: E402
from vram_estimator.knowledge.families import family as family_entry  # noqa: E402


def estimate_of(family, cfg, batch, seq, image, precision, attention, ckpt, dec_seq=None):
    """The hand-priced activation term (``coefficients.json``, what families without a traced
    table use) for a calibration config of ``family`` (fully trainable): the rows of
    activations.json measure those coefficients on the CPU's own layouts; the traced tables have
    their own check (calibration/trace_activations.py, tests/test_vram_activation_tables.py)."""
    from dataclasses import replace

    from vram_estimator.reading.config_comments import Value

    model = db.Model(key="calibration", family=family_entry(family), config=cfg)
    given = dict(model=model, batch=batch, seq=seq, image=image, precision=precision, attention=attention,
                 checkpointing="on" if ckpt else "off", decoder_seq=dec_seq, mode="train")
    s = E.setup({k: Value(v, "calibration") for k, v in given.items() if v is not None})
    return A.ACTIVATION_MODELS[s.model.kind](replace(s.shape(), family="")).stored


FAMILY = {"decoder_gated": "llama", "decoder_gelu": "gpt2", "encoder": "bert", "encdec": "bart", "vit": "vit"}


def est_config(style, c):
    """The estimator's view of a calibration config (torch-free; mirrors the builders above)."""
    h, layers, heads, ff = c["h"], c["layers"], c["heads"], c["ff"]
    if style == "decoder_gated":
        return dict(hidden=h, layers=layers, heads=heads, kv_heads=c["kv"], ff=ff, vocab=256, tied=False)
    if style == "decoder_gelu":
        return dict(hidden=h, layers=layers, heads=heads, ff=ff, vocab=256, positions=4096)
    if style == "encoder":
        return dict(hidden=h, layers=layers, heads=heads, ff=ff, vocab=256, positions=4096)
    if style == "encdec":
        return dict(hidden=h, layers=layers, dec_layers=layers, heads=heads, ff=ff, vocab=256, positions=4096)
    image = {16: 64, 32: 96, 64: 128}.get(c["seq"], 64)
    return dict(hidden=h, layers=layers, heads=heads, ff=ff, patch=16, image=image, classes=1000)


def reestimate(rows):
    """Recompute every row's estimate and error with the current coefficients (torch-free)."""
    A.coefficients.cache_clear()
    for r in rows:
        cfg = est_config(r["style"], r["config"])
        r["family"] = FAMILY[r["style"]]
        dec = r["config"]["kv"] if r["style"] == "encdec" else None
        r["estimate"] = estimate_of(
            r["family"],
            cfg,
            r["config"]["batch"],
            r["config"]["seq"],
            cfg.get("image", 224),
            r["precision"],
            r["attention"],
            r["checkpointing"],
            dec_seq=dec,
        )
        r["error_pct"] = round((r["estimate"] - r["measured"]) / r["measured"] * 100, 2)
    return rows


def refresh_rows(path=os.path.join(ROOT, "calibration", "activations.json")):
    """Rewrite the estimate and error of every measured row with the current model (the
    measurements themselves are untouched)."""
    import json

    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    data["rows"] = reestimate(data["rows"])
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1)
    return data["rows"]


if __name__ == "__main__":
    rows = refresh_rows()
    print(f"{len(rows)} rows re-estimated; worst |error| {max(abs(r['error_pct']) for r in rows):.2f} %")


# --------------------------------------------------------------------------- runtime rows

LORA_SETS = {
    "qv": ("q_proj", "v_proj"),
    "all": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
}
CPU_MASK_BYTES = 0  # on the CPU dropout keeps its noise in the input's dtype (0: that dtype)


def runtime_model(size_cfg, family="llama"):
    """The estimator's model for a calibration/runtime.json size (mirrors measure_runtime.py)."""
    c = size_cfg
    cfg = dict(hidden=c["h"], layers=c["layers"], heads=c["heads"], kv_heads=c["kv"], ff=c["ff"])
    cfg["vocab"] = c["vocab"]
    cfg["tied"] = family == "gemma2"
    if family == "gemma2":
        cfg.update(norms_per_layer=4, head_dim=c["h"] // c["heads"])
    return db.Model(key="calibration", family=family_entry(family), config=cfg)


def runtime_setup(row, size_cfg):
    """The estimator's Setup for a measured runtime row (torch-free)."""
    from vram_estimator.reading.config_comments import Value

    given = dict(
        model=runtime_model(size_cfg, row.get("family", "llama")),
        batch=size_cfg["batch"],
        seq=size_cfg["seq"],
        precision="nf4" if row.get("quant") else row["precision"],
        attention=row.get("attention", "sdpa"),
        checkpointing="on" if row.get("ckpt") else "off",
        mode="train",
    )
    if row.get("lora"):
        given.update(lora=8, lora_targets=LORA_SETS[row["lora"]], lora_dropout=row.get("dropout", 0.0))
    return E.setup({k: Value(v, "calibration") for k, v in given.items()})


def runtime_stack_estimate(row, size_cfg):
    """The activation term of the decoder stack for a runtime row, with the CPU's dropout mask."""
    from dataclasses import replace

    s = runtime_setup(row, size_cfg)
    shape = s.shape()
    shape = replace(shape, adapters=replace(shape.adapters, mask_bytes=CPU_MASK_BYTES))
    return A.ACTIVATION_MODELS["decoder"](shape).stored - head_side_bytes(shape)


def head_side_bytes(shape):
    """What a traced table adds on the logits side (Gemma 2's final soft-cap keeps its tanh):
    outside the decoder stack (``model.model``) that calibration/runtime.json measured."""
    found = A.traced_table(shape.family, shape.pc, shape.attention)
    if not found or shape.checkpointing:
        return 0.0
    return found[0]["outside"].get("v", 0.0) * shape.dims.vocab * shape.batch * shape.seq
