"""Find a model's ``config.json`` on this machine, never over the network.

``from_pretrained("org/name")`` for a model that is not built in is counted exactly when its
configuration is local:

1. a folder (or a ``config.json`` file) at that path, relative to the script's folder first,
   then to the current directory;
2. the Hugging Face cache: ``$HF_HUB_CACHE``, ``$HF_HOME/hub``, then
   ``~/.cache/huggingface/hub`` (``$XDG_CACHE_HOME`` respected), in
   ``models--org--name/snapshots/<revision>/config.json`` -- the revision ``refs/main``
   names, else the newest snapshot.

:func:`find_model_config` returns the file or, when there is none, every place it looked, so the
"unknown model" message can say how to fix it; :func:`model_from_local` counts the model the
file describes.
"""

from __future__ import annotations

import os
import re
from typing import Any, List, Optional, Tuple

from ..knowledge import db

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}(/[\w.-]{1,96})?$")


def cache_roots() -> List[str]:
    roots = []
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            roots.append(os.environ[var])
    if os.environ.get("HF_HOME"):
        roots.append(os.path.join(os.environ["HF_HOME"], "hub"))
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    roots.append(os.path.join(xdg, "huggingface", "hub"))
    seen: List[str] = []
    for root in roots:
        if root not in seen:
            seen.append(root)
    return seen


def _config_in(path: str) -> Optional[str]:
    if os.path.isfile(path) and path.endswith(".json"):
        return path
    for sub in ("", "transformer", "unet"):
        candidate = os.path.join(path, sub, "config.json")
        if os.path.isfile(candidate):
            return candidate
    return None


def _snapshot(repo_dir: str) -> Optional[str]:
    snapshots = os.path.join(repo_dir, "snapshots")
    try:
        with open(os.path.join(repo_dir, "refs", "main"), encoding="utf-8") as handle:
            revision = handle.read(100).strip()
        found = _config_in(os.path.join(snapshots, revision)) if revision else None
        if found:
            return found
    except OSError:
        pass
    try:
        names = sorted(os.listdir(snapshots), key=lambda n: -os.path.getmtime(os.path.join(snapshots, n)))
    except OSError:
        return None
    for name in names[:32]:
        found = _config_in(os.path.join(snapshots, name))
        if found:
            return found
    return None


def find_model_config(ident: str, base_dir: Optional[str] = None) -> Tuple[Optional[str], List[str]]:
    """``(config.json path, [])`` or ``(None, places looked)`` for a model id or folder."""
    looked: List[str] = []
    if not ident or len(ident) > 400 or "\x00" in ident:
        return None, looked
    expanded = os.path.expanduser(ident)
    bases = [expanded] if os.path.isabs(expanded) else [
        os.path.join(b, expanded) for b in (base_dir, os.getcwd()) if b is not None
    ]
    for path in bases:
        looked.append(path)
        found = _config_in(path)
        if found:
            return found, []
    if _HUB_ID.match(ident) and "/" in ident:
        folder = "models--" + ident.replace("/", "--")
        for root in cache_roots():
            repo = os.path.join(root, folder)
            looked.append(repo)
            found = _snapshot(repo)
            if found:
                return found, []
    return None, looked


def model_from_local(text: str, base_dir: Optional[str]) -> Tuple[Optional[Any], List[str], Optional[str]]:
    """``(Model, [], None)``, or ``(None, places looked, why it is unusable)``."""
    path, looked = find_model_config(text, base_dir)
    if path is None:
        # no config on this machine: a name whose architecture is known (an assumption, said so)
        inferred = db.model_from_name(text)
        return (inferred, [], None) if inferred is not None else (None, looked, None)
    model = db.load_hf_config(path, name=text)
    if model is None:
        return None, looked, (
            f"model '{text[:120]}': {path} is not a configuration we can count (its model_type is "
            "not a family we model, or it is incomplete); fix: name an architecture ('# vram: "
            "model=llama-3-8b') or a size ('# vram: params=7B')"
        )
    return model, [], None
