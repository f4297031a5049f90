"""Inline ``# vram:`` comments: grammar, value normalisation, and errors.

Grammar: a comment whose text starts with ``vram:`` followed by whitespace-separated
``key=value`` pairs; anything after a further ``#`` is a free-text remark::

    # vram: gpu=a100-80gb model=llama-3-8b batch=4 seq=2048   # remark

Every accepted value is normalised to one canonical spelling (``flash_attention_2`` ->
``flash``, ``true`` -> ``on``, ``8k`` -> ``8192``).  Problems never raise: they come back as
:class:`CommentError` (line, column, message naming the offending text and what is accepted),
which the flake8 plugin reports as TPF102.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ..knowledge import db
from .hf_local import model_from_local
from ..knowledge.model_names import suggestion_text
from ..knowledge.losses import ACCEPTED as LOSS_ACCEPTED, loss_name

PREFIX = re.compile(r"^#+\s*vram\s*:", re.I)

PRECISIONS = {
    "fp32": "fp32",
    "float32": "fp32",
    "32": "fp32",
    "32-true": "fp32",
    "full": "fp32",
    "fp16-mixed": "fp16-mixed",
    "16-mixed": "fp16-mixed",
    "amp": "fp16-mixed",
    "mixed": "fp16-mixed",
    "fp16mixed": "fp16-mixed",
    "bf16-mixed": "bf16-mixed",
    "bf16mixed": "bf16-mixed",
    "amp-bf16": "bf16-mixed",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "bf16-true": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "16-true": "fp16",
    "16": "fp16",
    "fp16-true": "fp16",
    "int8": "int8",
    "8bit": "int8",
    "llm.int8": "int8",
    "nf4": "nf4",
    "4bit": "nf4",
    "int4": "nf4",
    "fp4": "nf4",
    "qlora": "nf4",
}
OPTIMIZERS = {
    "adamw": "adamw",
    "adam": "adam",
    "adamw-torch": "adamw",
    "adamw_torch": "adamw",
    "adamw-torch-fused": "adamw",
    "adamw_torch_fused": "adamw",
    "fusedadam": "adam",
    "sgd": "sgd",
    "sgd-momentum": "sgd-momentum",
    "momentum": "sgd-momentum",
    "nesterov": "sgd-momentum",
    "adafactor": "adafactor",
    "adamw-8bit": "adamw-8bit",
    "adamw8bit": "adamw-8bit",
    "adam8bit": "adamw-8bit",
    "adam-8bit": "adamw-8bit",
    "adamw_bnb_8bit": "adamw-8bit",
    "paged-adamw-8bit": "paged-adamw-8bit",
    "paged_adamw_8bit": "paged-adamw-8bit",
    "pagedadamw8bit": "paged-adamw-8bit",
    "paged-adamw": "paged-adamw",
    "paged_adamw_32bit": "paged-adamw",
    "lion": "lion",
    "lion-8bit": "lion-8bit",
    "none": "none",
    "off": "none",
}
SHARDINGS = {
    "ddp": "ddp",
    "none": "none",
    "off": "none",
    "single": "none",
    "zero1": "zero1",
    "zero-1": "zero1",
    "stage1": "zero1",
    "zero2": "zero2",
    "zero-2": "zero2",
    "stage2": "zero2",
    "shard-grad-op": "zero2",
    "zero3": "zero3",
    "zero-3": "zero3",
    "stage3": "zero3",
    "fsdp": "fsdp",
    "full-shard": "fsdp",
    "full_shard": "fsdp",
    "fsdp2": "fsdp2",
}
OFFLOADS = {
    "optimizer": "optimizer",
    "opt": "optimizer",
    "param": "param",
    "params": "param",
    "both": "both",
    "all": "both",
    "optimizer+param": "both",
    "none": "none",
    "off": "none",
}
ATTENTIONS = {
    "eager": "eager",
    "math": "eager",
    "sdpa": "sdpa",
    "flash": "flash",
    "flash2": "flash",
    "flash_attention_2": "flash",
    "flash-attention-2": "flash",
    "fa2": "flash",
    "flash-attn": "flash",
    "flash_attention_3": "flash",
    "xformers": "sdpa",
    "mem-efficient": "sdpa",
}
MODES = {
    "train": "train",
    "training": "train",
    "finetune": "train",
    "inference": "inference",
    "infer": "inference",
    "eval": "inference",
    "forward": "inference",
    "generate": "generate",
    "generation": "generate",
    "serve": "generate",
    "decode": "generate",
}
ONOFF = {
    "on": "on",
    "true": "on",
    "yes": "on",
    "1": "on",
    "full": "on",
    "off": "off",
    "false": "off",
    "no": "off",
    "0": "off",
    "none": "off",
}

INT_KEYS = ("batch", "seq", "image", "context", "world")
KEYS = (
    "gpu",
    "model",
    "params",
    "batch",
    "seq",
    "image",
    "context",
    "precision",
    "optimizer",
    "world",
    "sharding",
    "offload",
    "checkpointing",
    "attention",
    "lora",
    "mode",
    "loss",
)

ACCEPTED = {
    "precision": "fp32, fp16-mixed, bf16-mixed, bf16, fp16, int8, nf4",
    "optimizer": "adamw, adam, sgd, sgd-momentum, adafactor, adamw-8bit, paged-adamw-8bit, lion, none",
    "sharding": "ddp, zero1, zero2, zero3, fsdp, none",
    "offload": "optimizer, param, both, none",
    "checkpointing": "on, off",
    "attention": "eager, sdpa, flash",
    "mode": "train, inference, generate",
    "lora": "a rank such as 16, or off",
    "batch": "a positive integer (8, 2k)",
    "seq": "a positive integer (2048, 8k)",
    "image": "a positive integer (224)",
    "context": "a positive integer (8192, 32k)",
    "world": "a positive integer (8)",
    "params": "a count such as 7B, 350M, 124439808",
    "loss": LOSS_ACCEPTED,
}


@dataclass
class Value:
    """A resolved input and where it came from (``comment line 3``, ``train.py:12``, ``default``)."""

    value: Any
    source: str
    line: Optional[int] = None
    text: str = ""
    guessed: bool = False  # a default (ours or a library's), not a value anyone wrote


@dataclass
class CommentError:
    line: int
    col: int
    message: str


@dataclass
class Comments:
    values: Dict[str, Value] = field(default_factory=dict)
    errors: List[CommentError] = field(default_factory=list)
    first_line: Optional[int] = None
    first_col: int = 0


# The largest value each count may take: beyond these a value is a typo or hostile input
# (a report built on batch=10**30 would be nonsense), so it is an error, never a number.
LIMITS = {
    "batch": 1 << 20,
    "seq": 1 << 24,
    "context": 1 << 24,
    "new_tokens": 1 << 24,
    "image": 1 << 16,
    "world": 1 << 20,
    "lora": 1 << 16,
    "grad_accum": 1 << 20,
    "global_batch": 1 << 30,
    "decoder_seq": 1 << 24,
    "params": 10**15,
}
_MAX_TEXT = 64  # longer values are never names we know (and are not echoed in full)
_INT = re.compile(r"^\s*(\d{1,15}(?:\.\d{1,6})?)\s*([kKmM]?)\s*$")


def shown(text: str) -> str:
    """A value as an error message quotes it: at most ``_MAX_TEXT`` characters."""
    text = str(text)
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 1] + "…"


def parse_int(text: str) -> Optional[int]:
    """``8``, ``2k`` (2048), ``1.5k``, ``1m``: a positive integer, or None."""
    m = _INT.match(text)
    if not m:
        return None
    scale = {"": 1, "k": 1024, "m": 1024 * 1024}[m.group(2).lower()]
    if m.group(2) == "" and not m.group(1).isdigit():
        return None
    value = int(m.group(1)) * scale if m.group(1).isdigit() else int(float(m.group(1)) * scale)
    return value if value > 0 else None


def _too_large(text: str) -> bool:
    digits = re.sub(r"\D", "", text.split(".", 1)[0])
    return len(digits) > 15


def check_count(key: str, raw: str) -> Tuple[Optional[int], Optional[str]]:
    """A bounded positive integer for ``key``, or an error naming the text and the bound."""
    text = raw.strip().strip("\"'")
    limit = LIMITS.get(key)
    if _too_large(text):
        return None, f"'{key}={shown(raw)}' is too large (at most {limit:,})"
    value = parse_int(text)
    if value is None:
        return None, f"'{key}={shown(raw)}' is not {ACCEPTED[key]}"
    if limit is not None and value > limit:
        return None, f"'{key}={shown(raw)}' is too large (at most {limit:,})"
    return value, None


def check_gpu(text: str) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """Resolve a GPU / instance / ``NxGPU`` / capacity text, or an error with suggestions.

    The bounds (no nested or zero counts, capacities up to 64 TiB, short names) are
    :func:`db.parse_target`'s; this adds the close matches and the accepted forms."""
    text = (text or "").strip().strip("\"'")
    try:
        target, why = db.parse_target(text)
    except (ValueError, OverflowError, RecursionError):
        target, why = None, f"unknown GPU '{shown(text)}'"
    if target is not None:
        return target, None
    near = db.suggestions(text[:_MAX_TEXT], db.gpu_names() + db.instance_names()) if text else []
    hint = f"did you mean {', '.join(near)}? " if near else ""
    return None, (
        f"{why or 'unknown GPU'}; {hint}accepted: a GPU ({', '.join(db.gpu_names()[:8])}, ...), "
        "an instance type (p4de.24xlarge, ...), NxGPU (8xa100-80gb) or a capacity (48GiB); "
        "see `vram-estimate gpus`"
    )


