"""What the script reader knows of one script, and the questions every pass asks of it.

:class:`ScriptState` holds the file's imports, the names bound so far (constants, argparse and
click defaults, dataclass fields), the calls and dicts assigned to names, and the
:class:`ScriptFacts` found; its methods answer what a handler needs: the dotted name of a callee
through the imports (:meth:`ScriptState.qual`), the value of an expression (bounded folding,
:mod:`.folding`), where a line is, and how to record a fact.  The handlers of
:mod:`.call_handlers` and :mod:`.entrypoints` are given a state; :mod:`.script_reader` runs the
passes that fill it.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..knowledge import db
from .config_comments import Value
from .folding import Evaluate, Folder, Resolved
from ..knowledge.model_names import stored_precision
from .setting_names import dtype_name, interpret

MAX_CHAIN = 64  # longer attribute/call chains are never names we know
CONFIG_SUFFIXES = (".json", ".yaml", ".yml")
TORCH_DTYPE_ATTRS = ("bfloat16", "float16", "half", "float32", "float")  # torch.<attr> read as a dtype


@dataclass
class ScriptFacts:
    values: Dict[str, Value] = field(default_factory=dict)
    prio: Dict[str, int] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    unknown_models: List[Tuple[str, int]] = field(default_factory=list)
    markers: Dict[str, Tuple[int, str]] = field(default_factory=dict)
    # model ids / folders the script loads (text, line, how): looked up locally by inputs.py
    model_refs: List[Tuple[str, int, str]] = field(default_factory=list)
    # files the script names that may hold its configuration: (text, line, what)
    config_refs: List[Tuple[str, int, str]] = field(default_factory=list)
    # an exact model shape read from the script (nanoGPT globals): an HF-style config dict
    model_config: Optional[Value] = None
    configurator: Optional[int] = None  # line of exec(open('configurator.py').read())
    runtime_model: Optional[str] = None  # from_pretrained(name) with name set at run time
    errors: List[str] = field(default_factory=list)
    # what the launcher decides only when the run has more than one rank (litgpt's
    # ``if devices > 1: strategy = FSDPStrategy(...)``): applied by api.resolve once world > 1
    multi_rank: Dict[str, Value] = field(default_factory=dict)

    def put(
        self, key: str, value: Any, source: str, line: Optional[int], prio: int, guessed: bool = False
    ) -> bool:
        """Record an input unless a more specific place already gave it.  ``guessed``: a
        library's default (``TrainingArguments``' batch 8), not a value the script wrote."""
        if value is None:
            return False
        if key in self.prio and self.prio[key] >= prio:
            return False
        self.values[key] = Value(value, source, line, guessed=guessed)
        self.prio[key] = prio
        return True

    def put_multi_rank(self, key: str, value: Any, source: str, line: Optional[int]) -> None:
        """Record what the run uses when it has more than one rank; the first place wins."""
        if value is not None and key not in self.multi_rank:
            self.multi_rank[key] = Value(value, source, line)


class ScriptState:
    """One script as read so far, and the questions handlers ask of it (see the module docstring)."""

    nodes: Dict[type, List[ast.AST]]  # the tree's nodes by kind, filled by the reader's first pass

    def __init__(
        self, tree: ast.AST, filename: str, overrides: Optional[Dict[str, Tuple[Any, str, int]]] = None
    ):
        self.tree = tree
        self.filename = filename or "<script>"
        self.base = os.path.basename(self.filename)
        self.imports: Dict[str, str] = {}
        self.env: Dict[str, Tuple[Any, int, str]] = {}
        self.argparse: Dict[str, Tuple[Any, int]] = {}
        self.fields: Dict[str, Tuple[Any, int]] = {}
        self.calls_by_name: Dict[str, ast.Call] = {}
        self.dicts_by_name: Dict[str, ast.Dict] = {}
        self.assigned_to: Dict[int, str] = {}  # id(call) -> the name it is assigned to
        self.entry_points: Dict[str, str] = {}  # function name -> how it is run ("fire.Fire")
        self.lightning_trainers: set = set()
        self.hf_trainers: set = set()
        self.gpt_dims: Dict[str, Tuple[Any, int, str]] = {}
        self.overrides = overrides or {}  # configurator-style: name -> (value, source, line)
        self.folder = Folder(self._lookup)
        self.facts = ScriptFacts()
        self._rank_conditional: Optional[set] = None

    # ----------------------------------------------------------------- names

    def qual(self, node: ast.AST) -> str:
        """Dotted name of a callee through the imports (``torch.optim.AdamW``); iterative."""
        suffix: List[str] = []
        for _ in range(MAX_CHAIN):
            if isinstance(node, ast.Attribute):
                suffix.append("." + node.attr)
                node = node.value
            elif isinstance(node, ast.Call):
                suffix.append("()")
                node = node.func
            elif isinstance(node, ast.Name):
                return self.imports.get(node.id, node.id) + "".join(reversed(suffix))
            else:
                return "?" + "".join(reversed(suffix))
        return "?"

    def src(self, line: int, how: str = "") -> str:
        return f"{self.base}:{line}" + (f" ({how})" if how else "")

    def put(self, key: str, value: Any, line: int, prio: int, how: str = "", guessed: bool = False) -> None:
        self.facts.put(key, value, self.src(line, how), line, prio, guessed)

    def put_launch(self, call: ast.Call, key: str, value: Any, how: str) -> None:
        """A launcher's choice (a strategy object): under an ``if`` on the device count it is what
        the run uses with more than one rank (litgpt: ``if devices > 1: strategy =
        FSDPStrategy(...)``), else always."""
        if id(call) in self.rank_conditional():
            source = self.src(call.lineno, how + ", with more than one rank")
            self.facts.put_multi_rank(key, value, source, call.lineno)
        else:
            self.put(key, value, call.lineno, 3, how)

    def rank_conditional(self) -> set:
        """Ids of the calls inside an ``if`` (either branch) whose test names a device or rank
        count (``devices``, ``world_size``, ``num_gpus``, ...); computed once, on first use."""
        if self._rank_conditional is None:
            self._rank_conditional = set()
            for branch in self.nodes.get(ast.If, []):
                if _names_a_rank_count(branch.test):
                    for stmt in branch.body + branch.orelse:
                        calls = (n for n in ast.walk(stmt) if isinstance(n, ast.Call))
                        self._rank_conditional.update(id(n) for n in calls)
        return self._rank_conditional

    def mark(self, what: str, line: int, why: str) -> None:
        self.facts.markers.setdefault(what, (line, why))

    # ----------------------------------------------------------------- evaluation

    def _lookup(self, node: ast.AST, ev: Evaluate) -> Optional[Resolved]:
        """What the folder cannot know alone: bound names, ``args.x``, dtypes, env defaults."""
        if isinstance(node, ast.Name):
            if node.id in self.env:
                value, _line, how = self.env[node.id]
                return value, how
            return None
        if isinstance(node, ast.Attribute):
            tail = node.attr
            if tail in TORCH_DTYPE_ATTRS and self.qual(node).startswith("torch."):
                return "torch." + tail, ""
            if isinstance(node.value, ast.Name) and tail in self.argparse:
                value, line = self.argparse[tail]
                return value, f"argparse default, line {line}"
            if tail in self.fields:
                value, line = self.fields[tail]
                return value, f"field default, line {line}"
            return None
        if isinstance(node, ast.Call):
            q = self.qual(node.func)
            if q.endswith(("environ.get", "getenv")) and len(node.args) >= 2:
                return ev(node.args[1])
            if q in ("Path", "pathlib.Path") and len(node.args) == 1:
                return ev(node.args[0])
        return None

    def try_ev(self, node: Optional[ast.AST]) -> Resolved:
        return self.folder.try_value(node)

    @staticmethod
    def kw(call: ast.Call, *names: str) -> Optional[ast.AST]:
        for k in call.keywords:
            if k.arg in names:
                return k.value
        return None

    def value_of(self, call: ast.Call, *names: str, pos: Optional[int] = None) -> Resolved:
        node = self.kw(call, *names)
        if node is None and pos is not None and len(call.args) > pos:
            node = call.args[pos]
        return self.try_ev(node)

    def dtype_of(self, node: Optional[ast.AST]) -> Optional[str]:
        value, _ = self.try_ev(node)
        return dtype_name(value) if isinstance(value, str) else None

    def is_model(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            if "model" in node.id.lower() or node.id in ("net", "unet", "llm"):
                return True
            call = self.calls_by_name.get(node.id)
            return call is not None and self.qual(call.func).endswith("from_pretrained")
        if isinstance(node, ast.Attribute):
            return "model" in node.attr.lower()
        return False

    def model_ref(self, text: str, line: int, how: str, prio: int) -> None:
        """A model named by id or folder: the database, else a local config.json later."""
        key = db.find_model(text) if len(text) <= 200 else None
        if key:
            self.put("model", key, line, prio, how)
            stored = stored_precision(text)
            if stored:  # below load_in_4bit= / BitsAndBytesConfig (5), above a torch_dtype= (2)
                self.put("precision", stored, line, 4, f"'{text[:80]}' is a pre-quantised checkpoint")
        else:
            self.facts.unknown_models.append((text, line))
            self.facts.model_refs.append((text, line, how))

    def config_ref(self, value: Any, line: int, what: str) -> None:
        if isinstance(value, str) and value.lower().endswith(CONFIG_SUFFIXES) and len(value) < 400:
            if all(ref[0] != value for ref in self.facts.config_refs):
                self.facts.config_refs.append((value, line, what))

    # ----------------------------------------------------------------- binding names

    def bind_name(self, name: str, value: Any, line: int, how: str, prio_base: int = 0) -> None:
        """A name bound to a value: remember it, and record what it sets (see setting_names)."""
        self.env[name] = (value, line, how)
        found = interpret(name, value)
        if found is None:
            self.config_ref(value, line, f"'{name}'")
            return
        setting, canonical, rank = found
        if setting.startswith("gpt."):
            self.gpt_dims[setting[4:]] = (canonical, line, how)
        elif setting == "model":
            if db.find_model(canonical):
                self.put("model", db.find_model(canonical), line, 1 + prio_base, how)
            elif canonical:
                self.facts.model_refs.append((canonical, line, how))
        else:
            self.put(setting, canonical, line, 1 + prio_base + rank, how)


RANK_COUNT_WORDS = ("device", "world", "gpu", "nproc", "num_nodes", "node", "rank")


def _names_a_rank_count(test: ast.AST) -> bool:
    for node in ast.walk(test):
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        if name and any(word in name.lower() for word in RANK_COUNT_WORDS):
            return True
    return False
