"""The family modules; importing this package registers every family in ``registry.FAMILIES``."""

from . import decoders, diffusion, encoders, vision  # noqa: F401
