"""A fix is applied only where nothing later needs what it removes (issue: "safe" fixes that
broke code). Hypothesis builds training code with a later use of the stored graphs or of
autograd in an evaluation function, and checks that `tpf fix` leaves those alone."""
from __future__ import annotations

import ast
import textwrap

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flake8_torch_preflight.engine import lint_source
from flake8_torch_preflight.fixes import fix_source

# Ways the stored losses are used later that need their graphs.
GRAPH_USES = {
    "helper_backward": ("def consume(items):\n    torch.stack(items).sum().backward()\n",
                        "consume({name})"),
    "helper_backward_kw": ("def consume(scale, items=None):\n"
                           "    (torch.stack(items).sum() * scale).backward()\n",
                           "consume(0.5, items={name})"),
    "unseen_function": ("", "reducer.reduce_and_backward({name})"),
    "unseen_method": ("", "self_like.flush({name})"),
    "autograd_grad": ("", "torch.autograd.grad(torch.stack({name}).sum(), params)"),
}
# Uses that do not need the graphs: the fix is allowed there.
HARMLESS_USES = {
    "print_item": ("", "print(sum(l.item() for l in {name}))"),
    "numpy": ("", "np.mean([l.item() for l in {name}])"),
    "none": ("", "pass"),
}


def _training_code(name: str, use: tuple, how: str) -> str:
    helper, call = use
    store = {"append": f"{name}.append(loss)", "augassign": f"{name} += loss"}[how]
    start = "[]" if how == "append" else "0.0"
    imports = textwrap.dedent("""\
        import numpy as np
        import torch
        import torch.nn as nn
        import reducer
        from helpers import self_like


        """)
    return imports + helper + "\n\n" + textwrap.dedent(f"""\
        def train(model, loader, optimizer, params):
            torch.manual_seed(0)
            {name} = {start}
            for step, (x, y) in enumerate(loader):
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
                {store}
            {call.format(name=name)}
        """)


names = st.sampled_from(["losses", "history", "pending", "curve"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=names, use=st.sampled_from(sorted(GRAPH_USES)), how=st.sampled_from(["append"]))
def test_detach_is_never_applied_where_a_later_use_needs_the_graph(name, use, how):
    source = _training_code(name, GRAPH_USES[use], how)
    ast.parse(source)
    result = fix_source(source)
    assert not any(f.code == "TPF001" for f in result.fixed), result.source
    assert ".detach()" not in result.source


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=names, use=st.sampled_from(sorted(HARMLESS_USES)), how=st.sampled_from(["append"]))
def test_detach_is_applied_where_nothing_needs_the_graph(name, use, how):
    source = _training_code(name, HARMLESS_USES[use], how)
    result = fix_source(source)
    assert any(f.code == "TPF001" for f in result.fixed)
    assert "loss.detach()" in result.source
    assert not any(f.code == "TPF001" for f in lint_source(result.source))


GRADIENT_NEEDS = {
    "saliency": "(g,) = torch.autograd.grad(out.sum(), x)",
    "helper_grad": "g = input_gradient(model, x)",
    "unseen_attack": "x = attacks.pgd(model, x, y)",
    "backward": "out.sum().backward()",
}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(need=st.sampled_from(sorted(GRADIENT_NEEDS)),
       name=st.sampled_from(["evaluate", "validate", "eval_epoch", "predict"]))
def test_no_grad_is_never_added_to_a_function_that_needs_gradients(need, name):
    source = textwrap.dedent(f"""\
        import torch
        import attacks


        def input_gradient(model, x):
            x = x.requires_grad_(True)
            return torch.autograd.grad(model(x).sum(), x)[0]


        def {name}(model, loader):
            model.eval()
            total = 0.0
            for x, y in loader:
                out = model(x)
                {GRADIENT_NEEDS[need]}
                total += out.argmax(1).eq(y).sum().item()
            return total
        """)
    result = fix_source(source)
    assert "no_grad" not in result.source
    assert not any(f.code == "TPF002" for f in result.fixed)
