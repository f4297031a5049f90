"""The other files of the project, analysed once per process and cached.

A file is read and parsed with `ast` (never imported or executed), keyed by path and
modification time. Only a few recent analyses are kept: each holds every fact of its file,
and a process that keeps hundreds alive makes every garbage collection in flake8 scan them
(measured: 10 % of the whole flake8 run on a 377-file repository), while one file's imports
are usually few.
"""
from __future__ import annotations

import ast
import os
from collections import OrderedDict
from typing import Callable, Optional, Tuple, TypeVar

T = TypeVar("T")
_MAX_CACHED = 16
# path -> (mtime, analysis or None when it does not parse)
_CACHE: "OrderedDict[str, Tuple[float, object]]" = OrderedDict()


def analysis_of(path: str, build: Callable[[ast.Module, str], T]) -> Optional[T]:
    """`build(tree, path)` for the file at `path`, cached; None when it is missing,
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
