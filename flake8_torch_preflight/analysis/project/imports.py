"""Import table: turn local names into the qualified names they were imported as.

Rules never match on the text a user happened to write (`nn.CrossEntropyLoss`,
`torch.nn.CrossEntropyLoss`, `from torch.nn import CrossEntropyLoss as CE`); they ask for
the qualified name. Only imports are followed: the analysed code is never imported or
executed, and torch's own sources are never read.
"""
from __future__ import annotations

import ast
from typing import Dict, List, Optional, Set


class ImportTable:
    """Local name -> fully qualified dotted name, from every import in the file.

    Function-local imports are folded into one file-wide table: a script that imports
    `torch.nn as nn` inside `main()` means the same `nn` everywhere in practice, and the
    cost of scoping imports exactly is not worth a missed finding.
    """

    def __init__(self, tree: ast.AST, module_name: str = "") -> None:
        self._names: Dict[str, str] = {}
        self.modules: Set[str] = set()
        self.star_modules: List[str] = []   # `from .models import *`
        self._module_name = module_name
        # every import statement of the file, in no particular order (one walk, asked again
        # by questions about what importing a module runs)
        self.statements = list(import_statements(tree.body))
        for node in self.statements:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.modules.add(alias.name)
                    if alias.asname:
                        self._names[alias.asname] = alias.name
                    else:
                        head = alias.name.split(".", 1)[0]
                        self._names.setdefault(head, head)
            elif isinstance(node, ast.ImportFrom):
                base = self._absolute_base(node)
                if base:
                    self.modules.add(base)
                for alias in node.names:
                    if alias.name == "*":
                        if base:
                            self.star_modules.append(base)
                        continue
                    target = f"{base}.{alias.name}" if base else alias.name
                    self._names[alias.asname or alias.name] = target

    def _absolute_base(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        # Relative import: keep it recognisable as project-local ("." prefix).
        return "." * node.level + (node.module or "")

    def resolve_name(self, name: str) -> Optional[str]:
        return self._names.get(name)

    def qualname(self, expr: ast.AST) -> Optional[str]:
        """`nn.functional.softmax` -> `torch.nn.functional.softmax` when `nn` is imported.

        Returns None when the head of the chain is not an imported name.
        """
        parts = []
        while isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return None
        head = self._names.get(expr.id)
        if head is None:
            return None
        parts.append(head)
        return ".".join(reversed(parts))

    def imports_any(self, *prefixes: str) -> bool:
        """True when some import is one of `prefixes` or a submodule of one."""
        for module in self.modules:
            for prefix in prefixes:
                if module == prefix or module.startswith(prefix + "."):
                    return True
        return False


def import_statements(body):
    """Import statements anywhere in the file, visiting statements only (not expressions)."""
    todo = list(body)
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            yield stmt
            continue
        for field in ("body", "orelse", "finalbody"):
            child = getattr(stmt, field, None)
            if isinstance(child, list):
                todo.extend(child)
        for handler in getattr(stmt, "handlers", ()):
            todo.extend(handler.body)
        for case in getattr(stmt, "cases", ()):
            todo.extend(case.body)
