"""What training config files say about memory, one reader per format.

A file is recognised by keys only its format uses (``FORMATS``, tried in order); each reader
turns the document into :class:`Setting` records that name the key they came from
(``train.micro_batch_size``).  Flat formats (axolotl, an HF ``TrainingArguments`` JSON) share
the one name table of :mod:`..setting_names`; nested ones (torchtune, litgpt, DeepSpeed,
accelerate) have their own tables of paths.

``prio`` follows the script reader's scale: a DeepSpeed micro-batch (3) yields to a
``TrainingArguments`` keyword in the script (4), and a file given on the command line is
raised above everything the script says (see :mod:`..inputs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from ...knowledge import db
from ..config_comments import LIMITS
from ..setting_names import interpret, optimizer_name
from ..tables import LIGHTNING_PRECISION, LITGPT_LORA_ROLES, OPTIMIZER_CLASSES
from .loader import Doc
from ...knowledge.losses import CONFIG_SWITCHES, callee_loss


@dataclass
class Setting:
    key: str
    value: Any
    field: str = ""
    prio: int = 4
    multi_rank: bool = False  # what the launcher does only with more than one rank
    line: Optional[int] = None  # where it is, when the field does not say (a launch line)


def _count(value: Any, key: str) -> Optional[int]:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value if value <= LIMITS.get(key, 1 << 30) else None


def _optimizer_settings(value: Any, field: str, prio: int) -> List[Setting]:
    """The optimizer a config names, and ``fused: true`` / ``foreach: false`` in its arguments
    (torchtune puts them beside ``_component_``, litgpt under ``init_args``)."""
    name = _optimizer_class(value)
    if not name:
        return []
    out = [Setting("optimizer", name, field, prio)]
    if isinstance(value, dict):
        args = value.get("init_args") if isinstance(value.get("init_args"), dict) else value
        if args.get("fused") is True or args.get("foreach") is False:
            out.append(Setting("optimizer_foreach", False, field, prio))
    return out


def _optimizer_class(value: Any) -> Optional[str]:
    """``torch.optim.AdamW`` / ``{class_path: ...}`` / ``{_component_: ...}`` / ``adamw_8bit``."""
    if isinstance(value, dict):
        value = value.get("class_path") or value.get("_component_") or value.get("type")
    if not isinstance(value, str):
        return None
    last = value.rsplit(".", 1)[-1]
    return OPTIMIZER_CLASSES.get(last.lower().replace("_", "")) or optimizer_name(last)


# --------------------------------------------------------------------------- DeepSpeed


def read_deepspeed(config: Dict[str, Any], prefix: str = "") -> List[Setting]:
    out: List[Setting] = []
    zero = config.get("zero_optimization")
    if isinstance(zero, dict):
        stage = zero.get("stage")
        if stage in (1, 2, 3):
            out.append(Setting("sharding", f"zero{stage}", prefix + "zero_optimization.stage", 4))
        offload = _offload(_device(zero.get("offload_optimizer")), _device(zero.get("offload_param")))
        if offload:
            out.append(Setting("offload", offload, prefix + "zero_optimization", 4))
    mb = _count(config.get("train_micro_batch_size_per_gpu"), "batch")
    if mb:
        out.append(Setting("batch", mb, prefix + "train_micro_batch_size_per_gpu", 3))
    accum = _count(config.get("gradient_accumulation_steps"), "grad_accum")
    if accum:
        out.append(Setting("grad_accum", accum, prefix + "gradient_accumulation_steps", 3))
    total = _count(config.get("train_batch_size"), "global_batch")
    if total:
        out.append(Setting("global_batch", total, prefix + "train_batch_size", 3))
    for key, precision in (("bf16", "bf16"), ("fp16", "fp16")):
        section = config.get(key)
        if isinstance(section, dict) and section.get("enabled") is True:
            out.append(Setting("precision", precision, prefix + f"{key}.enabled", 4))
    out += _optimizer_settings(config.get("optimizer"), prefix + "optimizer.type", 3)
    return out


def _device(section: Any) -> Optional[str]:
    if isinstance(section, dict):
        return section.get("device")
    return section if isinstance(section, str) else None


def _offload(optimizer_device: Optional[str], param_device: Optional[str]) -> Optional[str]:
    opt = optimizer_device in ("cpu", "nvme")
    par = param_device in ("cpu", "nvme")
    return "both" if opt and par else "optimizer" if opt else "param" if par else None


def _deepspeed(doc: Doc) -> List[Setting]:
    return read_deepspeed(doc.data)


# --------------------------------------------------------------------------- flat files


def _flat(doc: Doc, extra: Dict[str, Callable[[Any], List[Setting]]]) -> List[Setting]:
    """Top-level ``name: value`` pairs through the shared name table, plus format extras."""
    out: List[Setting] = []
    roles: List[str] = []
    for name, value in doc.data.items():
        if name in extra:
            for setting in extra[name](value):
                setting.field = setting.field or name
                out.append(setting)
            continue
        if name in LITGPT_LORA_ROLES:
            if value is True:
                roles.extend(LITGPT_LORA_ROLES[name])
            continue
        found = interpret(name, value)
        if found and not found[0].startswith("gpt."):
            setting, canonical, rank = found
            out.append(Setting(setting, canonical, name, 4 + rank))
    if roles:
        out.append(Setting("lora_targets", roles, "lora_* switches", 4))
    return out


def _adapter(value: Any) -> List[Setting]:
    if value == "qlora":
        return [Setting("lora", 8, "", 3), Setting("precision", "nf4", "", 4)]
    if value == "lora":
        return [Setting("lora", 8, "", 3)]
    return []


def _mixed(flag: str) -> Callable[[Any], List[Setting]]:
    def read(value: Any) -> List[Setting]:
        if value is True or value == "auto":
            return [Setting("precision", f"{flag}-mixed", "", 5)]
        return []

    return read


def _fsdp(value: Any) -> List[Setting]:
    if isinstance(value, list) and value:
        value = " ".join(str(v) for v in value)
    if isinstance(value, str) and value.strip():
        out = [Setting("sharding", "zero2" if "shard_grad_op" in value else "fsdp", "", 4)]
        if "offload" in value:
            out.append(Setting("offload", "both", "", 4))
        return out
    return []


def _nested_deepspeed(value: Any) -> List[Setting]:
    if isinstance(value, dict):
        return read_deepspeed(value, "deepspeed.")
    return []  # a file name: followed as a reference by inputs.py


def _use_peft(value: Any) -> List[Setting]:
    return [Setting("lora", 8, "", 2)] if value is True else []


def _all_linear(value: Any) -> List[Setting]:
    return [Setting("lora_targets", ["all-linear"], "", 5)] if value is True else []


def _seq(value: Any) -> List[Setting]:
    n = _count(value, "seq")
    return [Setting("seq", n, "", 4)] if n else []


def _liger_switch(layout: str) -> Callable[[Any], List[Setting]]:
    """``use_liger_kernel: true`` (HF arguments) / ``liger_fused_linear_cross_entropy: true``
    (axolotl's Liger plugin): the fused linear cross-entropy loss."""
    return lambda value: [Setting("loss", layout, "", 4)] if value is True else []


FLAT_EXTRAS: Dict[str, Callable[[Any], List[Setting]]] = {
    **{key: _liger_switch(layout) for key, layout in CONFIG_SWITCHES.items()},
    "adapter": _adapter,
    "bf16": _mixed("bf16"),
    "fp16": _mixed("fp16"),
    "fsdp": _fsdp,
    "deepspeed": _nested_deepspeed,
    "use_peft": _use_peft,
    "lora_target_linear": _all_linear,
    "sequence_len": _seq,
}


def _axolotl(doc: Doc) -> List[Setting]:
    return _flat(doc, FLAT_EXTRAS)


def _hf_args(doc: Doc) -> List[Setting]:
    return _flat(doc, FLAT_EXTRAS)


# --------------------------------------------------------------------------- litgpt

LITGPT_QUANTIZE = {
    "bnb.nf4": "nf4",
    "bnb.nf4-dq": "nf4",
    "bnb.fp4": "nf4",
    "bnb.fp4-dq": "nf4",
    "bnb.int8": "int8",
}


def _litgpt(doc: Doc) -> List[Setting]:
    d = doc.data
    out: List[Setting] = []
    model = d.get("checkpoint_dir") or d.get("model_name")
    if isinstance(model, str):
        out.append(Setting("model", model, "checkpoint_dir", 4))
    precision = d.get("precision")
    if isinstance(precision, (str, int)) and str(precision) in LIGHTNING_PRECISION:
        out.append(Setting("precision", LIGHTNING_PRECISION[str(precision)], "precision", 4))
    devices = _count(d.get("devices"), "world")
    nodes = _count(d.get("num_nodes"), "world") or 1
    if devices:
        out.append(Setting("world", devices * nodes, "devices", 4))
    out += _litgpt_lora(d) + _litgpt_train(d) + _litgpt_launch(d)
    # every litgpt training script runs model(..., lm_head_chunk_size=128) into
    # chunked_cross_entropy (litgpt/finetune/*.py, litgpt/pretrain.py)
    out.append(Setting("loss", "litgpt-chunked", "litgpt's training loop: chunked_cross_entropy", 2))
    out.append(Setting("runtime", "litgpt", "a litgpt config", 2))
    out += _optimizer_settings(d.get("optimizer"), "optimizer", 4)
    quantize = d.get("quantize")
    if isinstance(quantize, str) and quantize in LITGPT_QUANTIZE:
        out.append(Setting("precision", LITGPT_QUANTIZE[quantize], "quantize", 6))
        # Lightning's BitsandbytesPrecision: _NF4Linear compress_statistics=False, _NF4DQLinear True
        out.append(Setting("double_quant", quantize.endswith("-dq"), "quantize", 6))
        # litgpt's finetune scripts swap the AdamW they are given for bitsandbytes' PagedAdamW
        # when the model is quantised (litgpt.utils.instantiate_bnb_optimizer)
        out.append(Setting("optimizer", "paged-adamw", "quantize", 5))
    return out


def _litgpt_lora(d: Dict[str, Any]) -> List[Setting]:
    rank = _count(d.get("lora_r"), "lora")
    if not rank:
        return []
    out = [Setting("lora", rank, "lora_r", 4)]
    roles = [m for role, mods in LITGPT_LORA_ROLES.items() if d.get(role) is True for m in mods]
    if roles:
        out.append(Setting("lora_targets", roles, "lora_* switches", 4))
    return out


def _litgpt_train(d: Dict[str, Any]) -> List[Setting]:
    train = d.get("train") if isinstance(d.get("train"), dict) else {}
    out: List[Setting] = []
    mb = _count(train.get("micro_batch_size"), "batch")
    if mb:
        out.append(Setting("batch", mb, "train.micro_batch_size", 5))
    total = _count(train.get("global_batch_size"), "global_batch")
    if total:
        out.append(Setting("global_batch", total, "train.global_batch_size", 4))
    seq = _count(train.get("max_seq_length"), "seq")
    if seq:
        out.append(Setting("seq", seq, "train.max_seq_length", 4))
    return out


def _litgpt_launch(d: Dict[str, Any]) -> List[Setting]:
    """What litgpt's scripts do with ``devices * num_nodes > 1``: the finetune scripts (a
    ``checkpoint_dir``) shard with FSDP (FSDP2 ``fully_shard`` for LoRA) and checkpoint every
    block; ``litgpt pretrain`` (a ``model_name``, no ``checkpoint_dir``) shards without
    checkpointing."""
    field = "devices > 1 (litgpt's launcher)"
    if "checkpoint_dir" in d and "lora_r" in d:
        # finetune lora: FSDPStrategy(auto_wrap_policy={Block}) (FSDP1, frozen and LoRA weights in
        # one flat parameter per block) up to litgpt 0.5.4; ModelParallelStrategy whose
        # parallelize_fn applies FSDP2 fully_shard from 0.5.5 (#2086).  A config does not say which
        why = field + ": FSDP1 Block units (litgpt <= 0.5.4; FSDP2 from 0.5.5)"
        out = [Setting("sharding", "fsdp", why, 3, multi_rank=True),
               Setting("fsdp_units", "litgpt", why, 3, multi_rank=True)]
    else:
        # full / adapter / pretrain: FSDPStrategy(auto_wrap_policy={Block}), one FSDP1 unit a block
        out = [Setting("sharding", "fsdp", field + ": FSDP, one unit per block", 3, multi_rank=True),
               Setting("fsdp_units", "block", field + ": auto_wrap_policy={Block}", 3,
                       multi_rank=True)]
    if "checkpoint_dir" in d:
        why = field + ": activation checkpointing per block"
        out.append(Setting("checkpointing", "on", why, 3, multi_rank=True))
    return out


# --------------------------------------------------------------------------- torchtune

TORCHTUNE_MODULES = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}
TORCHTUNE_DTYPES = {"bf16": "bf16", "fp32": "fp32", "fp16": "fp16"}


