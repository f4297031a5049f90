"""Measure saved-activation bytes per image for the CNN families (ResNet, ConvNeXt) on CPU.

Uses the Hugging Face implementations (``ResNetModel``/``ConvNextModel`` + a linear head),
whose parameter counts equal torchvision's (checked in tests/test_vram_db.py).  The per-image
bytes at 224x224 are measured once per model and precision ("fit") and written to
vram_estimator/data/coefficients.json; other image sizes and batches are then checked against
the (image/224)^2 scaling the estimator uses ("check").  Results go to calibration/cnn.json.

    PYTHONPATH=. /tmp/venv-torch/bin/python calibration/measure_cnn.py
"""

from __future__ import annotations

import json
import os
import sys

import torch
import transformers as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from calibration.measure_activations import saved_bytes  # noqa: E402
from vram_estimator.knowledge import db  # noqa: E402
from vram_estimator.costs import estimate as E  # noqa: E402


def build(key):
    c = db.model_entry(key)["config"]
    if key.startswith("resnet"):
        bottleneck = c["block"] == "bottleneck"
        cfg = tf.ResNetConfig(
            depths=c["stages"],
            layer_type="bottleneck" if bottleneck else "basic",
            hidden_sizes=[256, 512, 1024, 2048] if bottleneck else [64, 128, 256, 512],
            num_labels=1000,
            downsample_in_bottleneck=False,
        )
        return tf.ResNetForImageClassification(cfg)
    cfg = tf.ConvNextConfig(hidden_sizes=c["dims"], depths=c["depths"], num_labels=1000)
    return tf.ConvNextForImageClassification(cfg)


def main():
    path = os.path.join(ROOT, "vram_estimator", "data", "coefficients.json")
    co = json.load(open(path))
    rows = []
    for key in ("resnet18", "resnet50", "convnext-tiny"):
        torch.manual_seed(0)
        for precision in ("fp32", "bf16-mixed", "bf16"):
            model = build(key)
            if precision == "bf16":
                model = model.to(torch.bfloat16)
            dtype = torch.bfloat16 if precision == "bf16" else torch.float32
            px = torch.randn(1, 3, 224, 224, dtype=dtype)
            per_image = saved_bytes(model, lambda: {"pixel_values": px}, precision, False)
            entry = co["cnn"].setdefault(key, {})
            entry[E.precision_class(precision)] = per_image
            entry["source"] = "measured (calibration/measure_cnn.py, per image at 224)"
            rows.append(
                dict(model=key, precision=precision, image=224, batch=1, split="fit", measured=per_image)
            )
            for image, batch in ((160, 2), (288, 2)):
                px2 = torch.randn(batch, 3, image, image, dtype=dtype)
                measured = saved_bytes(model, lambda: {"pixel_values": px2}, precision, False)
                rows.append(
                    dict(
                        model=key,
                        precision=precision,
                        image=image,
                        batch=batch,
                        split="check",
                        measured=measured,
                    )
                )
    with open(path, "w") as handle:
        json.dump(co, handle, indent=1)
    E.coefficients.cache_clear()
    for r in rows:
        stored = E.activation_bytes(r["model"], r["batch"], 0, r["image"], r["precision"], "eager").stored
        r["estimate"] = stored
        r["error_pct"] = round((stored - r["measured"]) / r["measured"] * 100, 2)
    with open(os.path.join(ROOT, "calibration", "cnn.json"), "w") as handle:
        json.dump(dict(torch=torch.__version__, transformers=tf.__version__, rows=rows), handle, indent=1)
    print(max(abs(r["error_pct"]) for r in rows))


if __name__ == "__main__":
    main()
