"""Tiny helpers over stdlib `ast` nodes shared by the analysis and the rules."""
from __future__ import annotations

import ast
from typing import Iterator, Optional, Set


def dotted(expr: ast.AST) -> Optional[str]:
    """`self.model.fc` -> "self.model.fc"; None for anything that is not a name chain."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        parts.append(expr.id)
        return ".".join(reversed(parts))
    return None


def target_texts(target: Optional[ast.AST]) -> Iterator[str]:
    """The name chains an assignment or loop target binds: `x`, `rest` and `self.best` in
    `x, (*rest, self.best) = …`; subscripts and a missing target (a `while` loop) give none."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from target_texts(elt)
    elif isinstance(target, ast.Starred):
        yield from target_texts(target.value)
    else:
        text = dotted(target)
        if text:
            yield text


def call_attr(call: ast.Call) -> Optional[str]:
    """The method name of `x.meth(...)`, else None."""
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


def callee_name(call: ast.Call) -> Optional[str]:
    """Last name of the callee: `F.softmax(...)` -> "softmax", `evaluate(...)` -> "evaluate"."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def keyword(call: ast.Call, name: str) -> Optional[ast.expr]:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def is_const(expr: Optional[ast.AST], value: object) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is value


def short(node: ast.AST, limit: int = 40) -> str:
    """Source-like text of a node for messages, shortened to one readable token."""
    try:
        text = ast.unparse(node)
    except Exception:  # pragma: no cover - ast.unparse handles every node of a parsed tree
        return "<expr>"
    text = " ".join(text.split())
    if isinstance(node, ast.Call):
        head = ast.unparse(node.func)
        text = f"{head}(...)" if node.args or node.keywords else f"{head}()"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def contains_mod(expr: ast.AST) -> bool:
    """True when `expr` has a `%` between non-literals: the shape of a counter test."""
    for node in ast.walk(expr):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            if not isinstance(node.left, ast.Constant):
                return True
    return False


def iterated_expr(loop: ast.AST) -> Optional[ast.expr]:
    """`loader` in `for i, b in enumerate(tqdm(loader)):`; None for while loops."""
    expr = getattr(loop, "iter", None)
    while isinstance(expr, ast.Call) and expr.args:
        expr = expr.args[0]
    return expr


def nesting_depth(tree: ast.AST) -> int:
    """How deep the syntax tree goes (iteratively: the tree may be too deep to recurse)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def is_self_attribute(node: Optional[ast.AST]) -> bool:
    """`self.x` (one attribute of `self`)."""
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
        and node.value.id == "self"


def assigns_self_attribute(stmt: ast.AST) -> bool:
    """`self.x = ...` / `self.x: T = ...`: the statement stores an attribute of `self`."""
    targets = getattr(stmt, "targets", None) or [getattr(stmt, "target", None)]
    return any(is_self_attribute(target) for target in targets)


def bound_names(target: Optional[ast.AST]) -> Set[str]:
    """The plain names a binding target binds (`i`, `(i, (x, y))` of a `for` loop)."""
    if target is None:
        return set()
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def names_read(expr: Optional[ast.AST]) -> Set[str]:
    """The names and attribute chains an expression mentions (`model`, `model.head`), as
    `dotted` spells them."""
    if expr is None:
        return set()
    return {text for n in ast.walk(expr) if isinstance(n, (ast.Name, ast.Attribute))
            for text in (dotted(n),) if text is not None}


def declared_outer(func_node: ast.AST) -> Set[str]:
    """The names a function declares `global` or `nonlocal` anywhere in its body."""
    return {name for node in ast.walk(func_node) if isinstance(node, (ast.Global, ast.Nonlocal))
            for name in node.names}


def store_count(scope: ast.AST, name: str) -> int:
    """How many times `name` is bound or deleted anywhere under `scope` (nested scopes too:
    a conservative count for 'bound exactly once')."""
    return sum(1 for node in ast.walk(scope)
               if isinstance(node, ast.Name) and node.id == name
               and isinstance(node.ctx, (ast.Store, ast.Del)))


def reached_from(expr: Optional[ast.AST]) -> Optional[str]:
    """The longest name chain an expression is reached from (`model` for
    `model.get_classifier()`, `model.blocks` for `model.blocks[-1]`); None if none."""
    while expr is not None:
        text = dotted(expr)
        if text is not None:
            return text
        if isinstance(expr, ast.Call):
            expr = expr.func.value if isinstance(expr.func, ast.Attribute) else None
        elif isinstance(expr, (ast.Attribute, ast.Subscript)):
            expr = expr.value
        else:
            return None
    return None


def scope_nodes(body):
    """The nodes of one scope's own code (not nested functions, classes or lambdas)."""
    todo = list(body)
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                      ast.Lambda)):
                todo.append(child)
