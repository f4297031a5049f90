"""The flake8 adapter: flake8's tree in, `TPFnnn` lines out. Nothing else lives here.

flake8 passes the `ast` it already built (never mutated, never re-parsed) and the file's
lines (only scanned for `# tpf: skip-file`); the file is never re-read, so stdin and editor
buffers work. Columns are 0-based: flake8 adds one.

Notes (severity `note`: tuning advice, the code is correct) are reported only with
`--tpf-notes` or `tpf-notes = true` in `[flake8]`; errors and warnings always.

Findings are kept across runs in `.tpf_cache/` at the project root (`cache.py`); off with
`--tpf-no-cache`, `tpf-cache = false` in `[flake8]`, or `TPF_NO_CACHE=1`.
"""
from __future__ import annotations

import ast
from typing import Any, ClassVar, Iterator, List, Tuple

from . import __version__, cache
from .engine import has_skip_file_comment, lint_file
from .findings import NOTE


class TorchPreflightChecker:
    name = "flake8-torch-preflight"
    version = __version__

    # Set from the option for the whole run; an instance may override it (the fixture harness).
    show_notes: ClassVar[bool] = False

    def __init__(self, tree: ast.Module, lines: List[str], filename: str = "<stdin>") -> None:
        self.tree = tree
        self.lines = lines
        self.filename = filename

    @classmethod
    def add_options(cls, option_manager: Any) -> None:
        option_manager.add_option(
            "--tpf-notes", action="store_true", default=False, parse_from_config=True,
            help="also report flake8-torch-preflight notes (tuning advice; the code is "
                 "correct). Errors and warnings are always reported.")
        option_manager.add_option(
            "--tpf-no-cache", action="store_true", default=False, parse_from_config=True,
            help="do not read or write flake8-torch-preflight's cache across runs "
                 "(.tpf_cache/ at the project root); also TPF_NO_CACHE=1")
        option_manager.add_option(
            "--tpf-cache", action="store_true", default=None, parse_from_config=True,
            help="keep flake8-torch-preflight's findings across runs (the default; "
                 "`tpf-cache = false` in [flake8] turns it off)")

    @classmethod
    def parse_options(cls, options: Any) -> None:
        cls.show_notes = bool(getattr(options, "tpf_notes", False))
        cache.set_enabled(cache_wanted(options))

    def run(self) -> Iterator[Tuple[int, int, str, type]]:
        if has_skip_file_comment(self.lines):
            return
        for finding in lint_file(self.tree, self.filename, "".join(self.lines)):
            if finding.severity == NOTE and not self.show_notes:
                continue
            yield finding.line, finding.col, finding.message, type(self)


def cache_wanted(options: Any) -> bool:
    """The cache is on unless `--tpf-no-cache` or `tpf-cache = false` says otherwise."""
    return not getattr(options, "tpf_no_cache", False) and \
        getattr(options, "tpf_cache", None) is not False
