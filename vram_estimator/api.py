"""Glue: merge what the script says, what comments say and what the caller overrides; fill
defaults (each marked ``default``); estimate; attach remedies.

Precedence, lowest to highest: defaults < script facts < ``# vram:`` comments < explicit
overrides (CLI flags, flake8 ``--vram-gpu`` only for the target when no ``gpu=`` comment).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from . import db
from .config_comments import CommentError, Comments, Value, comments_from_source, normalise, read_comments
from .estimate import Estimate, estimate
from .script_reader import ScriptFacts, read_script


@dataclass
class Result:
    """Everything a report needs."""

    estimate: Optional[Estimate]
    errors: List[CommentError] = field(default_factory=list)
    facts: Optional[ScriptFacts] = None
    remedies: List[Any] = field(default_factory=list)
    combination: Optional[Any] = None
    report_line: int = 1
    report_col: int = 0

    @property
    def verdict(self) -> Optional[str]:
        return self.estimate.verdict if self.estimate else None

    @property
    def point_gib(self) -> float:
        return self.estimate.point / 1024**3 if self.estimate else 0.0


def default_seq(model_key: Optional[str]) -> int:
    if not model_key:
        return 2048
    entry = db.model_entry(model_key)
    kind = db.KIND[entry["family"]]
    maxp = entry.get("max_positions", 2048)
    if kind == "decoder":
        return min(2048, maxp)
    if kind == "encdec" and entry["family"] == "whisper":
        return 1500
    return min(512, maxp)


def resolve(values: Dict[str, Value], target: Optional[Dict[str, Any]]) -> Dict[str, Value]:
    """Fill defaults and derived settings; every default is marked as such."""
    s = dict(values)

    def default(key: str, value: Any, why: str = "default") -> None:
        if key not in s:
            s[key] = Value(value, why)

    model = s.get("model")
    model_key = model.value if model else None
    if (
        model_key
        and "params" in s
        and s["params"].source.startswith("comment")
        and not model.source.startswith("comment")
    ):
        del s["model"]  # a params= comment beats a model read from the script
        model_key = None
    default("mode", "train")
    mode = s["mode"].value
    if mode == "train":
        default("optimizer", "adamw")
    else:
        s["optimizer"] = Value("none", "not training")
    kind = db.KIND[db.model_entry(model_key)["family"]] if model_key else "decoder"
    if kind in ("decoder", "encdec") and mode != "train":
        default("precision", "bf16", "default (checkpoint dtype of a Hugging Face model)")
    default("precision", "fp32")
    default("batch", 1 if mode != "train" else 8)
    if kind in ("cnn", "vit", "unet", "clip"):
        cfg = db.model_entry(model_key)["config"] if model_key else {}
        vis = cfg.get("vision", cfg)
        default("image", vis.get("image", 224), "default (model's native resolution)")
    if mode == "generate" and "seq" not in s and "context" in s:
        new = s.get("new_tokens")
        n_new = new.value if new else min(256, s["context"].value // 2)
        prompt = max(1, s["context"].value - n_new)
        s["seq"] = Value(prompt, s["context"].source + f" (prompt = context - {n_new} new tokens)")
    default("seq", default_seq(model_key), "default (model-family typical length)")
    if mode == "generate" and "context" not in s:
        new = s.get("new_tokens")
        if new:
            s["context"] = Value(s["seq"].value + new.value, f"{s['seq'].source} + {new.source}")
        else:
            s["context"] = Value(s["seq"].value + 256, "default (prompt + 256 new tokens)")
    if "world" not in s and target and target.get("count", 1) > 1:
        s["world"] = Value(int(target["count"]), f"GPU count of {target['name']}")
    default("world", 1)
    default("sharding", "ddp" if s["world"].value > 1 else "none")
    default("offload", "none")
    default("checkpointing", "off")
    default("attention", "sdpa", "default (transformers picks sdpa where available)")
    default("lora", 0)
    # DeepSpeed with bf16/fp16 keeps half-precision parameters and an fp32 master copy
    if s["sharding"].value in ("zero1", "zero2", "zero3") and s["precision"].value in (
        "bf16-mixed",
        "fp16-mixed",
    ):
        p = s["precision"]
        s["precision"] = Value(p.value.split("-")[0], p.source + "; DeepSpeed holds half-precision params")
    return s


def merge(
    facts: Optional[ScriptFacts], comments: Comments, overrides: Optional[Dict[str, Value]] = None
) -> Dict[str, Value]:
    values: Dict[str, Value] = {}
    if facts:
        values.update(facts.values)
    if "params" in comments.values and "model" not in comments.values:
        values.pop("model", None)
    if "model" in comments.values:
        values.pop("params", None)
    values.update(comments.values)
    if overrides:
        if "params" in overrides:
            values.pop("model", None)
        values.update(overrides)
    return values


def target_of(values: Dict[str, Value], default_gpu: Optional[str]) -> Optional[Dict[str, Any]]:
    gpu = values.get("gpu")
    if gpu is not None:
        return db.resolve_target(gpu.value)
    if default_gpu:
        return db.resolve_target(default_gpu)
    return None


def run(values: Dict[str, Value], default_gpu: Optional[str] = None, with_remedies: bool = True) -> Result:
    target = target_of(values, default_gpu)
    if "model" not in values and "params" not in values:
        return Result(estimate=None)
    settings = resolve(values, target)
    est = estimate(settings, target)
    result = Result(estimate=est)
    if with_remedies and target and est.verdict != "fits":
        from .remedies import remedies, smallest_combination

        result.remedies = remedies(settings, target, est)
        result.combination = smallest_combination(settings, target, est)
    return result


def estimate_source(
    source: str,
    filename: str = "<script>",
    gpu: Optional[str] = None,
    overrides: Optional[Dict[str, Any]] = None,
    tree: Optional[ast.AST] = None,
    comment_tokens: Optional[List[Any]] = None,
) -> Result:
    """Estimate a script given as text.  ``overrides`` are raw ``key: value`` pairs (CLI flags)."""
    comments = read_comments(comment_tokens if comment_tokens is not None else comments_from_source(source))
    if tree is None:
        try:
            tree = ast.parse(source, filename=filename)
        except (SyntaxError, ValueError):
            tree = None
    facts = read_script(tree, filename) if tree is not None else ScriptFacts()
    over, errors = parse_overrides(overrides or {})
    values = merge(facts, comments, over)
    errors = list(comments.errors) + errors
    if gpu and "gpu" not in values and db.resolve_target(gpu) is None:
        errors.append(CommentError(1, 0, f"unknown GPU '{gpu}' in --vram-gpu; see `vram-estimate gpus`"))
        gpu = None
    result = run(values, default_gpu=gpu)
    result.errors = errors
    result.facts = facts
    result.report_line = comments.first_line or 1
    result.report_col = comments.first_col if comments.first_line else 0
    return result


def parse_overrides(raw: Dict[str, Any]) -> (Dict[str, Value], List[CommentError]):
    out: Dict[str, Value] = {}
    errors: List[CommentError] = []
    for key, value in raw.items():
        if value is None:
            continue
        if key == "lora_targets":
            out[key] = Value(value, "command line")
            continue
        norm, err = normalise(key, str(value))
        if err:
            errors.append(CommentError(1, 0, err))
            continue
        if key == "model" and isinstance(norm, int):
            key = "params"
        out[key] = Value(norm, f"--{key}")
    return out, errors


def estimate_config(**kwargs: Any) -> Result:
    """Estimate from keyword settings alone: ``estimate_config(model="llama-3-8b", gpu="h100")``."""
    over, errors = parse_overrides(kwargs)
    result = run(over)
    result.errors = errors
    return result
