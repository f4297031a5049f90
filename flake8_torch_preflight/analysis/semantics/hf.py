"""Hugging Face model libraries (transformers, PEFT, diffusers) and vision model zoos
(timm, torchvision): calls whose result is an `nn.Module`."""
from __future__ import annotations

from . import torchapi as api
from ..core.values import Value
from .registry import Call, qualified_matching
from .torch import wrapped_model


@qualified_matching(lambda qual: bool(api.HF_MODEL_FACTORY_RE.match(qual)
                                      or api.VISION_MODEL_FACTORY_RE.match(qual)), order=40)
def _model_factory(call: Call) -> Value:
    return wrapped_model(call)