def _local_model(text: str) -> Optional[Any]:
    """A model folder or cached Hub id with a config.json we can count (see hf_local)."""
    model, _looked, _why = model_from_local(text, None)
    return model


def normalise(key: str, raw: str) -> Tuple[Optional[Any], Optional[str]]:
    """Canonical value for ``key=raw``, or ``(None, error message)``."""
    text = raw.strip().strip("\"'")
    low = text.lower().replace("_", "-") if key not in ("optimizer", "attention") else text.lower()
    if not text:
        return None, f"empty value for '{key}'"
    if key in INT_KEYS:
        return check_count(key, raw)
    if key == "gpu":
        _target, error = check_gpu(text)
        return (None, error) if error else (text, None)
    if key == "model":
        if low.startswith("params="):
            return normalise("params", text.split("=", 1)[1])
        key_ = db.find_model(text) if len(text) <= 200 else None
        if key_ is None:
            local = _local_model(text)
            if local is not None:
                return local, None
            near = db.suggestions(suggestion_text(text)[:_MAX_TEXT], db.model_names())
            hint = f"did you mean {', '.join(near)}? " if near else ""
            return None, (
                f"unknown model '{shown(text)}'; {hint}accepted: a built-in architecture or Hugging Face id "
                "(see `vram-estimate models`), a folder with a config.json, or params=7B for an "
                "unknown model"
            )
        return key_, None
    if key == "params":
        value = db.parse_params(text) if not _too_large(text) else None
        if value is None or value > LIMITS["params"]:
            return None, f"'params={shown(raw)}' is not {ACCEPTED['params']} (at most 1000T)"
        return value, None
    if key == "loss":
        layout = loss_name(text)
        return (layout, None) if layout else (None, f"'loss={shown(raw)}' is not one of {ACCEPTED[key]}")
    if key == "lora":
        if low in ("off", "none", "0", "false", "no"):
            return 0, None
        return check_count("lora", raw)
    table = {
        "precision": PRECISIONS,
        "optimizer": OPTIMIZERS,
        "sharding": SHARDINGS,
        "offload": OFFLOADS,
        "checkpointing": ONOFF,
        "attention": ATTENTIONS,
        "mode": MODES,
    }[key]
    for candidate in (low, low.replace("-", "_"), low.replace("_", "-"), text.lower()):
        if candidate in table:
            return table[candidate], None
    return None, f"'{key}={shown(raw)}' is not one of {ACCEPTED[key]}"


