"""Checking files for `tpf`: reading, select/ignore/noqa as flake8 decides, notebooks, discovery.

Everything a worker process needs is plain data (`Settings`), so `-j N` pickles it; a
`FileResult` comes back with every finding already placed (line and column in the file as
stored, the cell for a notebook) and with what a baseline fingerprint needs.
"""
from __future__ import annotations

import argparse
import ast
import io
import os
import stat
import sys
import tokenize
from dataclasses import dataclass, field, replace
from fnmatch import fnmatch
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from .engine import has_skip_file_comment, lint_file, lint_tree
from .findings import NOTE, Finding
from .noqa import NoqaMap
from .writing import remove_stale_temporaries

# Never walked into: Jupyter's autosave copies of every notebook.
ALWAYS_SKIPPED_FOLDERS = (".ipynb_checkpoints",)
NOTEBOOK_PATTERN = "*.ipynb"


# ---------------------------------------------------------------------------- settings

@dataclass
class Settings:
    """Everything a worker needs to check one file; plain data, so it pickles."""
    select: Optional[List[str]] = None
    ignore: Optional[List[str]] = None
    extend_select: List[str] = field(default_factory=list)
    extend_ignore: List[str] = field(default_factory=list)
    per_file_ignores: List[Tuple[str, List[str]]] = field(default_factory=list)
    disable_noqa: bool = False
    vram_gpu: Optional[str] = None
    vram: bool = True
    notes: bool = False
    cache: bool = True         # the cache across runs (`cache.py`)


class Decider:
    """flake8's select/ignore decision (its own DecisionEngine), plus per-file-ignores."""

    def __init__(self, settings: Settings) -> None:
        from flake8.style_guide import DecisionEngine
        from flake8.utils import normalize_path

        self.settings = settings
        self._engines: Dict[Tuple[str, ...], object] = {}
        self._make = DecisionEngine
        # flake8 makes a per-file pattern with a path separator absolute from the cwd
        self.per_file = [(normalize_path(pattern), codes)
                         for pattern, codes in settings.per_file_ignores]

    def _engine(self, extra: Tuple[str, ...]):
        engine = self._engines.get(extra)
        if engine is None:
            s = self.settings
            options = argparse.Namespace(
                select=s.select, ignore=s.ignore, extend_select=s.extend_select,
                extend_ignore=[*s.extend_ignore, *extra],
                extended_default_select=["TPF"], extended_default_ignore=[])
            engine = self._engines[extra] = self._make(options)
        return engine

    def for_file(self, path: str) -> Callable[[str], bool]:
        matching = [(pattern, codes) for pattern, codes in self.per_file
                    if matches(path, [pattern])]
        extra: Tuple[str, ...] = ()
        if matching:   # flake8 uses the one style guide whose pattern is longest
            extra = tuple(max(matching, key=lambda m: len(m[0]))[1])
        engine = self._engine(extra)
        from flake8.style_guide import Decision
        return lambda code: engine.decision_for(code) is Decision.Selected


def matches(path: str, patterns: Sequence[str]) -> bool:
    """flake8's `utils.matches_filename`: the basename, then the absolute path."""
    if not patterns:
        return False
    basename = os.path.basename(path)
    if basename not in (".", "..") and any(fnmatch(basename, p) for p in patterns):
        return True
    absolute = os.path.abspath(path)
    return any(fnmatch(absolute, p) for p in patterns)


_DECIDER: Dict[str, Decider] = {}


def _decider(settings: Settings) -> Decider:
    key = repr(settings)
    if key not in _DECIDER:
        _DECIDER.clear()
        _DECIDER[key] = Decider(settings)
    return _DECIDER[key]


def keep_predicate(settings: Settings, path: str, lines: Sequence[str],
                   noqa: bool = True) -> Callable[[Finding], bool]:
    """What `tpf` reports: selected codes, notes only when asked, and (with `noqa`) lines
    without a matching `# noqa`."""
    selected = _decider(settings).for_file(path)
    suppressions = NoqaMap(lines)

    def keep(finding: Finding) -> bool:
        if finding.severity == NOTE and not settings.notes:
            return False
        if not selected(finding.code):
            return False
        if not noqa or settings.disable_noqa:
            return True
        return not suppressions.suppressed(finding.line, finding.code)
    return keep


# ---------------------------------------------------------------------------- reading

class FileProblem(Exception):
    """A file we could not check: one line for the user."""


