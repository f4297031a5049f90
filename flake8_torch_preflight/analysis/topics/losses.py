"""Loss calls and what feeds them: which loss a call computes, and where its input came from.

Flow records every call as a `CallSite`; this module picks out the calls of the losses whose
input convention matters (cross-entropy takes logits, NLL takes log-probabilities, BCE takes
probabilities, BCE-with-logits takes logits) and explains the activation of the input:
which call produced it, and, for a module's output, why that module ends in an activation.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator, Optional, Tuple

from ..semantics import torchapi as api
from ..core import values as V
from ..core.astutil import dotted, keyword, short
from ..core.events import CallSite, FunctionFacts
from ..core.values import UNKNOWN, Value

CROSS_ENTROPY = "cross_entropy"
NLL = "nll_loss"
BCE = "binary_cross_entropy"
BCE_WITH_LOGITS = "binary_cross_entropy_with_logits"

_FUNCTIONAL = {
    "torch.nn.functional.cross_entropy": CROSS_ENTROPY,
    "torch.nn.functional.nll_loss": NLL,
    "torch.nn.functional.binary_cross_entropy": BCE,
    "torch.nn.functional.binary_cross_entropy_with_logits": BCE_WITH_LOGITS,
}
_CLASSES = {
    "CrossEntropyLoss": CROSS_ENTROPY,
    "NLLLoss": NLL,
    "BCELoss": BCE,
    "BCEWithLogitsLoss": BCE_WITH_LOGITS,
}
SPELLING = {
    CROSS_ENTROPY: ("nn.CrossEntropyLoss", "F.cross_entropy"),
    NLL: ("nn.NLLLoss", "F.nll_loss"),
    BCE: ("nn.BCELoss", "F.binary_cross_entropy"),
    BCE_WITH_LOGITS: ("nn.BCEWithLogitsLoss", "F.binary_cross_entropy_with_logits"),
}
# Modules whose output is a raw score (no activation): `nn.Linear` and friends.
RAW_OUTPUT_MODULES = frozenset({"torch.nn.Linear", "torch.nn.LazyLinear", "torch.nn.Bilinear"})
_MAX_DEPTH = 3


@dataclass(frozen=True)
class LossCall:
    call: CallSite
    kind: str                      # CROSS_ENTROPY | NLL | BCE | BCE_WITH_LOGITS
    spelled: str                   # how to name it in a message: `nn.CrossEntropyLoss`
    made_at: Optional[int]         # line that constructed the loss object, if any
    input_node: Optional[ast.expr]  # the first argument as written
    input: Value                   # its value


def loss_calls(analysis, facts: FunctionFacts) -> Iterator[LossCall]:
    """Calls of the four losses in `facts`, with their first (input) argument."""
    for call in facts.calls:
        kind = made_at = None
        if call.qualname in _FUNCTIONAL:
            kind = _FUNCTIONAL[call.qualname]
            spelled = SPELLING[kind][1]
        elif call.qualname is None:
            callee = facts.value(call.node.func)
            if not callee.has(V.LOSS_FN):
                continue
            found = loss_class(analysis, facts, callee)
            if found is None:
                continue
            kind, made_at = found
            spelled = SPELLING[kind][0]
        if kind is None:
            continue
        node = call.node.args[0] if call.node.args else keyword(call.node, "input")
        if node is None or isinstance(node, ast.Starred):
            continue
        value = call.args[0] if call.node.args else facts.value(node)
        yield LossCall(call, kind, spelled, made_at, node, value)


def loss_class(analysis, facts: FunctionFacts, callee: Value,
               depth: int = 0) -> Optional[Tuple[str, Optional[int]]]:
    """(kind, line made) of a loss object: from its constructing call, or, for a parameter
    (`def train(model, loader, criterion)`), from what every caller in this file passes."""
    node = callee.node
    if isinstance(node, ast.Call):
        qual = analysis.imports.qualname(node.func) or ""
        if qual.startswith("torch.nn.") and api.is_loss_class(qual):
            kind = _CLASSES.get(qual.rsplit(".", 1)[-1])
            return (kind, node.lineno) if kind else None
        return None
    if node is not None or not callee.params or facts.func is None or depth >= _MAX_DEPTH:
        return None
    return _from_callers(analysis, facts, callee, lambda f, v: loss_class(analysis, f, v, depth + 1)
                         if v.has(V.LOSS_FN) else None)


def _from_callers(analysis, facts: FunctionFacts, value: Value, ask):
    """The one answer `ask(caller_facts, argument value)` gives for every caller of the
    function whose parameter `value` is, or None when callers disagree or are unknown."""
    if len(value.params) != 1:
        return None
    (index,) = value.params
    func = facts.func
    callers = analysis.callers(func)
    if not callers:
        return None
    answers = set()
    offset = 1 if func.is_method else 0
    name = func.params[index] if index < len(func.params) else None
    for caller_facts, local in callers:
        node = local.node
        arg = None
        if offset <= index < offset + len(node.args):
            arg = node.args[index - offset]
        elif name is not None:
            arg = keyword(node, name)
        if arg is None or isinstance(arg, ast.Starred):
            return None
        answer = ask(caller_facts, caller_facts.value(arg))
        if answer is None:
            return None
        answers.add(answer)
    return answers.pop() if len(answers) == 1 else None


# ---------------------------------------------------------------------- input provenance
_SHAPE_METHODS = frozenset({"view", "reshape", "squeeze", "unsqueeze", "flatten", "contiguous",
                            "float", "half", "double", "bfloat16", "to", "cuda", "clone"})


def producer(facts: FunctionFacts, node: ast.expr, value: Value,
             through_shape: bool = False) -> Optional[CallSite]:
    """The call that produced `value` (the argument as written, or the call whose result
    was bound to the name), in this function; with `through_shape`, looking through
    `.squeeze(-1)`, `.float()`, `.view(...)` and the like to the call they reshape."""
    found = None
    if isinstance(node, ast.Call):
        for call in facts.calls:
            if call.node is node:
                found = call
                break
    if found is None:
        for call in reversed(facts.calls):
            if call.result is value:
                found = call
                break
    hops = 0
    while through_shape and found is not None and hops < 8 and found.qualname is None \
            and found.method in _SHAPE_METHODS and found.receiver is not None \
            and isinstance(found.node.func, ast.Attribute):
        inner = producer(facts, found.node.func.value, found.receiver)
        if inner is None:
            break
        found, hops = inner, hops + 1
    return found


def is_direct_activation_call(analysis, call: CallSite, tag: str) -> bool:
    """`F.softmax(x, dim=1)`, `torch.softmax(...)`, `x.softmax(1)` written in the argument."""
    if tag == V.SOFTMAX:
        funcs, method = api.SOFTMAX_FUNCS, "softmax"
    elif tag == V.LOG_SOFTMAX:
        funcs, method = api.LOG_SOFTMAX_FUNCS, "log_softmax"
    else:
        funcs, method = api.SIGMOID_FUNCS, "sigmoid"
    if call.qualname is not None:
        return call.qualname in funcs
    return call.method == method and call.receiver is not None and (
        call.receiver.grad or call.receiver.has(V.TENSOR))


def unwrapped_activation(analysis, facts: FunctionFacts, expr: ast.expr) -> Optional[ast.expr]:
    """For an activation call written in place (`F.softmax(logits, 1)`, `logits.softmax(-1)`,
    `nn.Softmax(dim=1)(logits)`, `self.softmax(logits)`, and their log-softmax forms): the
    expression it is applied to (`logits`); None for anything else."""
    if not isinstance(expr, ast.Call) or any(isinstance(a, ast.Starred) for a in expr.args):
        return None
    func = expr.func
    qualname = analysis.imports.qualname(func)
    if qualname in api.SOFTMAX_FUNCS | api.LOG_SOFTMAX_FUNCS:
        return expr.args[0] if expr.args else keyword(expr, "input")
    if qualname is None and isinstance(func, ast.Attribute) and func.attr in ("softmax", "log_softmax"):
        return func.value
    if len(expr.args) != 1 or expr.keywords:
        return None
    if isinstance(func, ast.Call) and analysis.imports.qualname(func.func) in \
            api.SOFTMAX_MODULES | api.LOG_SOFTMAX_MODULES:
        return expr.args[0]
    module = facts.value(func)
    if module.has(V.ACTIVATION_MODULE) and module.activation in (V.SOFTMAX, V.LOG_SOFTMAX):
        return expr.args[0]
    return None


def activation_source(analysis, facts: FunctionFacts, node: ast.expr, value: Value,
                      tag: str) -> str:
    """Words for where `value` got its activation `tag`: the call and its line, and for a
    module output, why the module ends in it."""
    call = producer(facts, node, value, through_shape=True)
    if call is None:
        origin = value.origin
        return f"made at line {origin[0]}" if origin else "made earlier in this function"
    text = f"`{short(call.node)}` at line {call.site.line}"
    callee = facts.value(call.node.func)
    if callee is UNKNOWN and call.receiver is not None and call.method == "forward":
        callee = call.receiver
    why = module_activation_reason(analysis, callee, tag)
    return f"{text}, {why}" if why else text


def module_activation_reason(analysis, module: Value, tag: str) -> Optional[str]:
    """Why calling `module` gives `tag` output: its forward, its last layer, or its file."""
    word = tag.replace("_", "-")
    if module.has(V.ACTIVATION_MODULE):
        return None
    last = module.field("last")
    if last is not None and last.activation == tag and isinstance(module.node, ast.Call):
        return f"the `nn.Sequential` made at line {module.node.lineno} ends with a {word} layer"
    cls = module.cls
    if cls is not None:
        forward = cls.method("forward")
        if forward is not None:
            where = analysis.where(forward, forward.node.lineno)
            return f"`{cls.name}.forward` ({where}) returns {word} output"
    return None


# ---------------------------------------------------------------------- raw logits
def raw_logits_source(analysis, facts: FunctionFacts, node: ast.expr, value: Value,
                      depth: int = 0) -> Optional[str]:
    """Words for the module that produced `value` when it surely outputs raw scores (an
    `nn.Linear`, an `nn.Sequential` ending in one, or a class of this file whose forward
    returns one of those unchanged); None when the analysis cannot be sure."""
    if value.tags & V.ACTIVATION_TAGS != {V.LOGITS} or depth > _MAX_DEPTH:
        return None
    call = producer(facts, node, value, through_shape=True)
    if call is None:
        return None
    callee = facts.value(call.node.func)
    if callee is UNKNOWN and call.method == "forward" and call.receiver is not None:
        callee = call.receiver
    if callee is UNKNOWN and dotted(call.node.func) == "self" and facts.func is not None:
        return None
    why = _raw_module(analysis, callee, depth)
    if why is None:
        return None
    return f"`{short(call.node)}` at line {call.site.line} is the raw output of {why}"


def _raw_module(analysis, module: Value, depth: int, single_unit: bool = False) -> Optional[str]:
    """Words for `module` when it outputs raw scores (with `single_unit`: exactly one per
    sample, an `nn.Linear(h, 1)` at the end); None when not sure."""
    if not module.has(V.MODULE) or module.has(V.ACTIVATION_MODULE) or module.has(V.LOSS_FN):
        return None
    node = module.node
    if isinstance(node, ast.Call):
        qual = analysis.imports.qualname(node.func)
        if qual in RAW_OUTPUT_MODULES and (not single_unit or _one_output(qual, node)):
            return f"the `{qual.replace('torch.nn.', 'nn.')}` made at line {node.lineno}"
        last = module.field("last")
        if last is not None and qual == "torch.nn.Sequential":
            inner = _raw_module(analysis, last, depth + 1, single_unit)
            if inner is not None:
                return f"the `nn.Sequential` made at line {node.lineno}, which ends with {inner}"
            return None
    cls = module.cls
    if cls is not None and cls.is_module and cls.home in (None, analysis):
        forward = cls.method("forward")
        if forward is None:
            return None
        fwd_facts = analysis.facts_for(forward)
        returned = fwd_facts.returns
        if returned.tags & V.ACTIVATION_TAGS != {V.LOGITS}:
            return None
        returns = [c for c in fwd_facts.calls if c.result is returned]
        if len(returns) != 1:
            return None
        inner_callee = fwd_facts.value(returns[0].node.func)
        inner = _raw_module(analysis, inner_callee, depth + 1, single_unit)
        if inner is None:
            return None
        return f"`{cls.name}.forward`, which returns the output of {inner}"
    return None


def _one_output(qual: str, node: ast.Call) -> bool:
    """`nn.Linear(h, 1)` / `nn.Linear(h, out_features=1)`: one score per sample."""
    if qual != "torch.nn.Linear":
        return False
    out = node.args[1] if len(node.args) > 1 else keyword(node, "out_features")
    return isinstance(out, ast.Constant) and out.value == 1 and not isinstance(out.value, bool)


# ---------------------------------------------------------------------- softmax of one score
@dataclass(frozen=True)
class OneUnitSoftmax:
    softmax: CallSite      # the softmax / log_softmax call
    source: str            # words for the single-unit module it normalises
    proven: bool           # the dim is the last one (`dim=-1`); `dim=1` assumes 2-D scores


def softmax_of_one_unit(analysis, facts: FunctionFacts, node: ast.expr,
                        value: Value) -> Optional[OneUnitSoftmax]:
    """`F.softmax(self.fc(h), dim=-1)` where `self.fc` is an `nn.Linear(h, 1)` (or a model
    ending in one): the softmax of a single score is 1.0 for every sample (its log-softmax
    0.0), whatever the model computes, so nothing downstream depends on the model. Read
    from the softmax call written in the argument or bound to it (no reshaping in between,
    which could move the unit axis)."""
    tags = value.tags & V.ACTIVATION_TAGS
    if tags not in ({V.SOFTMAX}, {V.LOG_SOFTMAX}):
        return None
    call = producer(facts, node, value)
    if call is None or not is_direct_activation_call(analysis, call, next(iter(tags))):
        return None
    dim = _softmax_dim(call)
    inner = unwrapped_activation(analysis, facts, call.node)
    if dim not in (1, -1) or inner is None:
        return None
    scores = producer(facts, inner, facts.value(inner))
    if scores is None:
        return None
    callee = facts.value(scores.node.func)
    if callee is UNKNOWN and scores.method == "forward" and scores.receiver is not None:
        callee = scores.receiver
    why = _raw_module(analysis, callee, 0, single_unit=True)
    if why is None:
        return None
    return OneUnitSoftmax(call, f"`{short(scores.node)}` at line {scores.site.line} is the "
                                f"single-score output of {why}", dim == -1)


def _softmax_dim(call: CallSite) -> Optional[int]:
    """The literal `dim` of `F.softmax(x, dim)` / `x.softmax(dim)`, else None."""
    position = 0 if call.qualname is None else 1
    dim = keyword(call.node, "dim")
    if dim is None and len(call.node.args) > position:
        dim = call.node.args[position]
    if isinstance(dim, ast.UnaryOp) and isinstance(dim.op, ast.USub) \
            and isinstance(dim.operand, ast.Constant):
        return -dim.operand.value if isinstance(dim.operand.value, int) else None
    return dim.value if isinstance(dim, ast.Constant) and isinstance(dim.value, int) else None
