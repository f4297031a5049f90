"""What library calls say about memory: one handler per callee, looked up by name.

``on_call`` resolves the callee through the file's imports, finds its handler by the last
name (``from_pretrained``, ``LoraConfig``, ``TrainingArguments``, an optimizer class ...) and
lets the handler check the qualified name it needs (a Lightning ``Trainer`` is not an HF one).
Keywords meaningful on any call (``attn_implementation=``, ``max_length=``) and file names
passed to any call (a DeepSpeed JSON, a YAML config) are read after the handler.

Library knowledge lives in the tables here (the ones config files name too in :mod:`.tables`);
``script_reader`` only binds names and dispatches.
"""

from __future__ import annotations

import ast
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..knowledge import db
from .config_comments import ATTENTIONS
from .configs.formats import read_deepspeed, torchtune_model_settings
from ..knowledge.losses import CONFIG_SWITCHES, LIGER_PATCH_PREFIX, LOSS_CALLEES, callee_loss
from ..knowledge.model_names import lit_llama_size
from .script_state import ScriptState
from .setting_names import optimizer_name
from .tables import LIGHTNING_PRECISION, LITGPT_LORA_ROLES, OPTIMIZER_CLASSES

Handler = Callable[[ScriptState, ast.Call, str], None]

OPTIMIZER_MODULES = (
    "torch.optim",
    "bitsandbytes",
    "bnb",
    "transformers",
    "deepspeed",
    "lion_pytorch",
    "apex",
    "timm.optim",
    "schedulefree",
    "torchao",
)
HF_TRAINERS = (
    "Trainer",
    "Seq2SeqTrainer",
    "SFTTrainer",
    "DPOTrainer",
    "ORPOTrainer",
    "GRPOTrainer",
    "RewardTrainer",
    "KTOTrainer",
    "PPOTrainer",
)
HF_ARGS = (
    "TrainingArguments",
    "Seq2SeqTrainingArguments",
    "SFTConfig",
    "DPOConfig",
    "ORPOConfig",
    "GRPOConfig",
    "RewardConfig",
    "KTOConfig",
)
# from_pretrained on these loads no weights that count
NOT_MODELS = (
    "Tokenizer",
    "Processor",
    "FeatureExtractor",
    "ImageProcessor",
    "Scheduler",
    "GenerationConfig",
    "PeftConfig",
)
GENERATION_TASKS = (
    "text-generation",
    "text2text-generation",
    "summarization",
    "translation",
    "automatic-speech-recognition",
)
SEQ_KEYWORDS = ("max_length", "max_seq_length", "block_size", "seq_len")
# optimizer options that replace torch's default foreach implementation (no step temporaries)
UNFUSED = {"fused": True, "foreach": False}
LIGHTNING_MODULES = ("lightning", "pytorch_lightning", "lightning_fabric")
LIT_MODULES = ("litgpt", "lit_gpt", "lit_llama")
LIT_CONFIG_OWNERS = ("Config", "GPT", "LLaMAConfig", "LLaMA")
# FSDP sharding strategies (torch's ShardingStrategy names, as Lightning takes them)
FSDP_STRATEGY_NAMES = {
    "full_shard": "fsdp",
    "hybrid_shard": "fsdp",
    "shard_grad_op": "zero2",
    "_hybrid_shard_zero2": "zero2",
    "no_shard": "ddp",
}


# --------------------------------------------------------------------------- dispatch


def on_call(reader: ScriptState, call: ast.Call) -> None:
    q = reader.qual(call.func)
    last = q.rsplit(".", 1)[-1]
    handler = HANDLERS.get(last)
    if handler is None and last.startswith(LIGER_PATCH_PREFIX):
        handler = _loss
    if handler is None and last.lower().replace("_", "") in OPTIMIZER_CLASSES:
        handler = _optimizer
    if handler is None:
        handler = torchvision_handler(reader, q)
    if handler is None and q.startswith("torchtune.models."):
        handler = _torchtune_builder
    if handler is not None:
        handler(reader, call, q)
    if last == "from_pretrained" and q.startswith("liger_kernel"):
        _loss(reader, call, q)
    _generic_keywords(reader, call, last)


def _generic_keywords(reader: ScriptState, call: ast.Call, last: str) -> None:
    for k in call.keywords:
        if k.arg == "attn_implementation":
            v, how = reader.try_ev(k.value)
            if isinstance(v, str) and v.lower() in ATTENTIONS:
                reader.put("attention", ATTENTIONS[v.lower()], call.lineno, 3, how)
        elif k.arg in SEQ_KEYWORDS and last != "generate":
            v, how = reader.try_ev(k.value)
            if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 24:
                reader.put("seq", v, call.lineno, 2, how)
    for arg in list(call.args[:2]) + [k.value for k in call.keywords]:
        if isinstance(arg, (ast.Constant, ast.Name, ast.Attribute, ast.BinOp)):
            value, _ = reader.try_ev(arg)
            reader.config_ref(value, call.lineno, f"{last}()")


