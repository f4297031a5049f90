"""The traced estimate (``vram-estimate --trace``; optional extra ``[trace]``: torch and
transformers, PEFT for LoRA).

The static estimate prices each term from tables; the traced one builds the run's model from
its configuration with transformers on fake tensors (no memory, no GPU, nothing downloaded),
runs one real forward, backward and optimizer step at the run's full size under PyTorch's own
memory tracker, and adds what a CPU trace cannot see (the caching allocator's fragmentation,
workspaces) from the same runtime model the static path uses.  Nothing here imports torch
until a trace runs: :func:`missing` only looks for the packages.
"""

from __future__ import annotations

import importlib.util
from typing import Optional

NEEDS = ("torch", "transformers")
INSTALL = "pip install 'flake8-torch-preflight[trace]'"


def missing() -> Optional[str]:
    """Why a trace cannot run here (a package is not installed), or None."""
    absent = [name for name in NEEDS if importlib.util.find_spec(name) is None]
    if not absent:
        return None
    return f"--trace needs {' and '.join(absent)} ({INSTALL}); the static estimate needs neither"
