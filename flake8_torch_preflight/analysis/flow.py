"""Order-aware flow analysis of one function body: values, graphs and training events.

The analysis walks statements in order with an environment `name -> Value`, so
`x = x.item()` changes what `x` is from that line on and not before. Branches are joined,
loop bodies are walked twice (once to let loop-carried values settle, once to record), and
calls to functions of the same file use their summaries (computed once, see
`analysis.FileAnalysis`). Everything a rule may ask is recorded in `FunctionFacts`.
"""
from __future__ import annotations

import ast
from dataclasses import replace
from typing import Dict, Iterable, List, Optional, Tuple

from . import torchapi as api
from . import values as V
from .astutil import dotted, is_const, keyword
from .bindings import scan_bindings
from .events import (Backward, CallSite, Cond, Forward, FunctionFacts, LocalCall, ModeCall,
                     Site, Step, Store)
from .values import UNKNOWN, Origin, Value, derived, join, join_all

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_STORE_METHODS = {"append": "append", "extend": "extend", "insert": "insert", "add": "add",
                  "appendleft": "append", "update": "update"}
_CONTAINER_READ_METHODS = frozenset({"pop", "popleft", "get", "values", "items", "copy", "index"})
_MODULE_RETURNS_SELF = frozenset({"to", "cuda", "cpu", "train", "eval", "half", "float", "double",
                                  "bfloat16", "requires_grad_", "type", "share_memory"})
# Graph-breaking methods whose result lives on the host (a number, a size, a list/array).
_HOST_RESULTS = frozenset({"item", "tolist", "numpy", "size", "dim", "numel", "nelement",
                           "element_size", "data_ptr", "stride", "get_device", "is_contiguous"})
_MAX_DEPTH_TWICE = 4   # loops nested deeper than this are walked once