# --------------------------------------------------------------------------- models


def _from_pretrained(reader: ScriptState, call: ast.Call, q: str) -> None:
    owner = q.rsplit(".", 1)[0].split(".")[-1]
    if any(s in owner for s in NOT_MODELS):
        return
    line = call.lineno
    ident, how = reader.value_of(call, "pretrained_model_name_or_path", pos=0)
    if isinstance(ident, str) and ident.strip():
        if owner == "PeftModel":
            pass  # the adapter's id; the base model is the first argument
        elif "Config" in owner:
            key = db.find_model(ident)
            if key:
                reader.put("model", key, line, 2, how)
            else:
                reader.facts.model_refs.append((ident, line, how))
        elif owner.startswith("UNet2D") or "Diffusion" in owner:
            sub, _ = reader.value_of(call, "subfolder")
            key = db.find_model(ident)
            if key or sub == "unet":
                reader.put("model", key or "sd15-unet", line, 3, how)
        else:
            reader.model_ref(ident, line, how, prio=3)
    elif call.args and isinstance(call.args[0], (ast.Name, ast.Attribute)):
        name = ast.unparse(call.args[0])[:60]
        reader.facts.runtime_model = reader.facts.runtime_model or (
            f"line {line}: the model is {owner}.from_pretrained({name}), and {name} is only known at run "
            "time; name it with --model or '# vram: model=...'"
        )
    if "Config" in owner:
        return
    _quantisation(reader, call, line)
    if "ForCausalLM" in owner or "LMHead" in owner:
        reader.mark("causal", line, owner)


def _quantisation(reader: ScriptState, call: ast.Call, line: int) -> None:
    for name in ("torch_dtype", "dtype"):
        node = reader.kw(call, name)
        if node is not None:
            dt = reader.dtype_of(node)
            if dt:
                reader.put("precision", dt, line, 2, f"{name}=")
    if reader.value_of(call, "load_in_4bit")[0] is True:
        reader.put("precision", "nf4", line, 5, "load_in_4bit")
    elif reader.value_of(call, "load_in_8bit")[0] is True:
        reader.put("precision", "int8", line, 5, "load_in_8bit")
    qc = reader.kw(call, "quantization_config")
    if isinstance(qc, ast.Name) and qc.id in reader.calls_by_name:
        _bnb(reader, reader.calls_by_name[qc.id], "BitsAndBytesConfig")
    elif isinstance(qc, ast.Call):
        _bnb(reader, qc, reader.qual(qc.func))


def _bnb(reader: ScriptState, call: ast.Call, q: str) -> None:
    if reader.qual(call.func).split(".")[-1] != "BitsAndBytesConfig":
        return
    if reader.value_of(call, "load_in_4bit")[0] is True:
        reader.put("precision", "nf4", call.lineno, 5, "BitsAndBytesConfig(load_in_4bit=True)")
        # transformers' BitsAndBytesConfig: bnb_4bit_use_double_quant=False unless given
        dq, how = reader.value_of(call, "bnb_4bit_use_double_quant")
        how = how or "BitsAndBytesConfig default bnb_4bit_use_double_quant=False"
        reader.put("double_quant", dq is True, call.lineno, 3, how)
    elif reader.value_of(call, "load_in_8bit")[0] is True:
        reader.put("precision", "int8", call.lineno, 5, "BitsAndBytesConfig(load_in_8bit=True)")


def _from_name(reader: ScriptState, call: ast.Call, q: str) -> None:
    """litgpt's ``Config.from_name("Llama-2-7b-hf")`` / ``GPT.from_name(...)`` /
    ``Config.from_file(path)``, lit-llama's ``LLaMAConfig.from_name("7B")``; LoRA keywords
    (``lora_r=``, ``lora_query=``) too, whether or not the name can be read."""
    owner = q.rsplit(".", 1)[0].split(".")[-1]
    if owner not in LIT_CONFIG_OWNERS or not (q.startswith(LIT_MODULES) or q.count(".") == 1):
        return
    _lit_config_lora(reader, call)
    if q.startswith(LIT_MODULES):
        reader.put("runtime", "litgpt", call.lineno, 2, f"litgpt {owner}")
    if q.endswith(".from_file"):
        return
    name, how = reader.value_of(call, "name", pos=0)
    if not isinstance(name, str) or not name.strip():
        return
    size = lit_llama_size(name) if owner.startswith("LLaMA") else None
    if size:
        reader.put("model", size, call.lineno, 3, f"lit-llama {name}: {size}'s shape")
    else:
        reader.model_ref(name, call.lineno, how, prio=3)