def torchtune_model(component: str) -> Tuple[Optional[str], int, bool]:
    """``torchtune.models.llama3_1.qlora_llama3_1_8b`` -> (model key, adapters?, quantised?)."""
    last = component.rsplit(".", 1)[-1]
    lora = last.startswith(("lora_", "qlora_"))
    quantised = last.startswith("qlora_")
    base = last.split("_", 1)[1] if lora else last
    return db.find_model(base), lora, quantised


def torchtune_model_settings(model: Dict[str, Any], field: str = "model._component_") -> List[Setting]:
    """A torchtune model builder and its arguments (a recipe's ``model:`` section, or the
    keywords of ``lora_llama3_1_8b(...)`` in a script)."""
    out: List[Setting] = []
    component = model.get("_component_")
    if not isinstance(component, str):
        return out
    key, lora, quantised = torchtune_model(component)
    if key:
        out.append(Setting("model", key, field, 4))
    if lora:
        rank = _count(model.get("lora_rank"), "lora") or 8
        out.append(Setting("lora", rank, "model.lora_rank", 4))
        out.append(Setting("lora_impl", "torchtune", field, 4))
        attention_modules = model.get("lora_attn_modules") or []
        targets = [TORCHTUNE_MODULES.get(m, m) for m in attention_modules if isinstance(m, str)]
        if model.get("apply_lora_to_mlp") is True:
            targets += ["gate_proj", "up_proj", "down_proj"]
        if model.get("apply_lora_to_output") is True:
            targets.append("lm_head")
        if targets:
            out.append(Setting("lora_targets", targets, "model.lora_attn_modules", 4))
    if quantised or model.get("quantize_base") is True:
        out.append(Setting("precision", "nf4", field, 6))
    return out


