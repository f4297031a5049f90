"""Source text, AST positions and edits for the injected-bug benchmark (benchmarks/mutants.py).

The operators find their sites with `ast` and change the text, never the tree: the mutant keeps
the file's own formatting and comments, so what is linted is the original file with one bug in
it. Positions are 1-based lines and character columns (`ast` gives UTF-8 byte columns; they are
converted here). Everything here is plain syntax: whether a site is "really the bug" is decided
by the operators without asking the analysis under test.
"""
from __future__ import annotations

import ast
import re
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

# A syntax helper shared with the package (plain `ast`, not the analysis under test).
from flake8_torch_preflight.analysis.core.astutil import dotted

Pos = Tuple[int, int]            # (line, character column)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
SCOPES = FUNCTIONS + (ast.ClassDef, ast.Lambda)
LOOPS = (ast.For, ast.AsyncFor, ast.While)
CONDITIONAL = (ast.If, ast.IfExp, ast.BoolOp, ast.ExceptHandler, ast.comprehension) + tuple(
    getattr(ast, name) for name in ("Match", "match_case") if hasattr(ast, name))


class Edit(NamedTuple):
    start: Pos
    end: Pos
    text: str


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def offset(pos: Pos) -> int:
        line, col = pos
        return offsets[line - 1] + col if line <= len(lines) else offsets[-1]

    out = text
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        out = out[:offset(edit.start)] + edit.text + out[offset(edit.end):]
    return out


def line_mapper(edits: Sequence[Edit]) -> Callable[[int], int]:
    """Original line -> line in the mutant. A line after an edit moves by the lines the edit
    added or removed; a line strictly inside an edit maps to where the edit starts."""
    spans = [(e.start[0], e.end[0], e.text.count("\n") - (e.end[0] - e.start[0])) for e in edits]

    def mapped(line: int) -> int:
        for start, end, _ in spans:
            if start < line < end:
                line = start
        return line + sum(delta for _, end, delta in spans if end <= line)

    return mapped