def _lit_config_lora(reader: ScriptState, call: ast.Call) -> None:
    """litgpt's ``Config.from_name/from_file(..., lora_r=lora_r, lora_dropout=..., lora_query=...)``:
    the values are usually the ``setup()`` parameters the litgpt command line fills."""
    rank, how = reader.value_of(call, "lora_r")
    if isinstance(rank, int) and not isinstance(rank, bool) and 0 < rank <= 1 << 16:
        reader.put("lora", rank, call.lineno, 3, how or "lora_r=")
    dropout, how = reader.value_of(call, "lora_dropout")
    if isinstance(dropout, (int, float)) and not isinstance(dropout, bool) and 0 <= dropout < 1:
        reader.put("lora_dropout", float(dropout), call.lineno, 3, how or "lora_dropout=")
    switched = [role for role in LITGPT_LORA_ROLES if reader.value_of(call, role)[0] is True]
    roles = [m for role in switched for m in LITGPT_LORA_ROLES[role]]
    if roles:
        reader.put("lora_targets", roles, call.lineno, 3, "lora_* switches")


def _lit_lora(reader: ScriptState, call: ast.Call, q: str) -> None:
    """lit-llama's ``with lora(r=8, alpha=16, dropout=0.05, enabled=True):``: adapters on the
    query and value of the fused attention projection (``enable_lora=[True, False, True]``)."""
    if not q.startswith(LIT_MODULES) or reader.value_of(call, "enabled")[0] is False:
        return
    rank, how = reader.value_of(call, "r")
    if isinstance(rank, int) and not isinstance(rank, bool) and 0 < rank <= 1 << 16:
        reader.put("lora", rank, call.lineno, 3, how or "lora(r=)")
        reader.put("lora_targets", ["q_proj", "v_proj"], call.lineno, 2, "lit-llama LoRA: query and value")


def _torchtune_builder(reader: ScriptState, call: ast.Call, q: str) -> None:
    """``torchtune.models.llama3_1.lora_llama3_1_8b(lora_attn_modules=[...], lora_rank=8)``: the
    same builder a recipe's ``model._component_`` names."""
    section: Dict[str, Any] = {"_component_": q}
    for k in call.keywords:
        if k.arg:
            value, _ = reader.try_ev(k.value)
            if value is not None:
                section[k.arg] = value
    for setting in torchtune_model_settings(section, field=q.rsplit(".", 1)[-1]):
        reader.put(setting.key, setting.value, call.lineno, setting.prio - 1, setting.field)


def _timm(reader: ScriptState, call: ast.Call, q: str) -> None:
    if q.startswith("timm"):
        name, how = reader.value_of(call, "model_name", pos=0)
        if isinstance(name, str):
            reader.model_ref(name, call.lineno, how, prio=3)


def _pipeline(reader: ScriptState, call: ast.Call, q: str) -> None:
    line = call.lineno
    task, _ = reader.value_of(call, "task", pos=0)
    model, how = reader.value_of(call, "model")
    if isinstance(model, str):
        reader.model_ref(model, line, how, prio=3)
    if task in GENERATION_TASKS:
        reader.mark("generate", line, f"pipeline('{task}')")
    else:
        reader.mark("inference", line, "pipeline")


# --------------------------------------------------------------------------- adapters


def _lora_config(reader: ScriptState, call: ast.Call, q: str) -> None:
    line = call.lineno
    r, how = reader.value_of(call, "r")
    rank = r if isinstance(r, int) and not isinstance(r, bool) and 0 < r <= 1 << 16 else None
    reader.put(
        "lora", rank or 8, line, 3, how or ("" if rank else "LoraConfig default r=8"), guessed=not rank
    )
    targets, _ = reader.value_of(call, "target_modules")
    if isinstance(targets, str):
        targets = ["all-linear"] if targets == "all-linear" else [targets]
    if isinstance(targets, list) and targets:
        reader.put("lora_targets", [str(t) for t in targets][:64], line, 3)


def _peft_model(reader: ScriptState, call: ast.Call, q: str) -> None:
    reader.put("lora", 8, call.lineno, 0, "get_peft_model, LoRA rank defaulted to 8", guessed=True)
    # PEFT upcasts half adapters to fp32 unless told not to (knowledge/adapters.py)
    upcast, how = reader.value_of(call, "autocast_adapter_dtype")
    if isinstance(upcast, bool):
        reader.put("autocast_adapter_dtype", upcast, call.lineno, 3, how or "autocast_adapter_dtype=")


def _kbit_training(reader: ScriptState, call: ast.Call, q: str) -> None:
    # every unquantised parameter to fp32 (bitsandbytes models; the estimate gates on the precision)
    reader.put("kbit_fp32", True, call.lineno, 3, q.rsplit(".", 1)[-1])
    flag, how = reader.value_of(call, "use_gradient_checkpointing")
    if flag is None or flag is True:
        reader.put("checkpointing", "on", call.lineno, 3, how or q.rsplit(".", 1)[-1])


