"""Mutation operators: each injects one silent bug that a TPF rule targets, where it fits.

An operator yields a `Mutation` for every site of a file where its change makes exactly that
bug, decided from the syntax of the file alone (never by asking the analysis under test, so the
benchmark cannot be tuned to it): "delete the `zero_grad()` only when it is the only reset of a
loop that backwards and steps on every iteration", "drop the division only when the step is
gated by a counter", "drop `shuffle=True` only on a training loader". Where a site is unsure
the operator skips it. `variant` says which shape of the bug a site is (the recall table
breaks down by it); `loop_line` names the loop the bug lives in, for the miss classifier.

Knowledge of libraries (optimizer classes, loss classes, wrapper names) lives in the tables
at the top, not in the operators.
"""
from __future__ import annotations

import ast
import random
import re
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from .mutation_text import (LOOPS, Edit, Source, delete_statement, dotted, insert_before,
                            is_literal, keyword, method_call, name_words,
                            receiver_text, remove_keyword, statement_text, unwrap_block,
                            walk_local)

# ---------------------------------------------------------------------------------- tables

# Optimizers that keep state between steps (moments, momentum buffers, curvature pairs):
# re-creating one resets that state. Plain SGD without momentum is stateless, so it is not here
# (the TPF012 operator admits SGD only with a literal momentum > 0).
STATEFUL_OPTIMIZERS = frozenset(
    """Adam AdamW Adamax NAdam RAdam RMSprop Adagrad Adadelta LBFGS SparseAdam Adafactor
    FusedAdam FusedLAMB DeepSpeedCPUAdam AdamW8bit Adam8bit PagedAdamW PagedAdamW8bit Lion
    Lamb LAMB AdaBelief""".split())
OPTIMIZER_CLASSES = STATEFUL_OPTIMIZERS | {"SGD"}
OPTIMIZER_MODULES = ("torch.optim", "bitsandbytes", "bnb", "apex", "deepspeed", "transformers",
                     "timm.optim", "torch_optimizer", "lion_pytorch")
CROSS_ENTROPY = {"torch.nn.CrossEntropyLoss", "torch.nn.modules.loss.CrossEntropyLoss"}
CROSS_ENTROPY_FN = {"torch.nn.functional.cross_entropy"}
BCE_LOGITS = {"torch.nn.BCEWithLogitsLoss", "torch.nn.modules.loss.BCEWithLogitsLoss"}
BCE_LOGITS_FN = {"torch.nn.functional.binary_cross_entropy_with_logits"}
SOFTMAX_FNS = {"torch.softmax", "torch.log_softmax", "torch.nn.functional.softmax",
               "torch.nn.functional.log_softmax", "torch.special.softmax"}
SIGMOID_FNS = {"torch.sigmoid", "torch.nn.functional.sigmoid", "torch.special.expit"}
DATALOADERS = {"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"}
DIST_SAMPLER_SUFFIX = "DistributedSampler"
DDP_WRAPS = ("DistributedDataParallel", "FullyShardedDataParallel", "fully_shard",
             "deepspeed.initialize")
FSDP1 = ("FullyShardedDataParallel",)
FSDP2 = ("fully_shard",)
CLIP_FNS = ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_grad_value")
NO_GRAD_FNS = {"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad",
               "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode"}
BREAKER_METHODS = {"item", "detach", "tolist", "numpy", "data"}
BREAKER_FUNCS = {"float", "int", "bool", "round", "str", "repr", "format"}
# What a loop logs with: the only calls a logging block may make (TPF010 operator).
LOGGING_CALLS = {"print", "log", "info", "debug", "warning", "add_scalar", "add_scalars",
                 "set_postfix", "set_description", "write", "append", "format", "item",
                 "log_dict", "update", "flush", "get_last_lr", "get_lr", "time", "perf_counter",
                 "mean", "sum", "cpu", "detach", "tolist", "numpy", "float", "round", "len",
                 "max", "min", "str", "int", "join", "log_metrics", "print0", "print_rank_0",
                 "print_rank0", "master_print", "logger"}

# Name words (see `name_words`) that say what a variable holds.
VAL_WORDS = {"val", "valid", "validation", "test", "eval", "evaluation", "dev", "holdout",
             "calib", "calibration", "predict", "inference", "infer"}
EVAL_FUNC_RE = re.compile(r"^(val_|valid_|eval_|test_|predict|infer|evaluate|validate|"
                          r"validation|eval$|evaluation$|test$)", re.IGNORECASE)
MODEL_WORDS = {"model", "net", "network", "module", "encoder", "decoder", "unet", "vae",
               "backbone", "classifier", "generator", "discriminator", "policy", "critic",
               "actor", "transformer", "gpt", "bert", "resnet", "cnn", "rnn", "lstm", "mlp",
               "student", "teacher", "learner", "agent", "autoencoder", "ae", "netg", "netd",
               "qnet", "qf", "vit", "llm", "lm", "engine", "wrapper", "predictor", "detector",
               "gnn", "gcn", "gat", "sage", "regressor", "seq2seq", "ema"}
SCHEDULER_WORDS = {"sched", "scheduler", "lr", "warmup", "schedule"}


class Mutation(NamedTuple):
    code: str                 # the rule that should report the injected bug
    operator: str
    variant: str              # the shape of this site
    line: int                 # where the bug is injected (original file)
    edits: Tuple[Edit, ...]
    loop_line: Optional[int] = None   # the loop the bug lives in (original file), if any
    detail: str = ""


class Operator(NamedTuple):
    code: str
    name: str
    find: Callable[[Source, random.Random], Iterator[Mutation]]
    what: str


# ---------------------------------------------------------------------------------- names

def last_name(text: Optional[str]) -> str:
    return (text or "").rsplit(".", 1)[-1]


def is_optimizer_name(text: Optional[str]) -> bool:
    words = name_words(last_name(text))
    if not words or SCHEDULER_WORDS & set(words):
        return False
    return any(w.startswith("optim") or w in ("opt", "optimiser") for w in words)


def is_scaler_name(text: Optional[str]) -> bool:
    return "scaler" in (text or "").lower()


def is_model_name(text: Optional[str]) -> bool:
    if not text or text in ("self", "cls"):
        return False
    words = set(name_words(last_name(text)))
    return bool(MODEL_WORDS & words) and ("model" in words or not VAL_WORDS & words)


def is_val_name(text: Optional[str]) -> bool:
    return bool(VAL_WORDS & set(name_words(text or "")))


def resolved(src: Source, func: ast.AST) -> str:
    return src.qualname(func) or dotted(func) or ""


def ends_with(qualname: str, names: Sequence[str]) -> bool:
    return any(qualname == n or qualname.endswith("." + n) for n in names)


# ---------------------------------------------------------------------------------- events

def backward_kind(src: Source, call: ast.AST) -> Optional[str]:
    """`tensor` for `x.backward()` / `scaler.scale(x).backward()` / `torch.autograd.backward`,
    `framework` for `accelerator.backward(x)` / `fabric.backward(x)` / `self.manual_backward`
    (gradients still need resetting), `engine` for DeepSpeed-style `engine.backward(loss)`."""
    if not isinstance(call, ast.Call):
        return None
    if resolved(src, call.func) == "torch.autograd.backward":
        return "tensor"
    if method_call(call, "manual_backward"):
        return "framework"
    if not method_call(call, "backward"):
        return None
    recv = receiver_text(call)
    words = set(name_words(recv or ""))
    if call.args and words & {"accelerator", "fabric", "strategy"}:
        return "framework"
    if call.args and words & (MODEL_WORDS | {"deepspeed", "ds"}):
        return "engine"
    return "tensor"


def step_kind(src: Source, call: ast.AST) -> Optional[str]:
    if not method_call(call, "step"):
        return None
    recv = receiver_text(call)
    if is_scaler_name(recv) and call.args:
        return "scaler"
    if is_optimizer_name(recv):
        return "optimizer"
    return None


def stepped_optimizer(src: Source, call: ast.Call) -> Optional[str]:
    kind = step_kind(src, call)
    if kind == "optimizer":
        return receiver_text(call)
    if kind == "scaler":
        return dotted(call.args[0])
    return None


