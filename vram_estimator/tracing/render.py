"""The traced estimate in the terminal report and the JSON document, beside the static one."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from .compare import differences

GIB = 1024**3


def _gib(x: float) -> str:
    return f"{x / GIB:.1f}"


def _diff(static: float, traced: float) -> str:
    if max(static, traced) < 0.05 * GIB:  # both print as 0.0
        return "–"
    if static <= 0:
        return "new"
    return f"{(traced - static) / static * 100:+.0f} %"


def _how(outcome: Any) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in outcome.versions.items())
    plan = outcome.traced.plan
    return (
        f"one {'training' if plan.train else 'inference'} step on fake tensors ({versions}), "
        f"MemTracker, {outcome.seconds:.0f} s"
    )


def trace_lines(outcome: Optional[Any], static: Any) -> List[str]:
    """The side-by-side table, or the one line that says why there is no trace."""
    if outcome is None:
        return []
    if outcome.estimate is None:
        return ["", f"trace: {outcome.problem}"]
    traced = outcome.estimate
    lines = ["", f"static vs traced ({_how(outcome)}):"]
    lines.append(f"  {'category':<12} {'static':>8} {'traced':>8} {'diff':>7}  why they can differ")
    for category, a, b, why in differences(static, traced):
        lines.append(f"  {category:<12} {_gib(a):>8} {_gib(b):>8} {_diff(a, b):>7}  {why}")
    lines.append(_pair("allocated", static.allocated(), traced.allocated()))
    reserved = (static.lower, static.point, static.upper), (traced.lower, traced.point, traced.upper)
    lines.append(_pair("reserved", *reserved))
    for phase, items in traced.phases.items():
        a = sum(t.point for t in static.phases.get(phase, []))
        b = sum(t.point for t in items)
        lines.append(f"  {phase[:12]:<12} {_gib(a):>8} {_gib(b):>8} {_diff(a, b):>7}  the phase's peak")
    if static.target:
        lines.append(f"  {'verdict':<12} {static.verdict:>8} {traced.verdict:>8}")
    lines.append(
        f"  (categories compared during the {traced.peak_phase}, where the trace peaks; "
        f"the static estimate peaks during the {static.peak_phase})"
    )
    return lines


def _pair(label: str, a: Any, b: Any) -> str:
    return (
        f"  {label:<12} {_gib(a[1]):>8} {_gib(b[1]):>8} {_diff(a[1], b[1]):>7}  "
        f"interval {_gib(a[0])}–{_gib(a[2])} / {_gib(b[0])}–{_gib(b[2])} GiB"
    )


def trace_json(outcome: Optional[Any], static: Any) -> Optional[Dict[str, Any]]:
    if outcome is None:
        return None
    if outcome.estimate is None:
        return {"problem": outcome.problem}
    traced = outcome.estimate
    return {
        "versions": outcome.versions,
        "seconds": round(outcome.seconds, 1),
        "memtracker_peaks": outcome.traced.peaks,
        "peak_phase": traced.peak_phase,
        "after": outcome.traced.after,
        "terms": [
            dict(name=t.name, lower=int(t.lower), point=int(t.point), upper=int(t.upper), note=t.note)
            for t in traced.terms
        ],
        "allocated": [int(x) for x in traced.allocated()],
        "reserved": [int(traced.lower), int(traced.point), int(traced.upper)],
        "verdict": traced.verdict,
        "categories": [
            dict(category=c, static=int(a), traced=int(b), why=why)
            for c, a, b, why in differences(static, traced)
        ],
    }
