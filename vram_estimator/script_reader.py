"""Read memory-relevant facts from a training/inference script, statically (stdlib ``ast``).

Nothing is imported or executed.  Names are resolved through the file's imports (``pl`` ->
``pytorch_lightning``, ``Trainer`` -> ``transformers.Trainer``), so a Lightning ``Trainer`` and a
Hugging Face ``Trainer`` are told apart, and ``ModelCheckpoint`` (a Lightning callback that saves
files) is never mistaken for gradient checkpointing.

Values resolve through module- and function-level constants with simple arithmetic, argparse
``add_argument(..., default=...)`` (read back through ``args.name``), and dataclass field defaults
(``per_device_train_batch_size: int = field(default=4)``).  Every fact carries its source
(``train.py:12``, ``train.py:12 (argparse default)``).  Where two places give the same key, the
more specific one wins (a ``TrainingArguments`` keyword over a constant named ``BATCH_SIZE``).

Training is recognised by a ``.backward()`` call, an HF ``Trainer``/TRL trainer, a Lightning
``Trainer.fit``, ``accelerator.backward`` or a DeepSpeed engine; generation by ``.generate()``
or a text-generation ``pipeline``; inference by ``no_grad``/``inference_mode``.
"""

from __future__ import annotations

import ast
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from . import db
from .config_comments import ATTENTIONS, OPTIMIZERS, PRECISIONS, Value

OPTIMIZER_CLASSES = {
    "adamw": "adamw",
    "adam": "adam",
    "fusedadam": "adam",
    "sgd": "sgd",
    "adafactor": "adafactor",
    "adamw8bit": "adamw-8bit",
    "adam8bit": "adamw-8bit",
    "pagedadamw8bit": "paged-adamw-8bit",
    "pagedadam8bit": "paged-adamw-8bit",
    "pagedadamw": "paged-adamw",
    "pagedadamw32bit": "paged-adamw",
    "lion": "lion",
    "lion8bit": "lion-8bit",
    "deepspeedcpuadam": "adamw",
    "adamwschedulefree": "adamw",
}
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
SEQ_NAMES = (
    "max_seq_length",
    "max_seq_len",
    "max_length",
    "seq_len",
    "seq_length",
    "sequence_length",
    "block_size",
    "context_length",
    "max_len",
    "ctx_len",
    "n_ctx",
    "model_max_length",
    "max_source_length",
    "cutoff_len",
)
BATCH_NAMES = (
    "batch_size",
    "per_device_train_batch_size",
    "micro_batch_size",
    "train_batch_size",
    "bs",
    "per_gpu_train_batch_size",
    "train_micro_batch_size_per_gpu",
)
IMAGE_NAMES = ("image_size", "img_size", "resolution", "crop_size", "input_size", "image_side")
MAX_NEW_NAMES = ("max_new_tokens",)
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


class _Unknown(Exception):
    pass


@dataclass
class ScriptFacts:
    values: Dict[str, Value] = field(default_factory=dict)
    prio: Dict[str, int] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    unknown_models: List[Tuple[str, int]] = field(default_factory=list)
    markers: Dict[str, Tuple[int, str]] = field(default_factory=dict)


