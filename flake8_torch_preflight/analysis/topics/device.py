"""Where tensors live: does the file target CUDA, which calls move data to a device, and
which names a loop body changes in place (so a transfer of them is not loop-invariant).

Everything here is computed once per file (or once per loop asked about) from the facts the
flow analysis already recorded: `facts.calls` and the `Value`s tagged `CUDA_DEVICE`.
"""
from __future__ import annotations

import ast
from typing import Dict, List, Optional, Set, Tuple

from ..semantics import torchapi as api
from ..core import values as V
from ..core.astutil import dotted, is_self_attribute, keyword, target_texts
from ..core.events import CallSite, FunctionFacts
from ..core.memo import per_file
from ..core.questions import Does

# Calls that only make sense when the script runs on an NVIDIA GPU.
_CUDA_CALLS = frozenset({"torch.cuda.set_device", "torch.cuda.synchronize",
                         "torch.cuda.manual_seed", "torch.cuda.manual_seed_all"})
# Last component of an argument that names a device (`device`, `self.device`, `local_rank`).
_DEVICE_WORDS = frozenset({"device", "dev", "rank", "local_rank", "gpu", "gpu_id", "cuda_device",
                           "device_id"})
# In-place tensor / container methods: a name they are called on changes inside the loop.
_MUTATORS = frozenset({"append", "extend", "insert", "update", "add", "pop", "clear", "remove",
                       "setdefault", "copy_", "fill_", "zero_", "set_", "resize_"})


@per_file("cuda_evidence")
def cuda_evidence(analysis) -> Optional[Tuple[int, str]]:
    """(line, what) of the first sign that the file targets CUDA, or None (memoised)."""
    found: Optional[Tuple[int, str]] = None
    for facts in analysis.all_facts():
        for call in facts.calls:
            what = _cuda_call(facts, call)
            if what is not None and (found is None or call.site.line < found[0]):
                found = (call.site.line, what)
    return found


def targets_cuda(analysis) -> bool:
    return cuda_evidence(analysis) is not None


def _cuda_call(facts: FunctionFacts, call: CallSite) -> Optional[str]:
    node = call.node
    if call.qualname is None and call.method == "cuda":
        return "`.cuda()`"
    if call.qualname in _CUDA_CALLS or (call.qualname or "").startswith("torch.cuda.amp."):
        return f"`{call.qualname}()`"
    if call.qualname == "torch.device" and call.result.has(V.CUDA_DEVICE):
        return "`torch.device(\"cuda\")`"
    if call.qualname is None and call.method == "to" and any(a.has(V.CUDA_DEVICE) for a in call.args):
        return "`.to(<cuda device>)`"
    for kw in node.keywords:
        if kw.arg in ("device", "device_type") and facts.value(kw.value).has(V.CUDA_DEVICE):
            return "`device=\"cuda\"`"
        if kw.arg == "accelerator" and isinstance(kw.value, ast.Constant) \
                and kw.value.value in ("gpu", "cuda"):
            return f"`accelerator=\"{kw.value.value}\"`"
    return None


def is_transfer(facts: FunctionFacts, call: CallSite) -> bool:
    """`x.cuda(...)` or `x.to(<device>)` — a host-to-device move, not a dtype cast."""
    if call.qualname is not None or not isinstance(call.node.func, ast.Attribute):
        return False
    if call.method == "cuda":
        return True
    if call.method != "to":
        return False
    node = call.node
    device = keyword(node, "device")
    candidates = ([device] if device is not None else []) + list(node.args[:1])
    for arg in candidates:
        if facts.value(arg).has(V.CUDA_DEVICE):
            return True
        text = dotted(arg)
        if text is not None and text.rsplit(".", 1)[-1].lower() in _DEVICE_WORDS:
            return True
    return False


def transfer_target(call: CallSite) -> str:
    """Text of where `.to(...)`/`.cuda(...)` sends its receiver, to compare two transfers."""
    node = call.node
    if call.method == "cuda":
        return "cuda:" + ",".join(ast.unparse(a) for a in node.args)
    device = keyword(node, "device")
    arg = device if device is not None else (node.args[0] if node.args else None)
    return ast.unparse(arg) if arg is not None else ""