def is_backward(src: Source) -> Callable[[ast.Call], bool]:
    def backward(call: ast.Call) -> bool:
        return backward_kind(src, call) in ("tensor", "framework")
    return backward


def is_step(src: Source) -> Callable[[ast.Call], bool]:
    def step(call: ast.Call) -> bool:
        return step_kind(src, call) is not None
    return step


def is_reset(call: ast.Call) -> bool:
    return method_call(call, "zero_grad")


def grad_resets(node: ast.AST) -> List[ast.AST]:
    """`x.zero_grad()`, `p.grad = None`, `p.grad.zero_()` / `.grad.data.zero_()` under node."""
    out: List[ast.AST] = []
    for n in walk_local(node):
        if isinstance(n, ast.Call) and (is_reset(n) or (method_call(n, "zero_", "detach_", "fill_")
                                                        and ".grad" in (dotted(n.func) or ""))):
            out.append(n)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(isinstance(t, ast.Attribute) and t.attr == "grad" for t in targets):
                out.append(n)
    return out


def optimizer_ctor(src: Source, call: ast.AST) -> Optional[str]:
    """The class name when `call` builds an optimizer we know."""
    if not isinstance(call, ast.Call):
        return None
    qual = resolved(src, call.func)
    name = last_name(qual)
    if name not in OPTIMIZER_CLASSES:
        return None
    if "." in qual and not qual.startswith(OPTIMIZER_MODULES):
        return None
    return name


def builds_optimizer(src: Source, node: ast.AST) -> bool:
    return any(optimizer_ctor(src, c) for c in src.local_calls(node))


def direct_calls(src: Source, loop: ast.AST, predicate) -> List[ast.Call]:
    """Calls in `loop` satisfying `predicate` that run on every iteration of it."""
    return [c for c in src.local_calls(loop) if predicate(c) and not _in_header(loop, c, src)
            and not src.conditional_within(c, loop)]


def _in_header(loop: ast.AST, node: ast.AST, src: Source) -> bool:
    return src.enclosing_loops(node)[:1] != [loop]


def loops_in(src: Source) -> List[ast.AST]:
    return src.loops


def in_lightning_class(src: Source, node: ast.AST) -> bool:
    for a in src.ancestors(node):
        if isinstance(a, ast.ClassDef):
            bases = " ".join(resolved(src, b) for b in a.bases)
            if "Lightning" in bases or "lightning" in bases or "Trainer" in bases:
                return True
    return False


def under_no_grad(src: Source, node: ast.AST) -> bool:
    """Inside `with torch.no_grad()`-like block, or in a function decorated with one."""
    for a in src.ancestors(node):
        if isinstance(a, (ast.With, ast.AsyncWith)) and any(
                _grad_disabling(src, item.context_expr) for item in a.items):
            return True
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                _grad_disabling(src, d) for d in a.decorator_list):
            return True
    return False


def _grad_disabling(src: Source, expr: ast.AST) -> bool:
    func = expr.func if isinstance(expr, ast.Call) else expr
    qual = resolved(src, func)
    if qual in NO_GRAD_FNS:
        return True
    if qual in ("torch.set_grad_enabled", "torch.enable_grad") and isinstance(expr, ast.Call):
        return not (expr.args and is_literal(expr.args[0], True))
    return False


def mod_tests(test: ast.AST) -> List[ast.BinOp]:
    return [n for n in ast.walk(test) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)]


def nearest_if(src: Source, node: ast.AST, within: ast.AST) -> Optional[ast.If]:
    for a in src.ancestors(node):
        if a is within:
            return None
        if isinstance(a, ast.If):
            return a
    return None


def names_in(node: ast.AST) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


GENERIC_NAMES = {"args", "self", "config", "cfg", "opt", "opts", "hparams", "hp", "params",
                 "training_args", "train_config", "conf", "FLAGS", "flags", "settings", "options"}


def key_names(node: ast.AST) -> set:
    """Names of an expression without the holders of settings (`args.accum` -> {accum})."""
    return names_in(node) - GENERIC_NAMES


def targets_cuda(src: Source) -> bool:
    return ".cuda(" in src.text or "'cuda" in src.text or '"cuda' in src.text


def assigned_name(src: Source, call: ast.Call) -> Optional[str]:
    stmt = src.parent(call)
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        return dotted(stmt.targets[0])
    return None


def is_dataloader(src: Source, call: ast.AST) -> bool:
    return isinstance(call, ast.Call) and (resolved(src, call.func) in DATALOADERS)


# ---------------------------------------------------------------------------------- loops

class TrainingLoop(NamedTuple):
    loop: ast.AST
    backwards: List[ast.Call]        # run on every iteration
    steps: List[ast.Call]            # run on every iteration


def every_iteration_loops(src: Source) -> Iterator[TrainingLoop]:
    """Loops that backward and step an optimizer on every iteration, directly in their body."""
    for loop in loops_in(src):
        backs = direct_calls(src, loop, lambda c: backward_kind(src, c) in ("tensor", "framework"))
        if not backs:
            continue
        steps = direct_calls(src, loop, lambda c: step_kind(src, c) is not None)
        if steps:
            yield TrainingLoop(loop, backs, steps)


def loop_reaches_backward(src: Source, loop: ast.AST) -> bool:
    return src.reaches(loop, is_backward(src))


# ================================================================================ operators