def _litgpt_lora(reader: ScriptState, call: ast.Call, q: str) -> None:
    if q.startswith("litgpt") or "lora" in q:
        how = "litgpt mark_only_lora_as_trainable, rank not read (default 8)"
        reader.put("lora", 8, call.lineno, 0, how, guessed=True)


# --------------------------------------------------------------------------- training setup


def _checkpointing(reader: ScriptState, call: ast.Call, q: str) -> None:
    reader.put("checkpointing", "on", call.lineno, 4)


def _torch_checkpoint(reader: ScriptState, call: ast.Call, q: str) -> None:
    if q.startswith("torch.utils.checkpoint"):
        reader.put("checkpointing", "on", call.lineno, 4, "torch.utils.checkpoint")


def _hf_args(reader: ScriptState, call: ast.Call, q: str) -> None:
    last = q.rsplit(".", 1)[-1]
    if not (q.startswith(("transformers", "trl")) or q == last):
        return
    line = call.lineno
    reader.mark("hf_args", line, last)
    v, how = reader.value_of(call, "per_device_train_batch_size")
    if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 20:
        reader.put("batch", v, line, 4, how)
    elif reader.kw(call, "per_device_train_batch_size") is None:
        reader.put("batch", 8, line, 1, f"{last} default per_device_train_batch_size=8", guessed=True)
    v, how = reader.value_of(call, "gradient_checkpointing")
    if v is True:
        reader.put("checkpointing", "on", line, 4, how)
    v, how = reader.value_of(call, "gradient_accumulation_steps")
    if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 20:
        reader.put("grad_accum", v, line, 4, how)
    for flag, precision in (("bf16", "bf16-mixed"), ("fp16", "fp16-mixed")):
        v, how = reader.value_of(call, flag)
        if v is True:
            reader.put("precision", precision, line, 3, how)
            break
    _hf_optim(reader, call, line, last)
    for k in ("max_seq_length", "max_length"):
        v, how = reader.value_of(call, k)
        if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 24:
            reader.put("seq", v, line, 3, how)
    _hf_sharding(reader, call, line)
    _hf_liger(reader, call, line)


def _loss(reader: ScriptState, call: ast.Call, q: str) -> None:
    """A call that chooses the training loss (``knowledge.losses``): torchtune's chunked losses,
    litgpt's ``chunked_cross_entropy``, Liger's fused linear cross-entropy (its per-model patch
    functions unless ``fused_linear_cross_entropy=False``)."""
    found = callee_loss(q)
    if found is None:
        return
    layout, why = found
    if q.rsplit(".", 1)[-1].startswith(LIGER_PATCH_PREFIX):
        fused, _ = reader.value_of(call, "fused_linear_cross_entropy")
        if fused is False:
            crossed, _ = reader.value_of(call, "cross_entropy")
            if crossed is not True:
                return
            layout, why = "plain", "Liger cross_entropy=True: the kernel keeps the logits, no fp32 copy"
    reader.put("loss", layout, call.lineno, 3, why)


def _hf_liger(reader: ScriptState, call: ast.Call, line: int) -> None:
    """``TrainingArguments(use_liger_kernel=True)``: the Trainer patches the model with Liger's
    defaults (``_apply_liger_kernel_to_instance``), whose loss is the fused linear cross-entropy."""
    for key, layout in CONFIG_SWITCHES.items():
        v, how = reader.value_of(call, key)
        if v is True:
            reader.put("loss", layout, line, 3, f"{key}=True: Liger fused linear cross-entropy")
            return


def _hf_optim(reader: ScriptState, call: ast.Call, line: int, last: str) -> None:
    """`optim="paged_adamw_8bit"` / `optim=OptimizerNames.PAGED_ADAMW_8BIT`, else HF's default."""
    v, how = reader.value_of(call, "optim")
    optim = reader.kw(call, "optim")
    if v is None and isinstance(optim, ast.Attribute):  # OptimizerNames.PAGED_ADAMW_8BIT
        v, how = optim.attr.lower(), optim.attr
    if isinstance(v, str) and optimizer_name(v):
        reader.put("optimizer", optimizer_name(v), line, 4, how)
        if "fused" in v.lower():
            reader.put("optimizer_foreach", False, line, 4, how)
    else:
        reader.put("optimizer", "adamw", line, 2, f"{last} default optim=adamw_torch", guessed=True)


