"""Run the rules over one parsed file. Shared by the flake8 plugin and the `tpf` CLI.

A crash in one rule costs that rule's findings for that file and nothing else: flake8 must
never die because of us.
"""
from __future__ import annotations

import ast
import contextlib
import gc
import io
import logging
import tokenize
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from . import cache
from .analysis import FileAnalysis
from .findings import FixPlan, Finding
from .noqa import TOKENIZE_ERRORS
from .rules import ALL_RULES

LOG = logging.getLogger("flake8_torch_preflight")
SKIP_FILE = "tpf: skip-file"
# A file that imports none of these has no training code for us to judge.
RELEVANT_IMPORTS = ("torch", "lightning", "pytorch_lightning", "lightning_fabric", "accelerate",
                    "transformers", "deepspeed", "timm", "peft", "trl", "diffusers", "torchvision")


def lint_tree(tree: ast.Module, filename: str = "<stdin>",
              rules: Optional[Sequence[type]] = None) -> List[Finding]:
    """Findings for one file, sorted by position; never raises."""
    with _no_collection_pauses():
        return _lint(tree, filename, rules)


@contextlib.contextmanager
def _no_collection_pauses():
    """The analysis of one file builds many small objects that all stay reachable until it
    ends, so a garbage collection in the middle of it can free nothing of ours but still
    scans everything alive in the process (flake8's tokens and trees included): measured,
    those pauses were a third of our time. Collection resumes as soon as the file is done
    (and the state it was in is restored)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _lint(tree: ast.Module, filename: str, rules: Optional[Sequence[type]]) -> List[Finding]:
    try:
        analysis = FileAnalysis(tree, filename)
        if not analysis.imports.imports_any(*RELEVANT_IMPORTS) and not _relative_imports(analysis):
            return []
    except Exception:  # a bug of ours must not stop flake8
        LOG.debug("analysis failed for %s", filename, exc_info=True)
        return []
    findings: List[Finding] = []
    try:
        for rule_class in rules or ALL_RULES:
            try:
                findings.extend(rule_class().check(analysis))
            except Exception:
                LOG.debug("rule %s failed on %s", rule_class.code, filename, exc_info=True)
    finally:
        analysis.release()
    return sorted(set(findings), key=lambda f: (f.line, f.col, f.code, f.message))


# Options that change what `lint_tree` finds (none yet: notes and selected codes are
# filtered afterwards); part of the cache key.
CACHE_OPTIONS = "all-rules"


def lint_file(tree: ast.Module, filename: str, text: str) -> List[Finding]:
    """`lint_tree(tree, filename)` through the cache across runs (`cache.py`): `text` is the
    source `tree` was parsed from. A hit returns what the analysis would, fix plans
    included; the plugin and `tpf check` use it, `tpf fix` does not."""
    if not cache.cacheable(filename):
        return lint_tree(tree, filename)
    from .analysis.project import resolution as project

    digest = cache.text_digest(text)
    records = cache.load_findings(filename, digest, CACHE_OPTIONS, project.module_file)
    found = _from_records(records, tree) if records is not None else None
    if found is not None:
        return found
    findings = lint_tree(tree, filename)
    records = _to_records(findings, tree)
    if records is not None:
        lookups, files = project.dependencies(filename)
        cache.store_findings(filename, digest, CACHE_OPTIONS, records,
                             cache.Dependencies(lookups, files))
    return findings


NodePath = Tuple[Tuple[str, int], ...]     # (field, index or -1) from the module down


def _to_records(findings: List[Finding], tree: ast.Module) -> Optional[list]:
    """Findings as builtin tuples; a plan's nodes as paths in `tree`. None when a plan's
    node is not in `tree` (not cached: a hit could not give it back)."""
    wanted = [f.plan for f in findings if f.plan is not None]
    paths = _node_paths(tree, {id(n) for p in wanted for n in (p.node, p.replacement)
                               if n is not None}) if wanted else {}
    records = []
    for f in findings:
        plan = None
        if f.plan is not None:
            node = paths.get(id(f.plan.node))
            replacement = paths.get(id(f.plan.replacement)) \
                if f.plan.replacement is not None else None
            if node is None or (f.plan.replacement is not None and replacement is None):
                return None
            plan = (f.plan.kind, node, replacement)
        records.append((f.line, f.col, f.code, f.severity, f.what, f.evidence, f.fix, plan))
    return records


def _from_records(records: list, tree: ast.Module) -> Optional[List[Finding]]:
    findings = []
    for line, col, code, severity, what, evidence, fix, plan in records:
        fix_plan = None
        if plan is not None:
            kind, node_path, replacement_path = plan
            node = _node_at(tree, node_path)
            replacement = _node_at(tree, replacement_path) if replacement_path else None
            if node is None or (replacement_path and replacement is None):
                return None
            fix_plan = FixPlan(kind, node, replacement)
        findings.append(Finding(line, col, code, severity, what, evidence, fix, plan=fix_plan))
    return findings


def _node_paths(tree: ast.AST, wanted: set) -> Dict[int, NodePath]:
    """id(node) -> its path from `tree`, for the nodes in `wanted`."""
    parents: Dict[int, Tuple[ast.AST, str, int]] = {}
    nodes: Dict[int, ast.AST] = {id(tree): tree}
    for parent in ast.walk(tree):
        for name, value in ast.iter_fields(parent):
            if isinstance(value, ast.AST):
                parents[id(value)], nodes[id(value)] = (parent, name, -1), value
            elif isinstance(value, list):
                for index, item in enumerate(value):
                    if isinstance(item, ast.AST):
                        parents[id(item)], nodes[id(item)] = (parent, name, index), item
    out: Dict[int, NodePath] = {}
    for key in wanted:
        if key not in nodes:
            continue
        steps = []
        node = nodes[key]
        while id(node) in parents:
            node, name, index = parents[id(node)]
            steps.append((name, index))
        out[key] = tuple(reversed(steps))
    return out


def _node_at(tree: ast.AST, path: NodePath) -> Optional[ast.AST]:
    node = tree
    for name, index in path:
        value = getattr(node, name, None)
        if index >= 0:
            value = value[index] if isinstance(value, list) and index < len(value) else None
        if not isinstance(value, ast.AST):
            return None
        node = value
    return node


def lint_source(source: str, filename: str = "<stdin>",
                rules: Optional[Sequence[type]] = None) -> List[Finding]:
    """Parse and lint; a file that does not parse has no findings (flake8 reports E999)."""
    if has_skip_file_comment(source.splitlines(True)):
        return []
    try:
        tree = ast.parse(source, filename=filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError):   # too deep for Python too
        return []
    return lint_tree(tree, filename, rules)


def has_skip_file_comment(lines: Iterable[str]) -> bool:
    """`# tpf: skip-file` as a real comment (not inside a string)."""
    lines = list(lines)
    if not any(SKIP_FILE in line for line in lines):
        return False
    try:
        for token in tokenize.generate_tokens(io.StringIO("".join(lines)).readline):
            if token.type == tokenize.COMMENT and token.string.lstrip("#").strip() == SKIP_FILE:
                return True
    except TOKENIZE_ERRORS:
        return False
    return False


def _relative_imports(analysis: FileAnalysis) -> bool:
    return any(m.startswith(".") for m in analysis.imports.modules)
