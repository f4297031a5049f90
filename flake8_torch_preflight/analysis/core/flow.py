"""The interpreter: order-aware flow analysis of one function body.

It walks statements in order with an environment `name -> Value`, so `x = x.item()` changes
what `x` is from that line on and not before. Branches are joined, loop bodies are walked
again when a value carried into the next iteration changed (the loop fixpoint, bounded),
and calls to functions of the same file use their summaries (computed once, see
`FileAnalysis.facts_for`). Everything a rule may ask is recorded in `FunctionFacts`.

What a *library* call does (torch, `nn.Module`, tensors, containers, Accelerate, DeepSpeed,
Lightning, Hugging Face) is not here: the interpreter looks it up in the tables of
`semantics/`, and only knows Python (names, attributes, arithmetic, control flow) and the
functions and classes of the analysed project.
"""
from __future__ import annotations

import ast
import weakref
from typing import Callable, Dict, FrozenSet, Iterable, List, Optional, Tuple

from ..project import resolution as project
from .. import semantics
from . import values as V
from .astutil import dotted
from .context import FileContext
from .identity import returned_parameter
from .env import Env, carried_values_changed, merge_envs
from ..project.index import FunctionInfo
from .events import (Backward, CallSite, Cond, Forward, Freeze, FunctionFacts, LocalCall, ModeCall,
                     Site, Step, Store)
from ..semantics import Access, Call
from .values import UNKNOWN, Value, derived, join, join_all

_MAX_DEPTH_TWICE = 4   # loops nested deeper than this are walked once
# Expressions nested deeper than this (a 100-link method chain, generated code) are not read:
# their value is unknown. Long left-nested sums do not count: they are walked in a loop.
MAX_EXPR_DEPTH = 100
# Methods of an `nn.Module` class of the file that keep their library meaning even when the
# class overrides them (a custom `train()` still switches the mode).
_LIBRARY_METHODS = frozenset({"eval", "train", "zero_grad", "to", "cuda"})
_PYSCALAR = Value.of(V.PYSCALAR)
_MODULO = Value.of(V.PYSCALAR, V.MODULO)
_TEXT = Value.of(V.TEXT)
_CUDA_TEXT = Value.of(V.TEXT, V.CUDA_DEVICE)


def _arithmetic_tags(left: Value, right: Value) -> frozenset:
    """`1 - x`, `2 * x`, `x + eps`, `x / 2`: an operand proven a tensor makes a tensor, on
    either side and whatever the other (a Python number broadcasts); otherwise what the
    operands may be."""
    if any(v.has(V.TENSOR) and not v.has(V.PYSCALAR) for v in (left, right)):
        return frozenset({V.TENSOR})
    return (left.tags | right.tags) & {V.PYSCALAR, V.TENSOR}


class FunctionRef:
    """Marks a Value that names a function of this file (`step_fn = train_step`)."""

    def __init__(self, func) -> None:
        self.func = func


