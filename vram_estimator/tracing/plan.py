"""What a traced estimate runs, decided from the static side's resolved :class:`Setup`
(torch-free), and what it measured.  A run the trace cannot reproduce on the CPU is refused
here with one line, before torch is imported."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from .architectures import build_for, traceable_families

# precision -> (default dtype the model is built in, autocast dtype or None)
PRECISIONS = {
    "fp32": ("fp32", None),
    "bf16": ("bf16", None),
    "fp16": ("fp16", None),
    "bf16-mixed": ("fp32", "bf16"),
    "fp16-mixed": ("fp32", "fp16"),
}
OPTIMIZERS = ("adamw", "adam", "sgd", "sgd-momentum", "adafactor", "none")


@dataclass(frozen=True)
class Plan:
    """One traced step: the model (family and our config), the run's shape and how it trains."""

    family: str
    config: Dict[str, Any]
    train: bool
    batch: int
    seq: int
    dtype: str
    autocast: Optional[str]
    attention: str
    checkpointing: bool
    lora: int
    lora_targets: Optional[Tuple[str, ...]]
    lora_dropout: float
    optimizer: str
    foreach: bool
    grads_persist: bool = False  # accumulation / set_to_none=False: gradients alive through the step


@dataclass
class Traced:
    """MemTracker's breakdown ({category: bytes}) at each phase's peak (``forward`` for
    inference; ``backward`` (forward and backward) and ``optimizer step`` for training) and at
    the end of each phase."""

    plan: Plan
    peaks: Dict[str, Dict[str, int]]
    after: Dict[str, Dict[str, int]] = field(default_factory=dict)

    @property
    def peak_phase(self) -> str:
        return max(self.peaks, key=lambda p: self.peaks[p].get("Total", 0))

    @property
    def peak(self) -> Dict[str, int]:
        return self.peaks[self.peak_phase]


def _refusal(s: Any) -> Optional[str]:
    """Why the trace cannot reproduce this run, or None."""
    family = s.model.family.name
    if not s.exact:
        return "the model is a parameter count (params=...), not an architecture the trace can build"
    if build_for(family) is None:
        return (
            f"transformers cannot be built for family '{family}' by the trace "
            f"(traced families: {', '.join(traceable_families())})"
        )
    if s.mode == "generate":
        return "generation is not traced (the trace runs one training or inference step)"
    if s.precision not in PRECISIONS:
        return f"{s.precision} weights are not traced (bitsandbytes kernels need real tensors)"
    if s.train and s.optimizer not in OPTIMIZERS:
        return f"optimizer {s.optimizer} is not traced (traced: {', '.join(OPTIMIZERS[:-1])})"
    if s.sharding not in ("none", "ddp"):
        ranks = f" over {s.world} ranks" if s.world > 1 else " on one rank"
        return f"{s.sharding}{ranks} is not traced (the trace runs plain PyTorch on one device, or DDP)"
    if s.offload != "none":
        return "offloading is not traced"
    if s.lora and s.lora_impl != "peft":
        return f"LoRA through {s.lora_impl} is not traced (the trace builds adapters with PEFT)"
    return None


def plan_for(s: Any) -> Tuple[Optional[Plan], Optional[str]]:
    """The plan for a resolved :class:`~vram_estimator.costs.terms.Setup`, or why there is none."""
    why = _refusal(s)
    if why:
        return None, why
    dtype, autocast = PRECISIONS[s.precision]
    return (
        Plan(
            family=s.model.family.name,
            config=dict(s.model.config),
            train=s.train,
            batch=s.batch,
            seq=s.seq,
            dtype=dtype,
            autocast=autocast,
            attention=s.attention,
            checkpointing=s.checkpointing,
            lora=s.lora if s.train else 0,
            lora_targets=s.lora_targets,
            lora_dropout=s.lora_dropout,
            optimizer=s.optimizer if s.train else "none",
            foreach=s.foreach,
            grads_persist=s.train and s.grads_persist,
        ),
        None,
    )