class FlowAnalyzer:
    def __init__(self, analysis, func, facts: FunctionFacts, env: Dict[str, Value],
                 global_env: Dict[str, Value], recording: bool = True) -> None:
        self.a = analysis
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
        self.scope = func.qualname if func else "<module>"
        body = func.node.body if func else analysis.tree.body
        local_names, self.rebinds, self.writes = scan_bindings(body)
        self.local_names = local_names | set(func.params) if func else None

    # ------------------------------------------------------------------ helpers
    def site(self, node: ast.AST) -> Site:
        return Site(node, self.current_stmt or node, tuple(self.loops), tuple(self.conds),
                    self.no_grad, self.accumulate,
                    self.eval_mode)

    def key_for(self, target: ast.AST) -> Optional[Tuple[str, str]]:
        """(container key, text) for a name or `self.attr` used as a container."""
        text = dotted(target)
        if text is None:
            return None
        head = text.split(".", 1)[0]
        if head == "self" and self.func is not None and self.func.cls is not None:
            return f"{self.func.cls.name}.{text}", text
        if self.local_names is not None and head not in self.local_names:
            return f"<module>:{text}", text
        return f"{self.scope}:{text}", text

    def lookup(self, name: str) -> Value:
        if name in self.env:
            if self.iteration_reads is not None and name not in self.env.iteration:
                self.iteration_reads.add(name)
            return self.env[name]
        return self.global_env.get(name, UNKNOWN)

    def filled(self, container: ast.AST, value: Value) -> Value:
        """`value` marked as the contents of `container`, so later reads (`torch.stack(xs)`,
        `sum(xs)`, `xs.pop()`) say where they came from: a backward or a return that
        consumes them makes the stores into `container` deliberate (TPF001)."""
        keyed = self.key_for(container)
        if keyed is None or keyed[0] in value.containers:
            return value
        return replace(value, containers=value.containers | {keyed[0]})

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
                added = self.facts.values.get(id(other), UNKNOWN)
                if added.grad and not added.leaf:
                    self.store(target, node, "augassign", added, other)
                return True
        return False

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.bind(node.target, self.expr(node.value), node)

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        right = self.expr(node.value)
        current = self.expr(node.target)
        if isinstance(node.op, ast.Div) and (current.grad or current.has(V.LOSS) or current.params):
            result = derived([current, right], V.DIVIDED)
        elif isinstance(node.op, ast.Mult) and right.has(V.RECIPROCAL):
            result = derived([current, right], V.DIVIDED)
        else:
            result = derived([current, right]) if (current.grad or right.grad) else join(current, right)
        if right.grad and not right.leaf:
            self.store(node.target, node, "augassign", right, node.value)
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
        self.loop(node, lambda: self.bind(node.target, _iter_item(iterated), node))

    stmt_AsyncFor = stmt_For

    def stmt_While(self, node: ast.While) -> None:
        self.loop(node, lambda: self.expr(node.test))

    def loop(self, node, enter) -> None:
        facts = self.facts
        if node not in facts.loop_parents:
            facts.loops.append(node)
            facts.loop_parents[node] = self.loops[-1] if self.loops else None
            facts.loop_rebinds[node] = frozenset(self.rebinds.get(node, ()))
            facts.loop_writes[node] = frozenset(self.writes.get(node, ()))
        before = self.env
        self.loops.append(node)
        outer_reads, self.iteration_reads = self.iteration_reads, set()
        mark = self.facts.mark() if self.recording else None
        self.env = before.branch(iteration=set())
        enter()
        self.run(node.body)
        body_written = set(self.env.written)
        after = merge_envs(before, self.env)
        if mark is not None and len(self.loops) <= _MAX_DEPTH_TWICE and \
                _carried_values_changed(before, after, self.iteration_reads):
            # A value read at the top of an iteration is changed by the iteration before
            # (`hidden = model(x, hidden)`): walk the body again from the settled values.
            self.facts.rollback(mark)
            self.env = after.branch(iteration=set())
            enter()
            self.run(node.body)
            body_written |= self.env.written
            after = merge_envs(after, self.env)
        reads, self.iteration_reads = self.iteration_reads, outer_reads
        if outer_reads is not None:
            outer_reads |= reads - before.iteration
        after.iteration.update(body_written)
        self.loops.pop()
        self.env = after
        self.run(node.orelse)

    def stmt_With(self, node) -> None:
        saved = (self.no_grad, self.accumulate)
        for item in node.items:
            ctx = item.context_expr
            value = self.expr(ctx)
            grad_mode = self.grad_mode_of(ctx)
            if grad_mode is False:
                self.no_grad = True
            elif grad_mode is True:
                self.no_grad = False
            if self.is_accumulate_context(ctx, value):
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
            items = value.elements
            plain = Value(grad=value.grad, graphs=value.graphs, origin=value.origin,
                          tags=value.tags - {V.CONTAINER}, containers=value.containers,
                          params=value.params, cls=value.cls)
            starred = any(isinstance(e, ast.Starred) for e in target.elts)
            for i, elt in enumerate(target.elts):
                if isinstance(elt, ast.Starred):
                    self.bind(elt.value, plain, stmt)
                elif items is not None and not starred and len(items) == len(target.elts):
                    self.bind(elt, items[i], stmt)
                else:
                    self.bind(elt, plain, stmt)
            return
        if isinstance(target, ast.Subscript):
            self.expr(target.slice)
            if value.grad and not value.leaf:
                self.store(target.value, stmt, "setitem", value, _stored_expr(stmt))
            self.assign_plain(target.value, self.filled(
                target.value, join(self.expr(target.value), _contents(value))), record=False)
            return
        if isinstance(target, ast.Attribute) and target.attr == "grad":
            self.reset(stmt)   # `p.grad = None` over parameters
        if isinstance(target, ast.Attribute) and value.grad and not value.leaf \
                and isinstance(target.value, ast.Name) and target.value.id == "self":
            self.store(target, stmt, "setattr", value, _stored_expr(stmt))
        self.assign_plain(target, value)

    def assign_plain(self, target: ast.AST, value: Value, record: bool = True) -> None:
        text = dotted(target)
        if text is not None:
            self.env[text] = value
            if record:
                self.record(target, value)

    def store(self, container: ast.AST, stmt: ast.AST, how: str, value: Value,
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

    # ------------------------------------------------------------------ expressions
    def expr(self, node: Optional[ast.AST]) -> Value:
        if node is None:
            return UNKNOWN
        method = _EXPR_HANDLERS.get(type(node))
        value = method(self, node) if method is not None else self.generic(node)
        if self.recording:
            self.facts.values[id(node)] = value
        return value

    def generic(self, node: ast.AST) -> Value:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.expr(child)
        return UNKNOWN

    def expr_Constant(self, node: ast.Constant) -> Value:
        if isinstance(node.value, str) and node.value.startswith("cuda"):
            return Value(tags=frozenset({V.CUDA_DEVICE}))
        if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return Value(tags=frozenset({V.PYSCALAR}))
        return UNKNOWN

    def expr_Name(self, node: ast.Name) -> Value:
        if node.id in self.env or node.id in self.global_env:
            return self.lookup(node.id)
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
                return attr
        base = self.expr(node.value)
        attr = node.attr
        if base.grad:
            if attr in api.GRAPH_BREAKING_ATTRS:
                return base.no_graph(V.TENSOR if attr in ("data", "grad") else V.PYSCALAR)
            tag = V.LOGITS if attr == "logits" else V.LOSS if attr == "loss" else None
            return derived([base], *((tag,) if tag else ()))
        if base.has(V.LOADER):
            field_value = base.field(attr)
            if field_value is not None:
                return field_value
        if base.has(V.MODULE) and attr not in ("config", "device", "dtype", "training"):
            # `model.module`, `model.fc`: submodules of a module are modules.
            return Value(tags=frozenset({V.MODULE}))
        if base.has(V.CONTAINER):
            return base
        if base.has(V.TENSOR) and not base.has(V.PYSCALAR) and attr in ("grad", "data", "T", "mT"):
            return Value(tags=frozenset({V.TENSOR}))   # `p.grad` of a parameter (TPF010)
        return UNKNOWN

    def expr_Subscript(self, node: ast.Subscript) -> Value:
        base = self.expr(node.value)
        self.expr(node.slice)
        if base.has(V.CONTAINER) or base.elements is not None:
            return _contents(base)
        if base.grad:
            return derived([base], *(t for t in base.tags if t in V.ACTIVATION_TAGS))
        if base.has(V.MODULE):
            return Value(tags=frozenset({V.MODULE}))  # nn.Sequential / ModuleList indexing
        return Value(tags=base.tags & {V.TENSOR, V.PYSCALAR}, containers=base.containers,
                     params=base.params)

    def expr_BinOp(self, node: ast.BinOp) -> Value:
        left, right = self.expr(node.left), self.expr(node.right)
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
        tags = (left.tags | right.tags) & {V.PYSCALAR, V.TENSOR}
        return Value(tags=tags, params=left.params | right.params)

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Value:
        operand = self.expr(node.operand)
        if isinstance(node.op, ast.Not):
            counter = operand.has(V.COUNTER_COND) or operand.has(V.MODULO)
            return Value(tags=frozenset({V.COUNTER_COND})) if counter else UNKNOWN
        return operand

    def expr_Compare(self, node: ast.Compare) -> Value:
        operands = [self.expr(node.left)] + [self.expr(c) for c in node.comparators]
        if any(v.has(V.MODULO) for v in operands):
            return Value(tags=frozenset({V.COUNTER_COND}))
        if not any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops) \
                and any((v.grad or v.has(V.TENSOR)) and not v.has(V.PYSCALAR) for v in operands):
            return Value(tags=frozenset({V.TENSOR}))   # `pred == y`: a bool tensor, no graph
        return UNKNOWN

    def expr_BoolOp(self, node: ast.BoolOp) -> Value:
        parts = [self.expr(v) for v in node.values]
        return join_all(parts)

    def expr_IfExp(self, node: ast.IfExp) -> Value:
        self.expr(node.test)
        return join(self.expr(node.body), self.expr(node.orelse))

    def expr_Tuple(self, node) -> Value:
        items = tuple(self.expr(e) for e in node.elts)
        base = join_all(items)
        return Value(grad=base.grad, leaf=base.leaf, graphs=base.graphs, origin=base.origin,
                     tags=(base.tags & V.ACTIVATION_TAGS) | {V.CONTAINER}, containers=base.containers,
                     params=base.params, elements=items)

    expr_List = expr_Tuple

    def expr_Set(self, node) -> Value:
        return _as_container(join_all(self.expr(e) for e in node.elts))

    def expr_Dict(self, node: ast.Dict) -> Value:
        for k in node.keys:
            self.expr(k)
        return _as_container(join_all(self.expr(v) for v in node.values))

    def expr_ListComp(self, node) -> Value:
        saved = self.env
        self.env = saved.branch()   # comprehension variables do not leak
        for gen in node.generators:
            self.bind(gen.target, _iter_item(self.expr(gen.iter)), node)
            for cond in gen.ifs:
                self.expr(cond)
        if hasattr(node, "elt"):
            element = self.expr(node.elt)
        else:
            element = join(self.expr(node.key), self.expr(node.value))
        self.env = saved
        return _as_container(element)

    expr_SetComp = expr_GeneratorExp = expr_DictComp = expr_ListComp

    def expr_Lambda(self, node) -> Value:
        return UNKNOWN

    def expr_JoinedStr(self, node) -> Value:
        self.generic(node)
        head = node.values[0] if node.values else None
        if isinstance(head, ast.Constant) and isinstance(head.value, str) \
                and head.value.startswith("cuda"):
            return Value(tags=frozenset({V.CUDA_DEVICE}))   # f"cuda:{local_rank}"
        return UNKNOWN

    def expr_Await(self, node) -> Value:
        return self.expr(node.value)

    # ------------------------------------------------------------------ calls
    def expr_Call(self, node: ast.Call) -> Value:
        func = node.func
        qual = self.a.imports.qualname(func)
        receiver = None
        method = None
        if isinstance(func, ast.Attribute):
            method = func.attr
            if qual is None:
                receiver = self.expr(func.value)
        elif isinstance(func, ast.Name) and qual is None:
            receiver = None
        args = tuple(self.expr(a) for a in node.args)
        kwargs = {kw.arg: self.expr(kw.value) for kw in node.keywords}
        result = self.call(node, qual, method, receiver, args, kwargs)
        if self.no_grad and result.grad and not result.leaf:
            result = result.no_graph(V.TENSOR)
        if self.recording:
            self.facts.calls.append(CallSite(self.site(node), node, qual, method, receiver, args, result))
        return result

    def call(self, node, qual, method, receiver, args, kwargs) -> Value:
        if qual is not None:
            return self.call_qualified(node, qual, args, kwargs)
        if method is not None:
            return self.call_method(node, method, receiver, args, kwargs)
        if isinstance(node.func, ast.Name):
            return self.call_name(node, node.func.id, args, kwargs)
        callee = self.expr(node.func)
        return self.call_value(node, callee, args, kwargs)

    def call_qualified(self, node, qual, args, kwargs) -> Value:
        line = node.lineno
        if api.is_loss_class(qual) or api.is_torch_nn_class(qual):
            return self.construct_nn(node, qual, args)
        if qual in api.LOSS_FUNCTIONS:
            return self.loss_result(node, args)
        if qual in api.SOFTMAX_FUNCS:
            return _activation(args, V.SOFTMAX)
        if qual in api.LOG_SOFTMAX_FUNCS:
            return _activation(args, V.LOG_SOFTMAX)
        if qual in api.SIGMOID_FUNCS:
            return _activation(args, V.SIGMOID)
        if qual in ("torch.autograd.backward",) and args:
            self.backward(node, args[0], "autograd")
            return UNKNOWN
        if qual in api.SCALER_NAMES:
            return Value(tags=frozenset({V.SCALER}), node=node)
        if qual in api.DATALOADER_NAMES:
            return self.construct_loader(node, args, kwargs)
        if qual in api.DISTRIBUTED_SAMPLERS:
            return Value(tags=frozenset({V.DIST_SAMPLER, V.SAMPLER}), node=node)
        if qual in api.ACCELERATOR_NAMES:
            return Value(tags=frozenset({V.ACCELERATOR}), node=node)
        if qual in api.FABRIC_NAMES:
            return Value(tags=frozenset({V.FABRIC}), node=node)
        if qual in api.DEEPSPEED_INIT:
            engine = Value(tags=frozenset({V.ENGINE, V.MODULE}), node=node)
            return Value(tags=frozenset({V.ENGINE}), node=node,
                         elements=(engine, Value(tags=frozenset({V.ENGINE})), Value(
                             tags=frozenset({V.LOADER, V.PREPARED})), Value(tags=frozenset({V.SCHEDULER}))))
        if qual in api.DDP_WRAPPERS:
            wrapped = args[0] if args else UNKNOWN
            return Value(tags=wrapped.tags | {V.MODULE, V.DDP}, cls=wrapped.cls, node=node)
        if api.SCHEDULER_RE.match(qual):
            return Value(tags=frozenset({V.SCHEDULER}), node=node)
        if api.OPTIMIZER_RE.match(qual) or api.OPTIMIZER_FACTORY_RE.match(qual):
            if self.loops:
                self.reset(node)   # a fresh optimizer per iteration starts from clean gradients
            return Value(tags=frozenset({V.OPTIMIZER}), node=node)
        if qual in ("torch.device",) and args and args[0].has(V.CUDA_DEVICE):
            return Value(tags=frozenset({V.CUDA_DEVICE}))
        if api.MODEL_FACTORY_RE.match(qual):
            wrapped = args[0] if args else UNKNOWN
            return Value(tags=frozenset({V.MODULE}) | (wrapped.tags & {V.DDP}), cls=wrapped.cls,
                         node=node)
        if qual.endswith(".from_pretrained") and ("Tokenizer" in qual or "Processor" in qual):
            return UNKNOWN
        if not qual.startswith("torch."):
            # `Net()` imported from a module class of another file of this project.
            from .project import instance_of
            instance = instance_of(self.a, qual, node)
            if instance is not None:
                return instance
        requires_grad = keyword(node, "requires_grad")
        if qual.startswith("torch."):
            if is_const(requires_grad, True):
                return Value(grad=True, leaf=True, graphs=frozenset({line}),
                             origin=Origin(line, node), tags=frozenset({V.TENSOR}))
            if qual in api.TORCH_BREAKING_FUNCS or not any(a.grad for a in args):
                cuda = any(v.has(V.CUDA_DEVICE) for v in kwargs.values())
                return Value(tags=frozenset({V.TENSOR} | ({V.CUDA_DEVICE} if cuda else set())))
            return derived(list(args) + list(kwargs.values()), V.TENSOR)
        return UNKNOWN

    def call_name(self, node, name, args, kwargs) -> Value:
        local = self.lookup(name) if (name in self.env or name in self.global_env) else None
        if local is not None and local is not UNKNOWN:
            self.record(node.func, local)   # the callee (which loss class, which module)
            return self.call_value(node, local, args, kwargs)
        func = self.a.index.function_named(name, self.func)
        if func is not None:
            return self.call_function(node, func, args, kwargs, None)
        cls = self.a.index.classes.get(name)
        if cls is not None:
            return self.construct_class(node, cls, args, kwargs)
        if name in api.PYTHON_BREAKERS:
            return Value(tags=frozenset({V.PYSCALAR}))
        if name in ("sum", "max", "min", "abs", "list", "tuple", "sorted", "reversed", "iter",
                    "next", "dict", "set"):
            if name in ("list", "tuple", "dict", "set") and not args:
                return Value(tags=frozenset({V.CONTAINER}))
            base = join_all(args)
            return base if name in ("list", "tuple", "sorted", "reversed", "iter", "set", "dict") \
                else _contents(base) if base.has(V.CONTAINER) else base
        if name == "enumerate" and args:
            return Value(tags=frozenset({V.CONTAINER}),
                         elements=(Value(tags=frozenset({V.PYSCALAR})), _iter_item(args[0])))
        if name == "zip" and args:
            return Value(tags=frozenset({V.CONTAINER}), elements=tuple(_iter_item(a) for a in args))
        return UNKNOWN

    def call_value(self, node, callee: Value, args, kwargs) -> Value:
        if callee.has(V.LOSS_FN):
            return self.loss_result(node, args)
        if callee.has(V.ACTIVATION_MODULE):
            return _activation(args, callee.activation)
        if callee.has(V.MODULE) or callee.has(V.SELF) and callee.cls is not None and callee.cls.is_module:
            return self.forward(node, callee, args, kwargs)
        if isinstance(callee.node, FunctionRef):
            return self.call_function(node, callee.node.func, args, kwargs, None)
        if callee.cls is not None and not callee.has(V.CONTAINER):
            dunder = callee.cls.method("__call__")   # a loss/metric object of this file
            if dunder is not None:
                return self.call_function(node, dunder, args, kwargs, callee)
        return UNKNOWN

    def call_method(self, node, method, receiver: Value, args, kwargs) -> Value:
        recv = receiver or UNKNOWN
        text = (dotted(node.func.value) or "") if isinstance(node.func, ast.Attribute) else ""
        # Methods of classes defined in this file: use the method's summary.
        if recv.cls is not None and not recv.has(V.CONTAINER):
            target = recv.cls.method(method)
            if target is not None and method not in ("eval", "train", "zero_grad", "to", "cuda"):
                result = self.call_function(node, target, args, kwargs, recv)
                if recv.cls.is_module and method == "forward":
                    return self.forward(node, recv, args, kwargs, result)
                return result
        # `self.model(x)`, `self.criterion(out, y)`, `trainer.loss_fn(...)`: calling an
        # attribute that holds a module, a loss or a function of this file.
        held = self.attr_value(node.func)
        if held is not None and (held.has(V.MODULE) or held.has(V.LOSS_FN)
                                 or held.has(V.ACTIVATION_MODULE)
                                 or isinstance(held.node, FunctionRef)):
            self.record(node.func, held)   # the callee (which loss class, which module)
            return self.call_value(node, held, args, kwargs)
        if method == "backward":
            if recv.grad or recv.has(V.LOSS) or not args or recv.has(V.TENSOR):
                self.backward(node, recv, "tensor")
                return UNKNOWN
            via = ("accelerator" if recv.has(V.ACCELERATOR) else "engine" if recv.has(V.ENGINE)
                   else "fabric" if recv.has(V.FABRIC) else "accelerator")
            self.backward(node, args[0], via)
            return UNKNOWN
        if method == "zero_grad" or (method == "zero_" and isinstance(node.func.value, ast.Attribute)
                                     and node.func.value.attr == "grad"):
            self.reset(node)
            return UNKNOWN
        if method == "step":
            self.maybe_step(node, recv, text, args)
            return UNKNOWN
        root = (text or _module_chain_root(node.func.value)) if method in ("eval", "train") else text
        if method in ("eval", "train") and (recv.has(V.MODULE) or _model_like(root)):
            mode = "eval" if method == "eval" or (args and is_const(node.args[0], False)) else "train"
            self.mode_call(node, mode, root)
            return recv
        if recv.has(V.SCALER):
            if method == "scale" and args:
                return args[0]
            if method == "unscale_":
                return UNKNOWN
        if recv.has(V.ACCELERATOR) or recv.has(V.FABRIC):
            if method in ("prepare", "setup", "setup_dataloaders", "prepare_data_loader",
                          "prepare_model", "prepare_optimizer", "setup_module", "setup_optimizers"):
                prepared = tuple(a.with_tags(V.PREPARED) for a in args)
                return prepared[0] if len(prepared) == 1 else Value(
                    tags=frozenset({V.CONTAINER}), elements=prepared)
            if method in ("accumulate", "no_sync", "autocast"):
                # Only `accumulate` scales for us (with `accelerator.backward`); `no_sync`
                # just skips the all-reduce, like DDP's.
                return Value(tags=frozenset({"accumulate"}) if method == "accumulate" else frozenset())
            return UNKNOWN
        if recv.has(V.MODULE):
            if method in _MODULE_RETURNS_SELF:
                return recv
            if method == "forward":
                return self.forward(node, recv, args, kwargs)
            if method in ("parameters", "named_parameters"):
                return Value(tags=frozenset({V.PARAMS, V.CONTAINER}))
            if method == "no_sync":
                return UNKNOWN   # DDP/FSDP skip the all-reduce; nothing scales the loss
            if method in ("modules", "children"):
                return _as_container(Value(tags=frozenset({V.MODULE})))
            return UNKNOWN
        if recv.has(V.CONTAINER) or recv.elements is not None:
            if method in _STORE_METHODS and args:
                stored = args[-1]
                if method == "extend" or method == "update":
                    stored = _contents(stored) if stored.has(V.CONTAINER) else stored
                if stored.grad and not stored.leaf:
                    self.store(node.func.value, node, _STORE_METHODS[method], stored, node.args[-1])
                key = dotted(node.func.value)
                if key is not None:
                    self.env[key] = self.filled(node.func.value, join(recv, _as_container(stored)))
                return UNKNOWN
            if method in _CONTAINER_READ_METHODS:
                return _contents(recv)
            return UNKNOWN
        if method in _STORE_METHODS and args and args[-1].grad and not args[-1].leaf \
                and not (recv.grad or recv.has(V.TENSOR)) \
                and isinstance(self.current_stmt, ast.Expr) and self.current_stmt.value is node:
            # (`y = t.add(u)` uses a result: arithmetic; list/set/dict stores return None.)
            # Unknown receiver (a list built elsewhere, `self.history`): still a store.
            self.store(node.func.value, node, _STORE_METHODS[method], args[-1], node.args[-1])
            key = dotted(node.func.value)
            if key is not None:
                self.env[key] = self.filled(node.func.value, join(recv, _as_container(args[-1])))
            return UNKNOWN
        if recv.grad or recv.has(V.TENSOR):
            return self.tensor_method(node, method, recv, args)
        if method in ("div", "div_", "true_divide") and recv.params:
            return derived([recv] + list(args), V.DIVIDED)   # `def f(x): return x.div(k)`
        if method in api.GRAPH_KEEPING_METHODS and recv.params:
            return derived([recv])   # a parameter's `x.mean()`: summaries follow what is passed
        return UNKNOWN

    def tensor_method(self, node, method, recv: Value, args) -> Value:
        if method in ("detach", "detach_"):
            return recv.no_graph(V.TENSOR)
        if method in api.GRAPH_BREAKING_METHODS:
            if method in _HOST_RESULTS:   # a host value: no longer a tensor at all
                return Value(tags=frozenset({V.PYSCALAR}), containers=recv.containers,
                             params=recv.params)
            return recv.no_graph(V.TENSOR)
        if method == "softmax":
            return _activation((recv,), V.SOFTMAX)
        if method == "log_softmax":
            return _activation((recv,), V.LOG_SOFTMAX)
        if method == "sigmoid":
            return _activation((recv,), V.SIGMOID)
        if method in ("div", "div_", "true_divide") and (recv.grad or recv.has(V.LOSS)):
            return derived([recv] + list(args), V.DIVIDED)
        if method in api.GRAPH_KEEPING_METHODS:
            keep = [t for t in recv.tags if t in V.ACTIVATION_TAGS] if method in (
                "to", "float", "half", "double", "bfloat16", "cuda", "contiguous", "view",
                "reshape", "squeeze", "unsqueeze", "flatten", "clone") else []
            cuda = [V.CUDA_DEVICE] if method == "cuda" or (
                method == "to" and any(a.has(V.CUDA_DEVICE) for a in args)) else []
            out = derived([recv] + [a for a in args if a.grad], *keep, *cuda)
            return out.with_tags(*(t for t in recv.tags if t == V.CUDA_DEVICE))
        return UNKNOWN

    # ------------------------------------------------------------------ constructors
    def construct_nn(self, node, qual, args) -> Value:
        last = qual.rsplit(".", 1)[-1]
        if last == "Parameter":
            return Value(grad=True, leaf=True, graphs=frozenset({node.lineno}),
                         origin=Origin(node.lineno, node), tags=frozenset({V.TENSOR}))
        if qual in ("torch.nn.ModuleList", "torch.nn.ModuleDict", "torch.nn.ParameterList"):
            return Value(tags=frozenset({V.MODULE}), node=node)
        tags = {V.MODULE}
        activation = None
        if api.is_loss_class(qual):
            tags.add(V.LOSS_FN)
        if qual in api.SOFTMAX_MODULES:
            tags.add(V.ACTIVATION_MODULE)
            activation = V.SOFTMAX
        elif qual in api.LOG_SOFTMAX_MODULES:
            tags.add(V.ACTIVATION_MODULE)
            activation = V.LOG_SOFTMAX
        elif qual in api.SIGMOID_MODULES:
            tags.add(V.ACTIVATION_MODULE)
            activation = V.SIGMOID
        elif last == "Sequential" and node.args:
            last_layer = args[-1]
            if last_layer.has(V.ACTIVATION_MODULE):
                activation = last_layer.activation
            # The last layer, for rules that ask what the stack outputs (TPF006 raw logits).
            return Value(tags=frozenset(tags), node=node, activation=activation,
                         fields=(("last", last_layer),))
        return Value(tags=frozenset(tags), node=node, activation=activation)

    def construct_loader(self, node, args, kwargs) -> Value:
        fields = []
        sampler = kwargs.get("sampler") or kwargs.get("batch_sampler")
        if sampler is not None:
            fields.append(("sampler", sampler))
        dataset = kwargs.get("dataset") or (args[0] if args else None)
        if dataset is not None:
            fields.append(("dataset", dataset))
        return Value(tags=frozenset({V.LOADER}), node=node, fields=tuple(fields))

    def construct_class(self, node, cls, args, kwargs) -> Value:
        init = cls.method("__init__")
        instance = Value(tags=frozenset({V.MODULE} if cls.is_module else set()), cls=cls, node=node)
        if init is not None:
            self.call_function(node, init, args, kwargs, instance, track=True)
        return instance

    # ------------------------------------------------------------------ events
    def forward(self, node, module: Value, args, kwargs, result: Optional[Value] = None) -> Value:
        line = node.lineno
        if result is None:
            result = UNKNOWN
            if module.cls is not None:
                fwd = module.cls.method("forward")
                if fwd is not None:
                    result = self.call_function(node, fwd, args, kwargs, module, track=False)
            if module.activation is not None and not module.has(V.ACTIVATION_MODULE):
                result = result.with_tags(module.activation)
        tags = {V.TENSOR} | (result.tags & V.ACTIVATION_TAGS)
        if not tags & V.ACTIVATION_TAGS:
            tags.add(V.LOGITS)
        if module.has(V.LOSS_FN):
            tags = {V.TENSOR, V.LOSS}
        value = Value(grad=not self.no_grad, graphs=frozenset({line}) | result.graphs,
                      origin=Origin(line, node), tags=frozenset(tags) | (result.tags & {V.DIVIDED, V.LOSS}),
                      containers=result.containers | join_all(
                          list(args) + list(kwargs.values())).containers,
                      elements=result.elements)
        if self.recording:
            self.facts.forwards.append(Forward(self.site(node), module, value))
        return value

    def loss_result(self, node, args) -> Value:
        line = node.lineno
        base = join_all(args)
        return Value(grad=True, graphs=frozenset({line}) | base.graphs, origin=Origin(line, node),
                     tags=frozenset({V.TENSOR, V.LOSS}), containers=base.containers, params=base.params)

    def backward(self, node, value: Value, via: str) -> None:
        if self.recording:
            self.facts.backwards.append(Backward(self.site(node), value, via))

    def reset(self, node) -> None:
        if self.recording:
            self.facts.resets.append(self.site(node))

    def maybe_step(self, node, recv: Value, text: str, args) -> None:
        if recv.has(V.SCHEDULER) or api.SCHEDULER_NAME_RE.search(text.lower()):
            return
        via = None
        if recv.has(V.ENGINE):
            via = "engine"
        elif recv.has(V.SCALER) and args:
            via = "scaler"
        elif recv.has(V.OPTIMIZER) or api.OPTIMIZER_NAME_RE.search(text.split(".")[-1].lower()):
            via = "optimizer"
        if via is None:
            return
        if self.recording:
            self.facts.steps.append(Step(self.site(node), via))
            if via == "engine":
                self.facts.resets.append(self.site(node))   # DeepSpeed zeroes grads in step()

    def mode_call(self, node, mode: str, receiver: str) -> None:
        self.eval_mode = mode == "eval"
        if self.recording:
            self.facts.modes.append(ModeCall(self.site(node), mode, receiver))

    # ------------------------------------------------------------------ interprocedural
    def call_function(self, node, func, args, kwargs, receiver: Optional[Value], track=True) -> Value:
        if self.recording and track:
            self.facts.local_calls.append(LocalCall(self.site(node), func, node))
        summary = self.a.facts_for(func)
        ret = summary.returns
        if ret is UNKNOWN or not ret.params:
            return _strip_params(ret)
        bound = _bind_arguments(func, args, kwargs, receiver)
        return _through_call(ret, bound)

    # ------------------------------------------------------------------ grad mode
    def grad_mode_of(self, ctx: ast.AST) -> Optional[bool]:
        """False when the context disables grad, True when it enables it, None otherwise."""
        call = ctx if isinstance(ctx, ast.Call) else None
        qual = self.a.imports.qualname(call.func if call else ctx)
        if qual in api.GRAD_DISABLING:
            if call is not None and call.args and is_const(call.args[0], False):
                return None  # inference_mode(False)
            return False
        if qual in api.SET_GRAD_ENABLED and call is not None and call.args:
            flag = call.args[0]
            if isinstance(flag, ast.Constant):
                return bool(flag.value)
            return False  # `set_grad_enabled(phase == "train")`: may be off; stay quiet
        return None

    def is_accumulate_context(self, ctx: ast.AST, value: Value) -> bool:
        return "accumulate" in value.tags


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
_PYSCALAR = Value(tags=frozenset({V.PYSCALAR}))
_MODULO = Value(tags=frozenset({V.PYSCALAR, V.MODULO}))


