"""Jupyter notebooks (`.ipynb`): the code cells, in order, checked as one module.

A notebook is one program run top to bottom (a model defined in cell 2 and trained in
cell 9 is one flow), so its code cells are joined into one module, each cell preceded by a
marker comment line. IPython syntax that is not Python (`%magic`, `%%cell magic`, `!shell`,
`x = !ls`, `obj?` help) is neutralised in place: the line keeps its length and indentation
and becomes `_#...` (a bare name and a comment), so every other line and column is
unchanged and `# noqa` works per line. A cell magic whose body is not Python (`%%bash`,
`%%writefile`, ...) turns the whole cell into comments. A cell that still does not parse
is left out (reported as one line) and the rest is checked.

Positions: `cell` counts code cells from 1, as nbQA does, so `tpf` and
`nbqa flake8` name the same cell. For tools that open the file itself (SARIF viewers, GitHub
annotations, JSON consumers) a finding also carries its line and column in the `.ipynb` text,
where that source line is stored.

Reading uses nbformat (format detection, version conversion). Writing does not: nbformat's
writer re-serialises the whole JSON document (key order, indentation, escapes, the
trailing newline of files written by other tools), so `tpf fix` replaces only the changed
cells' `source` values in the original text, re-using the original JSON text of every
unchanged line and the original's indentation, and refuses to write unless the result parses
to exactly the original document with those sources changed. Outputs, metadata and every
other byte stay identical.
"""
from __future__ import annotations

import ast
import bisect
import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

NOTEBOOK_SUFFIX = ".ipynb"
_MARKER = "# <tpf: notebook cell {}>\n"
_MARKER_RE = re.compile(r"^# <tpf: notebook cell (\d+)>\r?\n?$")
_LINE_END = re.compile(r"(?<=\n)|(?<=\r)(?!\n)")
# Cell magics whose body is Python that runs in the kernel: the body is checked.
PYTHON_BODY_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "memit",
                                     "px", "autopx", "tensorboard_time"})
# `files = !ls`, `out = %sx ls`: an assignment whose value is shell or a magic.
_ASSIGNED_MAGIC = re.compile(r"^[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*\s*=\s*(?=[!%])")
# `obj?`, `?obj`, `obj??`, and the wildcard search `torch.*Tensor?`
_HELP = re.compile(r"^(\?\??[\w.*]+|[\w.*\[\]()'\"]+\?\??)\s*$")


class NotebookProblem(Exception):
    """A notebook we cannot check or write: one line for the user."""


def is_notebook(path: str) -> bool:
    return path.lower().endswith(NOTEBOOK_SUFFIX)


# ---------------------------------------------------------------------------- reading

@dataclass
class Cell:
    number: int                 # among code cells, from 1 (nbQA's numbering)
    index: int                  # position in the notebook's `cells` list
    original: List[str]         # the cell's lines as stored (last one may lack "\n")
    neutral: List[str]          # the same lines with IPython syntax neutralised
    first_line: int = 0         # module line of the cell's first line (after its marker)
    parses: bool = True
    problem: str = ""


@dataclass
class Notebook:
    path: str
    text: str                   # the .ipynb file as read (decoded UTF-8)
    cells: List[Cell]
    module: str                 # the code cells as one module
    line_map: Dict[int, Tuple[int, int]]   # module line -> (cell number, line in cell)
    writable: bool = True       # nbformat 4 as stored (older formats are read converted)
    _layout: Optional["_Layout"] = field(default=None, repr=False)

    @property
    def problems(self) -> List[str]:
        return [c.problem for c in self.cells if c.problem]

    def cell(self, number: int) -> Cell:
        return self.cells[number - 1]

    def place(self, module_line: int) -> Optional[Tuple[int, int]]:
        """(cell number, line in cell) of a module line; None for a marker line."""
        return self.line_map.get(module_line)

    def file_position(self, cell_number: int, line: int, column: int) -> Tuple[int, int]:
        """1-based (line, column) in the .ipynb text of a cell position (column 1-based)."""
        layout = self.layout()
        return layout.position(self.cell(cell_number).index, line, column)

    def layout(self) -> "_Layout":
        if self._layout is None:
            self._layout = _Layout(self.text)
        return self._layout


def read_notebook(path: str, data: bytes) -> Notebook:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise NotebookProblem(f"not a notebook: cannot decode as UTF-8 at byte {exc.start}") \
            from None
    return parse_notebook(path, text)


