"""Load a YAML or JSON config file into plain values plus the line of every key, within bounds.

PyYAML (already installed with libcst, and declared by this package) parses YAML; ``json``
parses JSON.  Both are walked with an explicit stack and a node budget: a YAML file whose
aliases expand to a billion nodes ("billion laughs"), a 100,000-deep JSON array, or a file
over ``MAX_BYTES`` is one clear error, never a hang, a ``RecursionError`` or a traceback.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

MAX_BYTES = 1 << 20
MAX_NODES = 100_000
MAX_DEPTH = 64

Path = Tuple[str, ...]


class ConfigError(Exception):
    """A config file that cannot be read: the message is one line for the user."""


@dataclass
class Doc:
    """A parsed config: ``data`` as plain Python, and the 1-based line of each key path."""

    data: Any
    name: str
    lines: Dict[Path, int] = field(default_factory=dict)
    key_lines: Dict[str, int] = field(default_factory=dict)  # a key's first line, any depth
    launch: Optional[Any] = None  # the launch line its comments document (configs.launch.Launch)

    def get(self, dotted: str, default: Any = None) -> Any:
        node = self.data
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def line(self, dotted: str) -> Optional[int]:
        path = tuple(dotted.split("."))
        return self.lines.get(path) or self.key_lines.get(path[-1])


def read_text(path: str) -> str:
    try:
        size = os.path.getsize(path)
        if size > MAX_BYTES:
            raise ConfigError(f"{path}: config file is {size:,} bytes; at most {MAX_BYTES:,} are read")
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc.__class__.__name__}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})")


def load(path: str) -> Doc:
    text = read_text(path)
    name = os.path.basename(path)
    if path.lower().endswith(".json"):
        return parse_json(text, name)
    doc = parse_yaml(text, name)
    if "run" in text:  # cheap test before reading every comment line for a launch command
        from .launch import agreed, launches

        doc.launch = agreed(launches(text, comments=True))
    return doc


def parse_json(text: str, name: str) -> Doc:
    try:
        data = json.loads(text)
    except RecursionError:
        raise ConfigError(f"{name}: nested too deeply to read")
    except ValueError as exc:
        raise ConfigError(f"{name}: not valid JSON ({_first_line(str(exc))})")
    _check_size(data, name)
    doc = Doc(data=data, name=name)
    for m in _JSON_KEY.finditer(text):
        doc.key_lines.setdefault(m.group(1), text.count("\n", 0, m.start()) + 1)
    return doc


_JSON_KEY = re.compile(r'"((?:[^"\\\n]|\\.){1,200})"\s*:')


def _check_size(data: Any, name: str) -> None:
    stack: List[Tuple[Any, int]] = [(data, 0)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES or depth > MAX_DEPTH:
            raise ConfigError(f"{name}: too large or nested too deeply to read")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


def parse_yaml(text: str, name: str) -> Doc:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        root = yaml.compose(text, Loader=loader)
    except RecursionError:
        raise ConfigError(f"{name}: nested too deeply to read")
    except yaml.YAMLError as exc:
        raise ConfigError(f"{name}: not valid YAML ({_first_line(str(exc))})")
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{name}: not valid YAML ({exc.__class__.__name__})")
    doc = Doc(data=None, name=name)
    if root is not None:
        doc.data = _build(root, doc, name)
    return doc


def _build(root: Any, doc: Doc, name: str) -> Any:
    """Plain values from a YAML node graph, iteratively, counting every visit (aliases too)."""
    import yaml

    constructor = yaml.constructor.SafeConstructor()
    budget = [MAX_NODES]

    def scalar(node: Any) -> Any:
        try:
            return constructor.construct_object(node)
        except Exception:  # noqa: BLE001 - a scalar PyYAML cannot construct is text
            return node.value

    holder: Dict[Any, Any] = {"": None}
    # (node, container, key in container, path, depth)
    stack: List[Tuple[Any, Any, Any, Path, int]] = [(root, holder, "", (), 0)]
    while stack:
        node, parent, key, path, depth = stack.pop()
        budget[0] -= 1
        if budget[0] < 0 or depth > MAX_DEPTH:
            raise ConfigError(f"{name}: too large or nested too deeply to read")
        if isinstance(node, yaml.MappingNode):
            out: Dict[str, Any] = {}
            parent[key] = out
            for k_node, v_node in node.value:
                k = scalar(k_node) if isinstance(k_node, yaml.ScalarNode) else None
                if not isinstance(k, (str, int, float, bool)):
                    continue
                k = str(k)
                sub = path + (k,)
                line = k_node.start_mark.line + 1
                doc.lines.setdefault(sub, line)
                doc.key_lines.setdefault(k, line)
                stack.append((v_node, out, k, sub, depth + 1))
        elif isinstance(node, yaml.SequenceNode):
            items: List[Any] = [None] * len(node.value)
            parent[key] = items
            for i, item in enumerate(node.value):
                stack.append((item, items, i, path + (str(i),), depth + 1))
        else:
            parent[key] = scalar(node)
    return holder[""]


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "unreadable"
    return line[:120]
