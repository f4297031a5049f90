"""Remedies: what would make the run fit, each re-estimated, and the smallest combination.

A remedy is a change of settings (never of the model): halve the micro-batch (with gradient
accumulation to keep the effective batch), gradient checkpointing, SDPA/flash attention, an
8-bit optimizer, pure bf16 weights, LoRA, 4-bit weights (QLoRA / quantised serving), a ZeRO/FSDP
stage or more ranks, CPU offload of the optimizer.  Each applicable remedy is applied alone to
report its saving, new peak and verdict, and then combinations are searched: fewest remedies
first, then the cheapest in speed/quality (a fixed rank per remedy), then the lowest peak.  A
micro-batch reduction inside a combination goes only as low as needed (largest batch that fits).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..knowledge import db
from ..knowledge.registry import KIND_TRAITS
from ..reading.config_comments import Value
from .estimate import Estimate, estimate


@dataclass
class Remedy:
    key: str
    label: str
    cost: str
    rank: int
    apply: Callable[[Dict[str, Value]], Dict[str, Value]]


@dataclass
class Outcome:
    remedy: Remedy
    estimate: Estimate

    def saving(self, base: Estimate) -> float:
        return base.point - self.estimate.point


@dataclass
class Combination:
    labels: List[str]
    estimate: Estimate
    settings: Dict[str, Value]


def _set(s: Dict[str, Value], **kw: Any) -> Dict[str, Value]:
    out = dict(s)
    for k, v in kw.items():
        out[k] = Value(v, "remedy")
    return out


def _traits(s: Dict[str, Value]) -> frozenset:
    """What the model's kind offers the remedies (``registry.KIND_TRAITS``)."""
    m = s.get("model")
    return KIND_TRAITS[db.spec(m.value).kind if m else "decoder"]


def _val(s: Dict[str, Value], key: str, default: Any = None) -> Any:
    v = s.get(key)
    return v.value if v else default


@dataclass(frozen=True)
class _Run:
    """What the remedies ask of the settings, read once."""

    train: bool
    traits: frozenset
    precision: str
    world: int
    sharding: str
    batch: int
    bf16_gpu: bool


def _run(s: Dict[str, Value], target: Dict[str, Any]) -> _Run:
    return _Run(
        train=_val(s, "mode", "train") == "train",
        traits=_traits(s),
        precision=_val(s, "precision", "fp32"),
        world=int(_val(s, "world", 1)),
        sharding=_val(s, "sharding", "none"),
        batch=int(_val(s, "batch", 1)),
        bf16_gpu=bool(target.get("bf16", True)),
    )


def _attention(s: Dict[str, Value], run: _Run) -> Optional[Remedy]:
    if _val(s, "attention") not in ("eager", "math") or "attention" not in run.traits:
        return None
    return Remedy(
        "attention", "SDPA/flash attention", "none: same result, usually faster", 0,
        lambda x: _set(x, attention="sdpa"),
    )


