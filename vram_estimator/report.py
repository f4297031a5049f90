"""Rendering: the one-line flake8 message, the terminal report, and the JSON document."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from .api import Result, Sweep
from .reading.config_comments import KEYS
from .costs.estimate import Estimate
from .tracing.render import trace_json, trace_lines

GIB = 1024**3
TERM_KEYS = {
    "weights": ("model", "params", "precision", "lora"),
    "gathered params": ("sharding", "world"),
    "gradients": ("model", "params", "lora"),
    "optimizer state": ("optimizer", "offload"),
    "fp32 master copy": ("precision", "sharding"),
    "autocast copies": ("precision",),
    "activations": ("batch", "seq", "image", "checkpointing", "attention"),
    "logits buffer": ("batch", "seq"),
    "KV cache": ("batch", "context"),
    "ddp buckets": ("world", "sharding"),
    "zero buffers": ("sharding",),
}


def gib(x: float) -> str:
    return f"{x / GIB:.1f}"


def _src(est: Estimate, key: str) -> Optional[str]:
    v = est.settings.get(key)
    if v is None:
        return None
    value = v.value
    if isinstance(value, list):
        value = ",".join(str(x) for x in value)
    return f"{key}={value} {v.source}"


def evidence_text(est: Estimate, limit: int = 3) -> str:
    """Largest terms with the inputs they came from."""
    parts = []
    for t in sorted(est.terms, key=lambda t: -t.point)[:limit]:
        if t.point <= 0:
            continue
        srcs = [s for s in (_src(est, k) for k in TERM_KEYS.get(t.name, ())) if s]
        srcs = [s for s in srcs if "=0 " not in s and "=none " not in s and "=off " not in s][:2]
        parts.append(f"{t.name} {gib(t.point)}" + (f" from {', '.join(srcs)}" if srcs else ""))
    return "; ".join(parts)


def fix_text(result: Result) -> str:
    if result.combination is not None:
        c = result.combination
        return f"{' + '.join(c.labels)} (peak {gib(c.estimate.point)} GiB, upper {gib(c.estimate.upper)} GiB)"
    return "nothing here fits this card; pick a larger GPU or more of them (`vram-estimate gpus`)"


@dataclass(frozen=True)
class VramFinding:
    """One memory finding, structured (``tpf check`` renders JSON/SARIF/GitHub from these)."""

    line: int
    col: int
    code: str  # TPF100 / TPF101 / TPF102
    severity: str  # error / warning
    what: str
    evidence: str
    fix: str

    def message(self) -> str:
        """The flake8 line: ``CODE [severity] what (evidence); fix: fix``."""
        evidence = f" ({self.evidence})" if self.evidence else ""
        return f"{self.code} [{self.severity}] {self.what}{evidence}; fix: {self.fix}"


def error_finding(
    line: int, col: int, message: str, fix: str = "correct the '# vram:' comment or option"
) -> VramFinding:
    """TPF102 for a bad input; a message that carries its own '; fix: ...' keeps it."""
    what, sep, own_fix = message.rpartition("; fix: ")
    if not sep:
        what, own_fix = message, fix
    return VramFinding(line, col, "TPF102", "error", what, "", own_fix)


def _default_source(sweep: Sweep, est: Estimate) -> str:
    v = est.settings.get(sweep.key)
    return v.source if v is not None else "default"


def verdict_finding(result: Result) -> Optional[VramFinding]:
    """TPF100 / TPF101 for a result with a target, or None when it fits."""
    est = result.estimate
    if est is None or est.target is None:
        return None
    verdict = est.verdict
    if verdict == "fits":
        return None
    name = est.target["name"]
    interval = f"{gib(est.lower)}–{gib(est.upper)} GiB"
    evidence = f"{interval}; {evidence_text(est)}"
    line, col = result.report_line, result.report_col
    deciding = result.deciding
    if deciding:
        sweep = deciding[0]
        fitting = sweep.last_fitting()
        at_default = next((e for v, e in sweep.points if v == sweep.default), None)
        if at_default is not None:  # the interval at that value, not one widened for the guess
            at_value = f"{gib(at_default.lower)}–{gib(at_default.upper)} GiB at {sweep.key} {sweep.default}"
            evidence = f"{at_value}; " + evidence_text(est)
        what = (
            f"projected peak {gib(est.point)} GiB on {name} (usable {gib(est.usable)} GiB) depends on "
            f"{sweep.key}, which was not read ({sweep.key}={sweep.default} {_default_source(sweep, est)}): "
            f"{sweep.summary()}"
        )
        fix = f"state the {sweep.key} ('# vram: {sweep.key}=N' or the script's own setting)"
        if fitting:
            fix += f"; it fits up to {sweep.key} {fitting}"
        else:
            fix += f"; at {sweep.key} {sweep.default}: {fix_text(result)}"
        return VramFinding(line, col, "TPF101", "warning", what, evidence, fix)
    if verdict == "oom":
        what = (
            f"projected peak {gib(est.point)} GiB exceeds {name} usable {gib(est.usable)} GiB "
            "even at the optimistic end"
        )
        return VramFinding(line, col, "TPF100", "error", what, evidence, fix_text(result))
    if est.point <= est.usable:
        what = (
            f"projected peak {gib(est.point)} GiB fits {name} usable {gib(est.usable)} GiB "
            "but not its error margin"
        )
    else:
        what = (
            f"projected peak {gib(est.point)} GiB exceeds {name} usable {gib(est.usable)} GiB; "
            "it fits only at the optimistic end"
        )
    return VramFinding(line, col, "TPF101", "warning", what, evidence, fix_text(result))


def flake8_message(result: Result) -> Optional[str]:
    finding = verdict_finding(result)
    return finding.message() if finding else None


def _bar(x: float, total: float, width: int = 28) -> str:
    if total <= 0:
        return ""
    n = x / total * width
    full = int(n)
    part = " ▏▎▍▌▋▊▉"[int((n - full) * 8)] if full < width else ""
    return ("█" * full + part).rstrip()


VERDICT_EXPLAINED = {
    "fits": "the upper end of the interval fits",
    "tight": "the interval straddles usable memory (TPF101)",
    "oom": "even the optimistic end exceeds usable memory (TPF100)",
}
# settings beyond the comment keys that the report lists with their sources when they were read
READ_FROM_EXTRAS = ("lora_targets", "grad_accum", "global_batch", "optimizer_foreach", "optimizer_in_bwd")
# what each predicted figure is, in the words of the tool that would measure it
ALLOCATED_IS = "torch.cuda.max_memory_allocated()"
RESERVED_IS = "torch.cuda.max_memory_reserved()"
CARD_IS = "reserved + CUDA context: what nvidia-smi shows; the verdict compares this with the card"


def card_view(est: Estimate) -> Tuple[float, float, float]:
    """The reserved peak plus the CUDA context (lower end with the smallest context, upper with
    the largest): what ``nvidia-smi`` shows for the process, and what the verdict judges."""
    ctx_lo, ctx_hi = est.context_range
    return est.lower + ctx_lo, est.point + est.context, est.upper + ctx_hi


def text_report(result: Result, filename: Optional[str] = None) -> str:
    problem = _problem_lines(result)
    if problem is not None:
        return "\n".join(problem)
    est = result.estimate
    lines = [_title(est, filename), _settings_line(est), ""]
    lines += _breakdown_lines(est)
    lines += _verdict_lines(est)
    lines += trace_lines(result.traced, est)
    lines += sweep_lines(result)
    lines += [f"note: {note}" for note in est.notes + (result.facts.notes if result.facts else [])]
    lines += _remedy_lines(result)
    lines += _read_from_lines(est)
    return "\n".join(lines)


def _problem_lines(result: Result) -> Optional[List[str]]:
    """The report of a run that has no estimate (unreadable input, bad values, no model)."""
    if result.input_error:
        return [f"vram-estimate: {result.input_error}"]
    if result.errors:
        lines = [f"TPF102 line {e.line}: {e.message}" for e in result.errors]
        lines.append(
            "no estimate: correct the values above first (nothing is estimated on a value that is wrong)"
        )
        return lines
    if result.estimate is not None:
        return None
    lines = ["no model: name one with '# vram: model=...' (or params=7B), --model, or from_pretrained(...)"]
    facts = result.facts
    runtime_model = [facts.runtime_model] if facts and facts.runtime_model else []
    lines += [f"note: {note}" for note in runtime_model + (facts.notes if facts else [])]
    return lines


def _title(est: Estimate, filename: Optional[str]) -> str:
    title = f"vram-estimate: {filename or 'config'}"
    if est.target:
        t = est.target
        count = f" ({t['count']} GPUs)" if t.get("count", 1) > 1 else ""
        title += (
            f" -> {t['name']}{count}: {gib(est.capacity)} GiB reported, usable {gib(est.usable)} GiB "
            f"(context {gib(est.context)}, reserve {gib(est.reserve)})"
        )
    return title


def _settings_line(est: Estimate) -> str:
    s = est.settings

    def v(key: str) -> Any:
        return s[key].value if key in s else None

    model = v("model") or f"params={v('params'):,}"
    return (
        f"model {model}: {est.params_total / 1e9:.3g}B params, "
        f"{est.params_trainable / 1e6:,.1f}M trainable; "
        f"mode {v('mode')}, batch {v('batch')}, seq {v('seq')}, {v('precision')}, "
        f"optimizer {v('optimizer')}, "
        f"world {v('world')} ({v('sharding')}), checkpointing {v('checkpointing')}, "
        f"attention {v('attention')}"
        + (f", LoRA r={v('lora')}" if v("lora") else "")
        + (f", context {v('context')}" if v("context") and v("mode") == "generate" else "")
    )


def _breakdown_lines(est: Estimate) -> List[str]:
    """The peak phase's terms with bars, then what is predicted: the reserved peak, the
    allocated peak and (with a target) the card's view, each with its interval."""
    scale = max(est.upper, est.usable or 0)
    width = max(len(t.name) for t in est.terms)
    lines = [
        f"  {t.name:<{width}} {gib(t.point):>8} GiB  {_bar(t.point, scale):<29} {t.note}"
        for t in est.terms
        if t.point > 0 or t.upper > 0
    ]
    lines.append(f"  {'-' * width} {'-' * 12}")
    width = max(width, len("allocated peak"))
    lines.append(_figure_line("allocated peak", est.allocated(), width, ALLOCATED_IS))
    lines.append(_figure_line("reserved peak", (est.lower, est.point, est.upper), width, RESERVED_IS))
    if est.target:
        lines.append(_figure_line("card's view", card_view(est), width, CARD_IS))
        share = est.point / est.usable * 100 if est.usable else float("inf")
        lines.append(
            f"  {'usable':<{width}} {gib(est.usable):>8} GiB  {_bar(est.usable, scale)}  peak = {share:.0f}% "
            f"of usable"
        )
    return lines


