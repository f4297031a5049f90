"""`# noqa` with flake8's exact semantics, for the `tpf` CLI and `tpf fix`.

flake8 applies noqa itself in plugin mode; the standalone CLI must agree with it so one
suppression serves both. Everything here mirrors flake8 (`defaults.NOQA_INLINE_REGEXP`,
`Violation.is_inline_ignored`, `FileProcessor._noqa_line_mapping`, `should_ignore_file`):

- `# noqa` alone suppresses every code on the line; `# noqa: TPF003` only codes starting with
  one of the listed codes (prefix match, so `# noqa: TPF0` works);
- a malformed list (`# noqa: TPF`, `# NOQA : TPF001`) is a blanket noqa;
- the comment is searched on the reported line; a token that spans lines (a triple-quoted
  string) or a backslash continuation makes those lines one unit, while lines inside
  brackets stay separate (the comment goes on the statement's first line, where we report);
- `# flake8: noqa` alone on a line skips the whole file.
"""
from __future__ import annotations

import io
import tokenize
from typing import Dict, Optional, Sequence

from flake8.defaults import NOQA_FILE, NOQA_INLINE_REGEXP


class NoqaMap:
    """Which line text flake8 would search for `noqa` for each reported line."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = list(lines)
        self._mapping: Optional[Dict[int, str]] = None
        # No `noqa` anywhere (flake8 matches it case-insensitively): nothing is suppressed,
        # and the file need not be tokenized (a second of work on a 1 MB file).
        self._any = any("noqa" in line.lower() for line in self.lines)

    @property
    def mapping(self) -> Dict[int, str]:
        if self._mapping is None:
            self._mapping = _line_mapping(self.lines)
        return self._mapping

    def text_for(self, line: int) -> str:
        text = self.mapping.get(line)
        if text is None and 1 <= line <= len(self.lines):
            text = self.lines[line - 1]   # untokenizable file: fall back to the line itself
        return text or ""

    def suppressed(self, line: int, code: str) -> bool:
        return self._any and is_suppressed(self.text_for(line), code)

    def skip_file(self) -> bool:
        return file_is_skipped(self.lines)


def is_suppressed(text: str, code: str) -> bool:
    """flake8's `Violation.is_inline_ignored` for one line of text."""
    match = NOQA_INLINE_REGEXP.search(text)
    if match is None:
        return False
    codes_str = match.groupdict()["codes"]
    if codes_str is None:
        return True   # a bare or malformed `# noqa`
    codes = {c for c in (part.strip() for part in codes_str.replace(",", " ").split()) if c}
    return code in codes or code.startswith(tuple(codes))


def file_is_skipped(lines: Sequence[str]) -> bool:
    """`# flake8: noqa` on a line of its own (flake8 only warns when it shares a line)."""
    return any(NOQA_FILE.match(line) for line in lines)


# What tokenizing a broken file can raise. CPython 3.13.0's tokenizer raises SystemError
# ("returned a result with an exception set") on some NUL bytes instead of TokenError.
TOKENIZE_ERRORS = (tokenize.TokenError, SyntaxError, IndentationError, SystemError)


def _line_mapping(lines: Sequence[str]) -> Dict[int, str]:
    """Line number -> the (possibly joined) text flake8 searches for `noqa`."""
    mapping: Dict[int, str] = {}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO("".join(lines)).readline))
    except TOKENIZE_ERRORS:
        return mapping
    first, last = len(lines) + 2, -1
    for token in tokens:
        if token.type in (tokenize.ENDMARKER, tokenize.DEDENT):
            continue
        first = min(first, token.start[0])
        last = max(last, token.end[0])
        if token.type in (tokenize.NL, tokenize.NEWLINE):
            joined = "".join(lines[first - 1:last])
            for number in range(first, last + 1):
                mapping[number] = joined
            first, last = len(lines) + 2, -1
    return mapping
