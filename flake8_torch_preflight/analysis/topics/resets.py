"""Gradient resets and the tests around them (TPF003).

A reset counts for a loop that steps every iteration only when it runs every iteration too.
One under an `if` whose test folds to false never runs (`if False:`, `if config.get(
"is_fixed"):` over a literal dict holding False); one under a test of the loop's own counter
that holds for a bounded number of iterations (`if i == 0:`, `if step < warmup:`) leaves
every later step applying the sum of the gradients since. Any other test (a flag, an
accumulation counter `i % k == 0`, a test on the loss) may hold every iteration: the reset
counts. Also here: which tests the loop never changes, which tests only pick the parameters
that have a gradient, and which modules an optimizer was built from (read from its
construction). Memoised where asked per loop.
"""
from __future__ import annotations

import ast
from typing import FrozenSet, Optional

from ..core.astutil import bound_names, dotted, short
from ..core.constants import static_truth
from ..core.events import FunctionFacts, Site

# Comparisons of a counter with a constant that hold for finitely many of its values, with
# the counter on the left (`i == 0`, `step < warmup_steps`).
_BOUNDED_OPS = (ast.Eq, ast.Is, ast.Lt, ast.LtE)


def reset_not_every_iteration(analysis, facts: FunctionFacts, loop: ast.AST,
                              site: Site) -> Optional[str]:
    """Why the reset at `site` does not run on every iteration of `loop`, or None when it
    may: an enclosing test inside the loop that folds to the branch not taken, or that holds
    only while the loop's counter is below (or at) a bound."""
    for cond in site.conds_inside(loop):
        truth = static_truth(analysis, facts, cond.test)
        if truth is not None and truth is cond.negated:
            return f"its test `{short(cond.test, 40)}` (line {cond.test.lineno}) is always " \
                f"{'true' if cond.negated else 'false'}, so it never runs"
        if not cond.negated and _bounded_counter_test(facts, loop, site, cond.test):
            return f"it runs only while `{short(cond.test, 40)}` (line {cond.test.lineno}), " \
                f"a bounded number of iterations"
    return None


def _bounded_counter_test(facts: FunctionFacts, loop: ast.AST, site: Site,
                          test: ast.expr) -> bool:
    """`i == 0` / `step < 10` where `i` counts the iterations of `loop` (its target, or a
    name the loop increments), compared with a number."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], _BOUNDED_OPS)):
        return False
    bound = test.comparators[0]
    if not (isinstance(bound, ast.Constant) and isinstance(bound.value, int)):
        return False
    name = dotted(test.left)
    return name is not None and name in _counters(facts, loop)


def _counters(facts: FunctionFacts, loop: ast.AST) -> FrozenSet[str]:
    """Names that count the iterations of `loop`: the index of `for i, x in enumerate(...)`,
    `for i in range(...)`'s target, and names the body increments by a constant."""
    found = set()
    target, iterated = getattr(loop, "target", None), getattr(loop, "iter", None)
    if isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name):
        if iterated.func.id == "enumerate" and isinstance(target, ast.Tuple) and target.elts \
                and isinstance(target.elts[0], ast.Name):
            found.add(target.elts[0].id)
        elif iterated.func.id == "range" and isinstance(target, ast.Name):
            found.add(target.id)
    for stmt in _own_statements(loop):
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add) \
                and isinstance(stmt.value, ast.Constant) and dotted(stmt.target):
            found.add(dotted(stmt.target))
    rebound = facts.loop_rebinds.get(loop, frozenset())
    return frozenset(name for name in found if name not in rebound or name in bound_names(target))


def _own_statements(loop: ast.AST):
    """The statements of the loop body, nested blocks included, not nested loops' bodies
    (a counter of an inner loop counts that loop's iterations) nor nested functions."""
    todo = list(loop.body)
    while todo:
        stmt = todo.pop()
        yield stmt
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef,
                             ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody", "handlers"):
            todo.extend(getattr(stmt, field, ()))


def loop_invariant_test(facts: FunctionFacts, loop: ast.AST, test: ast.expr) -> bool:
    """Nothing `test` reads changes from one iteration of `loop` to the next (`if use_amp:`):
    no call, subscript or walrus in it, and none of its names or attributes is the loop's
    target or rebound or written in the loop."""
    changed = set(facts.loop_rebinds.get(loop, frozenset())) | \
        set(facts.loop_writes.get(loop, frozenset()))
    changed |= bound_names(getattr(loop, "target", None))
    for node in ast.walk(test):
        if isinstance(node, (ast.Call, ast.Subscript, ast.Await, ast.NamedExpr)):
            return False
        if isinstance(node, (ast.Name, ast.Attribute)):
            text = dotted(node)
            if text is None or any(text == c or text.startswith(c + ".") or
                                   c.startswith(text + ".") for c in changed):
                return False
    return True


def tests_only_the_parameter(test: ast.expr, name: str) -> bool:
    """`p.grad is not None`, `p.requires_grad`: every parameter that has a gradient passes."""
    texts = {dotted(n) for n in ast.walk(test) if isinstance(n, (ast.Name, ast.Attribute))}
    return texts <= {name, f"{name}.grad", f"{name}.requires_grad"}


def parameter_owners(construction: Optional[ast.AST]) -> Optional[FrozenSet[str]]:
    """The modules whose `.parameters()` an optimizer was built from (`Adam(netG.parameters())`,
    `Adam(itertools.chain(G_AB.parameters(), G_BA.parameters()))`, param groups), read from
    its construction; None when anything else goes in."""
    if not isinstance(construction, ast.Call):
        return None
    params = construction.args[0] if construction.args else next(
        (kw.value for kw in construction.keywords if kw.arg == "params"), None)
    if params is None:
        return None
    owners, spent = set(), set()
    for sub in ast.walk(params):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) \
                and sub.func.attr in ("parameters", "named_parameters") and not sub.args:
            owner = dotted(sub.func.value)
            if owner is None:
                return None
            owners.add(owner)
            spent.update(id(n) for n in ast.walk(sub))
        elif isinstance(sub, ast.Call):
            spent.update(id(n) for n in ast.walk(sub.func))
    free = [n for n in ast.walk(params) if isinstance(n, ast.Name) and id(n) not in spent]
    return frozenset(owners) if owners and not free else None