# other spellings of the comment keys
KEY_ALIASES = {
    "bs": "batch",
    "batch_size": "batch",
    "batch-size": "batch",
    "seq_len": "seq",
    "seqlen": "seq",
    "max_length": "seq",
    "gpus": "world",
    "ranks": "world",
    "dtype": "precision",
    "optim": "optimizer",
    "ckpt": "checkpointing",
    "gradient_checkpointing": "checkpointing",
    "attn": "attention",
    "zero": "sharding",
    "target": "gpu",
    "device": "gpu",
}


def _parse_token(token: str) -> Tuple[Optional[str], Any, Optional[str]]:
    """``(key, canonical value, None)`` for one ``key=value`` token, or ``(None, None, error)``."""
    if "=" not in token:
        accepted = ", ".join(KEYS)
        return None, None, f"'{token}' in '# vram:' comment is not key=value; accepted keys: {accepted}"
    key, raw = token.split("=", 1)
    key = key.strip().lower()
    if key == "zero" and raw.strip().isdigit():
        key, raw = "sharding", f"zero{raw.strip()}"
    key = KEY_ALIASES.get(key, key)
    if key not in KEYS:
        return None, None, f"unknown key '{key}' in '# vram:' comment; accepted keys: {', '.join(KEYS)}"
    value, error = normalise(key, raw)
    if error:
        return None, None, error
    if key == "model" and isinstance(value, int):
        key = "params"
    return key, value, None