class FlowAnalyzer:
    def __init__(self, context: FileContext, func, facts: FunctionFacts, env: Dict[str, Value],
                 global_env, recording: bool = True) -> None:
        self.a = context
        self.func = func
        self.facts = facts
        self.env = Env(env)
        self.global_env = global_env
        self.recording = recording
        self.loops: List[ast.AST] = []
        self.current_stmt: Optional[ast.stmt] = None
        # Names read in the current loop iteration before being written in it.
        self.iteration_reads: Optional[set] = None
        self.conds: List[Cond] = []
        self.no_grad = bool(func and func.grad_disabled_by_decorators)
        self.accumulate = False
        self.eval_mode = False
        self.freezes_at_exit: Dict[ast.AST, List[str]] = {}   # loop -> modules it freezes
        self.comprehension_names: FrozenSet[str] = frozenset()
        self.unseen_call = False    # the call being evaluated has a callee we cannot see into
        self.scope = func.qualname if func else "<module>"
        self._bindings = None   # scanned on first need: loop-free code without stores never asks
        self.expr_depth = 0   # expressions being evaluated, one inside the other

    # ------------------------------------------------------------------ where we are
    @property
    def bindings(self):
        if self._bindings is None:
            self._bindings = self.a.bindings(self.func)
        return self._bindings

    def is_local(self, name: str) -> bool:
        """`name` is bound in this function (the module body binds only globals)."""
        return self.func is None or name in self.bindings.names or name in self.func.params

    @property
    def in_loop(self) -> bool:
        return bool(self.loops)

    def site(self, node: ast.AST) -> Site:
        return Site(node, self.current_stmt or node, tuple(self.loops), tuple(self.conds),
                    self.no_grad, self.accumulate, self.eval_mode, self.comprehension_names)

    def qualname(self, expr: ast.AST) -> Optional[str]:
        return self.a.imports.qualname(expr)

    def plain_class_defines(self, method: str) -> bool:
        """Some class of this file that is not an `nn.Module` defines `method` (an `eval()`
        of its own): a receiver of unknown kind may be one of its instances."""
        return any(not cls.is_module and method in cls.methods
                   for cls in self.a.index.classes.values())

    def key_for(self, target: ast.AST) -> Optional[Tuple[str, str]]:
        """(container key, text) for a name or `self.attr` used as a container."""
        text = dotted(target)
        if text is None:
            return None
        head = text.split(".", 1)[0]
        if head == "self" and self.func is not None and self.func.cls is not None:
            return f"{self.func.cls.name}.{text}", text
        if not self.is_local(head):
            return f"{self.a.binding_scope(self.func.parent, head)}:{text}", text
        return f"{self.scope}:{text}", text

    # ------------------------------------------------------------------ the environment
    def lookup(self, name: str) -> Value:
        if name in self.env:
            if self.iteration_reads is not None and name not in self.env.iteration:
                self.iteration_reads.add(name)
            return self.env[name]
        return self.global_env.get(name, UNKNOWN)

    def known(self, name: str) -> bool:
        return name in self.env or name in self.global_env

    def filled(self, container: ast.AST, value: Value) -> Value:
        """`value` marked as the contents of `container`, so later reads (`torch.stack(xs)`,
        `sum(xs)`, `xs.pop()`) say where they came from: a backward or a return that
        consumes them makes the stores into `container` deliberate (TPF001)."""
        keyed = self.key_for(container)
        if keyed is None or keyed[0] in value.containers:
            return value
        return value.with_containers(keyed[0])

    def rebind(self, target: ast.AST, value: Value) -> None:
        """`target` holds `value` from here on (no value recorded for the target node)."""
        text = dotted(target)
        if text is not None:
            self.env[text] = value

    def attr_value(self, node: ast.AST) -> Optional[Value]:
        """What `a.b` holds when the analysis bound it (`self.x` from `__init__` too)."""
        text = dotted(node) if isinstance(node, ast.Attribute) else None
        if text is None:
            return None
        if text in self.env:
            return self.env[text]
        if text.startswith("self.") and self.func is not None and self.func.cls is not None:
            return self.a.class_attr(self.func.cls, text)
        return None

    def record(self, node: ast.AST, value: Value) -> Value:
        if self.recording:
            self.facts.values[id(node)] = value
        return value

    # ------------------------------------------------------------------ statements
    def run(self, body: Iterable[ast.stmt]) -> None:
        for stmt in body:
            self.stmt(stmt)

    def stmt(self, node: ast.stmt) -> None:
        self.current_stmt = node
        method = _STMT_HANDLERS.get(type(node))
        if method is not None:
            method(self, node)
        # Function and class definitions are analysed on their own; everything else
        # (pass, break, global, import, …) changes nothing we track.

    def stmt_Expr(self, node: ast.Expr) -> None:
        self.expr(node.value)
        call = node.value
        if isinstance(call, ast.Call):
            # `torch.set_grad_enabled(False)` as a statement: autograd stays off from here on
            mode = semantics.statement_grad_mode(self.qualname(call.func), call)
            if mode is not None:
                self.no_grad = not mode

    def stmt_Assign(self, node: ast.Assign) -> None:
        value = self.expr(node.value)
        for target in node.targets:
            if self.accumulation_store(target, node):
                self.assign_plain(target, self.filled(target, value) if value.grad else value)
            else:
                self.bind(target, value, node)

    def accumulation_store(self, target: ast.AST, node: ast.Assign) -> bool:
        """`acc = acc + v` / `self.acc = self.acc + v`: the same store as `acc += v`."""
        expr = node.value
        text = dotted(target) if isinstance(target, (ast.Name, ast.Attribute)) else None
        if text is None or not (isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add)):
            return False
        if isinstance(target, ast.Attribute) and not text.startswith("self."):
            return False
        for mine, other in ((expr.left, expr.right), (expr.right, expr.left)):
            if dotted(mine) == text:
                added = self.facts.value(other)
                if added.grad and not added.leaf:
                    self.record_store(target, node, "augassign", added, other)
                return True
        return False

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.bind(node.target, self.expr(node.value), node)

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Attribute) and isinstance(node.op, (ast.Mult, ast.Div)):
            semantics.assign_attribute(self, node.target.attr, node, augmented=True)
        right = self.expr(node.value)
        current = self.expr(node.target)
        if isinstance(node.op, ast.Div) and (current.grad or current.has(V.LOSS) or current.params):
            result = derived([current, right], V.DIVIDED)
        elif isinstance(node.op, ast.Mult) and right.has(V.RECIPROCAL):
            result = derived([current, right], V.DIVIDED)
        else:
            result = derived([current, right]) if (current.grad or right.grad) else join(current, right)
        if right.grad and not right.leaf:
            self.record_store(node.target, node, "augassign", right, node.value)
            result = self.filled(node.target, result)
        self.assign_plain(node.target, result)

    def stmt_If(self, node: ast.If) -> None:
        test = self.expr(node.test)
        counter = test.has(V.COUNTER_COND) or test.has(V.MODULO)
        before_eval = self.eval_mode
        self.conds.append(Cond(len(self.loops), node.test, counter))
        saved = self.env
        self.env = saved.branch()
        self.run(node.body)
        after_body, eval_body = self.env, self.eval_mode
        self.conds[-1] = Cond(len(self.loops), node.test, counter, negated=True)
        self.env, self.eval_mode = saved.branch(), before_eval
        self.run(node.orelse)
        self.conds.pop()
        self.env = merge_envs(saved, after_body, self.env)
        self.eval_mode = eval_body and self.eval_mode

    def stmt_For(self, node) -> None:
        iterated = self.expr(node.iter)
        self.loop(node, lambda: self.bind(node.target, semantics.iterated_item(iterated), node))

    stmt_AsyncFor = stmt_For

    def stmt_While(self, node: ast.While) -> None:
        self.loop(node, lambda: self.expr(node.test))

    def loop(self, node, enter: Callable[[], None]) -> None:
        """Walk a loop body; walk it once more from the settled values when something read
        at the top of an iteration is changed by the iteration before
        (`hidden = model(x, hidden)`). The first walk's events are rolled back."""
        self.note_loop(node)
        before = self.env
        self.loops.append(node)
        outer_reads, self.iteration_reads = self.iteration_reads, set()
        mark = self.facts.mark() if self.recording else None
        after, body_written = self.walk_iteration(node, before, enter)
        if mark is not None and len(self.loops) <= _MAX_DEPTH_TWICE and \
                carried_values_changed(before, after, self.iteration_reads):
            self.facts.rollback(mark)
            after, written_again = self.walk_iteration(node, after, enter)
            body_written |= written_again
        reads, self.iteration_reads = self.iteration_reads, outer_reads
        if outer_reads is not None:
            outer_reads |= reads - before.iteration
        after.iteration.update(body_written)
        self.loops.pop()
        self.env = after
        for module in self.freezes_at_exit.pop(node, ()):
            self.record_freeze(node, module)   # every parameter of `module` was frozen
        self.run(node.orelse)

    def walk_iteration(self, node, start: Env, enter: Callable[[], None]) -> Tuple[Env, set]:
        """One walk of the body from `start`: (environment after the loop, names written)."""
        self.env = start.branch(iteration=set())
        enter()
        self.run(node.body)
        return merge_envs(start, self.env), set(self.env.written)

    def note_loop(self, node) -> None:
        facts = self.facts
        if node not in facts.loop_parents:
            facts.loops.append(node)
            facts.loop_parents[node] = self.loops[-1] if self.loops else None
            facts.loop_rebinds[node] = frozenset(self.bindings.rebinds.get(node, ()))
            facts.loop_writes[node] = frozenset(self.bindings.writes.get(node, ()))

    def stmt_With(self, node) -> None:
        saved = (self.no_grad, self.accumulate)
        for item in node.items:
            ctx = item.context_expr
            value = self.expr(ctx)
            call = ctx if isinstance(ctx, ast.Call) else None
            grad_mode = semantics.context_grad_mode(self.qualname(call.func if call else ctx), call)
            if grad_mode is not None:
                self.no_grad = not grad_mode
            if value.has(V.ACCUMULATE_CONTEXT):
                self.accumulate = True
            if item.optional_vars is not None:
                self.bind(item.optional_vars, value, node)
        self.run(node.body)
        self.no_grad, self.accumulate = saved

    stmt_AsyncWith = stmt_With

    def stmt_Try(self, node) -> None:
        saved = self.env
        branches = []
        for block in [node.body] + [handler.body for handler in node.handlers]:
            self.env = saved.branch()
            self.run(block)
            branches.append(self.env)
        self.env = merge_envs(saved, *branches)
        self.run(node.orelse)
        self.run(node.finalbody)

    stmt_TryStar = stmt_Try

    def stmt_Match(self, node) -> None:
        self.expr(node.subject)
        saved = self.env
        branches = []
        for case in node.cases:
            self.env = saved.branch()
            self.run(case.body)
            branches.append(self.env)
        self.env = merge_envs(saved, saved.branch(), *branches)

    def stmt_Return(self, node: ast.Return) -> None:
        if self.recording:
            self.facts.return_exprs.append(node.value)
        if node.value is not None:
            value = self.expr(node.value)
            if self.recording:
                self.facts.returns = join(self.facts.returns, value)

    def stmt_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            if isinstance(target, ast.Name):
                self.env[target.id] = UNKNOWN

    # ------------------------------------------------------------------ binding
    def bind(self, target: ast.AST, value: Value, stmt: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            self.bind_unpacked(target, value, stmt)
            return
        if isinstance(target, ast.Subscript):
            self.expr(target.slice)
            if value.grad and not value.leaf:
                self.record_store(target.value, stmt, "setitem", value, _stored_expr(stmt))
            self.rebind(target.value, self.filled(
                target.value, join(self.expr(target.value), value.contents())))
            return
        if isinstance(target, ast.Attribute):
            semantics.assign_attribute(self, target.attr, stmt)
            if value.grad and not value.leaf and isinstance(target.value, ast.Name) \
                    and target.value.id == "self":
                self.record_store(target, stmt, "setattr", value, _stored_expr(stmt))
        self.assign_plain(target, value)

    def bind_unpacked(self, target, value: Value, stmt: ast.AST) -> None:
        """`a, b = value`: item by item when the items are known, else each gets the whole."""
        items = value.elements
        plain = value.unpacked()
        starred = any(isinstance(e, ast.Starred) for e in target.elts)
        for i, elt in enumerate(target.elts):
            if isinstance(elt, ast.Starred):
                self.bind(elt.value, plain, stmt)
            elif items is not None and not starred and len(items) == len(target.elts):
                self.bind(elt, items[i], stmt)
            else:
                self.bind(elt, plain, stmt)

    def assign_plain(self, target: ast.AST, value: Value) -> None:
        text = dotted(target)
        if text is not None:
            self.env[text] = value
            self.record(target, value)

    # ------------------------------------------------------------------ expressions
    def expr(self, node: Optional[ast.AST]) -> Value:
        if node is None or self.expr_depth >= MAX_EXPR_DEPTH:
            return UNKNOWN   # deeper than any hand-written expression: not read, so unknown
        method = _EXPR_HANDLERS.get(type(node))
        self.expr_depth += 1
        try:
            value = method(self, node) if method is not None else self.generic(node)
        finally:
            self.expr_depth -= 1
        if self.recording:
            self.facts.values[id(node)] = value
        return value

    def generic(self, node: ast.AST) -> Value:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.expr(child)
        return UNKNOWN

    def expr_Constant(self, node: ast.Constant) -> Value:
        if isinstance(node.value, str):
            return _CUDA_TEXT if node.value.startswith("cuda") else _TEXT
        if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return _PYSCALAR
        return UNKNOWN

    def expr_Name(self, node: ast.Name) -> Value:
        if self.known(node.id):
            value = self.lookup(node.id)
            if self.func is not None and value.has(V.CONTAINER) and not self.is_local(node.id):
                return self.filled(node, value)   # a module's or enclosing function's list
            return value
        func = self.a.index.function_named(node.id, self.func)
        return Value(node=FunctionRef(func)) if func is not None else UNKNOWN

    def expr_Starred(self, node: ast.Starred) -> Value:
        return self.expr(node.value)

    def expr_NamedExpr(self, node) -> Value:
        value = self.expr(node.value)
        self.bind(node.target, value, node)
        return value

    def expr_Attribute(self, node: ast.Attribute) -> Value:
        text = dotted(node)
        if text is not None and text in self.env:
            return self.lookup(text)
        if text is not None and text.startswith("self.") and self.func is not None \
                and self.func.cls is not None:
            attr = self.a.class_attr(self.func.cls, text)
            if attr is not None:
                # a container kept on the object: what another method reads from it is
                # what this class stores there (the proof of a fix follows it by its key)
                return self.filled(node, attr) if attr.has(V.CONTAINER) else attr
        base = self.expr(node.value)
        return semantics.read_attribute(Access(node, base, node.attr)) or UNKNOWN

    def expr_Subscript(self, node: ast.Subscript) -> Value:
        base = self.expr(node.value)
        self.expr(node.slice)
        if base.has(V.CONTAINER) or base.elements is not None:
            return base.contents()
        if base.grad:
            return derived([base], *(t for t in base.tags if t in V.ACTIVATION_TAGS))
        if base.has(V.MODULE):
            return Value.of(V.MODULE)  # nn.Sequential / ModuleList indexing
        return Value(tags=base.tags & {V.TENSOR, V.PYSCALAR}, containers=base.containers,
                     params=base.params, graph_params=base.graph_params)

    def expr_BinOp(self, node: ast.BinOp) -> Value:
        # A long sum (`a + b + c + ...`, generated code) nests to the left as deep as it is
        # long: walk that spine in a loop, not by recursion, in Python's evaluation order.
        spine = []
        while isinstance(node, ast.BinOp):
            spine.append(node)
            node = node.left
        value = self.expr(node)
        for binop in reversed(spine):
            value = self.binop(binop, value, self.expr(binop.right))
            if self.no_grad and value.grad and not value.leaf:
                value = value.no_graph(V.TENSOR)   # arithmetic under no_grad records nothing
            if self.recording and binop is not spine[0]:   # `expr` records the outermost
                self.facts.values[id(binop)] = value
        return value

    def binop(self, node: ast.BinOp, left: Value, right: Value) -> Value:
        if isinstance(node.op, ast.Div):
            if isinstance(node.left, ast.Constant):
                return derived([right], V.RECIPROCAL)
            if left.grad or left.has(V.LOSS) or left.params:   # params: `def f(x): return x / k`
                return derived([left, right], V.DIVIDED)
        if isinstance(node.op, ast.Mult) and (left.has(V.RECIPROCAL) or right.has(V.RECIPROCAL)):
            return derived([left, right], V.DIVIDED)
        if isinstance(node.op, ast.Mod):
            # `step % k` (not `"%d" % x`): the shape of a counter test.
            return _MODULO if not isinstance(node.left, ast.Constant) else _PYSCALAR
        if left.grad or right.grad:
            return derived([left, right])
        if left.has(V.CONTAINER) or right.has(V.CONTAINER):
            return join(left, right)
        both = join(left, right)
        return Value(tags=_arithmetic_tags(left, right), params=both.params,
                     graph_params=both.graph_params)

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Value:
        operand = self.expr(node.operand)
        if isinstance(node.op, ast.Not):
            counter = operand.has(V.COUNTER_COND) or operand.has(V.MODULO)
            return Value.of(V.COUNTER_COND) if counter else UNKNOWN
        return operand

    def expr_Compare(self, node: ast.Compare) -> Value:
        operands = [self.expr(node.left)] + [self.expr(c) for c in node.comparators]
        if any(v.has(V.MODULO) for v in operands):
            return Value.of(V.COUNTER_COND)
        if not any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops) \
                and any(v.is_tensor_like and not v.has(V.PYSCALAR) for v in operands):
            return Value.of(V.TENSOR)   # `pred == y`: a bool tensor, no graph
        return UNKNOWN

    def expr_BoolOp(self, node: ast.BoolOp) -> Value:
        return join_all([self.expr(v) for v in node.values])

    def expr_IfExp(self, node: ast.IfExp) -> Value:
        self.expr(node.test)
        return join(self.expr(node.body), self.expr(node.orelse))

    def expr_Tuple(self, node) -> Value:
        items = tuple(self.expr(e) for e in node.elts)
        base = join_all(items)
        return Value(grad=base.grad, leaf=base.leaf, graphs=base.graphs, origin=base.origin,
                     tags=(base.tags & V.ACTIVATION_TAGS) | {V.CONTAINER},
                     containers=base.containers, params=base.params,
                     graph_params=base.graph_params, elements=items)

    expr_List = expr_Tuple

    def expr_Set(self, node) -> Value:
        return join_all(self.expr(e) for e in node.elts).as_container()

    def expr_Dict(self, node: ast.Dict) -> Value:
        for k in node.keys:
            self.expr(k)
        return join_all(self.expr(v) for v in node.values).as_container()

    def expr_ListComp(self, node) -> Value:
        saved, outer_names = self.env, self.comprehension_names
        self.env = saved.branch()   # comprehension variables do not leak
        for gen in node.generators:
            self.bind(gen.target, semantics.iterated_item(self.expr(gen.iter)), node)
            self.comprehension_names = self.comprehension_names | _bound_names(gen.target)
            for cond in gen.ifs:
                self.expr(cond)
        if hasattr(node, "elt"):
            element = self.expr(node.elt)
        else:
            element = join(self.expr(node.key), self.expr(node.value))
        self.env, self.comprehension_names = saved, outer_names
        return element.as_container()

    expr_SetComp = expr_GeneratorExp = expr_DictComp = expr_ListComp

    def expr_Lambda(self, node) -> Value:
        return UNKNOWN

    def expr_JoinedStr(self, node) -> Value:
        self.generic(node)
        head = node.values[0] if node.values else None
        if isinstance(head, ast.Constant) and isinstance(head.value, str) \
                and head.value.startswith("cuda"):
            return _CUDA_TEXT   # f"cuda:{local_rank}"
        return _TEXT

    def expr_Await(self, node) -> Value:
        return self.expr(node.value)

    # ------------------------------------------------------------------ calls
    def expr_Call(self, node: ast.Call) -> Value:
        func = node.func
        qual = self.qualname(func)
        method = func.attr if isinstance(func, ast.Attribute) else None
        receiver = self.expr(func.value) if method is not None and qual is None else None
        args = tuple(self.expr(a) for a in node.args)
        keyword_values = tuple(self.expr(kw.value) for kw in node.keywords)
        kwargs = {kw.arg: value for kw, value in zip(node.keywords, keyword_values)}
        call = Call(node, qual, method, receiver or UNKNOWN, args, kwargs, self)
        self.unseen_call = False
        result = self.call(call)
        opaque = self.unseen_call
        if self.no_grad and result.grad and not result.leaf:
            result = result.no_graph(V.TENSOR)
        elif self.no_grad and result.flowing_params:
            result = result.graph_cut()   # a helper's return under the caller's no_grad
        if self.recording:
            self.facts.calls.append(CallSite(self.site(node), node, qual, method, receiver,
                                             args, result, opaque, keyword_values))
        return result

    def call(self, call: Call) -> Value:
        if call.qual is not None:
            return self.call_qualified(call)
        if call.method is not None:
            return self.call_method(call)
        if isinstance(call.node.func, ast.Name):
            return self.call_name(call, call.node.func.id)
        called = self.expr(call.node.func)
        self.unseen_call = False   # (the callee expression's own calls are recorded already)
        return self.call_value(call, called)

    def unseen(self) -> Value:
        """The call's callee is nothing the analysis can see into (a function of another
        package, an object of unknown kind): its value is unknown, and so is what it does."""
        self.unseen_call = True
        return UNKNOWN

    def call_qualified(self, call: Call) -> Value:
        """A library function or class, or one imported from another project file."""
        found = project.library_named_project(self.a, call.qual)   # the project's `datasets/`
        result = semantics.call_qualified(call) if found is None else None
        if result is not None:
            return result
        found = found or project.resolve(self.a, call.qual)   # `from models import Net`
        if found is None:
            return self.unseen()
        target = found[1]
        if isinstance(target, FunctionInfo):
            return self.call_function(call.node, target, call.args, call.kwargs, None)
        return self.construct_class(call, target)

    def call_method(self, call: Call) -> Value:
        receiver, method = call.receiver, call.method
        if receiver.cls is not None and not receiver.has(V.CONTAINER):
            target = receiver.cls.method(method)
            # An optimizer's `step()` is what the tables know (it steps), whoever wrote it.
            if target is not None and method not in _LIBRARY_METHODS \
                    and not receiver.has(V.OPTIMIZER):
                result = self.call_function(call.node, target, call.args, call.kwargs, receiver)
                if receiver.cls.is_module and method == "forward":
                    return self.forward(call.node, receiver, call.args, call.kwargs, result)
                return result
        # `self.model(x)`, `self.criterion(out, y)`, `trainer.loss_fn(...)`: calling an
        # attribute that holds a module, a loss or a function of this file.
        held = self.attr_value(call.node.func)
        if held is not None and (semantics.callable_value(held) or isinstance(held.node, FunctionRef)):
            self.record(call.node.func, held)   # the callee (which loss class, which module)
            return self.call_value(call, held)
        result, modelled = semantics.call_method(call)
        if not modelled:
            self.unseen()
        return result or UNKNOWN

    def call_name(self, call: Call, name: str) -> Value:
        if self.known(name):
            local = self.lookup(name)
            if local is not UNKNOWN:
                self.record(call.node.func, local)   # the callee (which loss class, which module)
                return self.call_value(call, local)
        func = self.a.index.function_named(name, self.func)
        if func is not None:
            return self.call_function(call.node, func, call.args, call.kwargs, None)
        cls = self.a.index.classes.get(name)
        if cls is not None:
            return self.construct_class(call, cls)
        result = semantics.call_builtin(call, name)
        if result is not None:
            return result
        found = project.star_imported(self.a, name)   # `from .models import *`
        if found is None:
            return self.unseen()
        if isinstance(found[1], FunctionInfo):
            return self.call_function(call.node, found[1], call.args, call.kwargs, None)
        return self.construct_class(call, found[1])

    def call_value(self, call: Call, called: Value) -> Value:
        result = semantics.call_value(call, called)
        if result is not None:
            return result
        if isinstance(called.node, FunctionRef):
            return self.call_function(call.node, called.node.func, call.args, call.kwargs, None)
        if called.cls is not None and not called.has(V.CONTAINER):
            dunder = called.cls.method("__call__")   # a loss/metric object of this file
            if dunder is not None:
                return self.call_function(call.node, dunder, call.args, call.kwargs, called)
        return self.unseen()

    def construct_class(self, call: Call, cls) -> Value:
        init = cls.method("__init__")
        tags = {V.MODULE} if cls.is_module else set()
        if semantics.optimizer_class(cls):
            tags.add(V.OPTIMIZER)      # `BertAdam(model.parameters())`: a project optimizer
        instance = Value(tags=frozenset(tags), cls=cls, node=call.node)
        if init is not None:
            self.call_function(call.node, init, call.args, call.kwargs, instance, track=True)
        if cls.is_module and self.class_records_no_graph(cls):
            instance = instance.with_tags(V.FROZEN)
        return instance

    def class_records_no_graph(self, cls) -> bool:
        """A module class whose objects record no graph of their own: its `__init__` freezes
        `self` (`self.requires_grad_(False)`, `p.requires_grad = False` over
        `self.parameters()`), or its `forward` runs with autograd off."""
        init, forward = cls.method("__init__"), cls.method("forward")
        if forward is not None and forward_without_grad(forward, self.qualname_in(forward)):
            return True
        if init is None or init is self.func:
            return False
        receiver = init.params[0] if init.params else "self"
        return any(f.module == receiver for f in self.a.facts_for(init).freezes)

    def qualname_in(self, func):
        home = func.home if func.home is not None else self.a
        return home.imports.qualname

    # ------------------------------------------------------------------ interprocedural
    def call_function(self, node, func, args, kwargs, receiver: Optional[Value], track=True) -> Value:
        if self.recording and track:
            self.facts.local_calls.append(LocalCall(self.site(node), func, node))
        bound = _bind_arguments(func, args, kwargs, receiver)
        if self.recording and track:
            self.record_passed_functions(node, func, bound)
        returned = returned_parameter(func)
        if returned is not None and returned in bound:
            return bound[returned]      # `layer_init(nn.Linear(...))`: the argument itself
        ret = self.a.facts_for(func).returns
        if func.home is not None and func.home is not self.a and ret is not UNKNOWN:
            ret = ret.seen_from(node)   # a function of another project file
        if ret is UNKNOWN or not ret.params:
            return ret.without_params()
        return ret.through_call(bound)

    def record_passed_functions(self, node, func, bound: Dict[int, Value]) -> None:
        """A function of the project passed to a project function that calls that parameter
        (`timer(step_fn)()`, `run_epoch(loader, step_fn)`, a wrapper it returns included)
        runs here: recorded as called at this site, so a closure run through a timing
        wrapper is part of the loop that runs the wrapper."""
        for index, value in bound.items():
            if isinstance(value.node, FunctionRef) and index < len(func.params) \
                    and calls_parameter(func, func.params[index]):
                self.facts.local_calls.append(LocalCall(self.site(node), value.node.func, node))

    def forward(self, node, module: Value, args, kwargs, result: Optional[Value] = None) -> Value:
        """`module(x)`: its forward's summary when the class is in the file (plus the
        activation it is known to end in), recorded as a forward pass."""
        forward = module.cls.method("forward") if module.cls is not None else None
        if result is None:
            result = UNKNOWN
            if forward is not None:
                result = self.call_function(node, forward, args, kwargs, module, track=False)
            if module.activation is not None and not module.has(V.ACTIVATION_MODULE):
                result = result.with_tags(module.activation)
        no_grad = self.no_grad or (module.cls is not None and forward is not None
                                   and forward_without_grad(forward, self.qualname_in(forward)))
        value = semantics.forward_output(node, module, result, list(args) + list(kwargs.values()),
                                         no_grad)
        if self.recording:
            self.facts.forwards.append(Forward(self.site(node), module, value))
        return value

    # ------------------------------------------------------------------ events
    def record_backward(self, node, value: Value, via: str) -> None:
        if self.recording:
            self.facts.backwards.append(Backward(self.site(node), value, via))

    def record_reset(self, node) -> None:
        if self.recording:
            self.facts.resets.append(self.site(node))

    def record_step(self, node, via: str) -> None:
        if self.recording:
            self.facts.steps.append(Step(self.site(node), via))

    def record_freeze(self, node, module: str) -> None:
        """`module` (as written) is frozen from here on: its value says so too, so what it
        computes carries only its inputs' graphs."""
        if self.recording:
            self.facts.freezes.append(Freeze(self.site(node), module))
        held = self.env.get(module)
        if held is not None and held.has(V.MODULE) and not held.has(V.CONTAINER):
            self.env[module] = held.with_tags(V.FROZEN)

    def freeze_after_loop(self, loop, module: str) -> None:
        """The body of `loop` (over `module.parameters()`) freezes each parameter on every
        iteration: `module` is frozen once the loop ends, however many it has."""
        self.freezes_at_exit.setdefault(loop, []).append(module)

    def thaw(self, module: str) -> None:
        """`module` (as written) trains its parameters again (`requires_grad_(True)`)."""
        for key in [k for k in self.env if module == k or module.startswith(k + ".")]:
            held = self.env[key]   # (a thawed head makes its whole model trainable too)
            if held.has(V.FROZEN):
                self.env[key] = held.with_tags(drop=frozenset({V.FROZEN}))

    def innermost_loop_binding(self, name: str):
        """The innermost enclosing `for` loop whose target binds `name`, or None."""
        for loop in reversed(self.loops):
            target = getattr(loop, "target", None)
            if target is not None and any(isinstance(n, ast.Name) and n.id == name
                                          for n in ast.walk(target)):
                return loop
        return None

    def record_grad_scale(self, node) -> None:
        if self.recording:
            self.facts.grad_scales.append(self.site(node))

    def record_mode(self, node, mode: str, receiver: str) -> None:
        self.eval_mode = mode == "eval"
        if self.recording:
            self.facts.modes.append(ModeCall(self.site(node), mode, receiver))

    def record_store(self, container: ast.AST, stmt: ast.AST, how: str, value: Value,
                     expr: ast.AST) -> None:
        """Record `value` put into `container`, when we are inside a loop."""
        if not self.loops or not self.recording:
            return
        keyed = self.key_for(container)
        if keyed is None:
            return
        key, text = keyed
        fresh = tuple(loop for loop in self.loops if text in self.facts.loop_rebinds.get(loop, ()))
        self.facts.stores.append(Store(self.site(stmt), key, text, how, value, expr, fresh))