def _torchtune(doc: Doc) -> List[Setting]:
    d = doc.data
    model = d.get("model") if isinstance(d.get("model"), dict) else {}
    out: List[Setting] = torchtune_model_settings(model)
    # torchtune decides how its 4-bit weights are stored and run (torchao NF4, terms.quantised_params)
    out.append(Setting("runtime", "torchtune", "torchtune recipe config", 4))
    mb = _count(d.get("batch_size"), "batch")
    if mb:
        out.append(Setting("batch", mb, "batch_size", 5))
    accum = _count(d.get("gradient_accumulation_steps"), "grad_accum")
    if accum:
        out.append(Setting("grad_accum", accum, "gradient_accumulation_steps", 4))
    tokenizer = d.get("tokenizer") if isinstance(d.get("tokenizer"), dict) else {}
    seq = _count(tokenizer.get("max_seq_len"), "seq")
    if seq:
        out.append(Setting("seq", seq, "tokenizer.max_seq_len", 4))
    dtype = d.get("dtype")
    if isinstance(dtype, str) and dtype in TORCHTUNE_DTYPES:
        out.append(Setting("precision", TORCHTUNE_DTYPES[dtype], "dtype", 4))
    if d.get("enable_activation_checkpointing") is True:
        out.append(Setting("checkpointing", "on", "enable_activation_checkpointing", 4))
    if d.get("optimizer_in_bwd") is True:
        out.append(Setting("optimizer_in_bwd", True, "optimizer_in_bwd", 4))
    out += _optimizer_settings(d.get("optimizer"), "optimizer._component_", 4)
    return out + _torchtune_loss(d.get("loss")) + _torchtune_recipe(doc)


