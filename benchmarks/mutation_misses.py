"""Why an injected bug was not reported: a first, automatic answer from the analysis layer.

Only the public questions of `FileAnalysis` are asked (`index.functions`, `facts_for`,
`module_facts`, `loop_does`, `framework_owned`, `evaluation_reason`, and the event lists of
`FunctionFacts`). Each answer names the first link of the rule's chain of evidence that the
analysis did not establish; "not reported: other" means every link we can ask about was there
(the rule itself decided to stay quiet) and the site needs reading by hand. The analysis is
restructured from time to time: any failure to ask becomes "not reported: analysis query
failed", never a crash of the benchmark.
"""
from __future__ import annotations

import ast
import os
from typing import Callable, Dict, Optional, Tuple

from .mutation_ops import Mutation
from .mutation_text import line_mapper

OTHER = "not reported: other"

# What each rule needs of the loop the bug lives in.
NEEDS_STEP = {"TPF003", "TPF004", "TPF012", "TPF014", "TPF015"}
LOOP_RULES = NEEDS_STEP | {"TPF007", "TPF009", "TPF010", "TPF013"}
# Shapes whose step is outside the loop the bug lives in.
STEP_OUTSIDE = {"micro-step"}


def classify(mutation: Mutation, mutant: str, path: str, registered: bool) -> str:
    if not registered:
        return "rule not registered (yet)"
    try:
        return _classify(mutation, mutant, path)
    except Exception as error:   # the analysis is being restructured: never stop the run
        return f"not reported: analysis query failed ({type(error).__name__})"


def _classify(mutation: Mutation, mutant: str, path: str) -> str:
    from flake8_torch_preflight.analysis import FileAnalysis
    from flake8_torch_preflight.engine import RELEVANT_IMPORTS

    tree = ast.parse(mutant, filename=path)
    analysis = FileAnalysis(tree, path)
    if not analysis.imports.imports_any(*RELEVANT_IMPORTS):
        return "file not linted (no torch/framework import)"
    mapped = line_mapper(mutation.edits)
    line = mapped(mutation.line)
    func = _function_at(analysis, line)
    facts = analysis.facts_for(func) if func is not None else analysis.module_facts
    owner = analysis.framework_owned(func)
    if owner:
        return f"framework-owned ({owner})"
    code = mutation.code
    if code in LOOP_RULES and mutation.loop_line is not None:
        loop_line = mapped(mutation.loop_line)
        loop_func = _function_at(analysis, loop_line)
        loop_facts = analysis.facts_for(loop_func) if loop_func is not None \
            else analysis.module_facts
        owner = analysis.framework_owned(loop_func)
        if owner:
            return f"framework-owned ({owner})"
        reason = _loop_reason(analysis, loop_facts, mutation, loop_line)
        if reason and "not recognised as a training loop" in reason:
            helper = _project_helper_called(tree, path, loop_line)
            if helper:
                return f"training step in a helper of another project file ({helper})"
        if reason:
            return reason
    specific = _SPECIFIC.get(code)
    if specific is not None:
        reason = specific(analysis, facts, mutation, line)
        if reason:
            return reason
    return OTHER


def _function_at(analysis, line: int):
    best = None
    for func in analysis.index.functions:
        node = func.node
        if node.lineno <= line <= getattr(node, "end_lineno", node.lineno):
            if best is None or node.lineno >= best.node.lineno:
                best = func
    return best


def _loop_reason(analysis, facts, mutation: Mutation, loop_line: int) -> Optional[str]:
    code = mutation.code
    loop = next((node for node in facts.loops if node.lineno == loop_line), None)
    if loop is None:
        return "loop not seen by the analysis"
    if not analysis.loop_does(facts, loop, "backward"):
        return "loop not recognised as a training loop (its backward is not seen)"
    step_outside = mutation.variant.split(":")[0] in STEP_OUTSIDE
    if code in NEEDS_STEP and not step_outside and not analysis.loop_does(facts, loop, "step"):
        return "optimizer step not recognised (receiver of unknown type)"
    if code == "TPF003" and analysis.loop_does(facts, loop, "reset"):
        return "a remaining reset is counted (of another optimizer/module, or in a helper)"
    if code == "TPF007":
        if not analysis.loop_does(facts, loop, "eval"):
            return "the eval() of the epoch loop is not seen (receiver or helper unresolved)"
        if analysis.loop_does(facts, loop, "train"):
            return "a train() is still counted in the loop (of another receiver or opaque)"
    return None


def _project_helper_called(tree: ast.Module, path: str, loop_line: int) -> Optional[str]:
    """A function imported from a file of this project (on disk beside the linted file) that
    the loop at `loop_line` calls: where its training step may live. Syntax only."""
    imported = _imported_names(tree)
    loop = next((n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While, ast.AsyncFor))
                 and n.lineno == loop_line), None)
    if loop is None:
        return None
    for call in (n for n in ast.walk(loop) if isinstance(n, ast.Call)):
        func = call.func
        head = func.id if isinstance(func, ast.Name) else (
            func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            else None)
        if head in imported and _project_module(path, *imported[head]):
            return f"{imported[head][0] or '.'}.{head}" if isinstance(func, ast.Name) \
                else f"{imported[head][0]}.{func.attr}"
    return None