def delete_zero_grad(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF003: delete the only reset of a loop that backwards and steps every iteration."""
    for tl in every_iteration_loops(src):
        loop = tl.loop
        if builds_optimizer(src, loop):
            continue                      # a fresh optimizer per iteration also resets
        resets = grad_resets(loop)
        helper_resets = [c for c in src.local_calls(loop) if not is_reset(c)
                         and src.local_callee(c) is not None and src.call_reaches(c, is_reset)]
        if helper_resets:
            continue
        stepped = {stepped_optimizer(src, s) for s in tl.steps} - {None}
        for reset in resets:
            if not (isinstance(reset, ast.Call) and isinstance(src.parent(reset), ast.Expr)):
                continue
            if src.conditional_within(reset, loop) or _in_header(loop, reset, src):
                continue
            target = receiver_text(reset)
            others = [r for r in resets if r is not reset]
            variant = _reset_variant(target, others, stepped)
            if variant is None:
                continue
            stmt = src.parent(reset)
            yield Mutation("TPF003", "delete-zero-grad", variant, stmt.lineno,
                           tuple(delete_statement(src, stmt)), loop.lineno, target or "")


def _reset_variant(target: Optional[str], others: List[ast.AST],
                   stepped: set) -> Optional[str]:
    """`only-reset` when nothing else resets; `one-of-several` when the other resets are of
    other optimizers that this loop steps; None when a remaining reset may cover ours."""
    if not others:
        return "only-reset"
    if target not in stepped:
        return None
    other_targets = [receiver_text(r) if isinstance(r, ast.Call) else None for r in others]
    if all(t in stepped and t != target for t in other_targets):
        return "one-of-several-optimizers"
    return None


def delete_set_epoch(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF009: delete the `sampler.set_epoch(epoch)` of an epoch loop."""
    calls = [c for c in src.nodes if method_call(c, "set_epoch")]
    samplers = [c for c in src.nodes if isinstance(c, ast.Call)
                and resolved(src, c.func).endswith(DIST_SAMPLER_SUFFIX)]
    shuffling = [s for s in samplers if not is_literal(_kw_value(s, "shuffle"), False)]
    if samplers and not shuffling:
        return
    for call in calls:
        recv = receiver_text(call)
        if not recv or "sampler" not in last_name(recv).lower():
            continue
        if not isinstance(src.parent(call), ast.Expr) or not src.enclosing_loops(call):
            continue
        if any(receiver_text(c) == recv for c in calls if c is not call):
            continue
        stmt = src.parent(call)
        variant = _sampler_variant(src, shuffling)
        yield Mutation("TPF009", "delete-set-epoch", variant, stmt.lineno,
                       tuple(delete_statement(src, stmt)), src.enclosing_loops(call)[0].lineno,
                       recv)


def _sampler_variant(src: Source, shuffling: List[ast.Call]) -> str:
    if not shuffling:
        return "sampler-built-elsewhere"
    if any(resolved(src, c.func).startswith("torch.utils.data") for c in shuffling):
        return "torch-sampler-in-file"
    return "other-sampler-class:" + last_name(resolved(src, shuffling[0].func))


def _kw_value(call: ast.Call, name: str) -> Optional[ast.AST]:
    kw = keyword(call, name)
    return kw.value if kw is not None else None


# ------------------------------------------------------------------ TPF007: model.train()

def reaches_mode(src: Source, scope: ast.AST, mode: str, model: str, depth: int = 0,
                 skip: Optional[ast.AST] = None) -> bool:
    """`model.<mode>()` runs under `scope`, directly or in a function of this file called
    with `model` as an argument (followed to the parameter that receives it)."""
    for call in src.local_calls(scope):
        if call is skip:
            continue
        if method_call(call, mode) and receiver_text(call) == model and _mode_arg_ok(call, mode):
            return True
        if depth >= 3:
            continue
        callee = src.local_callee(call)
        if callee is None:
            continue
        param = _receiving_param(call, callee, model)
        if param is not None and reaches_mode(src, callee, mode, param, depth + 1, skip):
            return True
    return False


def _mode_arg_ok(call: ast.Call, mode: str) -> bool:
    if mode == "eval" or not (call.args or call.keywords):
        return True
    value = call.args[0] if call.args else call.keywords[0].value
    return is_literal(value, True)


def _receiving_param(call: ast.Call, callee: ast.AST, model: str) -> Optional[str]:
    """The parameter of `callee` that `model` is passed to (`self.x` stays `self.x` for a
    method called on self)."""
    params = [a.arg for a in callee.args.posonlyargs + callee.args.args]
    is_method = isinstance(call.func, ast.Attribute)
    if is_method and model.startswith("self."):
        return model
    offset = 1 if is_method and params[:1] in (["self"], ["cls"]) else 0
    for i, arg in enumerate(call.args):
        if dotted(arg) == model and i + offset < len(params):
            return params[i + offset]
    for kw in call.keywords:
        if kw.arg and dotted(kw.value) == model:
            return kw.arg
    return None


def delete_train(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF007: delete the `model.train()` that undoes an `eval()` run in the same epoch loop."""
    for call in src.nodes:
        if not (method_call(call, "train") and isinstance(src.parent(call), ast.Expr)
                and _mode_arg_ok(call, "train")):
            continue
        model = receiver_text(call)
        if not model or model in ("self", "super") or in_lightning_class(src, call) \
                or not _module_like(src, model) or _mode_free_model_class(src, model):
            continue
        for loop, how in _epoch_loops_reaching(src, call, model):
            if not loop_reaches_backward(src, loop):
                continue
            if not reaches_mode(src, loop, "eval", how[1]):
                continue
            if reaches_mode(src, loop, "train", how[1], skip=call):
                continue
            stmt = src.parent(call)
            yield Mutation("TPF007", "delete-train", how[0], stmt.lineno,
                           tuple(delete_statement(src, stmt)), loop.lineno, model)
            break


# Words that name (or build) a layer whose forward depends on train/eval mode.
_MODE_WORDS = re.compile(r"dropout|batchnorm|batch_norm|instancenorm|syncbn|\.training\b|"
                         r"\bbn\d*\b|\bnorm\b", re.IGNORECASE)


def _mode_free_model_class(src: Source, model: str) -> bool:
    """The model is built from a class of this file and the file names no mode-dependent
    layer anywhere: deleting its `train()` changes nothing, so it is not the bug."""
    if _MODE_WORDS.search(src.text):
        return False
    classes = {node.name for node in src.nodes if isinstance(node, ast.ClassDef)}
    built = [node.value for node in src.nodes if isinstance(node, ast.Assign)
             and any(dotted(t) == model for t in node.targets)]
    return bool(built) and all(isinstance(v, ast.Call) and isinstance(v.func, ast.Name)
                               and v.func.id in classes for v in built)


def _module_like(src: Source, text: str) -> bool:
    """A name that holds a module: model-like, or called / asked for parameters here (not an
    optimizer or scheduler, whose `train()`/`eval()` are a different thing)."""
    if is_optimizer_name(text) or SCHEDULER_WORDS & set(name_words(last_name(text))):
        return False
    return is_model_name(text) or f"{text}(" in src.text or f"{text}.parameters(" in src.text


def _epoch_loops_reaching(src: Source, call: ast.Call, model: str):
    """(loop, (variant, model text in that loop)) for the loops whose iterations run `call`:
    loops around it in its function, and loops of this file that call its function."""
    loops = src.enclosing_loops(call)
    for loop in loops:
        variant = "top-of-loop" if not src.conditional_within(call, loop) else "restore-after-eval"
        yield loop, (variant, model)
    func = src.enclosing_function(call)
    if func is None or loops:
        return
    for site in src.nodes:
        if isinstance(site, ast.Call) and src.local_callee(site) is func:
            text = _argument_for(site, func, model)
            if text is None:
                continue
            for loop in src.enclosing_loops(site):
                yield loop, ("in-training-helper", text)


def _argument_for(site: ast.Call, func: ast.AST, model: str) -> Optional[str]:
    """What the call site passes for the parameter named by `model` (`self.x` as is)."""
    if model.startswith("self."):
        return model
    params = [a.arg for a in func.args.posonlyargs + func.args.args]
    offset = 1 if isinstance(site.func, ast.Attribute) and params[:1] in (["self"], ["cls"]) else 0
    head = model.split(".", 1)
    if head[0] not in params:
        return None
    index = params.index(head[0]) - offset
    value = None
    if 0 <= index < len(site.args):
        value = dotted(site.args[index])
    for kw in site.keywords:
        if kw.arg == head[0]:
            value = dotted(kw.value)
    if value is None:
        return None
    return value + ("." + head[1] if len(head) > 1 else "")


# ------------------------------------------------------------------ TPF001: stored loss

def drop_breaker(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF001: `total += loss.item()` -> `total += loss` where `loss` is backwarded in the loop
    and `total` outlives the iteration."""
    for stmt in src.nodes:
        store = _store_of(src, stmt)
        if store is None:
            continue
        target, expr = store
        loops = src.enclosing_loops(stmt)
        if not loops or under_no_grad(src, stmt):
            continue
        loop = next((lp for lp in loops if _backwarded_names(src, lp)), None)
        if loop is None or not _outlives(src, target, loop):
            continue
        backwarded = _backwarded_names(src, loop)
        for breaker in _breakers_on(expr, backwarded):
            if _other_breaker_above(src, breaker, expr):
                continue
            base = breaker.func.value
            edit = Edit(src.end(base), src.end(breaker), "")
            yield Mutation("TPF001", "drop-item-detach", breaker.func.attr, stmt.lineno,
                           (edit,), loop.lineno, target)


def _store_of(src: Source, stmt: ast.AST) -> Optional[Tuple[str, ast.AST]]:
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, (ast.Add, ast.Sub)):
        target = dotted(stmt.target)
        return (target, stmt.value) if target else None
    if isinstance(stmt, ast.Expr) and method_call(stmt.value, "append", "extend") \
            and stmt.value.args:
        target = receiver_text(stmt.value)
        return (target, stmt.value.args[0]) if target else None
    return None


def _backwarded_names(src: Source, loop: ast.AST) -> set:
    """Names backwarded inside `loop` and assigned in it (a fresh loss every iteration)."""
    return src.memo(("backwarded", id(loop)), lambda: _find_backwarded_names(src, loop))


def _find_backwarded_names(src: Source, loop: ast.AST) -> set:
    names = set()
    for call in src.local_calls(loop):
        kind = backward_kind(src, call)
        if kind == "tensor":
            names |= {n.id for n in ast.walk(call.func.value if isinstance(call.func, ast.Attribute)
                                             else call) if isinstance(n, ast.Name)}
        elif kind == "framework" and call.args:
            names |= {n.id for n in ast.walk(call.args[0]) if isinstance(n, ast.Name)}
    assigned = {t.id for n in walk_local(loop) if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in ast.walk(n.targets[0] if isinstance(n, ast.Assign) else n.target)
                if isinstance(t, ast.Name)}
    return names & assigned


def _outlives(src: Source, target: str, loop: ast.AST) -> bool:
    """`target` is bound before the loop (not re-created in its body) or is an attribute."""
    if "." in target:
        return True          # an attribute (`self.losses`, `stats.total`) outlives the loop
    for n in walk_local(loop):
        if isinstance(n, ast.Assign) and any(dotted(t) == target for t in n.targets):
            return False
    scope = src.enclosing_scope(loop)
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) and target in [
            a.arg for a in scope.args.posonlyargs + scope.args.args + scope.args.kwonlyargs]:
        return True
    for n in walk_local(scope):
        if isinstance(n, ast.Assign) and any(dotted(t) == target for t in n.targets) \
                and n.lineno < loop.lineno:
            return True
    return False