def parse_notebook(path: str, text: str) -> Notebook:
    import nbformat

    try:
        raw = json.loads(text)
    except ValueError:
        raise NotebookProblem("not a notebook: the file is not JSON") from None
    major = _check_structure(raw)
    node = raw
    if major != 4:   # older formats are read through nbformat's conversion
        try:
            node = nbformat.convert(nbformat.reader.reads(text), 4)
        except Exception:   # nbformat's own errors, or its code meeting a malformed file
            raise NotebookProblem(f"not a notebook: nbformat cannot read it as version "
                                  f"{major} and convert it") from None
        if not isinstance(node.get("cells"), list):
            raise NotebookProblem("not a notebook: it has no list of cells")
    cells: List[Cell] = []
    language = _language(node)
    if language not in ("python", ""):   # not checked, and said so: never "0 findings"
        raise NotebookProblem(f"not a Python notebook (kernel language: {language[:40]}); "
                              f"skipped, not checked")
    for index, cell in enumerate(node["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(str(part) for part in source)
        original = split_lines(str(source))
        cells.append(Cell(len(cells) + 1, index, original, neutralise(original)))
    return _assemble(path, text, cells, major == 4)


def _check_structure(raw: object) -> int:
    """The nbformat major version, after checking what tpf reads of a version 4 notebook;
    a NotebookProblem naming the JSON path of the first thing that is wrong."""
    def wrong(where: str, value: object, expected: str) -> NotebookProblem:
        return NotebookProblem(f"not a notebook: {where} is {_kind(value)}, not {expected}")

    if not isinstance(raw, dict):
        raise NotebookProblem(f"not a notebook: the JSON is {_kind(raw)}, not an object")
    major = raw.get("nbformat")
    if not isinstance(major, int) or isinstance(major, bool):
        raise (NotebookProblem("not a notebook: no nbformat version number") if major is None
               else wrong("nbformat", major, "a version number"))
    if major != 4:
        return major
    if "metadata" in raw and not isinstance(raw["metadata"], dict):
        raise wrong("metadata", raw["metadata"], "an object")
    cells = raw.get("cells")
    if not isinstance(cells, list):
        raise (NotebookProblem("not a notebook: it has no list of cells") if "cells" not in raw
               else wrong("cells", cells, "a list"))
    for index, cell in enumerate(cells):
        _check_cell(index, cell, wrong)
    return major


def _check_cell(index: int, cell: object, wrong) -> None:
    where = f"cells[{index}]"
    if not isinstance(cell, dict):
        raise wrong(where, cell, "an object")
    kind = cell.get("cell_type")
    if kind is None:
        raise NotebookProblem(f"not a notebook: {where} has no cell_type")
    if not isinstance(kind, str):
        raise wrong(f"{where}.cell_type", kind, "a string")
    if kind != "code":
        return
    if "source" not in cell:
        raise NotebookProblem(f"not a notebook: {where} (a code cell) has no source")
    source = cell["source"]
    if isinstance(source, list):
        for number, part in enumerate(source):
            if not isinstance(part, str):
                raise wrong(f"{where}.source[{number}]", part, "text")
    elif not isinstance(source, str):
        raise wrong(f"{where}.source", source, "text or a list of lines")


def _kind(value: object) -> str:
    """A JSON value's kind, in JSON's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def _language(node) -> str:
    def table(parent, key):   # metadata is free-form: anything but an object counts as absent
        value = parent.get(key) if isinstance(parent, dict) else None
        return value if isinstance(value, dict) else {}

    info, kernel = table(table(node, "metadata"), "language_info"), \
        table(table(node, "metadata"), "kernelspec")
    language = info.get("name") or kernel.get("language") or ""
    return str(language).lower()


def split_lines(text: str) -> List[str]:
    """Lines with their endings, split where Python's tokenizer splits (not at \\f, \\v)."""
    if not text:
        return []
    parts = _LINE_END.split(text)
    return [p for p in parts if p]


def _assemble(path: str, text: str, cells: List[Cell], writable: bool) -> Notebook:
    out: List[str] = []
    line_map: Dict[int, Tuple[int, int]] = {}
    for cell in cells:
        out.append(_MARKER.format(cell.number))
        cell.first_line = len(out) + 1
        lines = _terminated(cell.neutral)
        problem = _parse_problem("".join(lines))
        if problem:
            cell.parses, cell.problem = False, f"cell {cell.number}: {problem}"
            lines = ["\n"] * len(lines)     # left out, same line count
        for number, line in enumerate(lines, 1):
            out.append(line)
            line_map[len(out)] = (cell.number, number)
    return Notebook(path, text, cells, "".join(out), line_map, writable)


def _terminated(lines: Sequence[str]) -> List[str]:
    lines = list(lines)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"
    return lines


def _parse_problem(source: str) -> str:
    try:
        _tree(source, "<cell>")
    except SyntaxError as exc:
        return f"syntax error: {exc.msg}" + (f" (line {exc.lineno})" if exc.lineno else "")
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"cannot parse: {exc}"
    return ""


def parse_module(notebook: Notebook) -> ast.Module:
    """The joined module's tree."""
    return _tree(notebook.module, notebook.path)


def _tree(source: str, filename: str) -> ast.Module:
    """`ast.parse` with top-level `await` allowed, as IPython allows it in a cell."""
    flags = ast.PyCF_ONLY_AST | getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
    return compile(source, filename, "exec", flags=flags, dont_inherit=True)


# ---------------------------------------------------------------------------- IPython syntax

def neutralise(lines: Sequence[str]) -> List[str]:
    """The cell with IPython-only lines replaced by same-length Python (see module doc)."""
    out = list(lines)
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    cell_magic = first is not None and lines[first].lstrip().startswith("%%")
    if cell_magic:
        name = re.match(r"%%\s*(\w*)", lines[first].lstrip()).group(1)
        if name not in PYTHON_BODY_CELL_MAGICS:
            return [_comment(line) for line in lines]
        out[first] = _blank_expression(lines[first])
    state = _ScanState()
    for i, line in enumerate(lines):
        if cell_magic and i == first:
            continue
        if state.at_statement_start():
            replaced = _neutral_line(line)
            if replaced is not None:
                out[i] = replaced
                continue
        state.scan(line)
    return out


def _neutral_line(line: str) -> Optional[str]:
    body = line.lstrip(" \t")
    indent = line[:len(line) - len(body)]
    stripped = body.rstrip("\r\n")
    if not stripped or stripped.startswith("#"):
        return None
    if stripped[0] in "%!":
        return _blank_expression(line)
    assigned = _ASSIGNED_MAGIC.match(stripped)
    if assigned:
        head = indent + stripped[:assigned.end()]
        return head + _blank_expression(line[len(head):])
    if "#" not in stripped and _HELP.match(stripped):
        return _blank_expression(line)
    return None


def _blank_expression(text: str) -> str:
    """`%time f(x)` -> `_#ime f(x)`: a bare name and a comment, same length and indent."""
    body = text.lstrip(" \t")
    indent = text[:len(text) - len(body)]
    ending = body[len(body.rstrip("\r\n")):]
    core = body.rstrip("\r\n")
    if not core:
        return text
    return indent + ("_" if len(core) == 1 else "_#" + core[2:]) + ending


def _comment(line: str) -> str:
    core = line.rstrip("\r\n")
    if not core:
        return line
    return "#" + core[1:] + line[len(core):]


class _ScanState:
    """Where a line starts: inside a string, brackets or a backslash continuation, or not.

    Only to tell a `%`/`!` that begins a statement (IPython syntax) from one inside an
    expression (`(a\\n % b)`) or a string; Python's own tokenizer cannot run on text that
    still holds IPython syntax.
    """

    def __init__(self) -> None:
        self.quote: Optional[str] = None
        self.depth = 0
        self.continued = False

    def at_statement_start(self) -> bool:
        return self.quote is None and self.depth == 0 and not self.continued

    def scan(self, line: str) -> None:
        text = line.rstrip("\r\n")
        self.continued = False
        i, n = 0, len(text)
        while i < n:
            char = text[i]
            if self.quote is not None:
                if char == "\\":
                    i += 2
                    continue
                if text.startswith(self.quote, i):
                    i += len(self.quote)
                    self.quote = None
                    continue
                i += 1
                continue
            if char == "#":
                break
            if char in "'\"":
                triple = text[i:i + 3]
                self.quote = triple if triple in ("'''", '"""') else char
                i += len(self.quote)
                continue
            if char in "([{":
                self.depth += 1
            elif char in ")]}":
                self.depth = max(self.depth - 1, 0)
            elif char == "\\" and i == n - 1:
                self.continued = True
            i += 1
        if self.quote in ("'", '"') and not text.endswith("\\"):
            self.quote = None   # an unterminated one-line string ends with its line


# ---------------------------------------------------------------------------- messages

_LINE_REF = re.compile(r"(?<![\w./])line (\d+)\b")


def rewrite_line_references(text: str, notebook: Notebook) -> str:
    """`line 88` in a message (a module line) -> `cell 9 line 4`."""
    def replace(match: "re.Match[str]") -> str:
        place = notebook.place(int(match.group(1)))
        if place is None:
            return match.group(0)
        return f"cell {place[0]} line {place[1]}"

    prefix_file = re.compile(r"\.py(?:\s|,|:)*$")
    out, last = [], 0
    for match in _LINE_REF.finditer(text):
        if prefix_file.search(text[max(0, match.start() - 12):match.start()]):
            continue   # `in utils.py line 12`: another file's line
        out.append(text[last:match.start()])
        out.append(replace(match))
        last = match.end()
    out.append(text[last:])
    return "".join(out)


# ---------------------------------------------------------------------------- the JSON text

_WS = re.compile(r"[ \t\n\r]*")
_RAW_CHAR = re.compile(r"\\u[0-9a-fA-F]{4}|\\.|[^\\]", re.S)


class _Layout:
    """Where each code cell's `source` sits in the notebook's JSON text.

    Built with the standard library's JSON decoder (`raw_decode` gives where each value
    ends); only the structure around `cells` and `source` is walked here.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.decoder = json.JSONDecoder()
        self.line_starts = [0] + [m.end() for m in re.finditer(r"\n", text)]
        self.sources: Dict[int, Tuple[int, int]] = {}        # cell index -> value span
        self.elements: Dict[int, List[Tuple[int, int]]] = {}  # cell index -> string spans
        start = self._ws(0)
        for key, value_start, _ in self._members(start):
            if key == "cells":
                for index, (cell_start, _) in enumerate(self._items(value_start)):
                    self._cell(index, cell_start)

    # structure
    def _ws(self, i: int) -> int:
        return _WS.match(self.text, i).end()

    def _skip(self, i: int) -> int:
        _, end = self.decoder.raw_decode(self.text, i)
        return end

    def _members(self, i: int):
        text = self.text
        if text[i] != "{":
            raise NotebookProblem("the notebook's JSON is not an object where one is expected")
        i = self._ws(i + 1)
        if text[i] == "}":
            return
        while True:
            key, i = self.decoder.raw_decode(text, i)
            i = self._ws(i)
            i = self._ws(i + 1)          # the colon
            end = self._skip(i)
            yield key, i, end
            i = self._ws(end)
            if text[i] == ",":
                i = self._ws(i + 1)
                continue
            return

    def _items(self, i: int):
        text = self.text
        if text[i] != "[":
            raise NotebookProblem("the notebook's JSON is not a list where one is expected")
        i = self._ws(i + 1)
        if text[i] == "]":
            return
        while True:
            end = self._skip(i)
            yield i, end
            i = self._ws(end)
            if text[i] == ",":
                i = self._ws(i + 1)
                continue
            return

    def _cell(self, index: int, start: int) -> None:
        if self.text[start] != "{":
            return
        for key, value_start, value_end in self._members(start):
            if key != "source":
                continue
            self.sources[index] = (value_start, value_end)
            if self.text[value_start] == "[":
                self.elements[index] = list(self._items(value_start))
            else:
                self.elements[index] = [(value_start, value_end)]

    # positions
    def position(self, index: int, line: int, column: int) -> Tuple[int, int]:
        """1-based (line, column) in the text of a cell's (line, column)."""
        offset = self._offset(index, line, column)
        if offset is None:
            span = self.sources.get(index, (0, 0))
            offset = span[0]
        row = bisect.bisect_right(self.line_starts, offset) - 1
        return row + 1, offset - self.line_starts[row] + 1

    def _offset(self, index: int, line: int, column: int) -> Optional[int]:
        """The raw offset of decoded character (line, column) of the cell's source."""
        current_line, current_col = 1, 1
        for start, end in self.elements.get(index, ()):
            if self.text[start] != '"':
                continue
            for match in _RAW_CHAR.finditer(self.text, start + 1, end - 1):
                if current_line == line and current_col == column:
                    return match.start()
                char = self.decoder.decode('"' + match.group(0) + '"') \
                    if match.group(0).startswith("\\") else match.group(0)
                if char in ("\n", "\r"):
                    current_line, current_col = current_line + 1, 1
                else:
                    current_col += 1
            if current_line == line and current_col == column:
                return end - 1
        return None


# ---------------------------------------------------------------------------- fixing

def split_fixed_module(notebook: Notebook, fixed: str) -> Dict[int, List[str]]:
    """Cell number -> its new lines (IPython syntax restored) for every cell a fix changed."""
    above: List[str] = []          # inserted above the first cell (an import): cell 1's
    parts: Dict[int, List[str]] = {}
    current: Optional[int] = None
    for line in split_lines(fixed):
        marker = _MARKER_RE.match(line)
        if marker:
            current = int(marker.group(1))
            if current in parts:
                raise NotebookProblem("a fix moved code across cells; nothing written")
            parts[current] = []
        elif current is None:
            above.append(line)
        else:
            parts[current].append(line)
    if list(parts) != [c.number for c in notebook.cells]:
        raise NotebookProblem("a fix moved code across cells; nothing written")
    if above and notebook.cells:
        _place_added_lines(notebook, parts, above, 0)
    for position, cell in enumerate(notebook.cells):
        added = _added_on_top(cell, parts[cell.number])
        if added:   # an import LibCST put after the header comment, above a cell magic
            parts[cell.number] = parts[cell.number][len(added):]
            _place_added_lines(notebook, parts, added, position)
    changed: Dict[int, List[str]] = {}
    for cell in notebook.cells:
        new = parts[cell.number]
        old = _module_lines(cell)
        if new == old:
            continue
        if not cell.parses:
            raise NotebookProblem(f"a fix changed cell {cell.number}, which does not parse")
        changed[cell.number] = _restore(cell, old, new)
    return changed


def _module_lines(cell: Cell) -> List[str]:
    """The cell's lines as they stand in the joined module (blank when it does not parse)."""
    lines = _terminated(cell.neutral)
    return lines if cell.parses else ["\n"] * len(lines)


# Cell magics that run their body in the notebook's namespace: an import there is kept.
NAMESPACE_CELL_MAGICS = frozenset({"time", "capture"})


def _added_on_top(cell: Cell, new: List[str]) -> List[str]:
    """Lines a fix put at the very top of a cell that cannot take them there (a cell
    magic's first line, a cell that does not parse); [] otherwise."""
    old = _module_lines(cell)
    extra = len(new) - len(old)
    if extra <= 0 or new[extra:] != old or (cell.parses and not _cell_magic(cell)):
        return []
    return new[:extra]


def _place_added_lines(notebook: Notebook, parts: Dict[int, List[str]],
                       above: List[str], start: int) -> None:
    """Lines a fix put above the first cell (`import torch`) go where IPython runs them
    before any other Python: into the first cell whose body is Python, after its cell magic
    line when it has one (`%%time`, `%%capture`: a cell magic must stay the first line). A
    cell magic that keeps no names (`%%timeit`) or runs no Python (`%%bash`) is passed
    over, unless the fix changed that cell (then the import would come too late)."""
    for cell in notebook.cells[start:]:
        magic = _cell_magic(cell)
        if not cell.parses or (magic and magic not in NAMESPACE_CELL_MAGICS):
            if parts[cell.number] != _module_lines(cell):
                raise NotebookProblem(f"a fix needs {above[0].strip()!r} before cell "
                                      f"{cell.number}, whose %%{magic} would not keep it; "
                                      f"nothing written")
            continue
        at = 0
        if magic:
            at = next(i for i, line in enumerate(cell.original) if line.strip()) + 1
        parts[cell.number][at:at] = above
        return
    raise NotebookProblem("a fix needs an import, and no cell runs plain Python; "
                          "nothing written")


def _cell_magic(cell: Cell) -> str:
    """The cell magic's name (`time` for `%%time`), or ''."""
    first = next((line for line in cell.original if line.strip()), "")
    match = re.match(r"\s*%%\s*(\w*)", first)
    return match.group(1) if match else ""


def _restore(cell: Cell, old: List[str], new: List[str]) -> List[str]:
    """The new neutral lines with the original IPython lines put back, and the original's
    missing final newline kept missing."""
    original = _terminated(cell.original)
    out: List[str] = []
    kinds: List[str] = []      # per line of `out`: _ADDED, _LINE_MAGIC or ""
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            out.extend(original[a0:a1])
            kinds.extend(_LINE_MAGIC if old[k] != original[k] and _is_line_magic(original[k])
                         else "" for k in range(a0, a1))
            continue
        if any(old[k] != original[k] for k in range(a0, a1)):
            raise NotebookProblem(f"a fix changed an IPython line in cell {cell.number}; "
                                  f"nothing written")
        out.extend(new[b0:b1])
        kinds.extend([_ADDED] * (b1 - b0))
    _imports_after_line_magics(out, kinds)
    if cell.original and not cell.original[-1].endswith(("\n", "\r")) and out \
            and out[-1].endswith("\n"):
        out[-1] = out[-1][:-1]
    return out


_ADDED, _LINE_MAGIC = "added", "line magic"
_IMPORT = re.compile(r"(?:import|from)\s")


def _is_line_magic(line: str) -> bool:
    """`!pip install torch`, `%pip install torch`, `%matplotlib inline` at the top level."""
    return line.startswith(("!", "%")) and not line.startswith("%%")


def _imports_after_line_magics(lines: List[str], kinds: List[str]) -> None:
    """An import a fix added right above top-level `!pip install ...` / `%magic` lines goes
    below them, with the cell's own imports: the install must run before the import does.
    (The fixes place an import by Python's rules, where a shell line is just a statement.)"""
    i = 0
    while i < len(lines):
        if kinds[i] != _ADDED or not _IMPORT.match(lines[i]):
            i += 1
            continue
        j = i
        while j < len(lines) and kinds[j] == _ADDED and _IMPORT.match(lines[j]):
            j += 1
        end = j
        for k in range(j, len(lines)):   # line magics, blank lines between them allowed
            if kinds[k] == _LINE_MAGIC:
                end = k + 1
            elif lines[k].strip():
                break
        lines[i:end] = lines[j:end] + lines[i:j]
        kinds[i:end] = kinds[j:end] + kinds[i:j]
        i = end if end > j else j


def rewrite_sources(notebook: Notebook, changed: Dict[int, List[str]]) -> str:
    """The notebook text with the changed cells' `source` values replaced, nothing else."""
    layout = notebook.layout()
    text = notebook.text
    ascii_only = "\\u" in text and all(ord(c) < 128 for c in text)
    edits: List[Tuple[int, int, str]] = []
    expected = json.loads(text)
    for number, lines in changed.items():
        cell = notebook.cell(number)
        if cell.index not in layout.sources:
            raise NotebookProblem(f"cannot find the source of cell {number}; nothing written")
        start, end = layout.sources[cell.index]
        new_text = "".join(lines)
        if text[start] == "[":
            value = new_text.splitlines(True)
            rendered = _render_list(layout, cell.index, value, ascii_only)
        else:
            value = new_text
            rendered = json.dumps(new_text, ensure_ascii=ascii_only)
        expected["cells"][cell.index]["source"] = value
        edits.append((start, end, rendered))
    out = text
    for start, end, rendered in sorted(edits, reverse=True):
        out = out[:start] + rendered + out[end:]
    try:
        ok = json.loads(out) == expected
    except ValueError:
        ok = False
    if not ok:
        raise NotebookProblem("the rewritten notebook would not match the original outside "
                              "the fixed cells; nothing written")
    return out


def _render_list(layout: _Layout, index: int, lines: List[str], ascii_only: bool) -> str:
    """A JSON list of lines laid out like the original list (indentation, separators)."""
    text = layout.text
    start, end = layout.sources[index]
    elements = layout.elements.get(index) or []
    if not elements:
        opening, separator, closing = "\n", ",\n", "\n"
    else:
        opening = text[start + 1:elements[0][0]]
        closing = text[elements[-1][1]:end - 1]
        separator = text[elements[0][1]:elements[1][0]] if len(elements) > 1 \
            else "," + opening
    known = {}
    for s, e in elements:
        known.setdefault(json.loads(text[s:e]), text[s:e])
    if not lines:
        return "[]"
    rendered = [known.get(line) or json.dumps(line, ensure_ascii=ascii_only) for line in lines]
    return "[" + opening + separator.join(rendered) + closing + "]"
