"""Training config files: torchtune recipes, litgpt and axolotl YAMLs, Hugging Face
``TrainingArguments`` JSON/YAML, DeepSpeed JSON and accelerate configs.

:func:`read_config` loads a file within bounds (:mod:`.loader`), recognises its format by its
keys and reads the settings it holds (:mod:`.formats`); it never raises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from .formats import LITGPT_QUANTIZE, Setting, recognise
from .launch import Launch, agreed, launches, script_settings
from .loader import ConfigError, Doc, load, read_text

LAUNCH_SUFFIXES = (".sh", ".bash")

__all__ = ["ConfigRead", "Setting", "read_config"]


@dataclass
class ConfigRead:
    path: str
    format: Optional[str] = None
    settings: List[Setting] = field(default_factory=list)
    refs: List[str] = field(default_factory=list)  # other config files it names (a DeepSpeed JSON)
    error: Optional[str] = None
    doc: Optional[Doc] = None
    launch: Optional[Launch] = None  # a shell script's launch command

    def where(self, setting: Setting) -> Optional[int]:
        return setting.line or self.line(setting.field)

    def line(self, dotted: str) -> Optional[int]:
        if self.doc is None or not dotted:
            return None
        return self.doc.line(dotted)


def read_config(path: str) -> ConfigRead:
    if path.lower().endswith(LAUNCH_SUFFIXES):
        return read_launch_script(path)
    out = ConfigRead(path)
    try:
        out.doc = load(path)
    except ConfigError as exc:
        out.error = str(exc)
        return out
    found = recognise(out.doc)
    if found is None:
        return out
    out.format, reader = found
    try:
        out.settings = reader(out.doc)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # odd value types in a known format
        out.error = f"{path}: could not read its {out.format} ({exc.__class__.__name__})"
        return out
    data = out.doc.data
    nested = data.get("deepspeed_config") if isinstance(data, dict) else None  # accelerate's
    for holder in (data, nested):
        for key in ("deepspeed", "deepspeed_config_file"):
            ref = holder.get(key) if isinstance(holder, dict) else None
            if isinstance(ref, str) and ref.lower().endswith(".json"):
                out.refs.append(ref)
    return out


def read_launch_script(path: str) -> ConfigRead:
    """A shell script that launches the run: its ranks, the config files and the script
    arguments of its launch command (:mod:`.launch`)."""
    out = ConfigRead(path)
    try:
        text = read_text(path)
    except ConfigError as exc:
        out.error = str(exc)
        return out
    found = launches(text)
    launch = agreed(found)
    if launch is None:
        return out
    out.format, out.launch = "launch script", launch
    if launch.world:
        how = f"{launch.launcher} ranks" + (", every launch line" if len(found) > 1 else "")
        out.settings.append(Setting("world", launch.world, how, 5, line=launch.line))
    for key, value, name in script_settings(launch.args):
        out.settings.append(Setting(key, value, f"--{name}", 4, line=launch.line))
    quantize = launch.args.get("quantize")
    if launch.launcher == "litgpt" and quantize in LITGPT_QUANTIZE:
        precision = LITGPT_QUANTIZE[quantize]
        out.settings.append(Setting("precision", precision, "--quantize", 6, line=launch.line))
        double = quantize.endswith("-dq")
        out.settings.append(Setting("double_quant", double, "--quantize", 6, line=launch.line))
    if launch.launcher == "tune" and launch.recipe:
        out.settings += _recipe_settings(launch)
    out.refs = list(launch.configs)
    return out


def _recipe_settings(launch: Launch) -> List[Setting]:
    if "single_device" in launch.recipe:
        return [Setting("world", 1, f"torchtune recipe {launch.recipe}", 5, line=launch.line)]
    why = f"torchtune recipe {launch.recipe}: FSDP2 with more than one rank"
    return [Setting("sharding", "fsdp2", why, 3, multi_rank=True, line=launch.line)]
