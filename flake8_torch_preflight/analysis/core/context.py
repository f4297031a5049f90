"""What the interpreter (`flow.py`) and cross-file resolution (`project.py`) need from the
analysis of a file: a typed protocol, so neither imports `FileAnalysis` (no import cycle)."""
from __future__ import annotations

import ast
from typing import Dict, Optional, Protocol

from .bindings import Bindings
from .events import FunctionFacts
from ..project.imports import ImportTable
from ..project.index import ClassInfo, FileIndex, FunctionInfo
from .values import Value


class GlobalNames(Protocol):
    """Module-level names as bound so far."""

    def get(self, name: str, default: Optional[Value] = None) -> Optional[Value]: ...

    def __contains__(self, name: str) -> bool: ...


class FileContext(Protocol):
    tree: ast.Module
    filename: str
    imports: ImportTable
    index: FileIndex

    @property
    def global_env(self) -> GlobalNames: ...

    def facts_for(self, func: FunctionInfo) -> FunctionFacts: ...

    def class_attr(self, cls: ClassInfo, text: str) -> Optional[Value]: ...

    def other_file(self, path: str) -> Optional["FileContext"]: ...

    def binding_scope(self, func: Optional[FunctionInfo], name: str) -> str: ...

    def bindings(self, func: Optional[FunctionInfo]) -> "Bindings": ...

    def memo(self, topic: str) -> Dict: ...