def _torchtune_loss(loss: Any) -> List[Setting]:
    """``loss: {_component_: torchtune.modules.loss.CEWithChunkedOutputLoss}``; a plain
    ``torch.nn.CrossEntropyLoss`` in a recipe gets logits the model already upcast
    (torchtune's ``TransformerDecoder``: ``output = self.output(h).float()``), the Hugging Face
    layout."""
    component = loss.get("_component_") if isinstance(loss, dict) else None
    if not isinstance(component, str):
        return []
    found = callee_loss(component)
    layout = found[0] if found else ("hf" if component.endswith("CrossEntropyLoss") else None)
    return [Setting("loss", layout, "loss._component_", 4)] if layout else []


def _torchtune_recipe(doc: Doc) -> List[Setting]:
    """What the recipe decides: a ``*_single_device`` recipe runs on one GPU; the distributed
    ones (``lora_finetune_distributed``, ``full_finetune_distributed``) shard the model with
    FSDP2 over every rank, on the host too with ``fsdp_cpu_offload``.  The recipe is the one
    the config's ``tune run`` comment lines name, else what its file name says (torchtune names
    its single-device configs ``*_single_device.yaml``)."""
    launch = doc.launch
    recipe = launch.recipe if launch and launch.recipe else ""
    single = "single_device" in recipe if recipe else "single_device" in doc.name
    if single:
        return [Setting("world", 1, f"torchtune single-device recipe ({recipe or doc.name})", 2)]
    field = f"torchtune distributed recipe ({recipe or doc.name}), FSDP2 with more than one rank"
    out = [Setting("sharding", "fsdp2", field, 3, multi_rank=True)]
    if doc.data.get("fsdp_cpu_offload") is True:
        out.append(Setting("offload", "both", "fsdp_cpu_offload", 3, multi_rank=True))
    if launch and launch.world:
        out.append(Setting("world", launch.world, f"comment line {launch.line} ({launch.how})", 2))
    return out


