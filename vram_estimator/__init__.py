"""vram_estimator: a static peak-memory estimator for PyTorch training, inference and generation.

It reads a script's source (never imports or runs it) and inline ``# vram:`` comments, looks the
model and GPU up in package data (``data/models.json``, ``data/gpus.json``), and projects the peak
device memory as an interval.  It reports through flake8 (codes TPF100-TPF102) and its own CLI
(``vram-estimate``).  Nothing here imports torch or transformers except the optional
:mod:`vram_estimator.guard`.

Public entry points::

    from vram_estimator import estimate_source, estimate_config
    result = estimate_source(open("train.py").read(), filename="train.py", gpu="a100-80gb")
    print(result.verdict, result.point_gib)
"""

__version__ = "0.1.0"

from .api import estimate_config, estimate_source  # noqa: E402,F401

__all__ = ["estimate_config", "estimate_source", "__version__"]