class FunctionRef:
    """Marks a Value that names a function of this file (`step_fn = train_step`)."""

    def __init__(self, func) -> None:
        self.func = func


# ---------------------------------------------------------------------- utilities
class Env(dict):
    """name -> Value, remembering which names were written since it was branched, so a
    join at the end of an `if` or a loop costs what the branches wrote, not the whole scope."""

    __slots__ = ("written", "iteration")

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.written = set()
        self.iteration = set()    # written in the current loop iteration, shared by branches

    def __setitem__(self, key, value) -> None:
        self.written.add(key)
        self.iteration.add(key)
        dict.__setitem__(self, key, value)

    def branch(self, iteration: Optional[set] = None) -> "Env":
        env = Env(self)
        env.iteration = self.iteration if iteration is None else iteration
        return env


def _carried_values_changed(before: Env, after: Env, reads: set) -> bool:
    """Some name read before being written in an iteration now holds other facts."""
    for name in reads:
        old, new = before.get(name), after.get(name)
        if old is new:
            continue
        if old is None or new is None or old.grad != new.grad or old.leaf != new.leaf \
                or old.cls is not new.cls or (old.tags ^ new.tags) - _SETTLED_TAGS:
            return True
    return False


# Facts a second walk of a loop body would not change any rule's answer for: a list that
# gained elements, a number that became a tensor of numbers, where a value lives.
_SETTLED_TAGS = frozenset({V.CONTAINER, V.TENSOR, V.PYSCALAR, V.MODULO, V.CUDA_DEVICE})