def _handlers(prefix: str):
    """ast node type -> FlowAnalyzer method, looked up once instead of per node."""
    table = {}
    for name in dir(FlowAnalyzer):
        if name.startswith(prefix):
            node_type = getattr(ast, name[len(prefix):], None)
            if isinstance(node_type, type):
                table[node_type] = getattr(FlowAnalyzer, name)
    return table


_EXPR_HANDLERS = _handlers("expr_")
_STMT_HANDLERS = _handlers("stmt_")


def _bind_arguments(func, args, kwargs, receiver) -> Dict[int, Value]:
    bound: Dict[int, Value] = {}
    offset = 1 if receiver is not None and func.is_method else 0
    if offset:
        bound[0] = receiver
    for i, value in enumerate(args):
        bound[i + offset] = value
    for name, value in kwargs.items():
        if name in func.params:
            bound[func.params.index(name)] = value
    # `f(**inputs)`: any parameter not bound otherwise may receive one of its values
    unpacked = kwargs.get(None)
    if unpacked is not None:
        for position in range(offset, len(func.params)):
            bound.setdefault(position, unpacked.contents())
    return bound


_CALLED_PARAMETERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def calls_parameter(func, name: str) -> bool:
    """`func`'s body, or a function nested in it that does not rebind `name`, calls the
    parameter `name` (`fn(*args)`): read from the text once per function."""
    called = _CALLED_PARAMETERS.get(func)
    if called is None:
        called = _CALLED_PARAMETERS[func] = frozenset(_called_names(func.node))
    return name in called


