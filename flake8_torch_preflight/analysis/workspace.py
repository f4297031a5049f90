"""The other files of the project, analysed once per process and cached.

A file is read and parsed with `ast` (never imported or executed), keyed by path and
modification time. Only a few recent analyses are kept: each holds its file's tree and every
fact computed on it, and every garbage collection in flake8 (triggered by its own tokenizing
and checks between our files) scans whatever we keep alive. Measured on 443 corpus files,
keeping 64 analyses cost more in collections (1.3 s against stock flake8's 0.4 s) than
re-analysing saved; 4 was the best of 0, 2, 4, 8, 16 and 32. Within one linted file every
other file is analysed once (`FileAnalysis.other_file` pins it).
"""
from __future__ import annotations

import ast
import os
from collections import OrderedDict
from typing import Callable, Optional, Tuple, TypeVar

T = TypeVar("T")
_MAX_CACHED = 4
# (path, import depth) -> (mtime, analysis or None when it does not parse)
_CACHE: "OrderedDict[Tuple[str, int], Tuple[float, object]]" = OrderedDict()


def analysis_of(path: str, build: Callable[[ast.Module, str], T], depth: int = 1) -> Optional[T]:
    """`build(tree, path)` for the file at `path` seen `depth` import hops from the linted
    file, cached; None when it is missing, unreadable or does not parse."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    key = (path, depth)
    cached = _CACHE.get(key)
    if cached is not None and cached[0] == mtime:
        _CACHE.move_to_end(key)
        return cached[1]   # type: ignore[return-value]
    try:
        with open(path, "rb") as handle:
            tree = ast.parse(handle.read(), filename=path)
        analysis = build(tree, path)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        analysis = None
    _CACHE[key] = (mtime, analysis)
    while len(_CACHE) > _MAX_CACHED:
        _CACHE.popitem(last=False)
    return analysis


def clear() -> None:
    _CACHE.clear()