def _hf_sharding(reader: ScriptState, call: ast.Call, line: int) -> None:
    """`deepspeed="ds.json"` (followed) and `fsdp="full_shard offload"`."""
    ds = reader.kw(call, "deepspeed")
    if ds is not None:
        _deepspeed_config(reader, ds, line)
    v, _ = reader.value_of(call, "fsdp")
    if isinstance(v, str) and v:
        reader.put("sharding", "zero2" if "shard_grad_op" in v else "fsdp", line, 3)
        if "offload" in v:
            reader.put("offload", "both", line, 3)


def _hf_argument_parser(reader: ScriptState, call: ast.Call, q: str) -> None:
    """``HfArgumentParser((ModelArguments, ..., TrainingArguments))``: the run's arguments come
    from the command line or a JSON/YAML file, on top of the dataclasses' defaults."""
    if not q.startswith("transformers") and q != "HfArgumentParser":
        return
    classes = call.args[0] if call.args else reader.kw(call, "dataclass_types")
    names = classes.elts if isinstance(classes, (ast.Tuple, ast.List)) else [classes] if classes else []
    for node in names:
        last = reader.qual(node).rsplit(".", 1)[-1]
        if last in HF_ARGS:
            reader.mark("hf_args", call.lineno, f"HfArgumentParser({last})")
            line = call.lineno
            reader.put("batch", 8, line, 1, f"{last} default per_device_train_batch_size=8", guessed=True)
            reader.put("optimizer", "adamw", line, 1, f"{last} default optim=adamw_torch", guessed=True)
    reader.mark("args_file", call.lineno, "HfArgumentParser")


def _hf_trainer(reader: ScriptState, call: ast.Call, q: str) -> None:
    last = q.rsplit(".", 1)[-1]
    lightning = reader.imports.get(last, "").startswith(("pytorch_lightning", "lightning"))
    if last == "Trainer" and q.startswith(("pytorch_lightning", "lightning")):
        _lightning(reader, call)
        return
    if not (q.startswith(("transformers", "trl")) or q == last and not lightning):
        return
    line = call.lineno
    reader.mark("train", line, f"Hugging Face {last}")
    target = reader.assigned_to.get(id(call))
    if target:
        reader.hf_trainers.add(target)
    for k in ("max_seq_length", "max_length"):
        v, how = reader.value_of(call, k)
        if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 24:
            reader.put("seq", v, line, 3, how)


def _lightning(reader: ScriptState, call: ast.Call) -> None:
    line = call.lineno
    reader.mark("lightning", line, "Lightning Trainer")
    target = reader.assigned_to.get(id(call))
    if target:
        reader.lightning_trainers.add(target)
    _lightning_launch(reader, call)
    v, how = reader.value_of(call, "accumulate_grad_batches")
    if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 20:
        reader.put("grad_accum", v, line, 3, how)


def _fabric(reader: ScriptState, call: ast.Call, q: str) -> None:
    """``L.Fabric(devices=, num_nodes=, strategy=, precision="bf16-true")``: what the launcher
    decides (``bf16-true`` is bf16 weights, not fp32); Fabric runs no backward by itself."""
    if q.startswith(LIGHTNING_MODULES) or q == "Fabric":
        _lightning_launch(reader, call)


def _lightning_launch(reader: ScriptState, call: ast.Call) -> None:
    """``precision=``, ``devices=`` x ``num_nodes=`` and a strategy name, as Trainer and Fabric
    take them."""
    line = call.lineno
    prec, how = reader.value_of(call, "precision")
    if prec is not None and str(prec) in LIGHTNING_PRECISION:
        reader.put("precision", LIGHTNING_PRECISION[str(prec)], line, 3, how)
    devices, how = reader.value_of(call, "devices", "gpus")
    nodes, _ = reader.value_of(call, "num_nodes")
    nodes = nodes if isinstance(nodes, int) and 0 < nodes <= 1 << 16 else 1
    if isinstance(devices, int) and not isinstance(devices, bool) and 0 < devices <= 1 << 16:
        reader.put("world", devices * nodes, line, 3, how)
    elif isinstance(devices, list) and devices:
        reader.put("world", len(devices) * nodes, line, 3, how)
    _lightning_strategy(reader, reader.kw(call, "strategy"), line)


def _lightning_strategy(reader: ScriptState, strat: Optional[ast.AST], line: int) -> None:
    """A strategy named by a string; strategy objects are read by their own handlers."""
    if isinstance(strat, ast.Call):
        return
    sv, how = reader.try_ev(strat)
    if not isinstance(sv, str):
        return
    s = sv.lower()
    if s.startswith("deepspeed"):
        stage = "zero3" if "3" in s else "zero2" if "2" in s else "zero1"
        reader.put("sharding", stage, line, 3, how)
        if "offload" in s:
            reader.put("offload", "optimizer" if stage != "zero3" else "both", line, 3, how)
    elif s.startswith("fsdp"):
        reader.put("sharding", "fsdp", line, 3, how)
    elif s.startswith("ddp"):
        reader.put("sharding", "ddp", line, 3, how)


