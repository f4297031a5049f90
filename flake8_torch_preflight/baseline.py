"""Adopting the linter on code that already has findings: `tpf check --baseline FILE`.

A baseline records today's findings by fingerprint; later runs fail only on findings whose
fingerprint is not in it. A fingerprint must survive edits elsewhere in the file (lines
shifting, a function added above) and re-formatting, so it is built from:

- the rule code;
- the file's path relative to the baseline file's folder (so it works from any directory:
  `cd pkg && tpf check --baseline ../tpf-baseline.json .` names `pkg/train.py` as the root
  run does);
- the enclosing function or method (`Trainer.fit`), or `<module>`;
- the reported statement's text, tokenized, comments and layout dropped
  (`history.append( loss )  # hmm` and `history.append(loss)` are the same statement);
- an occurrence index among findings with the same four parts, so two identical statements
  in one function are two entries.

Line numbers are kept in the file for people reading it, never compared.

A run speaks only for what it checked (`Scope`): a recorded entry is compared, reported as
absent and replaced by `--update-baseline` only when its file was checked in this run (or
lies under a folder that was checked and no longer exists); every other entry is kept as
recorded. A file that could not be checked (a syntax error) keeps its entries.
"""
from __future__ import annotations

import ast
import hashlib
import io
import json
import os
import posixpath
import tokenize
from collections import Counter
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .noqa import TOKENIZE_ERRORS

FORMAT = 1
NEW, UNCHANGED, ABSENT = "new", "unchanged", "absent"
_SKIPPED_TOKENS = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                   tokenize.DEDENT, tokenize.ENDMARKER)


class BaselineError(Exception):
    """A baseline file we cannot read: one line, exit code 2."""


# ---------------------------------------------------------------------------- context

class StatementIndex:
    """For a reported line: the statement's normalised text and its enclosing function."""

    def __init__(self, tree: ast.AST, lines: Sequence[str]) -> None:
        self.lines = lines
        self.by_line: Dict[int, Tuple[ast.stmt, str]] = {}
        self._visit(tree, [])

    def _visit(self, node: ast.AST, scope: List[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                # the innermost statement starting on a line wins (visited last)
                self.by_line[child.lineno] = (child, ".".join(scope) or "<module>")
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self._visit(child, scope + [child.name])
            else:
                self._visit(child, scope)

    def context(self, line: int) -> Tuple[str, str]:
        """(statement text, scope) for a finding reported on `line`."""
        entry = self.by_line.get(line)
        if entry is None:
            text = self.lines[line - 1] if 1 <= line <= len(self.lines) else ""
            return normalise(text), "<module>"
        node, scope = entry
        if hasattr(node, "body"):      # a compound statement: its header line only
            text = self.lines[node.lineno - 1] if node.lineno <= len(self.lines) else ""
        else:
            end = getattr(node, "end_lineno", None) or node.lineno
            text = "".join(self.lines[node.lineno - 1:end])
        return normalise(text), scope


def normalise(text: str) -> str:
    """The tokens of `text`, comments and layout dropped; plain whitespace collapse if it
    does not tokenize (a compound statement's header alone, an unclosed bracket)."""
    words: List[str] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text.strip() + "\n").readline):
            if token.type not in _SKIPPED_TOKENS:
                words.append(token.string)
    except TOKENIZE_ERRORS:
        pass
    if words:
        return " ".join(words)
    return " ".join(text.split("#", 1)[0].split())


# ---------------------------------------------------------------------------- fingerprints

@dataclass(frozen=True)
class Entry:
    fingerprint: str
    code: str
    path: str
    line: int
    scope: str
    statement: str


def relative_path(path: str, baseline_path: str) -> str:
    folder = os.path.dirname(os.path.abspath(baseline_path))
    relative = os.path.relpath(os.path.abspath(path), folder)
    return relative.replace(os.sep, "/")


class Scope:
    """Which recorded entries a run over some paths speaks for."""

    def __init__(self, baseline_path: str, checked: Iterable[str], folders: Iterable[str]) -> None:
        self.folder = os.path.dirname(os.path.abspath(baseline_path))
        self.files = {relative_path(path, baseline_path) for path in checked}
        self.trees = [os.path.abspath(folder) for folder in folders]

    def covers(self, entry: "Entry") -> bool:
        if entry.path in self.files:
            return True
        full = os.path.normpath(os.path.join(self.folder, entry.path))
        return not os.path.lexists(full) and any(_inside(full, tree) for tree in self.trees)

    def split(self, recorded: Sequence["Entry"]) -> Tuple[List["Entry"], List["Entry"]]:
        """(entries this run speaks for, entries kept as recorded)."""
        inside: List[Entry] = []
        outside: List[Entry] = []
        for entry in recorded:
            (inside if self.covers(entry) else outside).append(entry)
        return inside, outside


