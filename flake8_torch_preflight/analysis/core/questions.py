"""The questions rules ask about what code *does*: typed, so a misspelt question is an error.

`Does` is a `str` enum, so `Does.BACKWARD == "backward"`; each member knows which recorded
events answer it (`sites_in(facts)`).
"""
from __future__ import annotations

from enum import Enum
from typing import Callable, Dict, List

from .events import FunctionFacts, Site
from ..semantics.torchapi import GRADIENT_FUNCS


class Does(str, Enum):
    BACKWARD = "backward"   # a backward pass (tensor, autograd, accelerator, engine, fabric)
    STEP = "step"           # an optimizer step (optimizer, scaler, engine)
    RESET = "reset"         # gradients reset (zero_grad, p.grad = None, a fresh optimizer)
    EVAL = "eval"           # `model.eval()` / `model.train(False)`
    TRAIN = "train"         # `model.train()`
    FORWARD = "forward"     # a module's forward pass
    DIFFERENTIATE = "differentiate"   # a backward, or `torch.autograd.grad` and friends
    SCALE_GRADS = "scale_grads"       # gradients multiplied/divided in place

    def sites_in(self, facts: FunctionFacts) -> List[Site]:
        """Where `facts`' own events (not its helpers') do this."""
        return _SITES[self](facts)


_SITES: Dict[Does, Callable[[FunctionFacts], List[Site]]] = {
    Does.BACKWARD: lambda f: [b.site for b in f.backwards],
    Does.STEP: lambda f: [s.site for s in f.steps],
    Does.RESET: lambda f: list(f.resets),
    Does.EVAL: lambda f: [m.site for m in f.modes if m.mode == "eval"],
    Does.TRAIN: lambda f: [m.site for m in f.modes if m.mode == "train"],
    Does.FORWARD: lambda f: [fw.site for fw in f.forwards],
    Does.SCALE_GRADS: lambda f: list(f.grad_scales),
    Does.DIFFERENTIATE: lambda f: [b.site for b in f.backwards] + [
        c.site for c in f.calls if c.qualname in GRADIENT_FUNCS],
}