# --------------------------------------------------------------------------- accelerate

FSDP_STRATEGIES = {
    "full_shard": "fsdp",
    "1": "fsdp",
    "shard_grad_op": "zero2",
    "2": "zero2",
    "hybrid_shard": "fsdp",
    "4": "fsdp",
    "no_shard": "ddp",
    "3": "ddp",
}


def _accelerate(doc: Doc) -> List[Setting]:
    d = doc.data
    out: List[Setting] = []
    mp = d.get("mixed_precision")
    if mp in ("bf16", "fp16"):
        out.append(Setting("precision", f"{mp}-mixed", "mixed_precision", 4))
    world = _count(d.get("num_processes"), "world")  # over every machine
    if world:
        out.append(Setting("world", world, "num_processes", 4))
    kind = str(d.get("distributed_type", "")).upper()
    if kind == "DEEPSPEED":
        out += _accelerate_deepspeed(_section(d, "deepspeed_config"))
    elif kind == "FSDP":
        out += _accelerate_fsdp(_section(d, "fsdp_config"))
    elif kind in ("MULTI_GPU", "MULTI_NPU", "MULTI_XPU"):
        out.append(Setting("sharding", "ddp", "distributed_type", 3))
    return out


def _section(d: Dict[str, Any], key: str) -> Dict[str, Any]:
    return d[key] if isinstance(d.get(key), dict) else {}


