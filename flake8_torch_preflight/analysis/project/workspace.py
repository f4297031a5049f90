"""The other files of the project: one analysis per module and process, whoever imports it.

A file is read and parsed with `ast` (never imported or executed), keyed by path and
modification time. The analysis of a module does not depend on the file that imports it: it
follows its own imports as far as they resolve (an import cycle is cut where it closes), so
every importer asks the same analysis and reuses the facts the ones before it computed
(issue 19: 609 of 704 other-file parses came from importer-specific analyses, keyed by their
import depth, of which only four were kept). Within one linted file every other file is
analysed once (`FileAnalysis.other_file` pins it).

How many are kept is a trade between analysing a module again and what every full garbage
collection in flake8 scans (each analysis holds its tree and the facts computed on it):
`_MAX_CACHED`, measured in docs/performance.md.
"""
from __future__ import annotations

import ast
import os
from collections import OrderedDict
from typing import Callable, Optional, Tuple, TypeVar

T = TypeVar("T")
_MAX_CACHED = 64
# path -> (mtime, analysis or None when it does not parse)
_CACHE: "OrderedDict[str, Tuple[float, object]]" = OrderedDict()


def analysis_of(path: str, build: Callable[[ast.Module, str], T]) -> Optional[T]:
    """`build(tree, path)` for the project file at `path`, cached; None when it is missing,
    unreadable or does not parse."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    cached = _CACHE.get(path)
    if cached is not None and cached[0] == mtime:
        _CACHE.move_to_end(path)
        return cached[1]   # type: ignore[return-value]
    try:
        with open(path, "rb") as handle:
            tree = ast.parse(handle.read(), filename=path)
        analysis = build(tree, path)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        analysis = None
    _CACHE[path] = (mtime, analysis)
    while len(_CACHE) > _MAX_CACHED:
        _CACHE.popitem(last=False)
    return analysis


def clear() -> None:
    _CACHE.clear()
