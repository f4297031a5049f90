"""Glue: read the inputs, merge them, fill defaults (each marked ``default``), estimate, attach
remedies and, when a defaulted input decides the verdict, the verdict over its plausible range.

Precedence, lowest to highest: defaults < script facts < config files the script names <
config files given on the command line < ``# vram:`` comments < explicit overrides (CLI flags;
flake8 ``--vram-gpu`` only for the target when no ``gpu=`` comment).

Bad values the user wrote (a comment, a flag, an unknown model or GPU) are ``errors``: no
verdict is built on them.  An input that cannot be read at all (a missing or undecodable
file, a syntax error) is ``input_error``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .knowledge import db
from .reading.config_comments import (
    CommentError,
    Comments,
    Value,
    check_gpu,
    comments_from_source,
    normalise,
    read_comments,
)
from .costs.estimate import Estimate, estimate
from .costs.activations import family_default_attention, traced_tables
from .reading.inputs import (
    InputError,
    Problems,
    apply_config_file,
    apply_discovered,
    apply_models,
    parse_source,
    read_configurator,
    read_python_file,
    unknown_model_message,
)
from .costs.remedies import remedies, smallest_combination
from .reading.script_reader import ScriptFacts, read_script

# The plausible range of an input nobody set, over which the verdict is shown.
BATCH_RANGE = (1, 2, 4, 8, 16, 32)
SEQ_RANGE = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
SWEPT = ("batch", "seq")


@dataclass
class Sweep:
    """The verdict at each plausible value of one defaulted input."""

    key: str
    default: Any
    points: List[Tuple[int, Estimate]] = field(default_factory=list)

    @property
    def decides(self) -> bool:
        return len({e.verdict for _, e in self.points}) > 1

    def last_fitting(self) -> Optional[int]:
        fitting = [v for v, e in self.points if e.verdict == "fits"]
        return fitting[-1] if fitting else None

    def first(self, verdict: str) -> Optional[int]:
        return next((v for v, e in self.points if e.verdict == verdict), None)

    def summary(self) -> str:
        """``fits up to batch 4, tight at 8, oom from 16``."""
        parts = []
        runs: List[Tuple[str, List[int]]] = []
        for value, est in self.points:
            if runs and runs[-1][0] == est.verdict:
                runs[-1][1].append(value)
            else:
                runs.append((est.verdict, [value]))
        for i, (verdict, values) in enumerate(runs):
            if len(runs) == 1:
                parts.append(f"{verdict} at every {self.key} {values[0]}–{values[-1]}")
            elif i == 0:
                parts.append(f"{verdict} up to {self.key} {values[-1]}")
            elif i == len(runs) - 1:
                parts.append(f"{verdict} from {values[0]}")
            else:
                parts.append(f"{verdict} at {values[0]}" + (f"–{values[-1]}" if len(values) > 1 else ""))
        return ", ".join(parts)


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
    input_error: Optional[str] = None
    sweeps: List[Sweep] = field(default_factory=list)
    model_problem: Optional[Tuple[int, str]] = None  # an unknown model read from the script
    traced: Optional[Any] = None  # tracing.compare.TraceOutcome when --trace was asked for

    @property
    def verdict(self) -> Optional[str]:
        return self.estimate.verdict if self.estimate else None

    @property
    def point_gib(self) -> float:
        return self.estimate.point / 1024**3 if self.estimate else 0.0

    @property
    def deciding(self) -> List[Sweep]:
        return [s for s in self.sweeps if s.decides]


# --------------------------------------------------------------------------- defaults


def guessed(v: Optional[Value]) -> bool:
    return v is None or v.guessed or v.source.startswith("default")


def resolve(
    values: Dict[str, Value],
    target: Optional[Dict[str, Any]],
    multi_rank: Optional[Dict[str, Value]] = None,
) -> Dict[str, Value]:
    """Fill defaults and derived settings; every default is marked as such.  ``multi_rank``:
    what the launcher decides only with more than one rank (``ScriptFacts.multi_rank``)."""
    s = dict(values)

    def default(key: str, value: Any, why: str = "default") -> None:
        if key not in s:
            s[key] = Value(value, why, guessed=True)

    model = s.get("model")
    if (
        model
        and "params" in s
        and s["params"].source.startswith("comment")
        and not model.source.startswith("comment")
    ):
        del s["model"]  # a params= comment beats a model read from the script
        model = None
    spec = db.spec(model.value) if model else None
    default("mode", "train")
    mode = s["mode"].value
    if mode == "train":
        default("optimizer", "adamw")
    else:
        s["optimizer"] = Value("none", "not training")
    kind = spec.kind if spec else "decoder"
    if kind in ("decoder", "encdec") and mode != "train":
        default("precision", "bf16", "default (checkpoint dtype of a Hugging Face model)")
    default("precision", "fp32")
    default("batch", 1 if mode != "train" else 8)
    if kind in ("cnn", "vit", "unet", "clip", "dit"):
        default("image", (spec.native_image if spec else 0) or 224, "default (model's native resolution)")
    if mode == "generate" and "seq" not in s and "context" in s:
        _prompt_from_context(s)
    default("seq", spec.default_seq() if spec else 2048, "default (model-family typical length)")
    if mode == "generate" and "context" not in s:
        _context_from_prompt(s)
    _ranks(s, target, multi_rank or {})
    _accumulation(s)
    default("offload", "none")
    default("checkpointing", "off")
    _runtime_attention(s, spec)
    default("attention", *_default_attention(spec))
    default("lora", 0)
    _default_loss(s, kind)
    # DeepSpeed with bf16/fp16 keeps half-precision parameters and an fp32 master copy
    deepspeed = s["sharding"].value in ("zero1", "zero2", "zero3")
    if deepspeed and s["precision"].value in ("bf16-mixed", "fp16-mixed"):
        p = s["precision"]
        s["precision"] = Value(p.value.split("-")[0], p.source + "; DeepSpeed holds half-precision params")
    return s


# runtimes that run soft-capped attention (Gemma 2) in their own eager code, never SDPA:
# litgpt/model.py, CausalSelfAttention.scaled_dot_product_attention ("with softcapping we cannot
# use SDPA": q @ k.mT, do_softcapping, softmax in fp32)
EAGER_WHEN_SOFTCAPPED = {"litgpt": "litgpt runs soft-capped attention eagerly (litgpt/model.py)"}


def _default_loss(s: Dict[str, Value], kind: str) -> None:
    """A language model trains with transformers' loss unless something read says otherwise."""
    if s["mode"].value == "train" and kind in ("decoder", "encdec") and "loss" not in s:
        why = "default (transformers' ForCausalLMLoss: logits upcast to fp32)"
        s["loss"] = Value("hf", why, guessed=True)


