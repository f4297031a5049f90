"""Huge literal displays (a module that is one 10 MB list of numbers) left out before parsing.

`ast.parse` of a 9.5 MB module holding one literal list peaks at about 1 GB (the parser's
memo and arena, then about 400 bytes of Python objects per element), and no rule learns
anything from a million constants. So, before `tpf` parses a big file, every display of
plain constants longer than `MIN_LITERAL` characters (`[0.12, 0.5, ...]`, `{"a": (1, 2),
...}`, `((1, 2), (3, 4), ...)`) is replaced by a parenthesised name nothing defines: to the
analysis, a value it does not know (unknown means silent). Every line and column outside the
display stays where it was, and so do the display's first and last columns; the lines inside
it become blank.

Only what is surely a display is replaced: the text from the opening bracket must match the
grammar below (numbers, strings, True/False/None, one level of nested tuples or lists,
comments and line breaks between elements, commas between elements), and the bracket must
not follow a name or a closing bracket (`f(1, 2, ...)` is a call, `x[1, 2]` a subscript:
left alone). A display with a name, a call or an operator inside is parsed as it is.
"""
from __future__ import annotations

import re

MIN_SOURCE = 256 * 1024     # smaller files are parsed as they are (the check costs nothing)
MIN_LITERAL = 32 * 1024     # a display this long (in characters of source) is left out
PLACEHOLDER = "__tpf_elided_literal__"

_GAP = r"(?:[ \t\r\n\f]|\\\r?\n|#[^\r\n]*)*"        # blanks, comments, line continuations
_DIGITS = r"\d(?:_?\d)*"
_FLOAT = rf"(?:(?:{_DIGITS})?\.{_DIGITS}|{_DIGITS}\.)(?:[eE][-+]?{_DIGITS})?|{_DIGITS}[eE][-+]?{_DIGITS}"
_NUMBER = (r"[-+]?(?:0[xX](?:_?[0-9a-fA-F])+|0[oO](?:_?[0-7])+|0[bB](?:_?[01])+"
           rf"|(?:{_FLOAT}|{_DIGITS})[jJ]|{_FLOAT}|[1-9](?:_?\d)*|0(?:_?0)*)")   # never 0777
_ONE_STRING = r"""(?:[rRbBuU]|[rR][bB]|[bB][rR])?(?:'[^'\\\r\n]*(?:\\.[^'\\\r\n]*)*'|"[^"\\\r\n]*(?:\\.[^"\\\r\n]*)*")"""  # noqa: E501
_SCALAR = rf"(?:{_NUMBER}|{_ONE_STRING}(?:{_GAP}{_ONE_STRING}){{0,64}}|True|False|None)(?![\w.'\"])"


_BATCH = 4096
# a nested tuple or list of at most _BATCH constants (a longer one is a display of its own)
_FLAT = (rf"(?:\({_GAP}(?:{_SCALAR}{_GAP},{_GAP}){{0,{_BATCH}}}(?:{_SCALAR}{_GAP},?{_GAP})?\)"
         rf"|\[{_GAP}(?:{_SCALAR}{_GAP},{_GAP}){{0,{_BATCH}}}(?:{_SCALAR}{_GAP},?{_GAP})?\])")
_ELEMENT = rf"(?:{_SCALAR}|{_FLAT})"
_PAIR = rf"{_SCALAR}{_GAP}:{_GAP}{_ELEMENT}"
# Elements are matched a few thousand at a time: one regex over a million elements keeps a
# backtracking record per element (2 GB for the 10 MB list), a loop per element is slow.
_GAP_RE = re.compile(_GAP)
_ITEMS = {kind: re.compile(rf"(?:{element}{_GAP},{_GAP}){{1,{_BATCH}}}")
          for kind, element in (("element", _ELEMENT), ("pair", _PAIR))}
_CLOSING = {"[": "]", "(": ")", "{": "}"}
_LAST = {(kind, opening): re.compile(rf"(?:{element}{_GAP})?\{closing}")
         for kind, element in (("element", _ELEMENT), ("pair", _PAIR))
         for opening, closing in _CLOSING.items()}
_OPENING = re.compile(r"[\[({]")
# what may come just before a display (never a call's or a subscript's bracket)
_AFTER = frozenset("=([{,:;%&|^~<>+-*/@!\n\r\t ")


def elide_huge_literals(source: str) -> str:
    """`source` with each huge display replaced (see the module doc); `source` itself when it
    is small or has none."""
    if len(source) < MIN_SOURCE:
        return source
    parts, last = [], 0
    position = 0
    while True:
        opening = _OPENING.search(source, position)
        if opening is None:
            break
        start = opening.start()
        end = _display_end(source, start) if _may_open_display(source, start) else None
        if end is None:
            position = start + 1
            continue
        if end - start >= MIN_LITERAL:
            parts.append(source[last:start])
            parts.append(_placeholder(source[start:end]))
            last = end
        position = end
    if not parts:
        return source
    parts.append(source[last:])
    return "".join(parts)


def _display_end(source: str, start: int):
    """Where the display of constants opening at `start` ends, or None if it is not one."""
    opening = source[start]
    kinds = ("pair", "element") if opening == "{" else ("element",)
    for kind in kinds:
        position = _GAP_RE.match(source, start + 1).end()
        items = _ITEMS[kind]
        while True:
            batch = items.match(source, position)
            if batch is None:
                break
            position = batch.end()
        last = _LAST[(kind, opening)].match(source, position)
        if last is not None:
            return last.end()
    return None


def _may_open_display(source: str, start: int) -> bool:
    before = start - 1
    while before >= 0 and source[before] in " \t":
        before -= 1
    if before < 0:
        return True
    char = source[before]
    if char in _AFTER:
        return True
    if not (char.isalnum() or char == "_"):
        return False
    word_start = before
    while word_start > 0 and (source[word_start - 1].isalnum() or source[word_start - 1] == "_"):
        word_start -= 1
    return source[word_start:before + 1] in ("return", "yield", "in", "else", "and", "or",
                                             "not", "is", "lambda", "assert", "await")


def _placeholder(display: str) -> str:
    """`(name)` in the display's place: its line breaks kept (lines after it do not move),
    its last line as long as before (columns after it on that line do not move)."""
    lines = display.split("\n")
    if len(lines) == 1:
        return "(" + PLACEHOLDER.ljust(len(display) - 2) + ")"
    last = lines[-1]
    middle = [""] * (len(lines) - 2)
    return "\n".join(["(" + PLACEHOLDER] + middle + [" " * (len(last) - 1) + ")"])