class _Reader:
    def __init__(self, tree: ast.AST, filename: str):
        self.tree = tree
        self.filename = filename or "<script>"
        self.base = os.path.basename(self.filename)
        self.imports: Dict[str, str] = {}
        self.env: Dict[str, Tuple[Any, int, str]] = {}
        self.argparse: Dict[str, Tuple[Any, int]] = {}
        self.fields: Dict[str, Tuple[Any, int]] = {}
        self.calls_by_name: Dict[str, ast.Call] = {}
        self.dicts_by_name: Dict[str, ast.Dict] = {}
        self.lightning_trainers: set = set()
        self.hf_trainers: set = set()
        self.facts = ScriptFacts()

    # ----------------------------------------------------------------- names

    def qual(self, node: ast.AST) -> str:
        if isinstance(node, ast.Name):
            return self.imports.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            return self.qual(node.value) + "." + node.attr
        if isinstance(node, ast.Call):
            return self.qual(node.func) + "()"
        return "?"

    def src(self, line: int, how: str = "") -> str:
        return f"{self.base}:{line}" + (f" ({how})" if how else "")

    def put(self, key: str, value: Any, line: int, prio: int, how: str = "") -> None:
        if value is None:
            return
        if key in self.facts.prio and self.facts.prio[key] >= prio:
            return
        self.facts.values[key] = Value(value, self.src(line, how), line)
        self.facts.prio[key] = prio

    def mark(self, what: str, line: int, why: str) -> None:
        self.facts.markers.setdefault(what, (line, why))

    # ----------------------------------------------------------------- evaluation

    def ev(self, node: Optional[ast.AST]) -> Tuple[Any, str]:
        """Value of a simple expression and how it was found ('' / 'argparse default' / 'constant')."""
        if node is None:
            raise _Unknown()
        if isinstance(node, ast.Constant):
            return node.value, ""
        if isinstance(node, ast.Name):
            if node.id in self.env:
                value, _line, how = self.env[node.id]
                return value, how
            raise _Unknown()
        if isinstance(node, ast.Attribute):
            q = self.qual(node)
            tail = node.attr
            if q.startswith("torch.") and tail in DTYPES:
                return "torch." + tail, ""
            if isinstance(node.value, ast.Name) and tail in self.argparse:
                value, line = self.argparse[tail]
                return value, f"argparse default, line {line}"
            if tail in self.fields:
                value, line = self.fields[tail]
                return value, f"field default, line {line}"
            raise _Unknown()
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v, how = self.ev(node.operand)
            return -v, how
        if isinstance(node, ast.BinOp):
            a, ha = self.ev(node.left)
            b, hb = self.ev(node.right)
            ops = {
                ast.Add: lambda x, y: x + y,
                ast.Sub: lambda x, y: x - y,
                ast.Mult: lambda x, y: x * y,
                ast.FloorDiv: lambda x, y: x // y,
                ast.Div: lambda x, y: x / y,
                ast.Pow: lambda x, y: x**y,
                ast.Mod: lambda x, y: x % y,
            }
            fn = ops.get(type(node.op))
            if fn is None or not all(isinstance(v, (int, float)) for v in (a, b)):
                if isinstance(node.op, ast.Add) and isinstance(a, str) and isinstance(b, str):
                    return a + b, ha or hb
                raise _Unknown()
            if (
                isinstance(b, (int, float))
                and b == 0
                and isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod))
            ):
                raise _Unknown()
            if isinstance(node.op, ast.Pow) and abs(b) > 64:
                raise _Unknown()
            return fn(a, b), ha or hb
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("int", "float", "str")
            and len(node.args) == 1
        ):
            v, how = self.ev(node.args[0])
            try:
                return {"int": int, "float": float, "str": str}[node.func.id](v), how
            except (TypeError, ValueError):
                raise _Unknown()
        if (
            isinstance(node, ast.Call)
            and self.qual(node.func).endswith("environ.get")
            and len(node.args) >= 2
        ):
            return self.ev(node.args[1])
        if isinstance(node, ast.Call) and self.qual(node.func).endswith("getenv") and len(node.args) >= 2:
            return self.ev(node.args[1])
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.ev(e)[0] for e in node.elts], ""
        if isinstance(node, ast.Dict):
            out = {}
            for k, v in zip(node.keys, node.values):
                if k is None:
                    raise _Unknown()
                try:
                    out[self.ev(k)[0]] = self.ev(v)[0]
                except _Unknown:
                    continue
            return out, ""
        raise _Unknown()

    def try_ev(self, node: Optional[ast.AST]) -> Tuple[Any, str]:
        try:
            return self.ev(node)
        except (_Unknown, RecursionError, TypeError, ValueError, OverflowError, ZeroDivisionError):
            return None, ""

    @staticmethod
    def kw(call: ast.Call, *names: str) -> Optional[ast.AST]:
        for k in call.keywords:
            if k.arg in names:
                return k.value
        return None

    # ----------------------------------------------------------------- passes

    def run(self) -> ScriptFacts:
        self.collect_imports()
        self.collect_bindings(getattr(self.tree, "body", []), top=True)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                try:
                    self.on_call(node)
                except (
                    _Unknown,
                    RecursionError,
                    TypeError,
                    ValueError,
                    AttributeError,
                    KeyError,
                    IndexError,
                ):
                    continue
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    q = self.qual(item.context_expr)
                    if q.endswith(("no_grad()", "inference_mode()")):
                        self.mark("inference", node.lineno, "no_grad/inference_mode")
        self.fix_mode()
        return self.facts

    def collect_imports(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.imports[a.asname or a.name.split(".")[0]] = (
                        a.name if a.asname else a.name.split(".")[0]
                    )
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    self.imports[a.asname or a.name] = f"{node.module}.{a.name}"

    def collect_bindings(self, body: List[ast.stmt], top: bool = False) -> None:
        """Constants, argparse defaults and dataclass fields, in source order."""
        for stmt in body:
            if (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
            ):
                name = stmt.targets[0].id
                if isinstance(stmt.value, ast.Call):
                    self.calls_by_name[name] = stmt.value
                if isinstance(stmt.value, ast.Dict):
                    self.dicts_by_name[name] = stmt.value
                value, how = self.try_ev(stmt.value)
                if value is not None:
                    self.env[name] = (value, stmt.lineno, how)
                    self.on_constant(name, value, stmt.lineno, how)
            elif (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and stmt.value is not None
            ):
                name = stmt.target.id
                node = stmt.value
                if isinstance(node, ast.Call) and self.qual(node.func).split(".")[-1] == "field":
                    node = self.kw(node, "default")
                value, how = self.try_ev(node)
                if value is not None:
                    self.fields[name] = (value, stmt.lineno)
                    self.env.setdefault(name, (value, stmt.lineno, how))
                    self.on_constant(name, value, stmt.lineno, "field default")
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                self.on_add_argument(stmt.value)
            for child_body in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(stmt, child_body, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], (ast.stmt, ast.excepthandler)):
                    if child_body == "handlers":
                        for h in inner:
                            self.collect_bindings(h.body)
                    else:
                        self.collect_bindings(inner)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Return)) and isinstance(
                getattr(stmt, "value", None), ast.Call
            ):
                self.on_add_argument(stmt.value)

    def on_add_argument(self, call: ast.Call) -> None:
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
            return
        dest = None
        dest_node = self.kw(call, "dest")
        if dest_node is not None:
            dest = self.try_ev(dest_node)[0]
        if dest is None:
            for arg in call.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    if arg.value.startswith("--"):
                        dest = arg.value[2:].replace("-", "_")
                        break
                    if not arg.value.startswith("-"):
                        dest = arg.value
            if dest is None:
                return
        default = self.kw(call, "default")
        value = self.try_ev(default)[0] if default is not None else None
        if value is None and isinstance(self.kw(call, "action"), ast.Constant):
            action = self.kw(call, "action").value
            if action == "store_true":
                value = False
            elif action == "store_false":
                value = True
        if value is not None:
            self.argparse[dest] = (value, call.lineno)
            self.on_constant(dest, value, call.lineno, "argparse default")

    def on_constant(self, name: str, value: Any, line: int, how: str) -> None:
        low = name.lower()
        if isinstance(value, bool):
            if (
                low
                in (
                    "gradient_checkpointing",
                    "grad_checkpointing",
                    "use_gradient_checkpointing",
                    "activation_checkpointing",
                )
                and value
            ):
                self.put("checkpointing", "on", line, 1, how)
            if low in ("bf16",) and value:
                self.put("precision", "bf16-mixed", line, 1, how)
            if low in ("fp16",) and value:
                self.put("precision", "fp16-mixed", line, 1, how)
            return
        if isinstance(value, int) and value > 0:
            if low in BATCH_NAMES:
                self.put("batch", value, line, 1 if low != "per_device_train_batch_size" else 2, how)
            elif low in SEQ_NAMES:
                self.put("seq", value, line, 1, how)
            elif low in IMAGE_NAMES:
                self.put("image", value, line, 1, how)
            elif low in ("lora_r", "lora_rank", "rank") and value <= 1024:
                self.put("lora", value, line, 1, how)
            elif low in MAX_NEW_NAMES:
                self.put("new_tokens", value, line, 1, how)
        if isinstance(value, str):
            if low in (
                "model_name",
                "model_id",
                "model_name_or_path",
                "base_model",
                "model",
                "model_path",
                "pretrained_model_name_or_path",
                "checkpoint",
                "model_checkpoint",
            ):
                key = db.find_model(value)
                if key:
                    self.put("model", key, line, 1, how)
            elif low in ("optim", "optimizer") and value.lower() in OPTIMIZERS:
                self.put("optimizer", OPTIMIZERS[value.lower()], line, 1, how)
            elif (
                low in ("precision", "mixed_precision", "dtype", "torch_dtype")
                and value.lower() in PRECISIONS
            ):
                self.put(
                    "precision",
                    (
                        PRECISIONS[value.lower()]
                        if low not in ("dtype", "torch_dtype")
                        else DTYPES.get(value.lower(), PRECISIONS[value.lower()])
                    ),
                    line,
                    1,
                    how,
                )
            elif low in ("attn_implementation", "attention") and value.lower() in ATTENTIONS:
                self.put("attention", ATTENTIONS[value.lower()], line, 1, how)

    # ----------------------------------------------------------------- calls

    def value_of(self, call: ast.Call, *names: str, pos: Optional[int] = None) -> Tuple[Any, str]:
        node = self.kw(call, *names)
        if node is None and pos is not None and len(call.args) > pos:
            node = call.args[pos]
        return self.try_ev(node)

    def dtype_of(self, node: Optional[ast.AST]) -> Optional[str]:
        value, _ = self.try_ev(node)
        if isinstance(value, str):
            return DTYPES.get(value.split(".")[-1].lower())
        return None

    def on_call(self, call: ast.Call) -> None:
        q = self.qual(call.func)
        last = q.split(".")[-1]
        line = call.lineno
        if last == "from_pretrained":
            self.on_from_pretrained(call, q)
        elif last == "BitsAndBytesConfig":
            self.on_bnb(call)
        elif last == "LoraConfig":
            r, how = self.value_of(call, "r")
            self.put(
                "lora",
                int(r) if isinstance(r, int) else 8,
                line,
                3,
                how or ("" if r else "LoraConfig default r=8"),
            )
            targets, _ = self.value_of(call, "target_modules")
            if isinstance(targets, str):
                targets = ["all-linear"] if targets == "all-linear" else [targets]
            if isinstance(targets, list) and targets:
                self.put("lora_targets", [str(t) for t in targets], line, 3)
        elif last in ("get_peft_model", "LoraModel"):
            self.put("lora", 8, line, 0, "get_peft_model, LoRA rank defaulted to 8")
        elif last == "prepare_model_for_kbit_training":
            flag, how = self.value_of(call, "use_gradient_checkpointing")
            if flag is None or flag:
                self.put("checkpointing", "on", line, 3, how or "prepare_model_for_kbit_training")
        elif last == "gradient_checkpointing_enable":
            self.put("checkpointing", "on", line, 4)
        elif (
            q.startswith("torch.utils.checkpoint")
            or q in ("checkpoint", "checkpoint_sequential")
            and self.imports.get(q, "").startswith("torch.utils.checkpoint")
        ):
            self.put("checkpointing", "on", line, 4, "torch.utils.checkpoint")
        elif last in HF_ARGS and (q.startswith(("transformers", "trl")) or q == last):
            self.on_training_arguments(call)
        elif last in HF_TRAINERS and (
            q.startswith(("transformers", "trl"))
            or q == last
            and not self.imports.get(last, "").startswith(("pytorch_lightning", "lightning"))
        ):
            self.mark("train", line, f"Hugging Face {last}")
            for k in ("max_seq_length", "max_length"):
                v, how = self.value_of(call, k)
                if isinstance(v, int):
                    self.put("seq", v, line, 3, how)
        elif last == "Trainer" and q.startswith(("pytorch_lightning", "lightning")):
            self.on_lightning(call)
        elif last in ("DataLoader",):
            v, how = self.value_of(call, "batch_size", pos=1)
            if isinstance(v, int) and v > 0:
                self.put("batch", v, line, 2, how)
        elif (
            last in ("DistributedDataParallel", "DDP")
            and "parallel" in q.lower()
            or q.endswith("nn.parallel.DistributedDataParallel")
        ):
            self.put("sharding", "ddp", line, 2)
        elif last in ("FullyShardedDataParallel", "FSDP", "fully_shard"):
            self.put("sharding", "fsdp", line, 3)
        elif q.startswith("deepspeed") and last == "initialize":
            self.mark("train", line, "DeepSpeed engine")
            cfg = self.kw(call, "config", "config_params")
            if cfg is not None:
                self.on_deepspeed(cfg, line)
        elif last == "Accelerator":
            mp, how = self.value_of(call, "mixed_precision")
            if isinstance(mp, str) and mp in ("bf16", "fp16"):
                self.put("precision", mp + "-mixed", line, 3, how)
        elif last in ("autocast",) and ("amp" in q or q.startswith("torch")):
            dt = self.dtype_of(self.kw(call, "dtype"))
            if dt == "bf16":
                self.put("precision", "bf16-mixed", line, 3)
            elif dt != "fp32":
                self.put("precision", "fp16-mixed", line, 2)
        elif last == "GradScaler":
            self.put("precision", "fp16-mixed", line, 2, "GradScaler")
        elif last == "scaled_dot_product_attention":
            self.put("attention", "sdpa", line, 1)
        elif last.lower().replace("_", "") in OPTIMIZER_CLASSES and (
            q.startswith(OPTIMIZER_MODULES) or "optim" in q.lower()
        ):
            name = OPTIMIZER_CLASSES[last.lower().replace("_", "")]
            if name == "sgd":
                mom, _ = self.value_of(call, "momentum")
                if isinstance(mom, (int, float)) and mom > 0:
                    name = "sgd-momentum"
            self.put("optimizer", name, line, 3)
            if last == "DeepSpeedCPUAdam":
                self.put("offload", "optimizer", line, 3)
        elif last == "backward":
            self.mark("train", line, ".backward()")
        elif last == "fit" and isinstance(call.func, ast.Attribute):
            base = call.func.value
            if isinstance(base, ast.Name) and base.id in self.lightning_trainers:
                self.mark("train", line, "Lightning Trainer.fit")
        elif last == "train" and isinstance(call.func, ast.Attribute):
            base = call.func.value
            if isinstance(base, ast.Name) and base.id in self.hf_trainers:
                self.mark("train", line, "Trainer.train()")
        elif last == "generate":
            self.mark("generate", line, ".generate()")
            v, how = self.value_of(call, "max_new_tokens")
            if isinstance(v, int):
                self.put("new_tokens", v, line, 3, how)
            v, how = self.value_of(call, "max_length")
            if isinstance(v, int):
                self.put("context", v, line, 3, how)
        elif last == "pipeline":
            task, _ = self.value_of(call, "task", pos=0)
            model, how = self.value_of(call, "model")
            if isinstance(model, str):
                self.on_model_id(model, line, how, prio=3)
            if task in (
                "text-generation",
                "text2text-generation",
                "summarization",
                "translation",
                "automatic-speech-recognition",
            ):
                self.mark("generate", line, f"pipeline('{task}')")
            else:
                self.mark("inference", line, "pipeline")
        elif (
            last in ("half", "bfloat16")
            and isinstance(call.func, ast.Attribute)
            and self.is_model(call.func.value)
        ):
            self.put("precision", "fp16" if last == "half" else "bf16", line, 2)
        elif last == "to" and isinstance(call.func, ast.Attribute) and self.is_model(call.func.value):
            for a in list(call.args) + [k.value for k in call.keywords if k.arg == "dtype"]:
                dt = self.dtype_of(a)
                if dt:
                    self.put("precision", dt, line, 2)
        elif last in ("eval",) and isinstance(call.func, ast.Attribute) and self.is_model(call.func.value):
            self.mark("inference", line, "model.eval()")
        elif last == "create_model" and q.startswith("timm"):
            name, how = self.value_of(call, "model_name", pos=0)
            if isinstance(name, str):
                self.on_model_id(name, line, how, prio=3)
        elif q.startswith("torchvision.models") or (
            q.startswith("models.") and "torchvision" in self.imports.get("models", "")
        ):
            key = db.find_model(last)
            if key:
                self.put("model", key, line, 3)
        elif last in ("Resize", "RandomResizedCrop", "CenterCrop", "RandomCrop"):
            v, how = self.value_of(call, "size", pos=0)
            if isinstance(v, list) and v:
                v = v[0]
            if isinstance(v, int) and v > 0:
                self.put("image", v, line, 2 if last != "Resize" else 1, how)
        # generic keywords anywhere
        for k in call.keywords:
            if k.arg == "attn_implementation":
                v, how = self.try_ev(k.value)
                if isinstance(v, str) and v.lower() in ATTENTIONS:
                    self.put("attention", ATTENTIONS[v.lower()], line, 3, how)
            elif k.arg in ("max_length", "max_seq_length", "block_size", "seq_len") and last not in (
                "generate",
            ):
                v, how = self.try_ev(k.value)
                if isinstance(v, int) and v > 0:
                    self.put("seq", v, line, 2, how)

    def is_model(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            if "model" in node.id.lower() or node.id in ("net", "unet", "llm"):
                return True
            call = self.calls_by_name.get(node.id)
            return call is not None and self.qual(call.func).endswith("from_pretrained")
        if isinstance(node, ast.Attribute):
            return "model" in node.attr.lower()
        return False

    def on_model_id(self, text: str, line: int, how: str, prio: int) -> None:
        key = db.find_model(text)
        if key:
            self.put("model", key, line, prio, how)
        else:
            self.facts.unknown_models.append((text, line))

    def on_from_pretrained(self, call: ast.Call, q: str) -> None:
        owner = q.rsplit(".", 1)[0].split(".")[-1]
        if any(
            s in owner
            for s in (
                "Tokenizer",
                "Processor",
                "FeatureExtractor",
                "ImageProcessor",
                "Scheduler",
                "GenerationConfig",
                "PeftConfig",
            )
        ):
            return
        line = call.lineno
        ident, how = self.value_of(call, "pretrained_model_name_or_path", pos=0)
        if isinstance(ident, str):
            if owner == "PeftModel" and len(call.args) > 1:
                pass
            elif "Config" in owner:
                key = db.find_model(ident)
                if key:
                    self.put("model", key, line, 2, how)
            elif owner.startswith("UNet2D") or "Diffusion" in owner:
                sub, _ = self.value_of(call, "subfolder")
                key = db.find_model(ident)
                if key or sub == "unet":
                    self.put("model", key or "sd15-unet", line, 3, how)
            else:
                self.on_model_id(ident, line, how, prio=3)
        if "Config" in owner:
            return
        for name in ("torch_dtype", "dtype"):
            node = self.kw(call, name)
            if node is not None:
                dt = self.dtype_of(node)
                if dt:
                    self.put("precision", dt, line, 2, f"{name}=")
        flag4, _ = self.value_of(call, "load_in_4bit")
        flag8, _ = self.value_of(call, "load_in_8bit")
        if flag4:
            self.put("precision", "nf4", line, 5, "load_in_4bit")
        elif flag8:
            self.put("precision", "int8", line, 5, "load_in_8bit")
        qc = self.kw(call, "quantization_config")
        if isinstance(qc, ast.Name) and qc.id in self.calls_by_name:
            self.on_bnb(self.calls_by_name[qc.id], line_override=line)
        elif isinstance(qc, ast.Call):
            self.on_bnb(qc)
        if "ForCausalLM" in owner or "LMHead" in owner:
            self.mark("causal", line, owner)

    def on_bnb(self, call: ast.Call, line_override: Optional[int] = None) -> None:
        if self.qual(call.func).split(".")[-1] != "BitsAndBytesConfig":
            return
        line = call.lineno
        if self.value_of(call, "load_in_4bit")[0]:
            self.put("precision", "nf4", line, 5, "BitsAndBytesConfig(load_in_4bit=True)")
        elif self.value_of(call, "load_in_8bit")[0]:
            self.put("precision", "int8", line, 5, "BitsAndBytesConfig(load_in_8bit=True)")

    def on_training_arguments(self, call: ast.Call) -> None:
        line = call.lineno
        self.mark("hf_args", line, "TrainingArguments")
        v, how = self.value_of(call, "per_device_train_batch_size")
        if isinstance(v, int) and v > 0:
            self.put("batch", v, line, 4, how)
        elif self.kw(call, "per_device_train_batch_size") is None:
            self.put("batch", 8, line, 1, "TrainingArguments default per_device_train_batch_size=8")
        v, how = self.value_of(call, "gradient_checkpointing")
        if v:
            self.put("checkpointing", "on", line, 4, how)
        if self.value_of(call, "bf16")[0]:
            self.put("precision", "bf16-mixed", line, 3, self.value_of(call, "bf16")[1])
        elif self.value_of(call, "fp16")[0]:
            self.put("precision", "fp16-mixed", line, 3, self.value_of(call, "fp16")[1])
        v, how = self.value_of(call, "optim")
        if isinstance(v, str):
            name = OPTIMIZERS.get(v.lower()) or OPTIMIZERS.get(v.lower().replace("_", "-"))
            if name is None and "8bit" in v:
                name = "paged-adamw-8bit" if "paged" in v else "adamw-8bit"
            if name is None and "adam" in v:
                name = "adamw"
            self.put("optimizer", name, line, 4, how)
        else:
            self.put("optimizer", "adamw", line, 2, "TrainingArguments default optim=adamw_torch")
        for k in ("max_seq_length", "max_length"):
            v, how = self.value_of(call, k)
            if isinstance(v, int) and v > 0:
                self.put("seq", v, line, 3, how)
        ds = self.kw(call, "deepspeed")
        if ds is not None:
            self.on_deepspeed(ds, line)
        v, _ = self.value_of(call, "fsdp")
        if isinstance(v, str) and v:
            self.put("sharding", "zero2" if "shard_grad_op" in v else "fsdp", line, 3)
            if "offload" in v:
                self.put("offload", "both", line, 3)

    def on_lightning(self, call: ast.Call) -> None:
        line = call.lineno
        self.mark("lightning", line, "Lightning Trainer")
        parent = getattr(call, "_vram_target", None)
        if parent:
            self.lightning_trainers.add(parent)
        prec, how = self.value_of(call, "precision")
        mapping = {
            "16": "fp16-mixed",
            "16-mixed": "fp16-mixed",
            "bf16": "bf16-mixed",
            "bf16-mixed": "bf16-mixed",
            "32": "fp32",
            "32-true": "fp32",
            "bf16-true": "bf16",
            "16-true": "fp16",
            "transformer-engine": "bf16-mixed",
        }
        if prec is not None and str(prec) in mapping:
            self.put("precision", mapping[str(prec)], line, 3, how)
        devices, how = self.value_of(call, "devices", "gpus")
        nodes, _ = self.value_of(call, "num_nodes")
        if isinstance(devices, int) and devices > 0:
            self.put("world", devices * (nodes if isinstance(nodes, int) and nodes > 0 else 1), line, 3, how)
        elif isinstance(devices, list) and devices:
            self.put("world", len(devices), line, 3, how)
        strat = self.kw(call, "strategy")
        sv, how = self.try_ev(strat)
        if isinstance(sv, str):
            s = sv.lower()
            if s.startswith("deepspeed"):
                stage = "zero3" if "3" in s else "zero2" if "2" in s else "zero1"
                self.put("sharding", stage, line, 3, how)
                if "offload" in s:
                    self.put("offload", "optimizer" if stage != "zero3" else "both", line, 3, how)
            elif s.startswith("fsdp"):
                self.put("sharding", "fsdp", line, 3, how)
            elif s.startswith("ddp"):
                self.put("sharding", "ddp", line, 3, how)
        elif isinstance(strat, ast.Call):
            sname = self.qual(strat.func).split(".")[-1]
            if sname == "DeepSpeedStrategy":
                stage, _ = self.value_of(strat, "stage")
                self.put("sharding", {1: "zero1", 2: "zero2", 3: "zero3"}.get(stage, "zero2"), line, 3)
                if self.value_of(strat, "offload_optimizer")[0]:
                    self.put("offload", "optimizer", line, 3)
            elif sname == "FSDPStrategy":
                self.put("sharding", "fsdp", line, 3)
            elif sname == "DDPStrategy":
                self.put("sharding", "ddp", line, 3)

    def on_deepspeed(self, node: ast.AST, line: int) -> None:
        config = None
        where = line
        if isinstance(node, ast.Name) and node.id in self.dicts_by_name:
            config = self.try_ev(self.dicts_by_name[node.id])[0]
            where = self.env.get(node.id, (None, line, ""))[1]
        else:
            value, _ = self.try_ev(node)
            if isinstance(value, dict):
                config = value
            elif isinstance(value, str) and value.endswith(".json"):
                path = (
                    value
                    if os.path.isabs(value)
                    else os.path.join(os.path.dirname(os.path.abspath(self.filename)), value)
                )
                try:
                    with open(path, encoding="utf-8") as handle:
                        config = json.load(handle)
                    self.facts.notes.append(f"DeepSpeed config read from {value}")
                except (OSError, ValueError):
                    self.facts.notes.append(
                        f"DeepSpeed config {value} named at line {line} could not be read"
                    )
                    return
        if not isinstance(config, dict):
            return
        how = "DeepSpeed config"
        zero = config.get("zero_optimization") or {}
        if isinstance(zero, dict):
            stage = zero.get("stage")
            if stage in (1, 2, 3):
                self.put("sharding", f"zero{stage}", where, 4, how)
            opt_dev = (
                (zero.get("offload_optimizer") or {}).get("device")
                if isinstance(zero.get("offload_optimizer"), dict)
                else None
            )
            par_dev = (
                (zero.get("offload_param") or {}).get("device")
                if isinstance(zero.get("offload_param"), dict)
                else None
            )
            if opt_dev in ("cpu", "nvme") and par_dev in ("cpu", "nvme"):
                self.put("offload", "both", where, 4, how)
            elif opt_dev in ("cpu", "nvme"):
                self.put("offload", "optimizer", where, 4, how)
            elif par_dev in ("cpu", "nvme"):
                self.put("offload", "param", where, 4, how)
        mb = config.get("train_micro_batch_size_per_gpu")
        if isinstance(mb, int) and mb > 0:
            self.put("batch", mb, where, 4, how)
        for key, prec in (("bf16", "bf16"), ("fp16", "fp16")):
            section = config.get(key)
            if isinstance(section, dict) and section.get("enabled") is True:
                self.put("precision", prec, where, 4, how)
        opt = config.get("optimizer")
        if isinstance(opt, dict) and isinstance(opt.get("type"), str):
            name = OPTIMIZERS.get(opt["type"].lower())
            if name:
                self.put("optimizer", name, where, 3, how)

    # ----------------------------------------------------------------- mode

    def fix_mode(self) -> None:
        m = self.facts.markers
        if "train" in m:
            line, why = m["train"]
            self.put("mode", "train", line, 5, why)
        elif "hf_args" in m or "lightning" in m:
            line, why = m.get("hf_args") or m.get("lightning")
            self.put("mode", "train", line, 4, why + " (the framework runs backward)")
        elif "generate" in m:
            line, why = m["generate"]
            self.put("mode", "generate", line, 4, why)
        elif "inference" in m:
            line, why = m["inference"]
            self.put("mode", "inference", line, 3, why)


def _annotate_targets(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            node.value._vram_target = node.targets[0].id  # type: ignore[attr-defined]


def read_script(tree: Optional[ast.AST], filename: str = "<script>") -> ScriptFacts:
    """Facts from a parsed module; never raises (a failure yields no facts and a note)."""
    if tree is None:
        return ScriptFacts()
    try:
        _annotate_targets(tree)
        reader = _Reader(tree, filename)
        # remember which names hold HF trainers (for .train())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                q = node.value.func
                name = q.attr if isinstance(q, ast.Attribute) else q.id if isinstance(q, ast.Name) else ""
                if name in HF_TRAINERS:
                    reader.hf_trainers.add(node.targets[0].id)
        return reader.run()
    except Exception as exc:  # noqa: BLE001 - reading must never break linting
        facts = ScriptFacts()
        facts.notes.append(f"script could not be read fully ({exc.__class__.__name__})")
        return facts


def read_source(source: str, filename: str = "<script>") -> ScriptFacts:
    try:
        tree = ast.parse(source, filename=filename)
    except (SyntaxError, ValueError):
        return ScriptFacts(notes=["script does not parse; only comments were read"])
    return read_script(tree, filename)