def _runtime_attention(s: Dict[str, Value], spec: Optional[db.Model]) -> None:
    runtime = s.get("runtime")
    why = EAGER_WHEN_SOFTCAPPED.get(runtime.value) if runtime else None
    if why and spec is not None and "attn-softcap" in spec.capabilities and guessed(s.get("attention")):
        s["attention"] = Value("eager", why)


def _default_attention(spec) -> Tuple[str, str]:
    """What the library runs the model's family on when the script sets nothing: the traced
    table's record of transformers' default (SDPA where the class supports it, else eager)."""
    traced = family_default_attention(spec.family.name) if spec else None
    if traced is None:
        return "sdpa", "default (transformers picks sdpa where available)"
    library = traced_tables()["families"][spec.family.name]["implementation"]
    return traced, f"default ({library} runs {traced} unless attn_implementation is set)"


def _prompt_from_context(s: Dict[str, Value]) -> None:
    new = s.get("new_tokens")
    n_new = new.value if new else min(256, s["context"].value // 2)
    prompt = max(1, s["context"].value - n_new)
    s["seq"] = Value(prompt, s["context"].source + f" (prompt = context - {n_new} new tokens)")


def _context_from_prompt(s: Dict[str, Value]) -> None:
    new = s.get("new_tokens")
    if new:
        s["context"] = Value(s["seq"].value + new.value, f"{s['seq'].source} + {new.source}")
    else:
        s["context"] = Value(s["seq"].value + 256, "default (prompt + 256 new tokens)", guessed=True)


def _ranks(s: Dict[str, Value], target: Optional[Dict[str, Any]], multi_rank: Dict[str, Value]) -> None:
    """World (the instance's GPU count by default), what the launcher decides with more than one
    rank, and the sharding (DDP by default with more than one)."""
    if "world" not in s and target and target.get("count", 1) > 1:
        s["world"] = Value(int(target["count"]), f"GPU count of {target['name']}")
    if "world" not in s:
        s["world"] = Value(1, "default", guessed=True)
    if s["world"].value > 1:
        for key, choice in multi_rank.items():
            s.setdefault(key, choice)
    if "sharding" not in s:
        s["sharding"] = Value("ddp" if s["world"].value > 1 else "none", "default", guessed=True)


def _accumulation(s: Dict[str, Value]) -> None:
    """Gradient accumulation from the global batch: ``global / (micro-batch x world)``, as litgpt
    (``global_batch_size``) and DeepSpeed (``train_batch_size``) derive it."""
    total = s.get("global_batch")
    if "grad_accum" in s or total is None or s["mode"].value != "train":
        return
    micro, world = s["batch"].value, s["world"].value
    steps = int(total.value) // max(1, int(micro) * int(world))
    if steps > 1:
        why = f"{total.source}: global batch {total.value} / (micro-batch {micro} x {world} ranks)"
        s["grad_accum"] = Value(steps, why, guessed=guessed(s["batch"]))


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
        if "model" in overrides:
            values.pop("params", None)
        values.update(overrides)
    return values


def target_of(values: Dict[str, Value], default_gpu: Optional[str]) -> Optional[Dict[str, Any]]:
    text = values["gpu"].value if "gpu" in values else default_gpu
    return check_gpu(text)[0] if text else None


# --------------------------------------------------------------------------- estimating


def run(
    values: Dict[str, Value],
    default_gpu: Optional[str] = None,
    with_remedies: bool = True,
    multi_rank: Optional[Dict[str, Value]] = None,
) -> Result:
    target = target_of(values, default_gpu)
    if "model" not in values and "params" not in values:
        return Result(estimate=None)
    settings = resolve(values, target, multi_rank)
    est = estimate(settings, target)
    result = Result(estimate=est)
    if target:
        result.sweeps = sweeps(settings, target)
    if with_remedies and target and est.verdict != "fits":
        result.remedies = remedies(settings, target, est)
        result.combination = smallest_combination(settings, target, est)
    return result


def plausible(key: str, settings: Dict[str, Value]) -> Tuple[int, ...]:
    if key == "batch":
        return BATCH_RANGE
    model = settings.get("model")
    top = db.spec(model.value).max_positions if model else 32768
    return tuple(v for v in SEQ_RANGE if v <= max(top, SEQ_RANGE[0]))


def sweeps(settings: Dict[str, Value], target: Dict[str, Any]) -> List[Sweep]:
    """For each defaulted batch / sequence length: the verdict over its plausible range.

    Only text models have a sequence length to sweep; a generation run's context follows
    the prompt, so it is swept with it when it was defaulted too."""
    out = []
    mode = settings["mode"].value
    model = settings.get("model")
    kind = db.spec(model.value).kind if model else "decoder"
    for key in SWEPT:
        if not guessed(settings.get(key)):
            continue
        if key == "seq" and kind not in ("decoder", "encoder", "encdec"):
            continue
        sweep = Sweep(key, settings[key].value)
        for value in plausible(key, settings):
            varied = dict(settings)
            varied[key] = Value(value, f"{key} {value} (range of a default)")
            if key == "seq" and mode == "generate" and guessed(settings.get("context")):
                varied["context"] = Value(value + 256, "range of a default")
            sweep.points.append((value, estimate(varied, target)))
        out.append(sweep)
    return out


def _check_model_names(
    values: Dict[str, Value], facts: Optional[ScriptFacts], problem: Optional[Tuple[int, str]]
):
    """An unknown model read from the script is an error only when nothing else names one."""
    if problem is None or "model" in values or "params" in values:
        return []
    return [CommentError(problem[0], 0, problem[1])]


def estimate_source(
    source: str,
    filename: str = "<script>",
    gpu: Optional[str] = None,
    overrides: Optional[Dict[str, Any]] = None,
    tree: Optional[ast.AST] = None,
    comment_tokens: Optional[List[Any]] = None,
    configs: Optional[List[str]] = None,
    read_files: bool = True,
) -> Result:
    """Estimate a script given as text.  ``overrides`` are raw ``key: value`` pairs (CLI flags);
    ``configs`` are config files the user names (YAML/JSON, or nanoGPT-style ``.py``)."""
    result_error = None
    if tree is None:
        tree, result_error = parse_source(source, filename)
    tokens = comment_tokens if comment_tokens is not None else comments_from_source(source, tree)
    comments = read_comments(tokens)
    problems = Problems()
    try:
        facts, model_problem = _read_inputs(tree, filename, configs or [], read_files, problems)
    except InputError as exc:
        return Result(estimate=None, input_error=str(exc), facts=ScriptFacts())
    over, errors = parse_overrides(overrides or {})
    values = merge(facts, comments, over)
    errors = list(comments.errors) + errors + [CommentError(line, 0, msg) for line, msg in problems.items]
    errors += _check_model_names(values, facts, model_problem)
    if gpu and "gpu" not in values:
        _target, why = check_gpu(gpu)
        if why:
            errors.append(CommentError(1, 0, f"--vram-gpu / vram-gpu: {why}"))
            gpu = None
    if errors or result_error:
        result = Result(estimate=None)
    else:
        result = run(values, default_gpu=gpu, multi_rank=facts.multi_rank)
    result.errors = errors
    result.facts = facts
    result.input_error = result_error
    result.report_line = comments.first_line or 1
    result.report_col = comments.first_col if comments.first_line else 0
    return result


def _read_inputs(
    tree: Optional[ast.AST], filename: str, configs: List[str], read_files: bool, problems: Problems
) -> Tuple[ScriptFacts, Optional[Tuple[int, str]]]:
    """The script's facts with the config files it names and the user gives (raises
    :class:`InputError` for a file that cannot be read), and an unknown model it names."""
    configurator: Dict[str, Tuple[Any, str, int]] = {}
    yaml_configs = []
    for path in configs:
        if path.endswith(".py"):
            configurator.update(read_configurator(path))
        else:
            yaml_configs.append(path)
    facts = read_script(tree, filename, configurator) if tree is not None else ScriptFacts()
    if configurator and facts.configurator is None and tree is not None:
        facts.notes.append(
            "the script has no exec(open('configurator.py').read()); the .py config still applies"
        )
        facts = _apply_configurator_anyway(tree, filename, configurator)
    if "args_file" in facts.markers and not yaml_configs:
        facts.notes.append(
            f"line {facts.markers['args_file'][0]}: HfArgumentParser reads the run's arguments from the "
            "command line or a JSON/YAML file; pass that file too (vram-estimate train.py args.json)"
        )
    if read_files:
        apply_discovered(facts, filename, problems)
        for path in yaml_configs:
            apply_config_file(facts, path, True, problems)
    return facts, _model_problem(facts, filename, problems, read_files)


def _model_problem(
    facts: ScriptFacts, filename: str, problems: Any, read_files: bool
) -> Optional[Tuple[int, str]]:
    if not read_files:
        if facts.model_refs and "model" not in facts.values:
            text, line, _ = facts.model_refs[0]
            return line, unknown_model_message(text, [])
        return None
    mine = Problems()
    apply_models(facts, filename, mine)
    return mine.items[0] if mine.items else None


def _apply_configurator_anyway(
    tree: ast.AST, filename: str, configurator: Dict[str, Tuple[Any, str, int]]
) -> ScriptFacts:
    """A nanoGPT-style config given for a script without the ``exec`` line: apply it after
    everything the module binds (as if the script exec'd it at its end)."""
    marker = ast.parse("exec(open('configurator.py').read())").body[0]
    body = list(getattr(tree, "body", []))
    ast.copy_location(marker, body[-1] if body else marker)
    return read_script(ast.Module(body=body + [marker], type_ignores=[]), filename, configurator)


def estimate_file(
    path: str,
    gpu: Optional[str] = None,
    overrides: Optional[Dict[str, Any]] = None,
    configs: Optional[List[str]] = None,
) -> Result:
    """Estimate a script on disk, read the way Python reads it (coding cookie, BOM)."""
    try:
        source = read_python_file(path)
    except InputError as exc:
        return Result(estimate=None, input_error=str(exc))
    return estimate_source(source, filename=path, gpu=gpu, overrides=overrides, configs=configs)


def estimate_configs(configs: List[str], overrides: Optional[Dict[str, Any]] = None) -> Result:
    """Estimate from config files alone: ``vram-estimate recipe.yaml --gpu a100-80gb``."""
    facts = ScriptFacts()
    problems = Problems()
    try:
        for path in configs:
            apply_config_file(facts, path, True, problems)
    except InputError as exc:
        return Result(estimate=None, input_error=str(exc))
    over, errors = parse_overrides(overrides or {})
    errors += [CommentError(line, 0, msg) for line, msg in problems.items]
    values = merge(facts, Comments(), over)
    result = Result(estimate=None) if errors else run(values, multi_rank=facts.multi_rank)
    result.errors = errors
    result.facts = facts
    return result


def parse_overrides(raw: Dict[str, Any]) -> Tuple[Dict[str, Value], List[CommentError]]:
    out: Dict[str, Value] = {}
    errors: List[CommentError] = []
    for key, value in raw.items():
        if value is None:
            continue
        if key == "lora_targets":
            out[key] = Value(list(value), "command line")
            continue
        norm, err = normalise(key, str(value))
        if err:
            errors.append(CommentError(1, 0, f"--{key}: {err}"))
            continue
        if key == "model" and isinstance(norm, int):
            key = "params"
        out[key] = Value(norm, f"--{key}")
    return out, errors


def estimate_config(**kwargs: Any) -> Result:
    """Estimate from keyword settings alone: ``estimate_config(model="llama-3-8b", gpu="h100")``."""
    over, errors = parse_overrides(kwargs)
    result = Result(estimate=None) if errors else run(over)
    result.errors = errors
    return result