def _strategy_object(reader: ScriptState, call: ast.Call, q: str) -> None:
    """``FSDPStrategy(...)`` / ``ModelParallelStrategy(...)`` / ``DeepSpeedStrategy(...)`` /
    ``DDPStrategy()``: under an ``if`` (litgpt's ``if devices > 1:``) they hold only with more
    than one rank (:meth:`ScriptState.put_launch`)."""
    last = q.rsplit(".", 1)[-1]
    if not (q.startswith(LIGHTNING_MODULES) or q == last):
        return
    for key, value, how in STRATEGY_READERS[last](reader, call):
        reader.put_launch(call, key, value, how)


Launch = List[Tuple[str, Any, str]]


def _fsdp_strategy(reader: ScriptState, call: ast.Call) -> Launch:
    kind, _ = reader.value_of(call, "sharding_strategy")
    sharding = FSDP_STRATEGY_NAMES.get(kind.lower(), "fsdp") if isinstance(kind, str) else "fsdp"
    out: Launch = [("sharding", sharding, "FSDPStrategy")]
    if reader.kw(call, "auto_wrap_policy") is not None:
        # FSDP1 units of whole blocks: frozen and trainable weights share a flat parameter
        out.append(("fsdp_units", "block", "FSDPStrategy(auto_wrap_policy=...)"))
    policy = reader.kw(call, "activation_checkpointing_policy", "activation_checkpointing")
    if policy is not None and not (isinstance(policy, ast.Constant) and policy.value in (None, False)):
        out.append(("checkpointing", "on", "FSDPStrategy(activation_checkpointing_policy=...)"))
    if reader.value_of(call, "cpu_offload")[0] is True:
        out.append(("offload", "both", "FSDPStrategy(cpu_offload=True)"))
    return out


def _model_parallel_strategy(reader: ScriptState, call: ast.Call) -> Launch:
    """litgpt's LoRA: ``ModelParallelStrategy(parallelize_fn=fn)``, where ``fn`` applies FSDP2
    (``fully_shard``) and, by its default, ``checkpoint_wrapper`` to every block."""
    fn = reader.kw(call, "parallelize_fn") or (call.args[0] if call.args else None)
    defs = [d for d in reader.nodes[ast.FunctionDef] if isinstance(fn, ast.Name) and d.name == fn.id]
    if not defs:
        return []
    called = {reader.qual(c.func).rsplit(".", 1)[-1] for c in ast.walk(defs[0]) if isinstance(c, ast.Call)}
    out: Launch = []
    if "fully_shard" in called:
        out.append(("sharding", "fsdp2", f"ModelParallelStrategy({defs[0].name}): FSDP2 fully_shard"))
    wraps = called & {"checkpoint_wrapper", "checkpoint"}
    if wraps and _constant_default(defs[0], "activation_checkpointing") is not False:
        out.append(("checkpointing", "on", f"{defs[0].name}() checkpoints every block"))
    return out


def _constant_default(func: ast.FunctionDef, name: str) -> Any:
    args = func.args.posonlyargs + func.args.args
    for arg, default in zip(args[len(args) - len(func.args.defaults) :], func.args.defaults):
        if arg.arg == name and isinstance(default, ast.Constant):
            return default.value
    return None


def _deepspeed_strategy(reader: ScriptState, call: ast.Call) -> Launch:
    stage, _ = reader.value_of(call, "stage")
    sharding = {1: "zero1", 2: "zero2", 3: "zero3"}.get(stage, "zero2")
    out: Launch = [("sharding", sharding, "DeepSpeedStrategy")]
    optimizer = reader.value_of(call, "offload_optimizer")[0] is True
    params = reader.value_of(call, "offload_parameters")[0] is True
    if optimizer or params:
        where = "both" if optimizer and params else "optimizer" if optimizer else "param"
        out.append(("offload", where, "DeepSpeedStrategy offload"))
    return out


STRATEGY_READERS: Dict[str, Callable[[ScriptState, ast.Call], Launch]] = {
    "FSDPStrategy": _fsdp_strategy,
    "ModelParallelStrategy": _model_parallel_strategy,
    "DeepSpeedStrategy": _deepspeed_strategy,
    "DDPStrategy": lambda reader, call: [("sharding", "ddp", "DDPStrategy")],
}


def _default_precision(reader: ScriptState, call: ast.Call, q: str) -> None:
    """litgpt's ``get_default_supported_precision(training=True)``: ``bf16-mixed`` on a GPU with
    bf16 (``16-mixed`` otherwise); ``training=False`` gives ``bf16-true``."""
    if not (q.startswith(("litgpt", "lit_gpt", "lit_llama")) or q == "get_default_supported_precision"):
        return
    training, _ = reader.value_of(call, "training", pos=0)
    if training is True:
        how = "litgpt's training default: bf16-mixed where the GPU has bf16"
        reader.put("precision", "bf16-mixed", call.lineno, 1, how, guessed=True)
    elif training is False:
        reader.put("precision", "bf16", call.lineno, 1, "litgpt's inference default: bf16-true", guessed=True)