def _figure_line(label: str, triple: Tuple[float, float, float], width: int, what: str) -> str:
    lower, point, upper = triple
    return f"  {label:<{width}} {gib(point):>8} GiB  interval {gib(lower)}–{gib(upper)} GiB  ({what})"


def _verdict_lines(est: Estimate) -> List[str]:
    if not est.target:
        return ["", "no target GPU: pass --gpu (or '# vram: gpu=...') for a verdict"]
    verdict = est.verdict
    return ["", f"verdict: {verdict.upper()} - {VERDICT_EXPLAINED[verdict]}"]


def _remedy_lines(result: Result) -> List[str]:
    if not result.remedies:
        return []
    est = result.estimate
    lw = max(len(o.remedy.label) for o in result.remedies)
    header = f"  {'remedy':<{lw}}  {'saving':>8}  {'new peak':>9}  {'verdict':<7}  cost"
    lines = ["", "remedies (each alone):", header]
    for o in sorted(result.remedies, key=lambda o: -o.saving(est)):
        lines.append(
            f"  {o.remedy.label:<{lw}}  {gib(o.saving(est)):>4} GiB  {gib(o.estimate.point):>5} GiB  "
            f"{o.estimate.verdict:<7}  {o.remedy.cost}"
        )
    lines.append("")
    c = result.combination
    if c:
        lines.append(
            f"smallest combination that fits: {' + '.join(c.labels)} -> {gib(c.estimate.point)} GiB "
            f"({gib(c.estimate.lower)}–{gib(c.estimate.upper)})"
        )
    else:
        lines.append("nothing here fits this card.")
    return lines