def non_blocking(call: CallSite) -> bool:
    flag = keyword(call.node, "non_blocking")
    return isinstance(flag, ast.Constant) and flag.value is True


def batch_transfer(facts: FunctionFacts, call: CallSite) -> bool:
    """`.to(...)`/`.cuda(...)` of a batch: the receiver's root name is bound by an enclosing
    loop (its header or its body: `for x, y in loader`, `batch = next(it)`) or is a parameter
    of a helper (a batch passed in); not a module, and not a value bound before the loop
    (an EMA copy or a teacher offloaded between steps)."""
    recv = call.receiver
    if recv is not None and recv.has(V.MODULE) and not (recv.grad or recv.has(V.TENSOR)):
        return False
    head = _root_name(call.node.func.value) if isinstance(call.node.func, ast.Attribute) else None
    if head is None or head in ("self", "cls"):
        return False
    for loop in call.site.loops:
        if head in loop_targets(loop) or head in facts.loop_rebinds.get(loop, ()):
            return True
    return facts.func is not None and head in facts.func.params


def _root_name(expr: ast.AST) -> Optional[str]:
    while isinstance(expr, (ast.Attribute, ast.Subscript, ast.Call)):
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return expr.id if isinstance(expr, ast.Name) else None


# A loader over indices (`DataLoader(range(n))`, `DataLoader(mask.nonzero().view(-1))`)
# yields index batches: there is nothing per item for a worker to do.
_INDEX_MAKERS = frozenset({"range", "torch.arange", "torch.randperm", "numpy.arange",
                           "numpy.random.permutation"})
_INDEX_METHODS = frozenset({"nonzero", "argwhere", "arange", "randperm"})
# What a `__getitem__` that only slices stored tensors may call on a slice (casts, views).
_CHEAP_ITEM_METHODS = frozenset({"float", "long", "int", "half", "double", "bool", "view",
                                 "reshape", "squeeze", "unsqueeze", "flatten", "contiguous"})


def in_memory_dataset(analysis, facts: FunctionFacts, loader: CallSite) -> Optional[int]:
    """Line of the in-memory dataset a `DataLoader(...)` call iterates, or None: a
    `TensorDataset(...)`, an index range or index tensor, or a dataset class of the file whose
    `__getitem__` only slices tensors it stores (passed directly, or through a name or
    `self.` attribute bound to one). Its items are already in memory: no per-item host work
    for loader workers to hide."""
    node = loader.node
    arg = keyword(node, "dataset")
    if arg is None and node.args:
        arg = node.args[0]
    collate = keyword(node, "collate_fn")
    if arg is None or collate is not None and not (isinstance(collate, ast.Constant)
                                                   and collate.value is None):
        return None   # a collate function does its work per batch (node2vec's random walks)
    if isinstance(arg, ast.Call):
        return arg.lineno if _in_memory_expr(analysis, arg, {}) else None
    text = dotted(arg)
    if text is None:
        return None
    bound = _tensor_dataset_bindings(analysis)
    found = bound.get((id(facts), text)) or (bound.get((None, text)) if "." in text else None)
    if found is None and isinstance(arg, ast.Name):
        found = _in_memory_names(analysis, facts).get(arg.id)
    return found


def _in_memory_expr(analysis, expr: ast.AST, names: Dict[str, int]) -> bool:
    """`TensorDataset(...)`, `range(n)`, `mask.nonzero().view(-1)`, `idx.split(k)[rank]` of
    an index name, `SliceDataset(x, y)` of a class that only slices what it stores."""
    if python_list(expr):
        return True
    if isinstance(expr, ast.Call):
        qual = analysis.imports.qualname(expr.func) or (
            expr.func.id if isinstance(expr.func, ast.Name) else None)
        if qual in api.TENSOR_DATASETS or qual in _INDEX_MAKERS:
            return True
        if isinstance(expr.func, ast.Name) and expr.func.id in analysis.index.classes:
            return _slicing_dataset(analysis, analysis.index.classes[expr.func.id])
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _INDEX_METHODS:
            return True
    root = expr
    while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
        root = root.func if isinstance(root, ast.Call) else root.value
    return isinstance(root, ast.Name) and root.id in names and root is not expr


