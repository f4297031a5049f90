"""What a name means for memory, wherever the name is found.

Real scripts keep their setup in module globals (nanoGPT's ``batch_size = 12``), function
signature defaults behind a CLI library (``def train(micro_batch_size: int = 4)``), dataclass
fields (``per_device_train_batch_size: int = field(default=4)``), argparse defaults, and flat
config files (axolotl's ``micro_batch_size: 2``, a TrainingArguments JSON).  One table says
what each such name sets, so every place that binds a name reads it the same way.

``rank`` orders names that set the same input: the per-device micro-batch
(``micro_batch_size``, ``per_device_train_batch_size``) outranks a plain ``batch_size``,
which in alpaca-lora-style scripts is the *global* batch (``batch_size // micro_batch_size``
is the accumulation), and outranks ``bs``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from .config_comments import ATTENTIONS, LIMITS, OPTIMIZERS, PRECISIONS

DTYPES = {
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp16": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "fp32": "fp32",
}


@dataclass(frozen=True)
class NameRule:
    setting: str
    kind: str  # count | model | optimizer | precision | dtype | attention | flag | targets | dim
    rank: int = 0
    when_true: Any = None  # kind 'flag': the setting's value when the name is bound to True


def _rules(setting: str, kind: str, names: str, rank: int = 0, when_true: Any = None) -> Dict[str, NameRule]:
    return {n: NameRule(setting, kind, rank, when_true) for n in names.split()}


NAMES: Dict[str, NameRule] = {
    **_rules("batch", "count", "bs"),
    **_rules("batch", "count", "batch_size train_batch_size batch", rank=1),
    **_rules(
        "batch",
        "count",
        "micro_batch_size per_device_train_batch_size per_gpu_train_batch_size "
        "train_micro_batch_size_per_gpu micro_batch device_batch_size",
        rank=2,
    ),
    **_rules(
        "seq",
        "count",
        "max_seq_length max_seq_len max_length seq_len seq_length sequence_length sequence_len "
        "block_size context_length max_len ctx_len n_ctx model_max_length max_source_length "
        "cutoff_len max_tokens",
    ),
    **_rules("image", "count", "image_size img_size resolution crop_size input_size image_side"),
    **_rules("new_tokens", "count", "max_new_tokens"),
    **_rules(
        "grad_accum",
        "count",
        "gradient_accumulation_steps grad_accum_steps accumulate_grad_batches gradient_accumulation_iters "
        "gradient_accumulation grad_accum gradient_accumulate_every accum_iter",
    ),
    # the batch of one optimizer step over every rank: accumulation = global / (micro x world)
    **_rules("global_batch", "count", "global_batch_size total_batch_size effective_batch_size"),
    **_rules("decoder_seq", "count", "max_target_length max_target_len decoder_max_length"),
    **_rules("lora", "count", "lora_r lora_rank"),
    **_rules(
        "model",
        "model",
        "model_name model_id model_name_or_path base_model model model_path "
        "pretrained_model_name_or_path model_checkpoint checkpoint_dir base_model_name",
    ),
    **_rules("optimizer", "optimizer", "optim optimizer optimizer_name"),
    **_rules("precision", "precision", "precision mixed_precision"),
    **_rules("precision", "dtype", "dtype torch_dtype"),
    **_rules("attention", "attention", "attn_implementation attention"),
    **_rules(
        "checkpointing",
        "flag",
        "gradient_checkpointing grad_checkpointing use_gradient_checkpointing "
        "activation_checkpointing enable_activation_checkpointing",
        when_true="on",
    ),
    **_rules("precision", "flag", "bf16", rank=1, when_true="bf16-mixed"),
    **_rules("precision", "flag", "fp16", rank=1, when_true="fp16-mixed"),
    **_rules("precision", "flag", "load_in_8bit", rank=3, when_true="int8"),
    **_rules("precision", "flag", "load_in_4bit", rank=4, when_true="nf4"),
    **_rules("attention", "flag", "flash_attention use_flash_attention flash_attn", when_true="flash"),
    **_rules("attention", "flag", "sdp_attention", when_true="sdpa"),
    **_rules("lora_targets", "targets", "lora_target_modules target_modules"),
    # a nanoGPT-style model is built from these globals
    **_rules("gpt", "dim", "n_layer n_head n_embd vocab_size bias"),
}


def interpret(name: str, value: Any) -> Optional[Tuple[str, Any, int]]:
    """``(setting, canonical value, rank)`` for ``name = value``, or None when it sets nothing.

    Values outside the accepted bounds (a batch of 10**30) set nothing: a linter does not
    build a report on them.
    """
    rule = NAMES.get(name.lower())
    if rule is None:
        return None
    canonical = _CONVERT[rule.kind](rule, value)
    if canonical is None:
        return None
    if rule.kind == "dim":
        return f"gpt.{name.lower()}", canonical, 0
    return rule.setting, canonical, rule.rank


def _count(rule: NameRule, value: Any) -> Optional[int]:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    limit = LIMITS.get(rule.setting)
    return value if limit is None or value <= limit else None


def _text(value: Any) -> Optional[str]:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _model(rule: NameRule, value: Any) -> Optional[str]:
    text = _text(value)
    return text if text and len(text) <= 200 else None


def _from_table(table: Dict[str, str]) -> Any:
    def convert(rule: NameRule, value: Any) -> Optional[str]:
        text = _text(value)
        if text is None:
            return None
        low = text.lower()
        for candidate in (low, low.replace("-", "_"), low.replace("_", "-")):
            if candidate in table:
                return table[candidate]
        return None

    return convert


def optimizer_name(text: str) -> Optional[str]:
    """Our optimizer name for a TrainingArguments/axolotl ``optim`` string (``adamw_bnb_8bit``)."""
    low = text.lower()
    name = OPTIMIZERS.get(low) or OPTIMIZERS.get(low.replace("_", "-"))
    if name is None and "8bit" in low:
        name = "paged-adamw-8bit" if "paged" in low else "adamw-8bit"
    if name is None and "adam" in low:
        name = "paged-adamw" if "paged" in low else "adamw"
    if name is None and "lion" in low:
        name = "lion-8bit" if "8bit" in low else "lion"
    if name is None and "sgd" in low:
        name = "sgd"
    return name


def _optimizer(rule: NameRule, value: Any) -> Optional[str]:
    text = _text(value)
    return optimizer_name(text) if text else None


def dtype_name(text: str) -> Optional[str]:
    """``torch.bfloat16`` / ``"bf16"`` / ``"float16"`` -> our precision for half weights."""
    return DTYPES.get(text.split(".")[-1].lower())


def _dtype(rule: NameRule, value: Any) -> Optional[str]:
    text = _text(value)
    if text is None:
        return None
    return dtype_name(text) or _from_table(PRECISIONS)(rule, text)


def _flag(rule: NameRule, value: Any) -> Optional[str]:
    return rule.when_true if value is True else None


def _targets(rule: NameRule, value: Any) -> Optional[list]:
    if isinstance(value, str) and value.strip() == "all-linear":
        return ["all-linear"]
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return [str(v) for v in value][:64]
    return None


def _dim(rule: NameRule, value: Any) -> Optional[Any]:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and 0 < value <= 1 << 24:
        return value
    return None


_CONVERT = {
    "count": _count,
    "model": _model,
    "optimizer": _optimizer,
    "precision": _from_table(PRECISIONS),
    "dtype": _dtype,
    "attention": _from_table(ATTENTIONS),
    "flag": _flag,
    "targets": _targets,
    "dim": _dim,
}