def _accelerate_deepspeed(ds: Dict[str, Any]) -> List[Setting]:
    out: List[Setting] = []
    stage = ds.get("zero_stage")
    if stage in (1, 2, 3):
        out.append(Setting("sharding", f"zero{stage}", "deepspeed_config.zero_stage", 4))
    offload = _offload(ds.get("offload_optimizer_device"), ds.get("offload_param_device"))
    if offload:
        out.append(Setting("offload", offload, "deepspeed_config", 4))
    accum = _count(ds.get("gradient_accumulation_steps"), "grad_accum")
    if accum:
        out.append(Setting("grad_accum", accum, "deepspeed_config.gradient_accumulation_steps", 4))
    return out


def _accelerate_fsdp(fsdp: Dict[str, Any]) -> List[Setting]:
    strategy = str(fsdp.get("fsdp_sharding_strategy", "full_shard")).lower()
    sharding = FSDP_STRATEGIES.get(strategy, "fsdp")
    if fsdp.get("fsdp_version") == 2 and "fsdp_reshard_after_forward" in fsdp:
        sharding = "fsdp" if fsdp["fsdp_reshard_after_forward"] is not False else "zero2"
    out = [Setting("sharding", sharding, "fsdp_config.fsdp_sharding_strategy", 4)]
    if fsdp.get("fsdp_offload_params") is True:
        out.append(Setting("offload", "both", "fsdp_config.fsdp_offload_params", 4))
    if fsdp.get("fsdp_activation_checkpointing") is True:
        out.append(Setting("checkpointing", "on", "fsdp_config.fsdp_activation_checkpointing", 4))
    return out


# --------------------------------------------------------------------------- detection


def _has(d: Dict[str, Any], *keys: str) -> bool:
    return any(k in d for k in keys)


def _is_torchtune(d: Dict[str, Any]) -> bool:
    return isinstance(d.get("model"), dict) and "_component_" in d["model"]


def _is_litgpt(d: Dict[str, Any]) -> bool:
    train = d.get("train")
    has_micro_batch = isinstance(train, dict) and "micro_batch_size" in train
    return "checkpoint_dir" in d or "lora_query" in d or has_micro_batch


def _is_axolotl(d: Dict[str, Any]) -> bool:
    return "base_model" in d and _has(d, "sequence_len", "micro_batch_size", "adapter", "datasets")


def _is_deepspeed(d: Dict[str, Any]) -> bool:
    return _has(d, "zero_optimization", "train_micro_batch_size_per_gpu")


def _is_hf_args(d: Dict[str, Any]) -> bool:
    return _has(d, "per_device_train_batch_size", "model_name_or_path") or (
        "output_dir" in d and "learning_rate" in d
    )


FORMATS: List[Tuple[str, Callable[[Dict[str, Any]], bool], Callable[[Doc], List[Setting]]]] = [
    ("torchtune recipe", _is_torchtune, _torchtune),
    ("accelerate config", lambda d: _has(d, "compute_environment", "distributed_type"), _accelerate),
    ("DeepSpeed config", _is_deepspeed, _deepspeed),
    ("litgpt config", _is_litgpt, _litgpt),
    ("axolotl config", _is_axolotl, _axolotl),
    ("Hugging Face arguments", _is_hf_args, _hf_args),
]


def recognise(doc: Doc) -> Optional[Tuple[str, Callable[[Doc], List[Setting]]]]:
    if not isinstance(doc.data, dict):
        return None
    for name, detect, read in FORMATS:
        if detect(doc.data):
            return name, read
    return None
