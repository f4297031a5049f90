"""Everything the estimator reads besides ``# vram:`` comments: script files (decoded the way
Python decodes them), their parse, the config files they name or the user passes, and local
``config.json`` files of the models they load.

Discovery rule for config files next to a script: a ``.json``/``.yaml``/``.yml`` file is read
when the script names it in a string -- a call argument (``TrainingArguments(deepspeed=
"ds.json")``, ``yaml.safe_load(open("config.yaml"))``, ``parser.parse_yaml_file(...)``), an
argparse/click default, or a constant -- and it exists relative to the script's folder (then
the current directory), and its keys are those of a format we know (``configs.formats``).
Nothing else in the folder is read: a ``config.yaml`` the script never names may belong to
another script, and which of nanoGPT's ``config/*.py`` files a run uses is a command-line
choice, so those are read only when given (``vram-estimate train.py config/train_gpt2.py``).

Precedence, lowest first: defaults, the script, config files the script names, config files
given on the command line, ``# vram:`` comments, command-line flags.
"""

from __future__ import annotations

import ast
import io
import os
import tokenize
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..knowledge import db
from .configs import read_config
from .folding import Folder
from .hf_local import model_from_local
from ..knowledge.db import closest_models
from ..knowledge.model_names import stored_precision
from .script_state import ScriptFacts

MAX_SCRIPT_BYTES = 10 << 20
EXPLICIT_PRIO = 10  # a config file the user passes outranks everything the script says
MAX_CONFIG_FILES = 8


class InputError(Exception):
    """An input that cannot be read: the message is one line, the exit status 5."""


@dataclass
class Problems:
    """Bad values the user wrote, found while reading (exit 2 / TPF102), with their lines."""

    items: List[Tuple[int, str]] = field(default_factory=list)

    def add(self, line: int, message: str) -> None:
        self.items.append((line, message))


# --------------------------------------------------------------------------- scripts