def parse_comment(text: str, line: int, col: int = 0) -> Tuple[Dict[str, Value], List[CommentError]]:
    """Parse one comment token's text (``# vram: ...``).  Returns values and errors; never raises."""
    values: Dict[str, Value] = {}
    errors: List[CommentError] = []
    m = PREFIX.match(text)
    if not m:
        return values, errors
    body = text[m.end() :]
    if "#" in body:
        body = body.split("#", 1)[0]
    if not body.strip():
        errors.append(
            CommentError(
                line,
                col,
                "empty '# vram:' comment; write key=value pairs such as "
                "'# vram: gpu=a100-80gb model=llama-3-8b batch=4'",
            )
        )
        return values, errors
    conflicting: set = set()
    for token in body.replace(",", " ").split():
        key, value, error = _parse_token(token)
        if error:
            errors.append(CommentError(line, col, error))
        elif key is not None and key not in conflicting:
            error = _repeated(values.get(key), key, value, token)
            if error:   # neither value is used: no estimate is built on a guess
                errors.append(CommentError(line, col, error))
                conflicting.add(key)
                del values[key]
            else:
                values[key] = Value(value, f"comment line {line}", line, token)
    return values, errors


def _repeated(earlier: Optional[Value], key: str, value: Any, token: str) -> Optional[str]:
    """Why a key given twice in one comment is wrong (two different values), or None (given
    once, or twice with one value: `batch=8 batch=8`, `seq=2k seq=2048`)."""
    if earlier is None or earlier.value == value:
        return None
    return (f"'{key}' is given twice in one '# vram:' comment with different values "
            f"('{shown(earlier.text)}' and '{shown(token)}'); keep one")


def read_comments(comments: Iterable[Tuple[int, int, str]]) -> Comments:
    """Fold ``(line, col, text)`` comment tokens into one :class:`Comments`; later lines win."""
    out = Comments()
    for line, col, text in comments:
        try:
            if not PREFIX.match(text or ""):
                continue
            if out.first_line is None:
                out.first_line, out.first_col = line, col
            values, errors = parse_comment(text, line, col)
            out.values.update(values)
            out.errors.extend(errors)
        except Exception as exc:  # never raise from comment parsing
            out.errors.append(
                CommentError(line, col, f"could not read '# vram:' comment ({exc.__class__.__name__})")
            )
    return out


def comments_from_source(source: str, tree: Any = None) -> List[Tuple[int, int, str]]:
    """COMMENT tokens of a source string that may be ``# vram:`` comments; tolerant of
    tokenize errors.

    With the parsed ``tree``, only the lines that mention ``vram`` are tokenized, each alone,
    skipping lines inside multi-line strings (the tree says where those are): the same
    comments as tokenizing the whole file, without paying for 1 MB of tokens."""
    import io
    import tokenize

    found: List[Tuple[int, int, str]] = []
    low = source.lower()
    if "vram" not in low:
        return found
    if tree is None:
        readline = io.StringIO(source).readline
        return _comment_tokens(tokenize, readline, 0)
    lines = source.splitlines(True)
    candidates = [i for i, line in enumerate(lines, 1) if "vram" in line.lower() and "#" in line]
    spans_lines = '"""' in source or "'''" in source or "\\\n" in source
    inside = _multiline_string_lines(tree, set(candidates)) if spans_lines else set()
    for number in candidates:
        if number not in inside:
            found.extend(_comment_tokens(tokenize, io.StringIO(lines[number - 1]).readline, number - 1))
    return found


def _comment_tokens(tokenize: Any, readline: Any, offset: int) -> List[Tuple[int, int, str]]:
    out: List[Tuple[int, int, str]] = []
    try:
        for tok in tokenize.generate_tokens(readline):
            if tok.type == tokenize.COMMENT:
                out.append((tok.start[0] + offset, tok.start[1], tok.string))
    except (tokenize.TokenError, IndentationError, SyntaxError, SystemError):
        pass   # SystemError: CPython 3.13.0's tokenizer on some NUL bytes
    return out


def _multiline_string_lines(tree: Any, wanted: set) -> set:
    """Which of the ``wanted`` line numbers lie inside a string that spans lines."""
    import ast

    inside: set = set()
    if not wanted:
        return inside
    for node in ast.walk(tree):
        if isinstance(node, (ast.Constant, ast.JoinedStr)) and getattr(node, "end_lineno", None):
            if node.end_lineno > node.lineno:
                inside.update(n for n in wanted if node.lineno <= n <= node.end_lineno)
    return inside