# Builtins and methods that return a Python list (or tuple) already materialised in memory.
_LIST_MAKERS = frozenset({"list", "sorted", "tuple"})
_LIST_METHODS = frozenset({"tolist", "readlines", "splitlines", "split"})
# Expressions whose value is a `str`: what a list of texts is made of.
_STRING_METHODS = frozenset({"strip", "lstrip", "rstrip", "lower", "upper", "format",
                             "replace", "join", "read", "decode", "title", "casefold"})


def python_list(expr: ast.AST) -> bool:
    """A list or tuple of Python objects built in memory: a display, a comprehension,
    `list(...)` / `sorted(...)`, `df["text"].tolist()`, `f.readlines()`, `text.split()`.
    A `DataLoader` over it only indexes the list: nothing to load per item."""
    if isinstance(expr, (ast.List, ast.ListComp, ast.Tuple)):
        return True
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Name) and func.id in _LIST_MAKERS:
            return True
        return isinstance(func, ast.Attribute) and func.attr in _LIST_METHODS
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return python_list(expr.left) and python_list(expr.right)
    return False


def list_of_strings(expr: ast.AST) -> bool:
    """A Python list proven to hold `str` items (a display of string literals, a
    comprehension whose element is a string, `f.readlines()`, `text.split()`): the loader
    yields strings, which `pin_memory` leaves alone."""
    if isinstance(expr, (ast.List, ast.Tuple)):
        return bool(expr.elts) and all(_string(e) for e in expr.elts)
    if isinstance(expr, ast.ListComp):
        return _string(expr.elt)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        return expr.func.attr in ("readlines", "splitlines") or (
            expr.func.attr == "split" and _string(expr.func.value))
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return list_of_strings(expr.left) and list_of_strings(expr.right)
    return False


def _string(expr: ast.AST) -> bool:
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, str)
    if isinstance(expr, ast.JoinedStr):
        return True
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Name):
            return func.id == "str"
        return isinstance(func, ast.Attribute) and func.attr in _STRING_METHODS
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Mod)):
        return _string(expr.left)
    return False


def loader_items_are_strings(analysis, facts: FunctionFacts, loader: CallSite) -> bool:
    """The `DataLoader(...)` iterates a list of strings (passed directly, or a name of the
    same function bound only to such lists) with the default collation: its batches are
    lists of `str`, and what the loop copies to the GPU is made in the loop, not pinned by
    the loader."""
    node = loader.node
    arg = keyword(node, "dataset") or (node.args[0] if node.args else None)
    if arg is None or keyword(node, "collate_fn") is not None:
        return False
    if not isinstance(arg, ast.Name):
        return list_of_strings(arg)
    values = _assigned_values(analysis, facts).get(arg.id)
    return bool(values) and all(list_of_strings(v) for v in values)


# torch functions that make a tensor of fresh values (noise, zeros, a fill): no data in it.
FRESH_TENSOR_MAKERS = frozenset(f"torch.{n}" for n in (
    "zeros ones empty full randn rand randint rand_like randn_like randint_like zeros_like "
    "ones_like empty_like full_like".split()))