class Source:
    """One file: its text, tree, parent links and imports, parsed once for every operator."""

    def __init__(self, text: str, path: str = "<mutant>") -> None:
        self.text = text
        self.path = path
        self.lines = text.splitlines(keepends=True)
        self.tree = ast.parse(text, filename=path)
        self.nodes: List[ast.AST] = list(ast.walk(self.tree))   # walked once, for every operator
        self.calls: List[ast.Call] = [n for n in self.nodes if isinstance(n, ast.Call)]
        self.loops: List[ast.AST] = [n for n in self.nodes if isinstance(n, LOOPS)]
        self.parents: Dict[ast.AST, ast.AST] = {}
        for parent in self.nodes:
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent
        self.imports = import_table(self.nodes)
        self.functions = local_functions(self.nodes)
        self._helper_memo: Dict[tuple, object] = {}

    # ---------------------------------------------------------------- positions
    def char_col(self, line: int, byte_col: int) -> int:
        text = self.lines[line - 1] if line <= len(self.lines) else ""
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace"))

    def start(self, node: ast.AST) -> Pos:
        return node.lineno, self.char_col(node.lineno, node.col_offset)

    def end(self, node: ast.AST) -> Pos:
        return node.end_lineno, self.char_col(node.end_lineno, node.end_col_offset)

    def segment(self, node: ast.AST) -> str:
        (l1, c1), (l2, c2) = self.start(node), self.end(node)
        if l1 == l2:
            return self.lines[l1 - 1][c1:c2]
        return "".join([self.lines[l1 - 1][c1:]] + self.lines[l1:l2 - 1] + [self.lines[l2 - 1][:c2]])

    def memo(self, key, compute: Callable[[], object]):
        """A value computed once per file (the operators ask the same questions of a loop)."""
        if key not in self._helper_memo:
            self._helper_memo[key] = compute()
        return self._helper_memo[key]

    def local_calls(self, node: ast.AST) -> List[ast.Call]:
        return self.memo(("calls", id(node)), lambda: list(local_calls(node)))

    def indent_of(self, line: int) -> str:
        text = self.lines[line - 1]
        return text[:len(text) - len(text.lstrip())]

    def owns_lines(self, stmt: ast.stmt) -> bool:
        """The statement alone fills its lines (no `a; b`, nothing after it but a comment)."""
        before = self.lines[stmt.lineno - 1][:self.start(stmt)[1]]
        after = self.lines[stmt.end_lineno - 1][self.end(stmt)[1]:]
        return not before.strip() and (not after.strip() or after.strip().startswith("#"))

    # ---------------------------------------------------------------- names
    def qualname(self, expr: ast.AST) -> Optional[str]:
        """`nn.CrossEntropyLoss` -> `torch.nn.CrossEntropyLoss` through the file's imports."""
        head, dot, rest = (dotted(expr) or "").partition(".")
        imported = self.imports.get(head)
        return None if imported is None else imported + dot + rest

    def imports_torch(self) -> bool:
        return any(q == "torch" or q.startswith("torch.") for q in self.imports.values())

    def torch_alias(self) -> Optional[str]:
        return next((n for n, q in sorted(self.imports.items()) if q == "torch"), None)

    def functional_alias(self) -> Optional[str]:
        return next((n for n, q in sorted(self.imports.items()) if q == "torch.nn.functional"),
                    None)

    # ---------------------------------------------------------------- structure
    def parent(self, node: ast.AST) -> Optional[ast.AST]:
        return self.parents.get(node)

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        node = self.parents.get(node)
        while node is not None:
            yield node
            node = self.parents.get(node)

    def enclosing_scope(self, node: ast.AST) -> ast.AST:
        return next((a for a in self.ancestors(node) if isinstance(a, SCOPES)), self.tree)

    def enclosing_function(self, node: ast.AST) -> Optional[ast.AST]:
        scope = self.enclosing_scope(node)
        return scope if isinstance(scope, FUNCTIONS) else None

    def enclosing_loops(self, node: ast.AST) -> List[ast.AST]:
        """Loops around `node` inside its own function, innermost first."""
        loops = []
        for a in self.ancestors(node):
            if isinstance(a, SCOPES):
                break
            if isinstance(a, LOOPS) and not _in_loop_header(a, node, self):
                loops.append(a)
        return loops

    def conditional_within(self, node: ast.AST, outer: ast.AST) -> bool:
        """An `if`, `except`, `match`, nested loop or short-circuit sits between `node` and
        `outer`: `node` may not run on every iteration of `outer` (`with`/`try` bodies do)."""
        for a in self.ancestors(node):
            if a is outer:
                return False
            if isinstance(a, CONDITIONAL + LOOPS + SCOPES):
                return True
        return True

    def block_of(self, stmt: ast.stmt) -> Tuple[ast.AST, str, List[ast.stmt]]:
        parent = self.parents[stmt]
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and stmt in block:
                return parent, field, block
        raise ValueError("statement outside a block")

    def statement_of(self, node: ast.AST) -> ast.stmt:
        while not isinstance(node, ast.stmt):
            node = self.parents[node]
        return node

    # ---------------------------------------------------------------- helpers in this file
    def local_callee(self, call: ast.Call) -> Optional[ast.AST]:
        """The function of this file that `f(...)` or `self.f(...)` calls, if unambiguous."""
        func = call.func
        if isinstance(func, ast.Name):
            found = self.functions.get(func.id)
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                and func.value.id in ("self", "cls"):
            found = self.functions.get(func.attr)
        else:
            return None
        return found[0] if found and len(found) == 1 else None

    def reaches(self, node: ast.AST, predicate: Callable[[ast.Call], bool]) -> bool:
        """Some call under `node` (not in nested scopes) satisfies `predicate`, directly or
        in a function of this file that it calls (followed transitively)."""
        key = ("reaches:" + predicate.__name__, id(node))
        if key not in self._helper_memo:
            self._helper_memo[key] = any(self.call_reaches(call, predicate)
                                         for call in self.local_calls(node))
        return self._helper_memo[key]

    def call_reaches(self, call: ast.Call, predicate: Callable[[ast.Call], bool],
                     _seen: Optional[set] = None) -> bool:
        if predicate(call):
            return True
        callee = self.local_callee(call)
        if callee is None:
            return False
        key = (predicate.__name__, id(callee))
        if key in self._helper_memo:
            return self._helper_memo[key]
        seen = _seen if _seen is not None else set()
        if id(callee) in seen:
            return False
        seen.add(id(callee))
        result = any(self.call_reaches(inner, predicate, seen)
                     for inner in self.local_calls(callee))
        self._helper_memo[key] = result
        return result


def _in_loop_header(loop: ast.AST, node: ast.AST, src: Source) -> bool:
    """`node` is in the loop's iterable/target/test, not its body."""
    header = [getattr(loop, "iter", None), getattr(loop, "target", None), getattr(loop, "test", None)]
    for a in [node] + list(src.ancestors(node)):
        if a is loop:
            return False
        if any(a is h for h in header if h is not None):
            return True
    return False


def import_table(nodes: Sequence[ast.AST]) -> Dict[str, str]:
    names: Dict[str, str] = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    head = alias.name.split(".", 1)[0]
                    names.setdefault(head, head)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                if alias.name != "*":
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def local_functions(nodes: Sequence[ast.AST]) -> Dict[str, List[ast.AST]]:
    table: Dict[str, List[ast.AST]] = {}
    for node in nodes:
        if isinstance(node, FUNCTIONS):
            table.setdefault(node.name, []).append(node)
    return table