def _imported_names(tree: ast.Module) -> Dict[str, Tuple[str, int]]:
    names: Dict[str, Tuple[str, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                names[alias.asname or alias.name] = (node.module or "", node.level)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = (alias.name, 0)
    return names


def _project_module(path: str, module: str, level: int) -> bool:
    """`module` names a .py file or package of the project around `path`."""
    here = os.path.dirname(os.path.abspath(path))
    if level:
        for _ in range(level - 1):
            here = os.path.dirname(here)
        bases = [here]
    else:
        bases = [here]
        for _ in range(4):
            here = os.path.dirname(here)
            bases.append(here)
    rel = module.replace(".", os.sep) if module else ""
    for base in bases:
        target = os.path.join(base, rel) if rel else base
        if os.path.isfile(target + ".py") or os.path.isfile(os.path.join(target, "__init__.py")):
            return True
    return False


def _stored_reason(analysis, facts, mutation: Mutation, line: int) -> Optional[str]:
    stores = [s for s in facts.stores if s.site.line == line]
    if not stores:
        loop_line = line_mapper(mutation.edits)(mutation.loop_line or line)
        forwards = [f for f in facts.forwards
                    if any(getattr(loop, "lineno", None) == loop_line for loop in f.site.loops)]
        if not forwards:
            return "no forward recognised in the loop (model of unknown type: a parameter, " \
                   "a library class, a factory)"
        return "store not recorded (container or target not tracked)"
    if not any(s.value.grad for s in stores):
        return "stored value not known to carry a graph (value of unknown type)"
    return None


def _eval_reason(analysis, facts, mutation: Mutation, line: int) -> Optional[str]:
    forwards = [f for f in facts.forwards if f.site.line >= line]
    if not forwards:
        return "model call not recognised as a forward (model of unknown type)"
    if all(f.site.no_grad for f in forwards):
        return "still seen under no_grad (a caller, a decorator, or an unknown context)"
    if all(analysis.evaluation_reason(facts, f.site) is None for f in forwards):
        return "not recognised as evaluation code"
    return None


def _activation_reason(tag: str) -> Callable:
    def reason(analysis, facts, mutation: Mutation, line: int) -> Optional[str]:
        calls = [c for c in facts.calls if c.site.line == line and c.args]
        if not calls:
            return "loss call not evaluated by the analysis"
        if not any(_is_loss(c) for c in calls):
            return "loss object of unknown type (built elsewhere, from config, or a parameter)"
        if not any(tag in getattr(c.args[0], "tags", ()) for c in calls if c.args):
            return f"{tag} output not recognised (value of unknown type)"
        return None
    return reason


def _is_loss(call) -> bool:
    if call.qualname and ("cross_entropy" in call.qualname or "binary_cross" in call.qualname):
        return True
    value = call.receiver
    tags = getattr(value, "tags", ())
    return "loss_fn" in tags


def _receiver_reason(analysis, facts, mutation: Mutation, line: int) -> Optional[str]:
    """TPF016: is the receiver of the bare `x.eval` known as a module / optimizer?"""
    stmt = next((n for n in ast.walk(analysis.tree) if isinstance(n, ast.Expr)
                 and n.lineno == line and isinstance(n.value, ast.Attribute)), None)
    if stmt is None:
        return None
    tags = getattr(facts.value(stmt.value.value), "tags", ())
    if not {"module", "optimizer", "ddp", "engine"} & set(tags):
        return "receiver of unknown type (not known as a module or optimizer)"
    return None


def _dataset_reason(analysis, facts, mutation: Mutation, line: int) -> Optional[str]:
    origin = mutation.variant.rsplit("dataset=", 1)[-1]
    if origin in ("torchvision", "torch.utils.data", "class-of-this-file"):
        return None
    return f"dataset of a kind this file does not prove map-style ({origin})"


def _accumulation_reason(analysis, facts, mutation: Mutation, line: int) -> Optional[str]:
    """TPF004: the accumulation count may be 1 (bound to a literal 1 in the file)."""
    divisor = mutation.detail.rsplit(".", 1)[-1]
    for node in ast.walk(analysis.tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and node.value.value == 1 and any(
                    (getattr(t, "id", None) or getattr(t, "attr", None)) == divisor
                    for t in node.targets):
            return f"accumulation count may be 1 (`{divisor} = 1` in this file)"
    return None


def _variant_reason(reasons: dict) -> Callable:
    def reason(analysis, facts, mutation: Mutation, line: int) -> Optional[str]:
        return reasons.get(mutation.variant)
    return reason


_SPECIFIC = {
    "TPF001": _stored_reason,
    "TPF004": _accumulation_reason,
    "TPF016": _receiver_reason,
    "TPF018": _dataset_reason,
    "TPF002": _eval_reason,
    "TPF005": _activation_reason("softmax"),
    "TPF006": _activation_reason("sigmoid"),
    "TPF008": _variant_reason({"wrap-elsewhere": "DDP/FSDP wrap not in this file"}),
    "TPF009": _variant_reason({"sampler-built-elsewhere":
                               "sampler built in another file or helper (type unknown)"}),
}
