"""The family modules, and the lookups of the families they register in ``registry.FAMILIES``.

Importing this package imports every family module (each registers its families), so a
family looked up here is always registered.
"""

from __future__ import annotations

from typing import Dict

from ..registry import FAMILIES, Family
from . import decoders, diffusion, encoders, vision  # noqa: F401  (each registers its families)


def family(name: str) -> Family:
    return FAMILIES[name]


def all_families() -> Dict[str, Family]:
    return dict(FAMILIES)