def _breakers_on(expr: ast.AST, names: set) -> List[ast.Call]:
    return [n for n in ast.walk(expr) if method_call(n, "item", "detach") and not n.args
            and isinstance(n.func.value, ast.Name) and n.func.value.id in names]


def _other_breaker_above(src: Source, breaker: ast.Call, root: ast.AST) -> bool:
    """Another graph breaker applies to the value once this one is gone (`.detach().item()`,
    `float(...)`, an f-string), or the store keeps something else (a comparison)."""
    node = breaker
    while node is not root:
        parent = src.parent(node)
        if isinstance(parent, ast.Attribute) and parent.attr in BREAKER_METHODS:
            return True
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) \
                and parent.func.id in BREAKER_FUNCS:
            return True
        if isinstance(parent, (ast.Compare, ast.JoinedStr, ast.FormattedValue, ast.Dict,
                               ast.Subscript)):
            return True
        if isinstance(parent, ast.Call) and node is not parent.func:
            return True      # passed to a function we know nothing of
        node = parent
    return False


# ------------------------------------------------------------------ TPF002: no_grad

def remove_no_grad(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF002: remove the `no_grad` of evaluation code that runs a model forward (not in
    pytest files, whose `test_*` functions are tests, not evaluation)."""
    base = src.path.replace("\\", "/").rsplit("/", 1)[-1]
    if base.startswith("test_") or base.endswith("_test.py") or base == "conftest.py":
        return
    for node in src.nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _undecorate(src, node)
        elif isinstance(node, ast.With) and len(node.items) == 1 \
                and _grad_disabling(src, node.items[0].context_expr):
            yield from _unwrap_no_grad(src, node)


def _undecorate(src: Source, func: ast.AST) -> Iterator[Mutation]:
    decorators = [d for d in func.decorator_list if _grad_disabling(src, d)]
    if len(decorators) != 1 or not EVAL_FUNC_RE.match(func.name) or in_lightning_class(src, func):
        return
    if src.reaches(func, is_backward(src)) or not _forwards(src, func) \
            or under_no_grad(src, func) or _callers_disable_grad(src, func) \
            or any(_grad_disabling(src, w.items[0].context_expr) for w in walk_local(func)
                   if isinstance(w, ast.With) and w.items):
        return
    dec = decorators[0]
    line = src.lines[dec.lineno - 1]
    if dec.lineno != dec.end_lineno or not line.strip().startswith("@"):
        return
    yield Mutation("TPF002", "remove-no-grad", "decorator", dec.lineno,
                   (Edit((dec.lineno, 0), (dec.lineno + 1, 0), ""),), None, func.name)


def _unwrap_no_grad(src: Source, with_stmt: ast.With) -> Iterator[Mutation]:
    if under_no_grad(src, with_stmt) or in_lightning_class(src, with_stmt):
        return
    if src.reaches(with_stmt, is_backward(src)) or not _forwards(src, with_stmt):
        return
    func = src.enclosing_function(with_stmt)
    reason = _evaluation_reason(src, with_stmt, func)
    if reason is None or (func is not None and _callers_disable_grad(src, func)):
        return
    trains = any(loop_reaches_backward(src, lp) for lp in src.enclosing_loops(with_stmt)) or (
        func is not None and src.reaches(func, is_backward(src)))
    if trains and reason != "val-loader":
        return     # no_grad in training code may guard a target computation: not evaluation
    edits = unwrap_block(src, with_stmt, with_stmt.body)
    if edits is None:
        return
    if trains:
        reason += ",training-function"
    loops = src.enclosing_loops(with_stmt)
    yield Mutation("TPF002", "remove-no-grad", f"with-block:{reason}", with_stmt.lineno,
                   tuple(edits), loops[0].lineno if loops else None,
                   func.name if func is not None else "<module>")


def _forwards(src: Source, node: ast.AST) -> List[ast.Call]:
    """Model forward calls written under `node`: `model(x)`, `self.net(x)`, `model.module(x)`."""
    return [c for c in src.local_calls(node) if is_model_name(dotted(c.func))
            and not method_call(c, "eval", "train", "to", "cuda", "parameters", "state_dict")]


def _evaluation_reason(src: Source, with_stmt: ast.With, func: Optional[ast.AST]) -> Optional[str]:
    if func is not None and EVAL_FUNC_RE.match(func.name):
        return "eval-name"
    for loop in [n for n in walk_local(with_stmt) if isinstance(n, LOOPS)] + \
            src.enclosing_loops(with_stmt):
        iterated = dotted(_iterated(getattr(loop, "iter", None)))
        if iterated and is_val_name(last_name(iterated)):
            return "val-loader"
    scope = func if func is not None else src.tree
    for call in src.local_calls(scope):
        if method_call(call, "eval") and call.lineno < with_stmt.lineno \
                and is_model_name(receiver_text(call)):
            return "after-eval"
    return None


def _iterated(expr: Optional[ast.AST]) -> Optional[ast.AST]:
    while isinstance(expr, ast.Call) and expr.args and \
            last_name(dotted(expr.func)) in ("enumerate", "tqdm", "zip", "iter", "progress_bar"):
        expr = expr.args[0]
    return expr


def _callers_disable_grad(src: Source, func: ast.AST) -> bool:
    return any(under_no_grad(src, c) for c in src.nodes
               if isinstance(c, ast.Call) and src.local_callee(c) is func)


# ------------------------------------------------------------------ TPF005 / TPF006

def _bindings(src: Source, target: str, scope: ast.AST) -> List[ast.AST]:
    """Values assigned to `target` in `scope`'s own body (a function or the module), or, for
    `self.x` and a class, in any of its methods. One pass over the file, memoised."""
    return _assignment_index(src).get((id(scope), target), [])


def _assignment_index(src: Source) -> Dict[Tuple[int, str], List[ast.AST]]:
    def build() -> Dict[Tuple[int, str], List[ast.AST]]:
        index: Dict[Tuple[int, str], List[ast.AST]] = {}
        for node in src.nodes:
            if not isinstance(node, ast.Assign):
                continue
            scope = src.enclosing_scope(node)
            cls = next((a for a in src.ancestors(node) if isinstance(a, ast.ClassDef)), None)
            for target in node.targets:
                text = dotted(target)
                if not text:
                    continue
                index.setdefault((id(scope), text), []).append(node.value)
                if cls is not None and text.startswith("self."):
                    index.setdefault((id(cls), text), []).append(node.value)
        return index
    return src.memo("assignments", build)


def _bound_only_to(src: Source, call: ast.Call, classes: set) -> bool:
    """`criterion(...)`: every assignment of `criterion` that can reach this call builds one of
    `classes` (those of its function, else of the module; `self.x`: those of its class)."""
    target = dotted(call.func)
    if not target:
        return False
    if target.startswith("self."):
        cls = next((a for a in src.ancestors(call) if isinstance(a, ast.ClassDef)), None)
        values = _bindings(src, target, cls) if cls is not None else []
    elif "." in target:
        values = _bindings(src, target, src.tree)
    else:
        values = _visible_bindings(src, call, target)
    return bool(values) and all(isinstance(v, ast.Call) and resolved(src, v.func) in classes
                                for v in values)


def _visible_bindings(src: Source, node: ast.AST, name: str) -> List[ast.AST]:
    """Assignments of `name` in the innermost enclosing function that binds it (a parameter
    of the same name hides everything: its value is unknown), else at module level."""
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    for scope in [a for a in src.ancestors(node) if isinstance(a, functions)]:
        values = _bindings(src, name, scope)
        if values:
            return values
        if name in _params(scope):
            return []
    return _bindings(src, name, src.tree)


def _params(func: ast.AST) -> List[str]:
    a = func.args
    return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]


def _loss_calls(src: Source, classes: set, functions: set) -> Iterator[ast.Call]:
    built = {dotted(t) for n in src.nodes if isinstance(n, ast.Assign)
             and isinstance(n.value, ast.Call) and resolved(src, n.value.func) in classes
             for t in n.targets}
    for call in src.calls:
        if not call.args:
            continue
        func = call.func
        if resolved(src, func) in functions or (
                isinstance(func, ast.Call) and resolved(src, func.func) in classes) or (
                dotted(func) in built and _bound_only_to(src, call, classes)):
            yield call


def _wrap(src: Source, arg: ast.AST, fn: str, method: str, rng: random.Random,
          extra: str = "") -> Tuple[Tuple[Edit, ...], str]:
    """Wrap `arg` in the activation, in a form drawn from those the file can write:
    `torch.softmax(x, dim=1)`, `F.softmax(x, dim=1)` or `x.softmax(dim=1)`."""
    text = src.segment(arg)
    forms = ["method"]
    if src.torch_alias():
        forms.append("torch")
    if src.functional_alias() and fn == "softmax":
        forms.append("functional")
    form = rng.choice(forms)
    if form == "torch":
        new = f"{src.torch_alias()}.{fn}({text}{', ' + extra if extra else ''})"
    elif form == "functional":
        new = f"{src.functional_alias()}.{fn}({text}{', ' + extra if extra else ''})"
    else:
        atom = isinstance(arg, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
        new = f"{text if atom else '(' + text + ')'}.{method}({extra})"
    return (Edit(src.start(arg), src.end(arg), new),), form


def softmax_into_cross_entropy(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF005: feed `softmax(logits)` to `CrossEntropyLoss` / `F.cross_entropy`."""
    for call in _loss_calls(src, CROSS_ENTROPY, CROSS_ENTROPY_FN):
        arg = call.args[0]
        if isinstance(arg, ast.Starred) or \
                _is_activation(src, arg, SOFTMAX_FNS, ("softmax", "log_softmax")):
            continue
        edits, form = _wrap(src, arg, "softmax", "softmax", rng, "dim=1")
        yield Mutation("TPF005", "softmax-into-cross-entropy", form, call.lineno, edits,
                       _loop_line(src, call), dotted(call.func) or "")


def sigmoid_into_bce_logits(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF006: feed `sigmoid(logits)` to `BCEWithLogitsLoss`."""
    for call in _loss_calls(src, BCE_LOGITS, BCE_LOGITS_FN):
        arg = call.args[0]
        if isinstance(arg, ast.Starred) or _is_activation(src, arg, SIGMOID_FNS, ("sigmoid",)):
            continue
        edits, form = _wrap(src, arg, "sigmoid", "sigmoid", rng)
        yield Mutation("TPF006", "sigmoid-into-bce-with-logits", form, call.lineno, edits,
                       _loop_line(src, call), dotted(call.func) or "")


def _is_activation(src: Source, arg: ast.AST, functions: set, methods: Tuple[str, ...]) -> bool:
    return isinstance(arg, ast.Call) and (resolved(src, arg.func) in functions
                                          or method_call(arg, *methods))


def _loop_line(src: Source, node: ast.AST) -> Optional[int]:
    loops = src.enclosing_loops(node)
    return loops[0].lineno if loops else None


# ------------------------------------------------------------------ TPF004: accumulation

def drop_accumulation_division(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF004: drop the `/ accum_steps` of a loss backwarded on every iteration when the step
    is gated by the accumulation count: a counter test, a boolean computed from one, or a
    micro-step loop with the step after it. The divisor must name what the gate counts."""
    for loop in loops_in(src):
        backs = direct_calls(src, loop, lambda c: _unscaled_backward(src, c))
        if not backs or _uses_accumulate_context(src, loop):
            continue
        gate = _accumulation_gate(src, loop)
        if gate is None:
            continue
        kind, counted = gate
        operator = "drop-accumulation-division" + (
            NO_EFFECT_SUFFIX if _sum_changes_nothing(src) else "")
        seen = set()
        for back in backs:
            for div, edits, shape in _divisions_for(src, loop, back):
                if id(div) in seen or not (key_names(div.right) & counted):
                    continue
                seen.add(id(div))
                yield Mutation("TPF004", operator, f"{kind}:{shape}",
                               div.lineno, tuple(edits), loop.lineno, src.segment(div.right))


# The operator name of an injected change that is no bug: shown on a row of its own, kept
# out of the recall totals (like a note's).
NO_EFFECT_SUFFIX = " (no effect)"
# Optimizers whose update is unchanged when every gradient is k times larger (m / sqrt(v),
# or the gradient's sign), with a weight decay that never sees the gradient (decoupled) or
# that the file leaves off: summing k micro-batches instead of averaging them changes
# nothing but `eps`'s weight (TPF004's own reasoning, see its docstring).
DECOUPLED_SCALE_INVARIANT = frozenset({"AdamW", "Adafactor", "Lion", "AdamW8bit", "PagedAdamW",
                                       "PagedAdamW8bit"})
COUPLED_SCALE_INVARIANT = frozenset({"Adam", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad",
                                     "Adadelta", "FusedAdam", "Adam8bit"})
CLIP_CALLS = ("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "clip_gradients",
              "clip_grad_norm_fp32", "clip_master_grads")


def _sum_changes_nothing(src: Source) -> bool:
    """The file builds optimizers, every one scale-invariant with no coupled weight decay
    (an Adam-family class without `weight_decay`, or AdamW & co. with any), and clips no
    gradient anywhere: an unscaled accumulated loss leaves every update as it was."""
    built = [(c, optimizer_ctor(src, c)) for c in src.calls]
    built = [(c, name) for c, name in built if name is not None]
    if not built or any(method_call(c, *CLIP_CALLS) or last_name(resolved(src, c.func)) in CLIP_CALLS
                        for c in src.calls):
        return False
    for call, name in built:
        if name in DECOUPLED_SCALE_INVARIANT:
            continue
        decay = keyword(call, "weight_decay")
        if name not in COUPLED_SCALE_INVARIANT or not (decay is None or _literal_zero(decay)):
            return False
    return True


def _literal_zero(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0


def _unscaled_backward(src: Source, call: ast.Call) -> bool:
    """A backward that does not divide by the accumulation count itself: a tensor's, Fabric's,
    or Accelerate's when no `Accelerator(gradient_accumulation_steps=...)` is built here."""
    kind = backward_kind(src, call)
    if kind == "tensor":
        return True
    if kind != "framework" or not method_call(call, "backward"):
        return False
    words = set(name_words(receiver_text(call) or ""))
    if "fabric" in words:
        return True
    return "accelerator" in words and not any(
        resolved(src, c.func).endswith("Accelerator") and keyword(c, "gradient_accumulation_steps")
        for c in src.calls)


def _accumulation_gate(src: Source, loop: ast.AST) -> Optional[Tuple[str, set]]:
    """(`counter` | `boolean` | `micro-step`, the names the gate counts with)."""
    for step in src.local_calls(loop):
        if step_kind(src, step) is None or src.enclosing_loops(step)[:1] != [loop]:
            continue
        cond = nearest_if(src, step, loop)
        if cond is None:
            continue
        mods = mod_tests(cond.test)
        if mods:
            return "counter", set().union(*(key_names(m.right) for m in mods))
        flag = _flag_name(cond.test)
        counted = _flag_counts(src, loop, flag) if flag else set()
        if counted:
            return "boolean", counted
    if any(step_kind(src, c) for c in src.local_calls(loop)):
        return None
    iterated = getattr(loop, "iter", None)
    if isinstance(iterated, ast.Call) and dotted(iterated.func) == "range" and _step_after(src, loop):
        return "micro-step", set().union(*(key_names(a) for a in iterated.args))
    return None


def _flag_name(test: ast.AST) -> Optional[str]:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    return dotted(test) if isinstance(test, (ast.Name, ast.Attribute)) else None


def _flag_counts(src: Source, loop: ast.AST, flag: str) -> set:
    """Names counted by the `%` of the assignment that computes `flag` in the loop."""
    for node in walk_local(loop):
        if isinstance(node, ast.Assign) and any(dotted(t) == flag for t in node.targets):
            mods = mod_tests(node.value)
            if mods:
                return set().union(*(key_names(m.right) for m in mods))
    return set()


def _step_after(src: Source, loop: ast.AST) -> bool:
    """An optimizer step after `loop`, in the same function and the same enclosing loops."""
    scope = src.enclosing_scope(loop)
    outer = src.enclosing_loops(loop)
    return any(step_kind(src, c) and c.lineno > loop.end_lineno
               and src.enclosing_scope(c) is scope and src.enclosing_loops(c) == outer
               for c in src.local_calls(scope))


def _uses_accumulate_context(src: Source, loop: ast.AST) -> bool:
    return any(isinstance(n, (ast.With, ast.AsyncWith)) and any(
        method_call(i.context_expr, "accumulate", "no_sync") for i in n.items)
        for n in list(walk_local(loop)) + list(src.ancestors(loop)))


def _divisions_for(src: Source, loop: ast.AST, back: ast.Call):
    """(division node, edits, variant) that scale the value `back` backwards."""
    if backward_kind(src, back) == "framework":
        scaled = back.args[0] if back.args else None
    else:
        receiver = back.func.value if isinstance(back.func, ast.Attribute) else None
        scaled = receiver.args[0] if method_call(receiver, "scale") and receiver.args \
            else receiver
    if scaled is None:
        return
    if _is_div(scaled):
        yield scaled, [Edit(src.start(scaled), src.end(scaled), _operand_text(src, scaled.left))], \
            "in-backward-call"
        return
    if not isinstance(scaled, ast.Name):
        return
    name = scaled.id
    for stmt in walk_local(loop):
        if not isinstance(stmt, ast.stmt) or stmt.lineno >= back.lineno \
                or src.enclosing_loops(stmt)[:1] != [loop]:
            continue
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Div) \
                and dotted(stmt.target) == name:
            div = ast.BinOp(left=stmt.target, op=ast.Div(), right=stmt.value)
            ast.copy_location(div, stmt)
            yield div, delete_statement(src, stmt), "augassign"
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                and dotted(stmt.targets[0]) == name and _is_div(stmt.value):
            value = stmt.value
            if isinstance(value.left, ast.Name) and value.left.id == name:
                yield value, delete_statement(src, stmt), "reassign"
            else:
                yield value, [Edit(src.start(value), src.end(value),
                                   _operand_text(src, value.left))], "at-definition"


def _is_div(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)


def _operand_text(src: Source, node: ast.AST) -> str:
    text = src.segment(node)
    atom = isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant))
    return text if atom else f"({text})"