def _called_names(node: ast.AST) -> set:
    """Names called in `node`'s body and in nested functions that do not bind them."""
    out, rebound = set(), set()
    for child in ast.walk(node):
        if isinstance(child, ast.Call) and isinstance(child.func, ast.Name):
            out.add(child.func.id)
        elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            rebound.add(child.id)
    return out - rebound


def _stored_expr(stmt: ast.AST) -> ast.AST:
    return getattr(stmt, "value", None) or stmt


def _bound_names(target: ast.AST) -> FrozenSet[str]:
    """The names a `for` target binds (`g`, `(i, (x, y))`)."""
    return frozenset(n.id for n in ast.walk(target) if isinstance(n, ast.Name))


def forward_without_grad(forward, qualname) -> bool:
    """A `forward` whose results are all made with autograd off: decorated with
    `torch.no_grad()`/`inference_mode()`, or each of its `return`s inside a `with` block that
    turns autograd off (a feature extractor that keeps itself out of every graph)."""
    if forward.grad_disabled_by_decorators:
        return True
    returns = _returns_under_grad_off(forward.node.body, qualname, False)
    return bool(returns) and all(returns)


def _returns_under_grad_off(body, qualname, off: bool) -> list:
    """For each `return` of the body (not of nested functions): is autograd off there?"""
    found = []
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(stmt, ast.Return):
            found.append(off)
            continue
        inner = off or isinstance(stmt, (ast.With, ast.AsyncWith)) and any(
            _grad_off_item(item, qualname) for item in stmt.items)
        blocks = [getattr(stmt, name, None) or [] for name in ("body", "orelse", "finalbody")]
        blocks += [handler.body for handler in getattr(stmt, "handlers", None) or []]
        blocks += [case.body for case in getattr(stmt, "cases", None) or []]
        for block in blocks:
            found += _returns_under_grad_off(block, qualname, inner)
    return found


def _grad_off_item(item, qualname) -> bool:
    expr = item.context_expr
    call = expr if isinstance(expr, ast.Call) else None
    qual = qualname(call.func if call is not None else expr)
    return semantics.context_grad_mode(qual, call) is False