def _read_from_lines(est: Estimate) -> List[str]:
    s = est.settings
    lines = ["", "read from:"]
    for key in (*(k for k in KEYS if k != "gpu"), *READ_FROM_EXTRAS, "gpu"):
        if key in s:
            val = s[key].value
            if isinstance(val, list):
                val = ",".join(map(str, val))
            lines.append(f"  {key:<14} {str(val):<22} {s[key].source}")
    return lines


def sweep_lines(result: Result) -> List[str]:
    """For each defaulted batch / sequence length: the verdict over its plausible range."""
    out: List[str] = []
    est = result.estimate
    for sweep in result.sweeps:
        decides = "decides the verdict" if sweep.decides else "does not change the verdict"
        out.append("")
        out.append(
            f"{sweep.key} was not read ({sweep.key}={sweep.default} {_default_source(sweep, est)}) "
            f"and {decides}:"
        )
        width = max(6, max(len(str(v)) for v, _ in sweep.points) + 1)
        out.append(f"  {sweep.key:<8}" + "".join(f"{v:>{width}}" for v, _ in sweep.points))
        out.append(f"  {'peak GiB':<8}" + "".join(f"{gib(e.point):>{width}}" for _, e in sweep.points))
        out.append(f"  {'verdict':<8}" + "".join(f"{e.verdict:>{width}}" for _, e in sweep.points))
        if sweep.decides:
            out.append(f"  {sweep.summary()}; set it with '# vram: {sweep.key}=N' or --{sweep.key} N")
    return out