# ------------------------------------------------------------------ TPF008: DDP sampler

def drop_ddp_sampler(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF008: drop the `sampler=DistributedSampler(...)` of a DDP training loader."""
    samplers = _dist_sampler_names(src)
    wrap = _data_parallel_wrap(src)
    prepared = _prepared_names(src)
    for call in src.nodes:
        if not is_dataloader(src, call):
            continue
        kw = keyword(call, "sampler")
        if kw is None or not _is_dist_sampler(src, kw.value, samplers):
            continue
        loader = assigned_name(src, call)
        if is_val_name(loader) or (call.args and is_val_name(dotted(call.args[0])) or
                                   loader in prepared):
            continue
        yield Mutation("TPF008", "drop-ddp-sampler", wrap, kw.value.lineno,
                       tuple(remove_keyword(src, call, kw)), None, loader or "")


# Who makes the model data-parallel, as the variant of a TPF008 site says it.
DATA_PARALLEL_WRAPS = (("torch.nn.parallel", "torch-ddp"), ("torch.distributed", "torch-fsdp"),
                       ("apex", "apex-ddp"), ("deepspeed", "deepspeed-engine"))


def _data_parallel_wrap(src: Source) -> str:
    """`torch-ddp`, `torch-fsdp`, `apex-ddp`, `deepspeed-engine`, `other-wrap` (the first
    present, in that order) or `no-wrap-in-file`."""
    kinds = set()
    for call in src.calls:
        qual = resolved(src, call.func)
        if ends_with(qual, DDP_WRAPS) or last_name(qual) in ("DDP", "FSDP"):
            kinds.add(next((kind for prefix, kind in DATA_PARALLEL_WRAPS
                            if qual.startswith(prefix)), "other-wrap"))
    order = [kind for _, kind in DATA_PARALLEL_WRAPS] + ["other-wrap"]
    return next((kind for kind in order if kind in kinds), "no-wrap-in-file")


def _dist_sampler_names(src: Source) -> set:
    names = set()
    for node in src.nodes:
        if isinstance(node, ast.Assign) and any(
                isinstance(c, ast.Call) and resolved(src, c.func).endswith(DIST_SAMPLER_SUFFIX)
                for c in ast.walk(node.value)):
            names |= {dotted(t) for t in node.targets if dotted(t)}
    return names


def _is_dist_sampler(src: Source, value: ast.AST, names: set) -> bool:
    if isinstance(value, ast.Call) and resolved(src, value.func).endswith(DIST_SAMPLER_SUFFIX):
        return True
    if isinstance(value, ast.IfExp):
        return _is_dist_sampler(src, value.body, names) or _is_dist_sampler(src, value.orelse, names)
    return dotted(value) in names


def _prepared_names(src: Source) -> set:
    return {dotted(a) for c in src.nodes
            if method_call(c, "prepare", "setup_dataloaders", "prepare_data_loader")
            for a in c.args if dotted(a)}


# ------------------------------------------------------------------ TPF012: optimizer in loop

def optimizer_into_loop(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF012: build the (stateful) optimizer again at the top of the loop that steps it."""
    for stmt in src.nodes:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], (ast.Name, ast.Attribute))):
            continue
        ctor = optimizer_ctor(src, stmt.value)
        if ctor is None or not _stateful(stmt.value, ctor) or not src.owns_lines(stmt):
            continue
        name = dotted(stmt.targets[0])
        try:
            _, _, block = src.block_of(stmt)
        except ValueError:
            continue
        for later in block[block.index(stmt) + 1:]:
            if _rebinds(later, name):
                break
            if isinstance(later, LOOPS) and _steps(src, later, name) \
                    and loop_reaches_backward(src, later):
                body = later.body[0]
                indent = src.indent_of(body.lineno) if body.lineno != later.lineno else None
                if indent is None:
                    break
                variant = "epoch-loop" if any(isinstance(n, LOOPS) for n in walk_local(later)
                                              if n is not later) else "step-loop"
                text = statement_text(src, stmt, indent)
                yield Mutation("TPF012", "optimizer-into-loop", variant, stmt.lineno,
                               tuple(insert_before(src, body, text)), later.lineno, ctor)
                break