def walk_local(node: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk` that does not enter nested functions, classes or lambdas."""
    todo = [node]
    while todo:
        current = todo.pop()
        yield current
        for child in ast.iter_child_nodes(current):
            if not isinstance(child, SCOPES):
                todo.append(child)


def local_calls(node: ast.AST) -> Iterator[ast.Call]:
    return (n for n in walk_local(node) if isinstance(n, ast.Call))


def method_call(call: ast.AST, *names: str) -> bool:
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr in names)


def receiver_text(call: ast.Call) -> Optional[str]:
    return dotted(call.func.value) if isinstance(call.func, ast.Attribute) else None


def keyword(call: ast.Call, name: str) -> Optional[ast.keyword]:
    return next((k for k in call.keywords if k.arg == name), None)


def is_literal(node: Optional[ast.AST], value) -> bool:
    return isinstance(node, ast.Constant) and node.value is value if value in (True, False, None) \
        else isinstance(node, ast.Constant) and node.value == value


NAME_WORDS = re.compile(r"[A-Za-z][a-z]*|[0-9]+")


def name_words(text: str) -> List[str]:
    """`train_loader` -> ['train', 'loader']; `netD` -> ['net', 'D']."""
    return [w.lower() for w in NAME_WORDS.findall(text.replace(".", "_"))]


# ---------------------------------------------------------------------------------- edits

def delete_statement(src: Source, stmt: ast.stmt) -> List[Edit]:
    """Remove `stmt`; a block left empty gets `pass`, so the file still parses."""
    _, _, block = src.block_of(stmt)
    if len(block) == 1:
        return [Edit(src.start(stmt), src.end(stmt), "pass")]
    if src.owns_lines(stmt):
        end_line = stmt.end_lineno
        return [Edit((stmt.lineno, 0), (end_line + 1, 0), "")]
    return [Edit(src.start(stmt), src.end(stmt), "pass")]


def statement_text(src: Source, stmt: ast.stmt, indent: str) -> str:
    """The statement's lines re-indented to `indent` (continuation lines keep their offset)."""
    own = src.indent_of(stmt.lineno)
    lines = [src.lines[i - 1] for i in range(stmt.lineno, stmt.end_lineno + 1)]
    first_col = src.start(stmt)[1]
    lines[0] = lines[0][first_col:]
    lines[-1] = lines[-1][:src.end(stmt)[1] - (first_col if len(lines) == 1 else 0)] + "\n"
    out = [indent + lines[0]]
    for line in lines[1:]:
        out.append(indent + line[len(own):] if line.startswith(own) else line)
    return "".join(out)


def insert_before(src: Source, stmt: ast.stmt, text: str) -> List[Edit]:
    """Insert whole lines (already indented) before the line of `stmt`."""
    return [Edit((stmt.lineno, 0), (stmt.lineno, 0), text)]


def unwrap_block(src: Source, compound: ast.stmt, body: List[ast.stmt]) -> Optional[List[Edit]]:
    """Replace a `with`/`if` statement by its body, dedented to the statement's indentation.
    None when the body shares the header's line (`with x: f()`)."""
    if body[0].lineno == compound.lineno:
        return None
    outer = src.indent_of(compound.lineno)
    inner = src.indent_of(body[0].lineno)
    if not inner.startswith(outer) or len(inner) <= len(outer):
        return None
    strip = len(inner) - len(outer)
    new_lines = []
    for i in range(body[0].lineno, compound.end_lineno + 1):
        line = src.lines[i - 1]
        lead = len(line) - len(line.lstrip(" \t"))
        # a blank line, or a string's continuation line indented less, is kept as it is
        new_lines.append(line[strip:] if line.strip() and lead >= strip else line)
    last = compound.end_lineno
    tail = src.lines[last - 1][src.end(compound)[1]:]
    if tail.strip() and not tail.strip().startswith("#"):
        return None
    return [Edit((compound.lineno, 0), (last + 1, 0), "".join(new_lines))]


def remove_keyword(src: Source, call: ast.Call, kw: ast.keyword) -> List[Edit]:
    """Drop `name=value` from a call, with its comma."""
    args: List[ast.AST] = list(call.args) + list(call.keywords)
    args.sort(key=lambda a: (a.lineno, a.col_offset))
    i = next(j for j, a in enumerate(args) if a is kw)
    if i + 1 < len(args):
        return [Edit(src.start(kw), src.start(args[i + 1]), "")]
    if i > 0:
        return [Edit(src.end(args[i - 1]), src.end(kw), "")]
    return [Edit(src.start(kw), src.end(kw), "")]


def parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True
