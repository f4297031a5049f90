"""The flake8 adapter: flake8's tree in, `TPFnnn` lines out. Nothing else lives here.

flake8 passes the `ast` it already built (never mutated, never re-parsed) and the file's
lines (only scanned for `# tpf: skip-file`); the file is never re-read, so stdin and editor
buffers work. Columns are 0-based: flake8 adds one.
"""
from __future__ import annotations

import ast
from typing import Iterator, List, Tuple

from . import __version__
from .engine import has_skip_file_comment, lint_tree


class TorchPreflightChecker:
    name = "flake8-torch-preflight"
    version = __version__

    def __init__(self, tree: ast.Module, lines: List[str], filename: str = "<stdin>") -> None:
        self.tree = tree
        self.lines = lines
        self.filename = filename

    def run(self) -> Iterator[Tuple[int, int, str, type]]:
        if has_skip_file_comment(self.lines):
            return
        for finding in lint_tree(self.tree, self.filename):
            yield finding.line, finding.col, finding.message, type(self)