def _halve_batch(s: Dict[str, Value], run: _Run) -> Optional[Remedy]:
    if run.batch < 2:
        return None
    return Remedy(
        "batch", f"micro-batch {run.batch} -> {run.batch // 2} (+ accumulate 2)",
        "lower GPU utilisation; same effective batch", 1,
        lambda x: _set(x, batch=max(1, int(_val(x, "batch", 1)) // 2)),
    )


def _checkpointing(s: Dict[str, Value], run: _Run) -> Optional[Remedy]:
    if not run.train or _val(s, "checkpointing") == "on":
        return None
    return Remedy(
        "checkpointing", "gradient checkpointing", "~20-35% slower steps (forward recomputed)", 2,
        lambda x: _set(x, checkpointing="on"),
    )


def _eight_bit_optimizer(s: Dict[str, Value], run: _Run) -> Optional[Remedy]:
    if not run.train or _val(s, "optimizer") not in ("adamw", "adam", "paged-adamw", "lion"):
        return None
    return Remedy(
        "optimizer", "8-bit AdamW (bitsandbytes)", "bitsandbytes dependency; near-identical loss", 3,
        lambda x: _set(x, optimizer="adamw-8bit"),
    )


def _bf16_weights(s: Dict[str, Value], run: _Run) -> Optional[Remedy]:
    if run.precision not in ("fp32", "fp16-mixed", "bf16-mixed") or not run.bf16_gpu:
        return None
    if "half-weights" not in run.traits:
        return None
    cost = (
        "bf16 updates lose precision on long runs (use Kahan/stochastic rounding)"
        if run.train
        else "negligible quality change"
    )
    return Remedy("precision", "pure bf16 weights", cost, 4, lambda x: _set(x, precision="bf16"))


ZERO_NEXT = {"none": "zero2", "ddp": "zero2", "zero1": "zero2", "zero2": "zero3"}


def _zero_stage_up(s: Dict[str, Value], run: _Run) -> Optional[Remedy]:
    if not run.train or run.sharding not in ZERO_NEXT or run.world <= 1:
        return None
    nxt = ZERO_NEXT[run.sharding]
    return Remedy(
        "sharding", f"ZeRO stage {nxt[-1]} over {run.world} ranks", "more communication per step", 5,
        lambda x, n=nxt: _set(x, sharding=n),
    )


def _lora(s: Dict[str, Value], run: _Run) -> Optional[Remedy]:
    if not run.train or "lora" not in run.traits or int(_val(s, "lora", 0) or 0):
        return None
    if run.precision in ("int8", "nf4"):
        return None
    return Remedy(
        "lora", "LoRA r=16 (adapters only)",
        "trains ~1% of weights; below full fine-tuning on large domain shifts", 6,
        lambda x: _set(x, lora=16, lora_targets=["all-linear"]),
    )


def _four_bit(s: Dict[str, Value], run: _Run) -> Optional[Remedy]:
    if "quantisable" not in run.traits or run.precision in ("int8", "nf4"):
        return None
    if run.train:
        return Remedy(
            "quant", "QLoRA: 4-bit base + LoRA r=16",
            "slower matmuls (dequantise); small quality loss vs 16-bit LoRA", 7,
            lambda x: _set(x, precision="nf4", lora=16, lora_targets=["all-linear"]),
        )
    return Remedy(
        "quant", "4-bit (nf4) weights", "small quality loss; slower at large batch", 7,
        lambda x: _set(x, precision="nf4"),
    )


SHARDED_FOR_OFFLOAD = ("zero1", "zero2", "zero3", "fsdp", "fsdp2")


def _offload(s: Dict[str, Value], run: _Run) -> Optional[Remedy]:
    if not run.train or _val(s, "offload") not in ("none", None):
        return None
    if _val(s, "optimizer") in ("none", None):
        return None

    def apply(x: Dict[str, Value]) -> Dict[str, Value]:
        keep = _val(x, "sharding") in SHARDED_FOR_OFFLOAD
        return _set(x, offload="optimizer", sharding=_val(x, "sharding") if keep else "zero2")

    label = "CPU offload of the optimizer (ZeRO-Offload)"
    return Remedy("offload", label, "2-5x slower steps; needs host RAM", 8, apply)


def _more_ranks(s: Dict[str, Value], run: _Run) -> Optional[Remedy]:
    if not run.train or run.world != 1:
        return None
    return Remedy(
        "ranks", "FSDP full shard over 8 GPUs", "needs 8 GPUs and fast interconnect", 9,
        lambda x: _set(x, world=8, sharding="fsdp"),
    )


# cheapest first: the order the remedies are listed and searched in
CANDIDATES: Tuple[Callable[[Dict[str, Value], _Run], Optional[Remedy]], ...] = (
    _attention,
    _halve_batch,
    _checkpointing,
    _eight_bit_optimizer,
    _bf16_weights,
    _zero_stage_up,
    _lora,
    _four_bit,
    _offload,
    _more_ranks,
)


def candidates(s: Dict[str, Value], target: Dict[str, Any]) -> List[Remedy]:
    """Remedies that apply to these settings, cheapest first."""
    run = _run(s, target)
    found = (make(s, run) for make in CANDIDATES)
    return [r for r in found if r is not None]


def remedies(s: Dict[str, Value], target: Dict[str, Any], base: Estimate) -> List[Outcome]:
    return [Outcome(r, estimate(r.apply(s), target)) for r in candidates(s, target)]


def _largest_batch(
    s: Dict[str, Value], target: Dict[str, Any]
) -> Optional[Tuple[Dict[str, Value], Estimate]]:
    b = int(_val(s, "batch", 1))
    while b >= 1:
        trial = _set(s, batch=b)
        est = estimate(trial, target)
        if est.verdict == "fits":
            return trial, est
        if b == 1:
            return None
        b //= 2
    return None


def smallest_combination(
    s: Dict[str, Value], target: Dict[str, Any], base: Estimate, max_size: int = 4
) -> Optional[Combination]:
    """Fewest remedies that fit, then cheapest, then lowest peak; None when nothing fits."""
    pool = [r for r in candidates(s, target) if r.key != "batch"]
    can_batch = int(_val(s, "batch", 1)) >= 2
    for count in range(1, max_size + 1):
        best: Optional[Tuple[Tuple[int, float], Combination]] = None
        options = [(c, False) for c in itertools.combinations(pool, count)]
        if can_batch:
            options += [(c, True) for c in itertools.combinations(pool, count - 1)]
        for combo, with_batch in options:
            keys = [r.key for r in combo]
            if "quant" in keys and ("lora" in keys or "precision" in keys):
                continue
            trial = dict(s)
            for r in combo:
                trial = r.apply(trial)
            labels = [r.label for r in combo]
            rank = sum(r.rank for r in combo)
            if with_batch:
                found = _largest_batch(_set(trial, batch=max(1, int(_val(s, "batch")) // 2)), target)
                if found is None:
                    continue
                trial, est = found
                labels.append(
                    f"micro-batch {_val(s, 'batch')} -> {_val(trial, 'batch')} (+ accumulate "
                    f"{int(_val(s, 'batch')) // int(_val(trial, 'batch'))})"
                )
                rank += 1
            else:
                est = estimate(trial, target)
                if est.verdict != "fits":
                    continue
            key = (rank, est.point)
            if best is None or key < best[0]:
                best = (key, Combination(labels, est, trial))
        if best is not None:
            return best[1]
    return None
