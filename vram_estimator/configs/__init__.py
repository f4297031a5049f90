"""Training config files: torchtune recipes, litgpt and axolotl YAMLs, Hugging Face
``TrainingArguments`` JSON/YAML, DeepSpeed JSON and accelerate configs.

:func:`read_config` loads a file within bounds (:mod:`.loader`), recognises its format by its
keys and reads the settings it holds (:mod:`.formats`); it never raises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from .formats import Setting, recognise
from .loader import ConfigError, Doc, load

__all__ = ["ConfigRead", "Setting", "read_config"]


@dataclass
class ConfigRead:
    path: str
    format: Optional[str] = None
    settings: List[Setting] = field(default_factory=list)
    refs: List[str] = field(default_factory=list)  # other config files it names (a DeepSpeed JSON)
    error: Optional[str] = None
    doc: Optional[Doc] = None

    def line(self, dotted: str) -> Optional[int]:
        if self.doc is None or not dotted:
            return None
        return self.doc.line(dotted)


def read_config(path: str) -> ConfigRead:
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
    for key in ("deepspeed", "deepspeed_config_file"):
        ref = data.get(key) if isinstance(data, dict) else None
        if isinstance(ref, str) and ref.lower().endswith(".json"):
            out.refs.append(ref)
    return out