def read_bytes(path: str) -> bytes:
    """The file's bytes; only a regular file is read (a named pipe would block forever)."""
    try:
        if path == "-":
            return sys.stdin.buffer.read()
        # O_NONBLOCK: opening a FIFO must not wait for a writer; no effect on a regular file
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(descriptor, "rb") as handle:
            kind = special_kind(os.fstat(handle.fileno()).st_mode)
            if kind:
                raise FileProblem("is a directory" if kind == "a directory"
                                  else f"not a regular file ({kind})")
            return handle.read()
    except IsADirectoryError:
        raise FileProblem("is a directory") from None
    except OSError as exc:
        raise FileProblem(f"cannot read: {exc.strerror or exc}") from None


_SPECIAL_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"),
                  (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                  (stat.S_ISBLK, "a block device"))


def special_kind(mode: int) -> str:
    """'' for a regular file, else what it is ("a named pipe")."""
    if stat.S_ISREG(mode):
        return ""
    return next((name for test, name in _SPECIAL_KINDS if test(mode)), "not a file")


def decode_source(data: bytes) -> Tuple[str, str]:
    """(text, encoding), honouring a BOM or PEP 263 coding cookie as Python does."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        raise FileProblem(f"cannot decode: {exc.msg}") from None
    try:
        return data.decode(encoding), encoding
    except (UnicodeDecodeError, LookupError) as exc:
        where = f" at byte {exc.start}" if isinstance(exc, UnicodeDecodeError) else ""
        raise FileProblem(f"cannot decode as {encoding}{where}; save it as UTF-8 "
                          f"or declare its encoding") from None


def read_source(path: str) -> Tuple[str, str]:
    return decode_source(read_bytes(path))


def parse_source(source: str, path: str) -> ast.Module:
    """The module's tree; huge displays of constants are left out first (`literals.py`: a
    10 MB list would take 1 GB to parse), every other position kept."""
    from .literals import elide_huge_literals

    try:
        return ast.parse(elide_huge_literals(source), filename=path)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        raise FileProblem(f"syntax error: {exc.msg} ({where})") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise FileProblem(f"cannot parse: {exc}") from None


# ---------------------------------------------------------------------------- one file

@dataclass
class Report:
    """One finding, placed. `line`/`column` (1-based) are in the file as stored: for a
    notebook, the line of its JSON text that holds the source line; `cell`, `cell_line` and
    `cell_column` are the position inside the notebook (0 for a Python file)."""
    finding: Finding
    line: int
    column: int
    cell: int = 0
    cell_line: int = 0
    cell_column: int = 0
    snippet: str = ""          # the reported source line, for the terminal report
    scope: str = "<module>"    # enclosing function, for baseline fingerprints
    statement: str = ""        # normalised statement text, for baseline fingerprints


@dataclass
class FileResult:
    path: str
    reports: List[Report] = field(default_factory=list)
    suppressed: List[Report] = field(default_factory=list)    # selected, silenced by # noqa
    problems: List[str] = field(default_factory=list)
    checked: bool = True      # False when the file could not be checked at all

    @property
    def problem(self) -> Optional[str]:
        return "; ".join(self.problems) if self.problems else None


def check_file(path: str, settings: Settings, data: Optional[bytes] = None,
               display: Optional[str] = None) -> FileResult:
    """Check one file (a notebook when its name ends in .ipynb); never raises for bad input."""
    name = display or path
    result = FileResult(name)
    try:
        if data is None:
            data = read_bytes(path)
        from .notebooks import is_notebook
        if is_notebook(name):
            _check_notebook(name, data, settings, result)
        else:
            source, _ = decode_source(data)
            _check_python(name, source, settings, result)
    except FileProblem as exc:
        result.problems, result.checked = [str(exc)], False
    except RecursionError:
        result.problems, result.checked = ["too deeply nested to analyse"], False
    return result


def _check_python(path: str, source: str, settings: Settings, result: FileResult) -> None:
    lines = source.splitlines(True)
    if not settings.disable_noqa and NoqaMap(lines).skip_file():
        return
    tree = parse_source(source, path)
    kept, suppressed = _select(tree, lines, path, settings)
    if not kept and not suppressed:
        return
    context = _Context(tree, lines)
    result.reports = [context.report(f, f.line, f.col + 1) for f in kept]
    result.suppressed = [context.report(f, f.line, f.col + 1) for f in suppressed]


def _check_notebook(path: str, data: bytes, settings: Settings, result: FileResult) -> None:
    from .notebooks import NotebookProblem, parse_module, read_notebook, rewrite_line_references

    try:
        notebook = read_notebook(path, data)
    except NotebookProblem as exc:
        raise FileProblem(str(exc)) from None
    result.problems = notebook.problems
    lines = notebook.module.splitlines(True)
    if not notebook.cells or (not settings.disable_noqa and NoqaMap(lines).skip_file()):
        return
    try:
        tree = parse_module(notebook)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise FileProblem(f"cannot parse the joined cells: {exc}") from None
    kept, suppressed = _select(tree, lines, path, settings)
    context = _Context(tree, lines)

    def place(finding: Finding) -> Report:
        cell, cell_line = notebook.place(finding.line) or (0, 0)
        finding = replace(finding, what=rewrite_line_references(finding.what, notebook),
                          evidence=rewrite_line_references(finding.evidence, notebook),
                          fix=rewrite_line_references(finding.fix, notebook))
        if not cell:
            return context.report(finding, 1, 1)
        line, column = notebook.file_position(cell, cell_line, finding.col + 1)
        report = context.report(finding, line, column)
        report.cell, report.cell_line, report.cell_column = cell, cell_line, finding.col + 1
        report.snippet = notebook.cell(cell).original[cell_line - 1] \
            if cell_line <= len(notebook.cell(cell).original) else report.snippet
        return report

    result.reports = [place(f) for f in kept]
    result.suppressed = [place(f) for f in suppressed]


def _select(tree: ast.Module, lines: List[str], path: str,
            settings: Settings) -> Tuple[List[Finding], List[Finding]]:
    """(reported, silenced by # noqa) findings of one parsed file, sorted."""
    findings: List[Finding] = []
    if not has_skip_file_comment(lines):
        from .notebooks import is_notebook
        cached = settings.cache and not is_notebook(path)   # a notebook's tree is its cells'
        findings.extend(lint_file(tree, path, "".join(lines)) if cached else lint_tree(tree, path))
    if settings.vram:
        findings.extend(vram_findings(tree, lines, path, settings))
    findings.sort(key=lambda f: (f.line, f.col, f.code, f.message))
    selected = keep_predicate(settings, path, lines, noqa=False)
    kept_by_noqa = keep_predicate(settings, path, lines)
    kept, suppressed = [], []
    for finding in findings:
        if not selected(finding):
            continue
        (kept if kept_by_noqa(finding) else suppressed).append(finding)
    return kept, suppressed


class _Context:
    """Snippet, scope and statement text for reports of one file (built on first use)."""

    def __init__(self, tree: ast.Module, lines: List[str]) -> None:
        self.tree, self.lines = tree, lines
        self._index = None

    def report(self, finding: Finding, line: int, column: int) -> Report:
        from .baseline import StatementIndex

        if self._index is None:
            self._index = StatementIndex(self.tree, self.lines)
        statement, scope = self._index.context(finding.line)
        snippet = self.lines[finding.line - 1] if 1 <= finding.line <= len(self.lines) else ""
        return Report(finding, line, column, snippet=snippet, scope=scope, statement=statement)


def _check_worker(args):
    path, settings = args
    return check_file(path, settings)


# ---------------------------------------------------------------------------- vram plugin

_VRAM_STATE: Dict[str, object] = {}


def vram_findings(tree, lines, path, settings: Settings) -> List[Finding]:
    """TPF100-TPF102 from the optional `vram_estimator` plugin, when installed."""
    module = _VRAM_STATE.get("module", False)
    if module is False:
        try:
            from vram_estimator import flake8_plugin as module  # type: ignore
        except Exception:
            module = None
        _VRAM_STATE["module"] = module
    if module is None:
        return []
    structured = getattr(module, "vram_findings", None)
    try:
        if structured is not None:
            return [_from_record(r) for r in structured(tree, list(lines), path,
                                                        settings.vram_gpu)]
        return _from_checker(module.VramChecker, tree, lines, path, settings)
    except Exception:   # the memory plugin must never stop a run
        return []


def _from_record(record) -> Finding:
    get = (lambda name, i: getattr(record, name)) if hasattr(record, "code") \
        else (lambda name, i: record[i])
    return Finding(int(get("line", 0)), int(get("col", 1)), str(get("code", 2)),
                   str(get("severity", 3)), str(get("what", 4)), str(get("evidence", 5)),
                   str(get("fix", 6)))


def _from_checker(checker, tree, lines, path, settings: Settings) -> List[Finding]:
    """The plugin's flake8 interface, for versions without `vram_findings`."""
    from .reporting import Item

    if _VRAM_STATE.get("gpu", False) != settings.vram_gpu:
        checker.parse_options(argparse.Namespace(vram_gpu=settings.vram_gpu))
        _VRAM_STATE["gpu"] = settings.vram_gpu
    out = []
    for line, col, text, _ in checker(tree=tree, lines=list(lines), filename=path).run():
        code, _, rest = str(text).partition(" ")
        item = Item.from_text(path, line, col + 1, code, rest)
        out.append(Finding(line, col, code, item.severity, item.what or item.text,
                           item.evidence, item.fix))
    return out


# ---------------------------------------------------------------------------- discovery

@dataclass
class Discovery:
    exclude: List[str]
    filename: List[str]
    # (path, why) of what a folder walk matched but will not read: FIFOs, sockets, devices
    skipped: List[Tuple[str, str]] = field(default_factory=list)


class UsageError(Exception):
    """Bad invocation: printed as one line, exit code 2."""


def discover(paths: Sequence[str], discovery: Discovery) -> List[Tuple[str, str]]:
    """(file, the argument it came from): flake8's discovery (explicit files always, the
    `filename` patterns under folders, minus excludes), plus notebooks under folders."""
    files: List[Tuple[str, str]] = []
    patterns = list(discovery.filename) + [NOTEBOOK_PATTERN]
    for path in paths:
        if path == "-":
            files.append((path, path))
            continue
        if not os.path.exists(path):
            raise UsageError(f"{path}: no such file or directory")
        if matches(path, discovery.exclude):
            continue
        if not os.path.isdir(path):
            files.append((path, path))
            continue
        for full in _walk(path, discovery.exclude):
            if matches(full, patterns) and not matches(full, discovery.exclude):
                kind = _special(full)
                if kind:
                    discovery.skipped.append((full, f"not a regular file ({kind})"))
                else:
                    files.append((full, path))
    seen = set()
    found = [f for f in files if not (f[0] in seen or seen.add(f[0]))]
    # what a killed `tpf fix` left next to these files goes at the next run (writing.py)
    for folder in sorted({os.path.dirname(path) or "." for path, _ in found if path != "-"}):
        remove_stale_temporaries(folder)
    return found


def _special(path: str) -> str:
    """What a walked path is when it is no regular file; '' when it is one or cannot be
    stat'ed (a dangling symlink: reading it says why)."""
    try:
        return special_kind(os.stat(path).st_mode)
    except OSError:
        return ""


def _walk(folder: str, exclude: Sequence[str]) -> Iterator[str]:
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in ALWAYS_SKIPPED_FOLDERS
                         and not matches(os.path.join(root, d), exclude))
        for name in sorted(names):
            yield os.path.join(root, name)


