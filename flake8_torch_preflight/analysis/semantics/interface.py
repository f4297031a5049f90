"""What library semantics may ask of the interpreter while a call is evaluated.

Handlers record training events (a backward, an optimizer step, a mode switch, a value
stored across iterations) and build values (a module's forward); they never walk statements
or touch the environment except through these methods.
"""
from __future__ import annotations

import ast
from typing import Dict, Optional, Protocol, Sequence

from ..core.values import Value


class Interpreter(Protocol):
    in_loop: bool                 # inside a for/while loop of the function
    no_grad: bool                 # autograd is off at the current statement
    current_stmt: Optional[ast.stmt]

    def qualname(self, expr: ast.AST) -> Optional[str]: ...

    def plain_class_defines(self, method: str) -> bool: ...

    def record_backward(self, node: ast.AST, value: Value, via: str) -> None: ...

    def record_reset(self, node: ast.AST) -> None: ...

    def record_step(self, node: ast.AST, via: str) -> None: ...

    def record_mode(self, node: ast.AST, mode: str, receiver: str) -> None: ...

    def record_freeze(self, node: ast.AST, module: str) -> None: ...

    def thaw(self, module: str) -> None: ...

    def freeze_after_loop(self, loop: ast.AST, module: str) -> None: ...

    def record_grad_scale(self, node: ast.AST) -> None: ...

    def innermost_loop_binding(self, name: str) -> Optional[ast.AST]: ...

    def record_store(self, container: ast.AST, stmt: ast.AST, how: str, value: Value,
                     expr: ast.AST) -> None: ...

    def filled(self, container: ast.AST, value: Value) -> Value: ...

    def rebind(self, target: ast.AST, value: Value) -> None: ...

    def forward(self, node: ast.Call, module: Value, args: Sequence[Value],
                kwargs: Dict[str, Value], result: Optional[Value] = None) -> Value: ...