def merge_envs(base: Env, *branches: Env) -> Env:
    """The environment after control flow that took one of `branches` (each from `base`);
    with a single branch, the branch may also not have run (loops)."""
    out = base.branch()
    written = set().union(*(b.written for b in branches))
    for key in written:
        values = [b.get(key, base.get(key)) for b in branches]
        if len(branches) == 1:
            values.append(base.get(key))
        out_value = join_all(v for v in values if v is not None)
        dict.__setitem__(out, key, out_value)
    out.written = base.written   # `base` is discarded by every caller: reuse its set
    out.written.update(written)
    return out


def _iter_item(value: Value) -> Value:
    if value.elements is not None and value.has(V.CONTAINER) and len(value.elements) > 0 and \
            not value.grad and all(e.tags == value.elements[0].tags for e in value.elements):
        return value.elements[0] if len(value.elements) == 1 else join_all(value.elements)
    if value.has(V.CONTAINER) and value.elements is not None and value.elements and \
            value.elements[0].has(V.PYSCALAR) and len(value.elements) == 2:
        return value  # enumerate(): unpacked by `for i, batch in ...`
    if value.has(V.LOADER):
        return Value(tags=frozenset({V.TENSOR}) | (value.tags & {V.CUDA_DEVICE}))
    if value.has(V.MODULE):
        return Value(tags=frozenset({V.MODULE}))
    return _contents(value)