def _deepspeed_config(reader: ScriptState, node: ast.AST, line: int) -> None:
    """A DeepSpeed config given as a dict literal, a name bound to one, or a JSON file name."""
    where = line
    if isinstance(node, ast.Name) and node.id in reader.dicts_by_name:
        config = reader.try_ev(reader.dicts_by_name[node.id])[0]
        where = reader.env.get(node.id, (None, line, ""))[1]
    else:
        config = reader.try_ev(node)[0]
    if isinstance(config, str):
        reader.config_ref(config, line, "DeepSpeed config")
        return
    if isinstance(config, dict):
        for setting in read_deepspeed(config):
            reader.put(setting.key, setting.value, where, setting.prio, "DeepSpeed config")


def _deepspeed_initialize(reader: ScriptState, call: ast.Call, q: str) -> None:
    if not q.startswith("deepspeed"):
        return
    reader.mark("train", call.lineno, "DeepSpeed engine")
    cfg = reader.kw(call, "config", "config_params")
    if cfg is not None:
        _deepspeed_config(reader, cfg, call.lineno)


def _dataloader(reader: ScriptState, call: ast.Call, q: str) -> None:
    v, how = reader.value_of(call, "batch_size", pos=1)
    if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 20:
        reader.put("batch", v, call.lineno, 2, how)


def _ddp(reader: ScriptState, call: ast.Call, q: str) -> None:
    if "parallel" in q.lower():
        reader.put("sharding", "ddp", call.lineno, 2)


def _fsdp(reader: ScriptState, call: ast.Call, q: str) -> None:
    reader.put("sharding", "fsdp", call.lineno, 3)


def _accelerator(reader: ScriptState, call: ast.Call, q: str) -> None:
    mp, how = reader.value_of(call, "mixed_precision")
    if isinstance(mp, str) and mp in ("bf16", "fp16"):
        reader.put("precision", mp + "-mixed", call.lineno, 3, how)


def _autocast(reader: ScriptState, call: ast.Call, q: str) -> None:
    if not ("amp" in q or q.startswith("torch")):
        return
    dt = reader.dtype_of(reader.kw(call, "dtype"))
    if dt == "bf16":
        reader.put("precision", "bf16-mixed", call.lineno, 3)
    elif dt != "fp32":
        reader.put("precision", "fp16-mixed", call.lineno, 2)


def _grad_scaler(reader: ScriptState, call: ast.Call, q: str) -> None:
    reader.put("precision", "fp16-mixed", call.lineno, 2, "GradScaler")


def _sdpa(reader: ScriptState, call: ast.Call, q: str) -> None:
    reader.put("attention", "sdpa", call.lineno, 1)


def _optimizer(reader: ScriptState, call: ast.Call, q: str) -> None:
    last = q.rsplit(".", 1)[-1]
    if not (q.startswith(OPTIMIZER_MODULES) or "optim" in q.lower()):
        return
    name = OPTIMIZER_CLASSES[last.lower().replace("_", "")]
    if name == "sgd":
        mom, _ = reader.value_of(call, "momentum")
        if isinstance(mom, (int, float)) and mom > 0:
            name = "sgd-momentum"
    reader.put("optimizer", _bnb_options(reader, call, name), call.lineno, 3)
    for option, value in UNFUSED.items():
        if reader.value_of(call, option)[0] is value:
            reader.put("optimizer_foreach", False, call.lineno, 3, f"{option}={value}")
    if last == "DeepSpeedCPUAdam":
        reader.put("offload", "optimizer", call.lineno, 3)


def _bnb_options(reader: ScriptState, call: ast.Call, name: str) -> str:
    """bitsandbytes' generic classes: ``bnb.optim.AdamW(..., optim_bits=8, is_paged=True)``."""
    if name not in ("adamw", "adam", "paged-adamw"):
        return name
    bits = reader.value_of(call, "optim_bits")[0] == 8
    paged = name == "paged-adamw" or reader.value_of(call, "is_paged")[0] is True
    if bits:
        return "paged-adamw-8bit" if paged else "adamw-8bit"
    return "paged-adamw" if paged else name


# --------------------------------------------------------------------------- mode


def _backward(reader: ScriptState, call: ast.Call, q: str) -> None:
    reader.mark("train", call.lineno, ".backward()")