def _stateful(call: ast.Call, ctor: str) -> bool:
    if ctor != "SGD":
        return True
    momentum = _kw_value(call, "momentum")
    return isinstance(momentum, ast.Constant) and isinstance(momentum.value, (int, float)) \
        and momentum.value > 0


def _rebinds(stmt: ast.AST, name: str) -> bool:
    for n in ast.walk(stmt):
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                if any(dotted(x) == name for x in ast.walk(t)):
                    return True
    return False


def _steps(src: Source, loop: ast.AST, name: str) -> bool:
    return any(stepped_optimizer(src, c) == name for c in src.local_calls(loop))


# ------------------------------------------------------------------ TPF014: unscale_

def delete_unscale(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF014: delete the `scaler.unscale_(opt)` that precedes a gradient clip."""
    for call in src.nodes:
        if not (method_call(call, "unscale_") and isinstance(src.parent(call), ast.Expr)
                and is_scaler_name(receiver_text(call))):
            continue
        loops = src.enclosing_loops(call)
        loop = loops[0] if loops else src.enclosing_function(call)
        if loop is None or (not loops and not src.reaches(loop, is_backward(src))):
            continue        # outside a loop: only a per-step function that backwards too
        scaler = receiver_text(call)
        steps = [c for c in src.local_calls(loop) if method_call(c, "step")
                 and receiver_text(c) == scaler and c.lineno > call.lineno]
        clips = [c for c in src.local_calls(loop) if last_name(dotted(c.func)) in CLIP_FNS
                 and call.lineno < c.lineno and (not steps or c.lineno < steps[0].lineno)
                 and "accelerator" not in (dotted(c.func) or "") and _clips_something(src, c)]
        if not steps or not clips:
            continue
        stmt = src.parent(call)
        variant = "same-block" if src.block_of(stmt)[2] is src.block_of(
            src.statement_of(clips[0]))[2] else "clip-in-other-block"
        if not loops:
            variant = "step-function:" + variant
        yield Mutation("TPF014", "delete-unscale", variant, stmt.lineno,
                       tuple(delete_statement(src, stmt)), loop.lineno if loops else None, scaler)


def _clips_something(src: Source, call: ast.Call) -> bool:
    """The clip has a threshold (`clip_grad_value_(params, None)` only measures the norm).
    A function of a module takes the parameters first; a method (FSDP's
    `model.clip_grad_norm_(max_norm)`) takes the threshold first."""
    threshold = _kw_value(call, "max_norm") or _kw_value(call, "clip_value")
    if threshold is None:
        head = (dotted(call.func) or "").split(".", 1)[0]
        function = isinstance(call.func, ast.Name) or head in src.imports
        index = 1 if function else 0
        threshold = call.args[index] if len(call.args) > index else None
    return threshold is not None and not is_literal(threshold, None)


# ------------------------------------------------------------------ TPF015: reset every step

def reset_every_iteration(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF015: move the `zero_grad()` out of the accumulation condition, to the top of the
    loop body (before the backward), so it runs on every micro-batch."""
    for loop in loops_in(src):
        backs = direct_calls(src, loop, is_backward(src))
        if not backs or _uses_accumulate_context(src, loop):
            continue
        gated_steps = [s for s in src.local_calls(loop) if step_kind(src, s) is not None
                       and src.enclosing_loops(s)[:1] == [loop] and _gate(src, s, loop)]
        if not gated_steps:
            continue
        resets = grad_resets(loop)
        if any(not src.conditional_within(r, loop) for r in resets):
            continue
        body = loop.body[0]
        if body.lineno == loop.lineno:
            continue
        for reset in resets:
            if not (isinstance(reset, ast.Call) and isinstance(src.parent(reset), ast.Expr)):
                continue
            gate = _gate(src, reset, loop)
            if gate is None or src.enclosing_loops(reset)[:1] != [loop]:
                continue
            stmt = src.parent(reset)
            first = body if not _is_docstring(body) else loop.body[1]
            text = statement_text(src, stmt, src.indent_of(first.lineno))
            edits = delete_statement(src, stmt) + insert_before(src, first, text)
            yield Mutation("TPF015", "reset-every-iteration", gate, stmt.lineno, tuple(edits),
                           loop.lineno, receiver_text(reset) or "")


def _gate(src: Source, node: ast.AST, loop: ast.AST) -> Optional[str]:
    """`counter` / `boolean` when the nearest `if` around `node` in `loop` gates accumulation."""
    cond = nearest_if(src, node, loop)
    if cond is None:
        return None
    if mod_tests(cond.test):
        return "counter"
    words = set(name_words(" ".join(sorted(names_in(cond.test)))))
    if words & {"accumulating", "accumulate", "accum", "sync", "gradients", "update"}:
        return "boolean"
    return None


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
        and isinstance(stmt.value.value, str)


# ------------------------------------------------------------------ TPF016: no parentheses

def drop_call_parentheses(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF016: `model.eval()` -> `model.eval`, likewise `train()` and `zero_grad()`."""
    for stmt in src.nodes:
        if not (isinstance(stmt, ast.Expr) and method_call(stmt.value, "eval", "train",
                                                           "zero_grad")):
            continue
        call = stmt.value
        method = call.func.attr
        recv = receiver_text(call)
        if method in ("eval", "train") and (call.args or call.keywords or not is_model_name(recv)):
            continue
        if recv is None:
            continue
        yield Mutation("TPF016", "drop-call-parentheses", method, stmt.lineno,
                       (Edit(src.end(call.func), src.end(call), ""),), _loop_line(src, call), recv)


# ------------------------------------------------------------------ TPF017: before sharding

def optimizer_before_sharding(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF017: move `opt = Adam(model.parameters())` above the FSDP wrap of `model`."""
    for stmt in src.nodes:
        if not (isinstance(stmt, ast.Assign) and optimizer_ctor(src, stmt.value)
                and src.owns_lines(stmt)):
            continue
        try:
            _, _, block = src.block_of(stmt)
        except ValueError:
            continue
        models = {receiver_text(c) for c in ast.walk(stmt.value)
                  if method_call(c, "parameters", "named_parameters")} - {None}
        if not models:
            continue
        index = block.index(stmt)
        wraps = [(i, kind) for i, s in enumerate(block[:index]) for kind in [_shards(src, s, models)]
                 if kind]
        if not wraps:
            continue
        first, kind = wraps[0]
        between = block[first:index]
        used = names_in(stmt.value) - {m.split(".")[0] for m in models}
        if any(_rebinds(s, n) for s in between for n in used):
            continue
        wrap_stmt = block[first]
        text = statement_text(src, stmt, src.indent_of(wrap_stmt.lineno))
        edits = delete_statement(src, stmt) + insert_before(src, wrap_stmt, text)
        yield Mutation("TPF017", "optimizer-before-sharding", kind, stmt.lineno, tuple(edits),
                       None, ",".join(sorted(models)))


def _shards(src: Source, stmt: ast.AST, models: set) -> Optional[str]:
    for call in ast.walk(stmt):
        if not isinstance(call, ast.Call) or not call.args:
            continue
        qual = resolved(src, call.func)
        if dotted(call.args[0]) not in models:
            continue
        if ends_with(qual, FSDP2):
            return "fsdp2"
        if ends_with(qual, FSDP1) or last_name(qual) == "FSDP":
            if is_literal(_kw_value(call, "use_orig_params"), True):
                return None
            return "fsdp1"
    return None


# ------------------------------------------------------------------ TPF018: shuffle

def drop_shuffle(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF018: drop `shuffle=True` of a training DataLoader (shuffle=True means map-style:
    DataLoader refuses it for an IterableDataset)."""
    for call in src.nodes:
        if not is_dataloader(src, call):
            continue
        kw = keyword(call, "shuffle")
        if kw is None or not is_literal(kw.value, True) or keyword(call, "sampler") \
                or keyword(call, "batch_sampler"):
            continue
        variant = _training_loader(src, call)
        if variant is None:
            continue
        variant += ":dataset=" + _dataset_origin(src, call)
        yield Mutation("TPF018", "drop-shuffle", variant, kw.lineno,
                       tuple(remove_keyword(src, call, kw)), None, assigned_name(src, call) or "")


def _dataset_origin(src: Source, loader: ast.Call) -> str:
    """Where the loader's dataset comes from, as far as this file says (for the breakdown):
    a class of this file, a library class, a call of something else, a parameter."""
    dataset = loader.args[0] if loader.args else _kw_value(loader, "dataset")
    if dataset is None:
        return "none"
    value = dataset
    if isinstance(dataset, (ast.Name, ast.Attribute)):
        values = _visible_bindings(src, loader, dataset.id) if isinstance(dataset, ast.Name) \
            else _bindings(src, dotted(dataset) or "", src.enclosing_scope(loader))
        if not values:
            return "parameter-or-unbound"
        value = values[-1]
    if not isinstance(value, ast.Call):
        return "expression"
    qual = resolved(src, value.func)
    name = last_name(qual)
    if name in src.functions and any(isinstance(a, ast.ClassDef) and a.name == name
                                     for a in src.nodes):
        return "class-of-this-file"
    for prefix in ("torchvision", "torch.utils.data", "datasets", "torchaudio", "torch_geometric",
                   "dgl", "transformers"):
        if qual.startswith(prefix + "."):
            return prefix
    if any(isinstance(a, ast.ClassDef) and a.name == name for a in src.nodes):
        return "class-of-this-file"
    return "call-of-other-code"


def _training_loader(src: Source, call: ast.Call) -> Optional[str]:
    """`train-name` / `iterated-by-training-loop` when the loader is a training loader."""
    loader = assigned_name(src, call)
    dataset = dotted(call.args[0]) if call.args else dotted(_kw_value(call, "dataset"))
    if is_val_name(loader) or is_val_name(dataset):
        return None
    if "train" in name_words(loader or "") or "train" in name_words(dataset or ""):
        return "train-name"
    if loader and any(dotted(_iterated(lp.iter)) == loader and loop_reaches_backward(src, lp)
                      for lp in loops_in(src) if isinstance(lp, (ast.For, ast.AsyncFor))):
        return "iterated-by-training-loop"
    return None


# ------------------------------------------------------------------ TPF010 / TPF013

def ungate_logging_sync(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF010: run a `if step % log_every == 0:` logging block (with `.item()`) every step."""
    if not targets_cuda(src):
        return
    for loop in loops_in(src):
        if not direct_calls(src, loop, is_backward(src)):
            continue
        for cond in [n for n in walk_local(loop) if isinstance(n, ast.If)]:
            if cond.orelse or not mod_tests(cond.test) or src.enclosing_loops(cond)[:1] != [loop] \
                    or src.lines[cond.lineno - 1].lstrip().startswith("elif"):
                continue
            test_nodes = {id(n) for n in ast.walk(cond.test)}
            calls = [c for c in src.local_calls(cond) if id(c) not in test_nodes]
            if not any(method_call(c, "item") for c in calls):
                continue
            if any(last_name(dotted(c.func)) not in LOGGING_CALLS
                   and not method_call(c, *LOGGING_CALLS) for c in calls):
                continue
            edits = unwrap_block(src, cond, cond.body)
            if edits is None:
                continue
            yield Mutation("TPF010", "ungate-logging-sync", "interval-removed", cond.lineno,
                           tuple(edits), loop.lineno, src.segment(cond.test))


def drop_num_workers(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF013 (note): drop `num_workers=N` of a training loader in a CUDA file whose training
    loop copies batches to the device, over a dataset that is not a `TensorDataset`."""
    if not targets_cuda(src) or not _copies_in_training_loop(src):
        return
    tensor_datasets = {dotted(t) for n in src.nodes if isinstance(n, ast.Assign)
                       and isinstance(n.value, ast.Call)
                       and last_name(resolved(src, n.value.func)) == "TensorDataset"
                       for t in n.targets}
    for call in src.calls:
        if not is_dataloader(src, call):
            continue
        kw = keyword(call, "num_workers")
        dataset = call.args[0] if call.args else _kw_value(call, "dataset")
        if kw is None or is_literal(kw.value, 0) or _training_loader(src, call) is None \
                or dataset is None or dotted(dataset) in tensor_datasets \
                or (isinstance(dataset, ast.Call)
                    and last_name(resolved(src, dataset.func)) == "TensorDataset"):
            continue
        yield Mutation("TPF013", "drop-num-workers", "main-process-loading", kw.lineno,
                       tuple(remove_keyword(src, call, kw)), None, assigned_name(src, call) or "")


def _copies_in_training_loop(src: Source) -> bool:
    return any(method_call(c, "to", "cuda") for loop in src.loops
               if direct_calls(src, loop, is_backward(src)) for c in src.local_calls(loop))


def transfer_into_loop(src: Source, rng: random.Random) -> Iterator[Mutation]:
    """TPF013 (warning): repeat a loop-invariant transfer made before a training loop at the
    top of its step loop: `w = weights.to(device)` (the source stays on the host) or
    `model.to(device)` (walks every parameter each step)."""
    for stmt in src.nodes:
        found = _transfer(src, stmt)
        if found is None or not src.owns_lines(stmt):
            continue
        variant, target, source = found
        try:
            _, _, block = src.block_of(stmt)
        except ValueError:
            continue
        for later in block[block.index(stmt) + 1:]:
            if _rebinds(later, source) or (target != source and _rebinds(later, target)
                                           and not isinstance(later, LOOPS)):
                break
            if not isinstance(later, LOOPS) or not loop_reaches_backward(src, later):
                continue
            step_loop = _step_loop(src, later)
            if step_loop is None or _rebinds(step_loop, source) or \
                    target not in names_in(step_loop) or step_loop.body[0].lineno == step_loop.lineno:
                break
            if target != source and any(_rebinds(s, target) for s in step_loop.body):
                break
            first = step_loop.body[0]
            text = statement_text(src, stmt, src.indent_of(first.lineno))
            yield Mutation("TPF013", "transfer-into-loop", variant, stmt.lineno,
                           tuple(insert_before(src, first, text)), step_loop.lineno, target)
            break


def _transfer(src: Source, stmt: ast.AST) -> Optional[Tuple[str, str, str]]:
    """(variant, name bound, name moved) for `t = x.to(dev)` / `model.to(dev)` / `model.cuda()`."""
    value = stmt.value if isinstance(stmt, (ast.Assign, ast.Expr)) else None
    if not (method_call(value, "to", "cuda") and isinstance(value.func.value, ast.Name)):
        return None
    if method_call(value, "to") and not (value.args or value.keywords):
        return None
    source = value.func.value.id
    if isinstance(stmt, ast.Expr):
        return ("model-to-device", source, source) if is_model_name(source) else None
    if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
        return None
    target = stmt.targets[0].id
    if target == source:
        return ("model-to-device", source, source) if is_model_name(source) else None
    if is_model_name(source) or is_val_name(source):
        return None
    return "tensor-to-device", target, source


def _step_loop(src: Source, loop: ast.AST) -> Optional[ast.AST]:
    """The loop under (or equal to) `loop` that backwards on every one of its iterations."""
    for candidate in [loop] + [n for n in walk_local(loop) if isinstance(n, LOOPS) and n is not loop]:
        if direct_calls(src, candidate, is_backward(src)):
            return candidate
    return None


OPERATORS: Tuple[Operator, ...] = (
    Operator("TPF001", "drop-item-detach", drop_breaker,
             "drop `.item()`/`.detach()` from a loss stored across iterations"),
    Operator("TPF002", "remove-no-grad", remove_no_grad,
             "remove the `no_grad` (decorator or with-block) of evaluation code"),
    Operator("TPF003", "delete-zero-grad", delete_zero_grad,
             "delete the only `zero_grad()` of a loop that backwards and steps every iteration"),
    Operator("TPF004", "drop-accumulation-division", drop_accumulation_division,
             "drop the division of a loss whose step is gated by a counter"),
    Operator("TPF005", "softmax-into-cross-entropy", softmax_into_cross_entropy,
             "wrap the input of a cross-entropy loss in softmax"),
    Operator("TPF006", "sigmoid-into-bce-with-logits", sigmoid_into_bce_logits,
             "wrap the input of BCEWithLogitsLoss in sigmoid"),
    Operator("TPF007", "delete-train", delete_train,
             "delete the `model.train()` that undoes an `eval()` of the same epoch loop"),
    Operator("TPF008", "drop-ddp-sampler", drop_ddp_sampler,
             "drop the `sampler=DistributedSampler(...)` of a training loader"),
    Operator("TPF009", "delete-set-epoch", delete_set_epoch,
             "delete the `sampler.set_epoch(epoch)` of an epoch loop"),
    Operator("TPF010", "ungate-logging-sync", ungate_logging_sync,
             "run an interval-gated `.item()` logging block on every step"),
    Operator("TPF012", "optimizer-into-loop", optimizer_into_loop,
             "build the stateful optimizer again at the top of the loop that steps it"),
    Operator("TPF013", "transfer-into-loop", transfer_into_loop,
             "repeat a loop-invariant `.to(device)` at the top of the step loop"),
    Operator("TPF013", "drop-num-workers", drop_num_workers,
             "drop `num_workers=` of a training loader in a CUDA file (a note)"),
    Operator("TPF014", "delete-unscale", delete_unscale,
             "delete the `scaler.unscale_()` before a gradient clip"),
    Operator("TPF015", "reset-every-iteration", reset_every_iteration,
             "move the gated `zero_grad()` to the top of the accumulation loop"),
    Operator("TPF016", "drop-call-parentheses", drop_call_parentheses,
             "drop the parentheses of `model.eval()`/`model.train()`/`opt.zero_grad()`"),
    Operator("TPF017", "optimizer-before-sharding", optimizer_before_sharding,
             "build the optimizer before the FSDP wrap of its model"),
    Operator("TPF018", "drop-shuffle", drop_shuffle,
             "drop `shuffle=True` of a training DataLoader"),
)