# ---------------------------------------------------------------------------- many files

def run_checks(files: Sequence[str], settings: Settings, jobs: int,
               stdin_name: str = "stdin",
               on_result: Optional[Callable[[FileResult], None]] = None) -> List[FileResult]:
    """Results in the order of `files`; `on_result` is called as each one is ready."""
    on_disk = [f for f in files if f != "-"]
    done: Dict[str, FileResult] = {}

    def record(result_path: str, result: FileResult) -> None:
        done[result_path] = result
        if on_result is not None:
            on_result(result)

    if jobs > 1 and len(on_disk) > 1:
        from . import workers

        with workers.worker_pool(min(jobs, len(on_disk))) as pool:
            chunk = max(1, len(on_disk) // (jobs * 8))
            for path, result in zip(on_disk, workers.ordered_map(
                    pool, _check_worker, [(f, settings) for f in on_disk], chunk)):
                record(path, result)
    else:
        for path in on_disk:
            record(path, check_file(path, settings))
    results = []
    for f in files:
        if f == "-":
            try:
                result = check_file("-", settings, read_bytes("-"), display=stdin_name)
            except FileProblem as exc:
                result = FileResult(stdin_name, problems=[str(exc)], checked=False)
            if on_result is not None:
                on_result(result)
            results.append(result)
        else:
            results.append(done[f])
    return results
