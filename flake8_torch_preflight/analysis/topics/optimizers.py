"""Which optimizer a step updates, and how its update reacts to the size of the gradient.

Rules that talk about a gradient's scale (TPF004: k accumulated micro-batches summed instead
of averaged) must say what is true for the optimizer in use. The family comes from the
optimizer's construction, found by following the stepped object to the call that built it
(in the function, in `__init__` for `self.optimizer`, or in the file's callers for a
parameter). Nothing is guessed from names: an optimizer we cannot trace is `UNKNOWN_FAMILY`.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import List, Optional

from ..semantics import torchapi as api
from ..core import values as V
from ..core.astutil import keyword
from .epochs import resolve_values
from ..core.events import FunctionFacts, Site
from ..core.memo import per_file

SGD_LIKE = "sgd"            # update = lr * g (+ momentum): a k x gradient is a k x step
SCALE_INVARIANT = "adaptive"  # update ~ m / sqrt(v) (or sign(g)): the gradient's scale cancels
UNKNOWN_FAMILY = "unknown"

# Last part of the optimizer class's qualified name -> family. Adaptive methods divide by a
# running RMS of the gradient (Adam, RMSprop, Adagrad, Adafactor…) or keep only its sign
# (Lion, Rprop, signSGD): multiplying every gradient by k leaves the update unchanged up to
# `eps`. SGD, ASGD and LARS-free momentum methods apply the gradient itself.
FAMILIES = {
    **{name: SGD_LIKE for name in ("SGD", "ASGD", "SGDW", "SGD8bit", "PagedSGD")},
    **{name: SCALE_INVARIANT for name in (
        "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "SparseAdam", "Adagrad", "Adadelta",
        "RMSprop", "Rprop", "Lion", "Adafactor", "LAMB", "Lamb", "FusedAdam", "FusedLAMB",
        "DeepSpeedCPUAdam", "Adam8bit", "AdamW8bit", "PagedAdamW", "PagedAdamW8bit",
        "PagedAdam", "Lion8bit", "PagedLion", "AdEMAMix")},
}
# Adaptive optimizers whose `weight_decay` is an L2 term added to the gradient (coupled):
# with k x gradients the decay is k x weaker relative to the data term. AdamW, Lion and
# Adafactor decouple it (applied to the weights directly), so the scale does not matter.
COUPLED_WEIGHT_DECAY = frozenset({"Adam", "Adamax", "NAdam", "RAdam", "Adagrad", "Adadelta",
                                  "RMSprop", "FusedAdam", "Adam8bit", "PagedAdam"})


@dataclass(frozen=True)
class OptimizerKind:
    family: str
    name: Optional[str]            # `AdamW`, or None when unknown
    line: Optional[int]            # where it was built
    coupled_decay: bool = False    # an L2 `weight_decay` literally > 0 on an Adam-style optimizer

    @property
    def shown(self) -> str:
        return f"`{self.name}` (line {self.line})" if self.name and self.line else "the optimizer"


UNKNOWN = OptimizerKind(UNKNOWN_FAMILY, None, None)


@per_file("stepped_optimizer")
def stepped_optimizer(analysis, facts: FunctionFacts, site: Site) -> OptimizerKind:
    """The optimizer that the step call at `site` updates (`opt.step()`, `scaler.step(opt)`),
    followed through the function's callers when it is a parameter; UNKNOWN when we cannot
    tell or when different optimizers may arrive there."""
    kinds = {_kind_of(analysis, value) for value in _stepped_values(analysis, facts, site)}
    return kinds.pop() if len(kinds) == 1 else UNKNOWN


def _stepped_values(analysis, facts: FunctionFacts, site: Site) -> List[V.Value]:
    call = call_at(analysis, facts, site.node)
    if call is None:
        return []
    if call.receiver is not None and call.receiver.has(V.SCALER):
        stepped = call.args[0] if call.args else V.UNKNOWN
    else:
        stepped = call.receiver or V.UNKNOWN
    return resolve_values(analysis, facts, stepped)


def call_at(analysis, facts: FunctionFacts, node: ast.AST):
    """The `CallSite` flow recorded for the call `node` of `facts` (indexed once per function)."""
    return _calls_by_node(analysis, facts).get(node)


@per_file("calls_by_node")
def _calls_by_node(analysis, facts: FunctionFacts) -> dict:
    return {c.node: c for c in facts.calls}


def _kind_of(analysis, value: V.Value) -> OptimizerKind:
    node = value.node
    if not value.has(V.OPTIMIZER) or not isinstance(node, ast.Call):
        return UNKNOWN
    qual = analysis.imports.qualname(node.func) or ""
    if not (api.OPTIMIZER_RE.match(qual)):
        return UNKNOWN
    name = qual.rsplit(".", 1)[-1]
    family = FAMILIES.get(name, UNKNOWN_FAMILY)
    decay = keyword(node, "weight_decay")
    coupled = name in COUPLED_WEIGHT_DECAY and isinstance(decay, ast.Constant) and \
        isinstance(decay.value, (int, float)) and decay.value > 0
    return OptimizerKind(family, name, node.lineno, coupled)


# Gradient clipping: the threshold is a norm (or value) of the gradients as they are when it
# runs, so it sees whatever scale they carry (accumulated sums, AMP's loss scale).
CLIP_FUNCTIONS = frozenset(
    f"torch.nn.utils{mod}.{name}" for mod in ("", ".clip_grad")
    for name in ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_grads_with_norm_"))
# FSDP's and Accelerate's `clip_grad_norm_`, Fabric's / Lightning's `clip_gradients`.
CLIP_METHODS = frozenset({"clip_grad_norm_", "clip_grad_value_", "clip_gradients"})


def clip_calls(analysis, facts: FunctionFacts, loop: ast.AST) -> list:
    """Gradient-clipping calls made directly in `loop` (torch.nn.utils and `.clip_grad_norm_`
    methods of a wrapped model or a framework object)."""
    return [c for c in analysis.in_loop(facts, "calls", loop) if is_clip(c)]


def is_clip(call) -> bool:
    if call.qualname in CLIP_FUNCTIONS:
        return True
    return call.qualname is None and call.method in CLIP_METHODS