def _inside(path: str, folder: str) -> bool:
    try:
        return os.path.commonpath([path, folder]) == folder
    except ValueError:   # different drives on Windows
        return False


def fingerprints(items: Iterable[Tuple[str, str, int, str, str]]) -> List[Entry]:
    """(code, relative path, line, scope, statement) per finding -> entries, in order."""
    seen: Counter = Counter()
    out = []
    for code, path, line, scope, statement in items:
        key = (code, path, scope, statement)
        occurrence = seen[key]
        seen[key] += 1
        digest = hashlib.sha256("\0".join((code, path, scope, statement, str(occurrence)))
                                .encode("utf-8")).hexdigest()[:24]
        out.append(Entry(digest, code, path, line, scope, statement))
    return out


# ---------------------------------------------------------------------------- the file

def load(path: str) -> Optional[List[Entry]]:
    """The recorded entries, or None when the file does not exist yet. A byte-order mark is
    accepted (editors on Windows add one); paths are normalised (`normal_path`)."""
    if not os.path.lexists(path):
        return None
    if not os.path.isfile(path):
        raise BaselineError(f"{path}: not a tpf baseline (not a regular file)")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        with open(path, encoding="utf-8-sig") as handle:
            data = json.load(handle)
        if data.get("format") != FORMAT:
            raise BaselineError(f"{path}: not a tpf baseline (format {data.get('format')!r})")
        return [Entry(e["fingerprint"], e["code"], normal_path(e["path"], folder),
                      int(e.get("line", 0)), e.get("scope", ""), e.get("statement", ""))
                for e in data["findings"]]
    except BaselineError:
        raise
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read the baseline: {exc.strerror or exc}") from None
    except RecursionError:
        raise BaselineError(f"{path}: not a tpf baseline (nested too deeply to read)") from None
    except (ValueError, KeyError, TypeError, AttributeError):
        raise BaselineError(f"{path}: not a tpf baseline (expected the JSON that "
                            f"`tpf check --baseline` writes)") from None


def normal_path(recorded: str, folder: str) -> str:
    """A recorded path as tpf writes it: relative to the baseline's folder, `/`-separated,
    no `.` parts (`./pkg/x.py`, `pkg\\x.py` and `/abs/to/root/pkg/x.py` are `pkg/x.py`).
    A `\\` is read as a separator (a file name holding one is not supported)."""
    text = str(recorded)
    if os.path.isabs(text):
        try:
            text = os.path.relpath(text, folder)
        except ValueError:   # another drive on Windows: it names no file under the root
            pass
    return posixpath.normpath(text.replace(os.sep, "/").replace("\\", "/"))


def unmatched_paths(entries: Sequence[Entry], baseline_path: str) -> List[str]:
    """The recorded paths that name no file or folder (a typo, a file deleted since, a
    baseline moved): their entries can match nothing."""
    folder = os.path.dirname(os.path.abspath(baseline_path))
    paths = sorted({entry.path for entry in entries})
    return [p for p in paths if not os.path.lexists(os.path.join(folder, p))]


def dump(entries: Sequence[Entry]) -> str:
    ordered = sorted(entries, key=lambda e: (e.path, e.line, e.code, e.fingerprint))
    payload = {
        "tool": "flake8-torch-preflight",
        "format": FORMAT,
        "comment": "Findings accepted on adoption; `tpf check --baseline` fails only on others. "
                   "Regenerate with --update-baseline.",
        "findings": [{"fingerprint": e.fingerprint, "code": e.code, "path": e.path,
                      "line": e.line, "scope": e.scope, "statement": e.statement}
                     for e in ordered],
    }
    return json.dumps(payload, indent=1, ensure_ascii=False) + "\n"


def classify(today: Sequence[Entry], recorded: Sequence[Entry]) -> Tuple[List[str], List[Entry]]:
    """Per today's entry: new or unchanged; and the recorded entries no longer found."""
    remaining = Counter(e.fingerprint for e in recorded)
    states = []
    for entry in today:
        if remaining[entry.fingerprint] > 0:
            remaining[entry.fingerprint] -= 1
            states.append(UNCHANGED)
        else:
            states.append(NEW)
    absent = []
    for entry in recorded:
        if remaining[entry.fingerprint] > 0:
            remaining[entry.fingerprint] -= 1
            absent.append(entry)
    return states, absent