def decode_python(data: bytes, name: str) -> str:
    """Bytes -> text as Python reads a source file: a coding cookie or a UTF-8 BOM decides."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        why = str(getattr(exc, "msg", exc))
        if "invalid or missing encoding declaration" in why:
            raise InputError(f"{name}: not valid UTF-8, and no coding cookie names another encoding")
        raise InputError(f"{name}: cannot decode: {why[:120]}")
    try:
        return data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        where = f" at byte {exc.start}" if isinstance(exc, UnicodeDecodeError) else ""
        raise InputError(
            f"{name}: not valid {encoding} text{where} (declare the file's encoding with a coding cookie)"
        )


def read_python_file(path: str) -> str:
    try:
        size = os.path.getsize(path)
        if size > MAX_SCRIPT_BYTES:
            raise InputError(
                f"{path}: {size:,} bytes; scripts over {MAX_SCRIPT_BYTES >> 20} MiB are not read"
            )
        with open(path, "rb") as handle:
            data = handle.read()
    except IsADirectoryError:
        raise InputError(f"cannot read {path}: it is a folder")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc.__class__.__name__}")
    return decode_python(data, path)


def parse_source(source: str, filename: str = "<script>") -> Tuple[Optional[ast.AST], Optional[str]]:
    """``(tree, None)`` or ``(None, one line saying why the script does not parse)``."""
    if source.startswith("\ufeff"):
        source = source[1:]
    try:
        return ast.parse(source, filename=filename), None
    except SyntaxError as exc:
        where = f"{filename}:{exc.lineno or 1}:{(exc.offset or 1)}"
        return None, f"{where}: syntax error: {exc.msg}"
    except (RecursionError, MemoryError):
        return None, f"{filename}: nested too deeply for Python to parse"
    except ValueError as exc:  # null bytes on older Pythons
        return None, f"{filename}: cannot parse: {exc}"


# --------------------------------------------------------------------------- configurator files


def read_configurator(path: str) -> Dict[str, Tuple[Any, str, int]]:
    """Module-level ``name = value`` lines of a nanoGPT-style config file (never executed)."""
    source = read_python_file(path)
    tree, error = parse_source(source, path)
    if tree is None:
        raise InputError(error or f"{path}: cannot parse")
    env: Dict[str, Tuple[Any, str, int]] = {}

    def lookup(node: ast.AST, _ev: Any) -> Optional[Tuple[Any, str]]:
        if isinstance(node, ast.Name) and node.id in env:
            return env[node.id][0], ""
        return None

    folder = Folder(lookup)
    base = os.path.basename(path)
    for stmt in getattr(tree, "body", []):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value, _ = folder.try_value(stmt.value)
            if value is not None:
                env[stmt.targets[0].id] = (value, f"{base}:{stmt.lineno}", stmt.lineno)
    return env


# --------------------------------------------------------------------------- config files


def _locate(text: str, base_dir: Optional[str]) -> Optional[str]:
    if os.path.isabs(text):
        return text if os.path.isfile(text) else None
    for base in (base_dir, os.getcwd()):
        if base is not None:
            path = os.path.join(base, text)
            if os.path.isfile(path):
                return path
    return None


def apply_config_file(
    facts: ScriptFacts, path: str, explicit: bool, problems: Problems, depth: int = 0, line: int = 1
) -> Optional[str]:
    """Read one config file into ``facts``; returns the format name, or None when unknown."""
    result = read_config(path)
    if result.error:
        if explicit:
            raise InputError(result.error)
        facts.notes.append(f"{result.error} (named at line {line}; not used)")
        return None
    if result.format is None:
        if explicit:
            raise InputError(
                f"{path}: not a config format we read (torchtune, litgpt, axolotl, Hugging Face "
                "arguments JSON/YAML, DeepSpeed JSON, accelerate config, a shell script with a "
                "torchrun / accelerate launch / deepspeed / tune run / litgpt line)"
            )
        return None
    base = os.path.basename(path)
    boost = EXPLICIT_PRIO if explicit else 0
    for setting in result.settings:
        where = result.where(setting)
        source = f"{base}:{where}" if where else base
        source += f" ({setting.field})" if setting.field else ""
        value = setting.value
        if setting.key == "model":
            model = resolve_model_text(value, os.path.dirname(path), problems, where or 1, source)
            if model is None:
                continue
            stored = stored_precision(value) if isinstance(value, str) else None
            if stored:
                facts.put("precision", stored, f"{source}: a pre-quantised checkpoint", where, 5 + boost)
            value = model
        if setting.multi_rank:
            facts.put_multi_rank(setting.key, value, source, where)
            continue
        facts.put(setting.key, value, source, where, setting.prio + boost)
    facts.notes.append(f"{result.format} read from {path}")
    if depth < 2:
        for ref in result.refs:
            located = _locate(ref, os.path.dirname(path))
            if located:
                apply_config_file(facts, located, explicit, problems, depth + 1, line)
    return result.format


def apply_discovered(facts: ScriptFacts, script_path: Optional[str], problems: Problems) -> None:
    base_dir = os.path.dirname(os.path.abspath(script_path)) if script_path else None
    read = 0
    for text, line, what in facts.config_refs:
        if read >= MAX_CONFIG_FILES:
            break
        path = _locate(text, base_dir)
        if path is None:
            if what == "DeepSpeed config":
                facts.notes.append(f"DeepSpeed config {text} named at line {line} could not be read")
            continue
        if apply_config_file(facts, path, False, problems, line=line):
            read += 1


# --------------------------------------------------------------------------- models


def unknown_model_message(text: str, looked: List[str]) -> str:
    near = closest_models(text)
    hint = f" (closest built-in: {', '.join(near)})" if near else ""
    where = f"; looked in {', '.join(looked[:3])}" if looked else ""
    # only an org/name id can be downloaded; a config name (litgpt's Config.from_name("tiny_LLaMA_1b"))
    # or a bare folder name cannot, so the fix does not offer it
    download = ""
    if "/" in text:
        download = f"download its config (huggingface-cli download {text[:120]} config.json), "
    return (
        f"unknown model '{text[:120]}': not built in{hint} and no local config.json{where}; "
        f"fix: {download}pass its folder "
        "(--model path/to/model), or name an architecture ('# vram: model=llama-3-8b') or a size "
        "('# vram: params=7B')"
    )


def resolve_model_text(
    text: Any, base_dir: Optional[str], problems: Optional[Problems], line: int, source: str
) -> Optional[Any]:
    """A built-in key or a :class:`db.Model` from a local config.json; else a problem."""
    if not isinstance(text, str) or not text.strip():
        return None
    key = db.find_model(text)
    if key:
        return key
    model, looked, why = model_from_local(text, base_dir)
    if model is not None:
        return model
    if problems is not None:
        problems.add(line, why or unknown_model_message(text, looked))
    return None


def apply_models(facts: ScriptFacts, script_path: Optional[str], problems: Problems) -> None:
    """A model the database does not know: exact from a local config.json, or one problem."""
    if "model" in facts.values:
        return
    base_dir = os.path.dirname(os.path.abspath(script_path)) if script_path else None
    base = os.path.basename(script_path) if script_path else "<script>"
    first_problem: Optional[Tuple[int, str]] = None
    for text, line, how in facts.model_refs:
        model, looked, why = model_from_local(text, base_dir)
        if model is not None:
            facts.put("model", model, f"{base}:{line} ({model.source})", line, 3)
            return
        if first_problem is None:
            first_problem = (line, why or unknown_model_message(text, looked))
    if facts.model_config is not None:
        model = db.model_from_hf_config(facts.model_config.value, name="nanoGPT-style GPT")
        if model is not None:
            facts.put("model", model, facts.model_config.source, facts.model_config.line, 2)
            return
    if first_problem is not None:
        problems.add(*first_problem)