def json_report(result: Result, filename: Optional[str] = None) -> Dict[str, Any]:
    est = result.estimate
    doc: Dict[str, Any] = {
        "file": filename,
        "errors": [dict(line=e.line, col=e.col, message=e.message) for e in result.errors],
    }
    if result.input_error:
        doc["input_error"] = result.input_error
    if est is None:
        doc["estimate"] = None
        return doc
    doc["inputs"] = {k: {"value": _plain(v.value), "source": v.source} for k, v in est.settings.items()}
    doc["params"] = {"total": est.params_total, "trainable": est.params_trainable}
    doc["terms"] = [
        dict(name=t.name, lower=int(t.lower), point=int(t.point), upper=int(t.upper), note=t.note)
        for t in est.terms
    ]
    doc["peak"] = _figure((est.lower, est.point, est.upper))  # the reserved peak, as before
    doc["allocated"] = dict(_figure(est.allocated()), measured_by=ALLOCATED_IS)
    doc["reserved"] = dict(doc["peak"], measured_by=RESERVED_IS)
    if est.target:
        doc.update(_json_judged(result))
    doc["notes"] = est.notes + (result.facts.notes if result.facts else [])
    if result.traced is not None:
        doc["traced"] = trace_json(result.traced, est)
    return doc


def _json_judged(result: Result) -> Dict[str, Any]:
    """What a target adds: the card's view, the verdict on it, remedies and sweeps."""
    est = result.estimate
    combination = result.combination
    return {
        "card": dict(_figure(card_view(est)), measured_by="nvidia-smi (reserved + CUDA context)"),
        "target": {
            "name": est.target["name"],
            "gpu": est.target.get("gpu"),
            "count": est.target.get("count"),
            "capacity": int(est.capacity),
            "context": int(est.context),
            "reserve": int(est.reserve),
            "usable": int(est.usable),
        },
        "verdict": est.verdict,
        "remedies": [
            dict(
                remedy=o.remedy.label,
                saving=int(o.saving(est)),
                new_peak=int(o.estimate.point),
                verdict=o.estimate.verdict,
                cost=o.remedy.cost,
            )
            for o in result.remedies
        ],
        "combination": (
            dict(
                remedies=combination.labels,
                peak=int(combination.estimate.point),
                upper=int(combination.estimate.upper),
            )
            if combination
            else None
        ),
        "sweeps": [_json_sweep(sw) for sw in result.sweeps],
    }


def _json_sweep(sw: Sweep) -> Dict[str, Any]:
    return dict(
        input=sw.key,
        default=sw.default,
        decides=sw.decides,
        points=[
            dict(value=v, verdict=e.verdict, lower=int(e.lower), point=int(e.point), upper=int(e.upper))
            for v, e in sw.points
        ],
    )


def _figure(triple: Tuple[float, float, float]) -> Dict[str, Any]:
    lower, point, upper = triple
    return {"lower": int(lower), "point": int(point), "upper": int(upper), "point_gib": round(point / GIB, 3)}


def _plain(value: Any) -> Any:
    """A setting's value as JSON can hold it (a model from a config.json prints as its key)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)
