"""Read memory-relevant facts from a training/inference script, statically (stdlib ``ast``).

Nothing is imported or executed.  Names are resolved through the file's imports (``pl`` ->
``pytorch_lightning``, ``Trainer`` -> ``transformers.Trainer``), so a Lightning ``Trainer`` and a
Hugging Face ``Trainer`` are told apart, and ``ModelCheckpoint`` (a Lightning callback that saves
files) is never mistaken for gradient checkpointing.

Where real scripts keep their setup, in source order:

* module globals and function-level constants (nanoGPT's ``batch_size = 12``), with bounded
  arithmetic (:mod:`.folding`), and ``configurator``-style overrides applied where the script
  ``exec``'s its configurator;
* the signature defaults of the function a CLI library runs (``fire.Fire(train)``,
  ``typer.run``, ``jsonargparse.CLI``, litgpt's ``CLI``, ``@click.command``/``@app.command``,
  or a bare ``main()`` call): those defaults are what the run uses;
* argparse / click option defaults (read back through ``args.name``) and dataclass fields
  (``HfArgumentParser``'s argument classes);
* library calls, through the handler table in :mod:`.call_handlers`.

What each bound name means comes from one table (:mod:`.setting_names`).  Every fact carries
its source (``train.py:12``, ``train.py:12 (default of train(micro_batch_size))``); where two
places give the same input, the more specific wins (a ``TrainingArguments`` keyword over a
constant named ``BATCH_SIZE``).  The reader does no I/O: files the script names (DeepSpeed JSON,
YAML configs, model folders) come back as references for :mod:`.inputs` to read.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

from . import db
from .config_comments import Value
from .folding import Evaluate, Folder, Resolved, Unknown
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


class _Reader:
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

    # ----------------------------------------------------------------- passes

    def run(self) -> ScriptFacts:
        from .call_handlers import on_call
        from .entrypoints import find_entry_points

        self.index_nodes()
        self.collect_imports()
        find_entry_points(self)
        self.collect_bindings(getattr(self.tree, "body", []))
        for node in self.nodes[ast.Call]:
            try:
                on_call(self, node)
            except (Unknown, TypeError, ValueError, AttributeError, KeyError, IndexError):
                continue
        for node in self.nodes[ast.With]:
            for item in node.items:
                q = self.qual(item.context_expr)
                if q.endswith(("no_grad()", "inference_mode()")):
                    self.mark("inference", node.lineno, "no_grad/inference_mode")
        from .entrypoints import finish_model_shape

        finish_model_shape(self)
        self.fix_mode()
        return self.facts

    def index_nodes(self) -> None:
        """One walk of the tree, nodes kept by the kind each pass reads (three walks of a
        1 MB file cost seconds)."""
        kinds = {ast.Call: ast.Call, ast.Import: ast.Import, ast.ImportFrom: ast.Import,
                 ast.FunctionDef: ast.FunctionDef, ast.AsyncFunctionDef: ast.FunctionDef,
                 ast.With: ast.With, ast.AsyncWith: ast.With}
        self.nodes: Dict[type, List[ast.AST]] = {k: [] for k in set(kinds.values())}
        for node in ast.walk(self.tree):
            kind = kinds.get(type(node))
            if kind is not None:
                self.nodes[kind].append(node)

    def collect_imports(self) -> None:
        for node in self.nodes[ast.Import]:
            if isinstance(node, ast.Import):
                for a in node.names:
                    top_level = a.name.split(".")[0]
                    self.imports[a.asname or top_level] = a.name if a.asname else top_level
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    self.imports[a.asname or a.name] = f"{node.module}.{a.name}"

    def collect_bindings(self, body: List[ast.stmt]) -> None:
        """Constants, entry-point defaults, argparse defaults and dataclass fields, in source
        order, with an explicit stack (5,000 nested ``elif``s are 5,000 stack entries, not
        5,000 Python frames)."""
        from .entrypoints import bind_statement

        stack: List[Iterator[ast.stmt]] = [iter(body)]
        while stack:
            stmt = next(stack[-1], None)
            if stmt is None:
                stack.pop()
                continue
            try:
                bind_statement(self, stmt)
            except (Unknown, TypeError, ValueError, AttributeError, KeyError, IndexError):
                pass
            for inner in reversed(_child_bodies(stmt)):
                stack.append(iter(inner))

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


def _child_bodies(stmt: ast.stmt) -> List[List[ast.stmt]]:
    """Nested statement lists of ``stmt``, in source order."""
    out: List[List[ast.stmt]] = []
    for name in ("body", "orelse"):
        inner = getattr(stmt, name, None)
        if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
            out.append(inner)
    for handler in getattr(stmt, "handlers", None) or ():
        out.append(handler.body)
    for case in getattr(stmt, "cases", None) or ():
        out.append(case.body)
    final = getattr(stmt, "finalbody", None)
    if final:
        out.append(final)
    return out


def read_script(
    tree: Optional[ast.AST],
    filename: str = "<script>",
    overrides: Optional[Dict[str, Tuple[Any, str, int]]] = None,
) -> ScriptFacts:
    """Facts from a parsed module; never raises (a failure yields no facts and a note).

    ``overrides`` are configurator-style assignments (``name -> (value, source, line)``) from a
    config file the script ``exec``'s; they replace the script's globals where it does so.
    """
    if tree is None:
        return ScriptFacts()
    try:
        return _Reader(tree, filename, overrides).run()
    except Exception as exc:  # noqa: BLE001 - every evaluation is bounded; this is the last guard
        facts = ScriptFacts()
        facts.notes.append(f"script could not be read fully ({exc.__class__.__name__})")
        return facts


def read_source(source: str, filename: str = "<script>") -> ScriptFacts:
    from .inputs import parse_source

    tree, error = parse_source(source, filename)
    if tree is None:
        return ScriptFacts(
            notes=[error or "script does not parse; only comments were read"], errors=[error or ""]
        )
    return read_script(tree, filename)
