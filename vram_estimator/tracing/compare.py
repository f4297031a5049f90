"""The traced estimate as an :class:`~vram_estimator.costs.estimate.Estimate` beside the static
one, and why the two differ, category by category.  Torch-free except :func:`traced_estimate`,
which imports the runner (torch, transformers) only when called."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..costs import terms as T
from ..costs.estimate import Estimate, gpu_figures, setup
from .plan import Plan, Traced, plan_for

CATEGORIES = ("params", "gradients", "optimizer", "activations", "CUDA side")
# MemTracker's reference types -> our categories
TRACED_CATEGORY = {
    "Parameter": "params",
    "Buffer": "params",
    "Gradient": "gradients",
    "Optstate": "optimizer",
    "Activation": "activations",
    "Temp": "activations",
    "Other": "activations",
}
# the static terms -> the same categories
STATIC_CATEGORY = {
    "weights": "params",
    "gathered params": "params",
    "unsharded root": "params",
    "gradients": "gradients",
    "head gradient": "gradients",
    "frozen gradients": "gradients",
    "fp32 gradients": "gradients",
    "optimizer state": "optimizer",
    "optimizer temporaries": "optimizer",
    "fp32 master copy": "optimizer",
    "autocast copies": "activations",
    "activations": "activations",
    "logits buffer": "activations",
    "backward working set": "activations",
    "dequantised weight": "activations",
    "KV cache": "activations",
    "runtime buffers": "CUDA side",
    "fragmentation": "CUDA side",
    "ddp buckets": "CUDA side",
    "zero buffers": "CUDA side",
}
# why a category can differ between the two, in the report's words
WHY = {
    "params": "exact in both; the trace also holds the model's buffers (rotary tables, masks)",
    "gradients": "the gradients alive at each one's peak moment (static: its peak phase's terms)",
    "optimizer": "states, plus the foreach step's temporaries when the peak is in the step",
    "activations": "static: per-family coefficients; trace: what this transformers version saves "
    "and frees, with the CPU build's kernels (its SDPA is a flash-style kernel, like CUDA's)",
    "CUDA side": "the same runtime model in both (fragmentation of the dynamic bytes, workspaces)",
}
# the trace counts what the CPU build allocates; CUDA kernels may save a little more or less
ACTIVATION_SPREAD = (0.95, 1.1)


@dataclass
class TraceOutcome:
    """A traced estimate, or why there is none (``problem``)."""

    estimate: Optional[Estimate] = None
    problem: Optional[str] = None
    traced: Optional[Traced] = None
    seconds: float = 0.0
    versions: Dict[str, str] = field(default_factory=dict)

    def categories(self) -> Dict[str, float]:
        return by_category(self.estimate) if self.estimate else {}


def by_category(est: Estimate, phase: Optional[str] = None) -> Dict[str, float]:
    """Bytes per category (:data:`CATEGORIES`) in ``phase`` (the estimate's peak phase when
    None or when the estimate has no such phase)."""
    out = dict.fromkeys(CATEGORIES, 0.0)
    for term in est.phases.get(phase or est.peak_phase, est.phases.get(est.peak_phase, est.terms)):
        out[STATIC_CATEGORY.get(term.name, "activations")] += term.point
    return out


def _traced_terms(peak: Dict[str, int]) -> List[T.Term]:
    """MemTracker's breakdown at a phase's peak as terms (one per category it has)."""
    params = peak.get("Parameter", 0) + peak.get("Buffer", 0)
    acts = peak.get("Activation", 0) + peak.get("Temp", 0) + peak.get("Other", 0)
    lo, hi = ACTIVATION_SPREAD
    items = [
        T.exact("weights", params, "traced: parameters and buffers"),
        T.exact("gradients", peak.get("Gradient", 0), "traced: gradients alive at the peak", dynamic=True),
        T.exact("optimizer state", peak.get("Optstate", 0), "traced: states (and step temporaries)"),
        T.Term("activations", acts * lo, acts, acts * hi, "traced: saved, temporaries, inputs", True),
    ]
    return [t for t in items if t.point > 0 or t.name == "weights"]


def _optimizer_temporaries(traced: Traced, phase: str) -> float:
    """Optimizer bytes at a phase's peak beyond the states that persist after the step."""
    persistent = traced.after.get("optimizer step", {}).get("Optstate", 0)
    return max(0.0, float(traced.peaks[phase].get("Optstate", 0)) - persistent)


def traced_terms(s: Any, traced: Traced, phase: str, figures: Dict[str, Any]) -> List[T.Term]:
    """A traced phase's peak plus what the CPU trace cannot see, from the static runtime model:
    the runtime buffers (workspaces), DDP's bucket copy with more than one rank, and the caching
    allocator's fragmentation of the dynamic bytes."""
    items = _traced_terms(traced.peaks[phase])
    items.append(T.runtime_buffers(s, figures))
    if s.world > 1:
        bucket = T.sharding_buffers(s)
        items += [bucket] if bucket is not None else []
    dynamic = [t for t in items if t.dynamic]
    temporaries = _optimizer_temporaries(traced, phase)
    total = T.Term(
        "dynamic",
        sum(t.lower for t in dynamic) + temporaries,
        sum(t.point for t in dynamic) + temporaries,
        sum(t.upper for t in dynamic) + temporaries,
    )
    return items + [T.fragmentation(total, figures)]


def as_estimate(static: Estimate, traced: Traced) -> Estimate:
    """The traced step as an estimate on the static one's target, context and reserve."""
    s = setup(static.settings)
    figures = gpu_figures(static.target)
    phases = {phase: traced_terms(s, traced, phase, figures) for phase in traced.peaks}
    peak = max(phases, key=lambda p: sum(t.point for t in phases[p]))
    return Estimate(
        terms=phases[peak],
        settings=static.settings,
        target=static.target,
        phases=phases,
        peak_phase=peak,
        capacity=static.capacity,
        context=static.context,
        context_range=static.context_range,
        reserve=static.reserve,
        params_total=static.params_total,
        params_trainable=static.params_trainable,
    )


def plan_of(static: Estimate) -> Tuple[Optional[Plan], Optional[str]]:
    return plan_for(setup(static.settings))


def traced_estimate(static: Estimate) -> TraceOutcome:
    """Trace the run of ``static`` (torch and transformers must be installed: see
    :func:`vram_estimator.tracing.missing`).  Anything the libraries raise while building or
    running the model is one line in ``problem``, never a traceback."""
    plan, why = plan_of(static)
    if plan is None:
        return TraceOutcome(problem=f"not traced: {why}")
    if plan.lora and _absent("peft"):
        return TraceOutcome(problem="not traced: a LoRA run is traced through PEFT, which is not installed")
    started = time.monotonic()
    try:
        from . import runner

        traced = runner.trace(plan)
    except Exception as exc:  # noqa: BLE001 - a library failing on this config is one line
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        why = f"{type(exc).__name__}: {first}"
        return TraceOutcome(problem=f"not traced: transformers could not run this model ({why})")
    return TraceOutcome(
        estimate=as_estimate(static, traced),
        traced=traced,
        seconds=time.monotonic() - started,
        versions=runner.versions(),
    )


def _absent(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is None


def differences(static: Estimate, traced: Estimate) -> List[Tuple[str, float, float, str]]:
    """Per category, in the phase the trace peaked in (the static estimate's phase of the same
    name, so both count the same moment): (category, static bytes, traced bytes, why)."""
    a, b = by_category(static, traced.peak_phase), by_category(traced)
    return [(c, a[c], b[c], WHY[c]) for c in CATEGORIES]
