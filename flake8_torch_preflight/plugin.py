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

import argparse
import ast
import configparser
from typing import Any, ClassVar, Iterator, List, Optional, Sequence, Tuple

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
            "--tpf-notes", action=_Flag, default=False, parse_from_config=True,
            help="also report flake8-torch-preflight notes (tuning advice; the code is "
                 "correct). Errors and warnings are always reported. "
                 "In [flake8]: tpf-notes = true or false")
        option_manager.add_option(
            "--tpf-no-cache", action=_Flag, default=False, parse_from_config=True,
            help="do not read or write flake8-torch-preflight's cache across runs "
                 "(.tpf_cache/ at the project root); also TPF_NO_CACHE=1")
        option_manager.add_option(
            "--tpf-cache", action=_Flag, default=None, parse_from_config=True,
            help="keep flake8-torch-preflight's findings across runs (the default; "
                 "`tpf-cache = false` in [flake8] turns it off)")

    @classmethod
    def parse_options(cls, options: Any) -> None:
        """A value in [flake8] that is not true or false stops flake8 with one line (its
        own ExecutionError), as a bad `vram-gpu` does."""
        cls.show_notes = notes_wanted(options)
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
    return not option_flag(options, "tpf_no_cache") and \
        option_flag(options, "tpf_cache") is not False


def notes_wanted(options: Any) -> bool:
    return bool(option_flag(options, "tpf_notes"))


class _Flag(argparse.Action):
    """A flag on the command line (`--tpf-notes`, no value) whose `[flake8]` value flake8
    hands over as text: flake8 reads a `store_true` option's value with configparser's
    `getboolean`, and `tpf-notes = 2` ended in its traceback. `option_flag` reads the text."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.pop("nargs", None)
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None):
        setattr(namespace, self.dest, True)


_BOOLEAN_WORDS = configparser.RawConfigParser.BOOLEAN_STATES   # 1/0, yes/no, true/false, on/off


def option_flag(options: Any, name: str) -> Optional[bool]:
    """The option's value: None when unset, True/False from the command line or from one of
    configparser's boolean words in the file; any other word is an option error."""
    value = getattr(options, name, None)
    if value is None or isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in _BOOLEAN_WORDS:
        return _BOOLEAN_WORDS[word]
    from flake8.exceptions import ExecutionError

    raise ExecutionError(f"{name.replace('_', '-')} = {str(value)[:64]} in [flake8]: not "
                         f"true or false (accepted: true/false, yes/no, on/off, 1/0)")
