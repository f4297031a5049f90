"""vram_estimator: a static peak-memory estimator for PyTorch training, inference and generation.

It reads a script's source (never imports or runs it) and inline ``# vram:`` comments, looks the
model and GPU up in package data (``data/models.json``, ``data/gpus.json``), and projects the peak
device memory as an interval.  It reports through flake8 (codes TPF100-TPF102) and its own CLI
(``vram-estimate``).  Nothing here imports torch or transformers except the optional
:mod:`vram_estimator.guard`.

The package reads top-down: :mod:`.api` resolves a setup and estimates it; :mod:`.reading`
reads scripts, configs, launch lines, comments and model names into settings with their
sources; :mod:`.costs` turns settings into the terms each phase keeps on the GPU, the verdict
and the remedies; :mod:`.knowledge` holds the model, GPU and family tables the cost model asks;
:mod:`.report`, :mod:`.cli` and :mod:`.flake8_plugin` present the result.

Public entry points::

    from vram_estimator import estimate_source, estimate_config
    result = estimate_source(open("train.py").read(), filename="train.py", gpu="a100-80gb")
    print(result.verdict, result.point_gib)
"""

__version__ = "0.1.0"

from .api import estimate_config, estimate_source  # noqa: E402,F401

__all__ = ["estimate_config", "estimate_source", "__version__"]