def synthetic_tensor(analysis, facts: FunctionFacts, expr: ast.AST, depth: int = 3) -> bool:
    """`expr` is a tensor of made-up values: a call of a fresh-tensor maker (its arguments
    are shapes and fills), moved or cast (`torch.randn(1, 3, 224, 224).to(dev)`), or a name of
    the same scope bound only to such tensors (a dummy input for a warm-up or a shape probe)."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) \
            and expr.func.attr in _CAST_METHODS:
        expr = expr.func.value
    if isinstance(expr, ast.Call):
        return analysis.imports.qualname(expr.func) in FRESH_TENSOR_MAKERS
    if isinstance(expr, ast.Name) and depth > 0:
        values = _assigned_values(analysis, facts).get(expr.id)
        return bool(values) and all(
            isinstance(v, ast.Call) and synthetic_tensor(analysis, facts, v, depth - 1)
            for v in values)
    return False


_CAST_METHODS = _CHEAP_ITEM_METHODS | {"to", "cuda", "half", "bfloat16"}


@per_file("assigned_values", key_args=1)
def _assigned_values(analysis, facts: FunctionFacts) -> Dict[str, list]:
    """name -> every value a plain `name = value` of the scope assigns; None marks a name
    also bound some other way (a loop target, unpacking, augmented assignment)."""
    scope = facts.func.node if facts.func is not None else analysis.tree
    values: Dict[str, list] = {}
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            values.setdefault(node.targets[0].id, []).append(node.value)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            values.setdefault(node.id, [])
    counts: Dict[str, int] = {}
    for node in ast.walk(scope):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            counts[node.id] = counts.get(node.id, 0) + 1
    return {name: vals for name, vals in values.items() if counts.get(name) == len(vals)}


@per_file("in_memory_names", key_args=1)
def _in_memory_names(analysis, facts: FunctionFacts) -> Dict[str, int]:
    """name -> line, for the names of one function (or the module) bound, in source order,
    only to in-memory datasets or index tensors."""
    scope = facts.func.node if facts.func is not None else analysis.tree
    names: Dict[str, int] = {}
    spoiled: Set[str] = set()
    for stmt in ast.walk(scope):
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1 \
                or not isinstance(stmt.targets[0], ast.Name):
            continue
        name = stmt.targets[0].id
        if _in_memory_expr(analysis, stmt.value, names):
            names.setdefault(name, stmt.lineno)
        else:
            spoiled.add(name)
    return {name: line for name, line in names.items() if name not in spoiled}


# Conversions of an item already in memory (`torch.tensor(self.ids[i])`): no loading.
_ITEM_CONVERSIONS = frozenset({"torch.tensor", "torch.as_tensor", "torch.from_numpy",
                               "torch.LongTensor", "torch.FloatTensor", "numpy.array",
                               "numpy.asarray", "int", "float", "bool", "str", "len", "dict",
                               "list", "tuple"})


def _slicing_dataset(analysis, cls) -> bool:
    """A dataset class whose `__getitem__` only indexes attributes of `self` (and casts,
    reshapes or converts the slices: `torch.tensor(self.ids[i])`): no file reads, no
    transforms."""
    getitem = cls.methods.get("__getitem__")
    if getitem is None:
        return False
    body = getitem.node
    for node in ast.walk(body):
        if isinstance(node, ast.Call):
            func = node.func
            cheap = isinstance(func, ast.Attribute) and func.attr in _CHEAP_ITEM_METHODS
            qualname = analysis.imports.qualname(func) or (
                func.id if isinstance(func, ast.Name) else None)
            if not cheap and qualname not in _ITEM_CONVERSIONS:
                return False
        elif isinstance(node, (ast.With, ast.For, ast.While, ast.Try, ast.Lambda)):
            return False
    subscripts = [n for n in ast.walk(body) if isinstance(n, ast.Subscript)]
    return bool(subscripts) and all(is_self_attribute(n.value) for n in subscripts
                                    if isinstance(n.ctx, ast.Load) and _reads_stored(n))


def _reads_stored(node: ast.Subscript) -> bool:
    return not isinstance(node.value, ast.Subscript)


@per_file("tensor_datasets")
def _tensor_dataset_bindings(analysis) -> Dict[tuple, int]:
    """(id(facts), target text) and, for attributes, (None, target text) -> line, for every
    `target = TensorDataset(...)` of the file (memoised)."""
    found: Dict[tuple, int] = {}
    for facts in analysis.all_facts():
        for call in facts.calls:
            stmt = call.site.stmt
            if call.qualname not in api.TENSOR_DATASETS or getattr(stmt, "value", None) is not call.node:
                continue
            targets = stmt.targets if isinstance(stmt, ast.Assign) else \
                [getattr(stmt, "target", None)]
            for target in targets:
                text = dotted(target) if target is not None else None
                if text is not None:
                    found.setdefault((id(facts), text), call.site.line)
                    if "." in text:
                        found.setdefault((None, text), call.site.line)
    return found


@per_file("loop_mutations")
def loop_mutations(analysis, facts: FunctionFacts, loop: ast.AST) -> Set[str]:
    """Names the loop body changes without rebinding them: `x[i] = ...`, `x += ...`,
    `x.copy_(...)`, `x.normal_()`, `xs.append(...)` (memoised per loop)."""
    names: Set[str] = set()
    for call in facts.calls:
        if loop in call.site.loops and call.method is not None \
                and isinstance(call.node.func, ast.Attribute) \
                and (call.method in _MUTATORS or (call.method.endswith("_")
                                                  and not call.method.startswith("_"))):
            text = dotted(call.node.func.value)
            if text is not None:
                names.add(text)
    names |= loop_targets(loop)   # the loop's own variable changes every iteration
    names |= facts.loop_writes.get(loop, frozenset())
    return names


def loop_targets(loop: ast.AST) -> Set[str]:
    """Names a `for` loop binds in its header (`x`, `y` in `for x, y in loader`)."""
    return set(target_texts(getattr(loop, "target", None)))


# ---------------------------------------------------------------------- per-step code
_STEP_HOOKS = frozenset({"training_step", "on_train_batch_start", "on_train_batch_end",
                         "on_before_backward", "on_after_backward", "on_before_optimizer_step",
                         "compute_loss", "on_step_begin", "on_step_end"})


@per_file("step_loops")
def step_loops(analysis, facts: FunctionFacts) -> List[ast.AST]:
    """The innermost training loops of `facts` that are *step* loops: one iteration is one
    optimisation step (the backward is in the loop, or in a helper that has no training loop
    of its own), as opposed to an epoch loop that calls `train_one_epoch()`."""
    return [loop for loop in analysis.innermost_loops_doing(facts, Does.BACKWARD)
            if analysis.in_loop(facts, "backwards", loop) or any(
                analysis.function_does(c.callee, Does.BACKWARD)
                and not analysis.has_training_loop(c.callee)
                for c in analysis.in_loop(facts, "local_calls", loop))]


@per_file("hot_reason")
def hot_reason(analysis, func) -> Optional[str]:
    """Why `func` runs once per training step (a framework step hook, or a call from a
    training step loop that no `if` guards), or None."""
    framework = analysis.framework_owned(func)
    if framework and func.cls is not None and func.parent is None and func.name in _STEP_HOOKS:
        return f"`{func.name}()` runs every step under {framework}"
    for cfacts, call in analysis.callers(func):
        site = call.site
        if analysis.evaluation_reason(cfacts, site):
            continue
        loop = next((lp for lp in step_loops(analysis, cfacts) if lp in site.loops), None)
        if loop is not None:
            if not site.conds_inside(loop):
                return (f"`{func.name}()` is called at line {site.line} in the training "
                        f"loop at line {loop.lineno}")
        elif not site.loops and not site.conds and cfacts.func is not None:
            caller_reason = hot_reason(analysis, cfacts.func)
            if caller_reason:
                return f"`{func.name}()` is called at line {site.line} by {caller_reason}"
    return None


def encloses(outer: ast.AST, inner: ast.AST) -> bool:
    """`inner`'s source span lies within `outer`'s (no tree walk)."""
    try:
        return (outer.lineno, outer.col_offset) <= (inner.lineno, inner.col_offset) and \
            (inner.end_lineno, inner.end_col_offset) <= (outer.end_lineno, outer.end_col_offset)
    except (AttributeError, TypeError):
        return False