def _fit(reader: ScriptState, call: ast.Call, q: str) -> None:
    base = call.func.value if isinstance(call.func, ast.Attribute) else None
    if isinstance(base, ast.Name) and base.id in reader.lightning_trainers:
        reader.mark("train", call.lineno, "Lightning Trainer.fit")


def _train(reader: ScriptState, call: ast.Call, q: str) -> None:
    base = call.func.value if isinstance(call.func, ast.Attribute) else None
    if isinstance(base, ast.Name) and base.id in reader.hf_trainers:
        reader.mark("train", call.lineno, "Trainer.train()")


def _generate(reader: ScriptState, call: ast.Call, q: str) -> None:
    line = call.lineno
    reader.mark("generate", line, ".generate()")
    v, how = reader.value_of(call, "max_new_tokens")
    if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 24:
        reader.put("new_tokens", v, line, 3, how)
    v, how = reader.value_of(call, "max_length")
    if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 24:
        reader.put("context", v, line, 3, how)


def _model_cast(reader: ScriptState, call: ast.Call, q: str) -> None:
    if isinstance(call.func, ast.Attribute) and reader.is_model(call.func.value):
        reader.put("precision", "fp16" if call.func.attr == "half" else "bf16", call.lineno, 2)


def _model_to(reader: ScriptState, call: ast.Call, q: str) -> None:
    if not (isinstance(call.func, ast.Attribute) and reader.is_model(call.func.value)):
        return
    for a in list(call.args) + [k.value for k in call.keywords if k.arg == "dtype"]:
        dt = reader.dtype_of(a)
        if dt:
            reader.put("precision", dt, call.lineno, 2)


def _model_eval(reader: ScriptState, call: ast.Call, q: str) -> None:
    if isinstance(call.func, ast.Attribute) and reader.is_model(call.func.value):
        reader.mark("inference", call.lineno, "model.eval()")


def _torchvision(reader: ScriptState, call: ast.Call, q: str) -> None:
    last = q.rsplit(".", 1)[-1]
    key = db.find_model(last)
    if key:
        reader.put("model", key, call.lineno, 3)


def _image_transform(reader: ScriptState, call: ast.Call, q: str) -> None:
    last = q.rsplit(".", 1)[-1]
    v, how = reader.value_of(call, "size", pos=0)
    if isinstance(v, list) and v:
        v = v[0]
    if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 16:
        reader.put("image", v, call.lineno, 2 if last != "Resize" else 1, how)


HANDLERS: Dict[str, Handler] = {
    "from_pretrained": _from_pretrained,
    "BitsAndBytesConfig": _bnb,
    "LoraConfig": _lora_config,
    "get_peft_model": _peft_model,
    "LoraModel": _peft_model,
    "prepare_model_for_kbit_training": _kbit_training,
    "prepare_model_for_int8_training": _kbit_training,
    "mark_only_lora_as_trainable": _litgpt_lora,
    "gradient_checkpointing_enable": _checkpointing,
    "checkpoint": _torch_checkpoint,
    "checkpoint_sequential": _torch_checkpoint,
    "HfArgumentParser": _hf_argument_parser,
    "DataLoader": _dataloader,
    "DistributedDataParallel": _ddp,
    "DDP": _ddp,
    "FullyShardedDataParallel": _fsdp,
    "FSDP": _fsdp,
    "fully_shard": _fsdp,
    "initialize": _deepspeed_initialize,
    "Accelerator": _accelerator,
    "Fabric": _fabric,
    "FSDPStrategy": _strategy_object,
    "ModelParallelStrategy": _strategy_object,
    "DeepSpeedStrategy": _strategy_object,
    "DDPStrategy": _strategy_object,
    "get_default_supported_precision": _default_precision,
    "from_name": _from_name,
    "from_file": _from_name,
    "lora": _lit_lora,
    "autocast": _autocast,
    "GradScaler": _grad_scaler,
    "scaled_dot_product_attention": _sdpa,
    "backward": _backward,
    "fit": _fit,
    "train": _train,
    "generate": _generate,
    "pipeline": _pipeline,
    "half": _model_cast,
    "bfloat16": _model_cast,
    "to": _model_to,
    "eval": _model_eval,
    "create_model": _timm,
    "Resize": _image_transform,
    "RandomResizedCrop": _image_transform,
    "CenterCrop": _image_transform,
    "RandomCrop": _image_transform,
    **{name: _loss for name in LOSS_CALLEES},
    **{name: _hf_args for name in HF_ARGS},
    **{name: _hf_trainer for name in HF_TRAINERS},
}


def torchvision_handler(reader: ScriptState, q: str) -> Optional[Handler]:
    """``torchvision.models.resnet50()``: any callee under torchvision.models names a model."""
    if q.startswith("torchvision.models") or (
        q.startswith("models.") and "torchvision" in reader.imports.get("models", "")
    ):
        return _torchvision
    return None
