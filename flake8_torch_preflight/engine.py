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
from typing import Iterable, List, Optional, Sequence

from .analysis import FileAnalysis
from .findings import Finding
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