def _contents(value: Value) -> Value:
    """What reading an element of a container gives."""
    if not value.has(V.CONTAINER) and value.elements is None:
        return value
    return Value(grad=value.grad, leaf=value.leaf, graphs=value.graphs, origin=value.origin,
                 tags=value.tags - {V.CONTAINER, V.PARAMS} | ({V.TENSOR} if value.has(V.PARAMS) else set()),
                 containers=value.containers, params=value.params, cls=value.cls)


def _as_container(element: Value) -> Value:
    return Value(grad=element.grad, leaf=element.leaf, graphs=element.graphs, origin=element.origin,
                 tags=element.tags | {V.CONTAINER}, containers=element.containers,
                 params=element.params, cls=element.cls)


def _activation(args, tag: str) -> Value:
    base = args[0] if args else UNKNOWN
    return Value(grad=base.grad, graphs=base.graphs, origin=base.origin,
                 tags=(base.tags - V.ACTIVATION_TAGS - {V.CONTAINER}) | {tag, V.TENSOR},
                 containers=base.containers, params=base.params)


def _through_call(ret: Value, bound: Dict[int, Value], depth: int = 0) -> Value:
    """A summary's return value at one call: what flowed in through the arguments it depends
    on joins it, element by element for tuples (`loss, logs = compute(model, batch)`)."""
    elements = ret.elements
    if elements is not None and depth < 2:
        elements = tuple(_through_call(e, bound, depth + 1) for e in elements)
    flowing = [bound[i] for i in sorted(ret.params) if i in bound]
    if not flowing:
        return replace(_strip_params(ret), elements=elements)
    merged = join_all(flowing)
    return Value(grad=ret.grad or merged.grad, graphs=ret.graphs | merged.graphs,
                 origin=ret.origin or merged.origin,
                 tags=ret.tags | (merged.tags & (V.ACTIVATION_TAGS | {V.TENSOR, V.LOSS, V.DIVIDED})),
                 containers=ret.containers | merged.containers, cls=ret.cls, node=ret.node,
                 elements=elements)


def _strip_params(value: Value) -> Value:
    if not value.params:
        return value
    return Value(grad=value.grad, leaf=value.leaf, graphs=value.graphs, origin=value.origin,
                 tags=value.tags, containers=value.containers, cls=value.cls, node=value.node,
                 elements=value.elements, fields=value.fields, activation=value.activation)


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
    return bound


def _module_chain_root(expr: ast.AST) -> str:
    """`model` for `model.to(device).cuda()`: calls that return the module itself are skipped."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) \
            and expr.func.attr in _MODULE_RETURNS_SELF:
        expr = expr.func.value
    return dotted(expr) or ""


def _model_like(text: str) -> bool:
    last = text.split(".")[-1]
    return bool(api.MODEL_PARAM_RE.match(last))


def _stored_expr(stmt: ast.AST) -> ast.AST:
    return getattr(stmt, "value", None) or stmt
