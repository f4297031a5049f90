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

What the passes fill, and the questions every handler asks of it (a callee's dotted name, an
expression's value), are :class:`.script_state.ScriptState`'s.

What each bound name means comes from one table (:mod:`.setting_names`).  Every fact carries
its source (``train.py:12``, ``train.py:12 (default of train(micro_batch_size))``); where two
places give the same input, the more specific wins (a ``TrainingArguments`` keyword over a
constant named ``BATCH_SIZE``).  The reader does no I/O: files the script names (DeepSpeed JSON,
YAML configs, model folders) come back as references for :mod:`.inputs` to read.
"""

from __future__ import annotations

import ast
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .call_handlers import on_call
from .entrypoints import bind_statement, find_entry_points, finish_model_shape, module_lora_switches
from .folding import Unknown
from .inputs import parse_source
from .script_state import ScriptFacts, ScriptState


class _Reader(ScriptState):
    """The passes over one script, in order (see :meth:`run`); what they fill is the state."""

    def run(self) -> ScriptFacts:
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
        finish_model_shape(self)
        module_lora_switches(self)
        self.fix_mode()
        return self.facts

    def index_nodes(self) -> None:
        """One walk of the tree, nodes kept by the kind each pass reads (three walks of a 1 MB
        file cost seconds)."""
        kinds = {ast.Call: ast.Call, ast.Import: ast.Import, ast.ImportFrom: ast.Import,
                 ast.FunctionDef: ast.FunctionDef, ast.AsyncFunctionDef: ast.FunctionDef,
                 ast.With: ast.With, ast.AsyncWith: ast.With, ast.If: ast.If}
        self.nodes = {k: [] for k in set(kinds.values())}
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
    tree, error = parse_source(source, filename)
    if tree is None:
        return ScriptFacts(
            notes=[error or "script does not parse; only comments were read"], errors=[error or ""]
        )
    return read_script(tree, filename)
