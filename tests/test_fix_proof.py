"""The proof a fix carries (`analysis/fix_proof.py`) and the typing it rests on: values are
graph-bearing or tensors because the code proves it, names only break ties."""
from __future__ import annotations

import ast
import textwrap

from flake8_torch_preflight.analysis import FileAnalysis
from flake8_torch_preflight.analysis.core import values as V
from flake8_torch_preflight.analysis.topics.fix_proof import container_premise, tensor_premise
from flake8_torch_preflight.analysis.core.values import Value, join
from flake8_torch_preflight.engine import lint_source


def _analysis(source: str) -> FileAnalysis:
    return FileAnalysis(ast.parse(textwrap.dedent(source)), "train.py")


def _returns(source: str, name: str) -> Value:
    analysis = _analysis(source)
    func = next(f for f in analysis.index.functions if f.name == name)
    return analysis.facts_for(func).returns


# ---------------------------------------------------------------------- values
def test_a_breaker_keeps_the_dependency_but_cuts_the_graph():
    param = Value(params=frozenset({0}))
    cut = param.no_graph(V.TENSOR)
    assert cut.params == {0} and cut.flowing_params == frozenset() and cut.has(V.DETACHED)
    assert param.host_number().flowing_params == frozenset()
    # a value that may be the live parameter on one branch keeps its flow
    assert join(cut, param).flowing_params == {0}
    assert not join(cut, param).has(V.DETACHED)


def test_a_helper_returning_a_detached_number_passes_no_graph():
    value = _returns("""
        import torch.nn as nn


        def metric(out, y, loss_fn):
            return loss_fn(out, y).detach().item()


        def step(model, x, y):
            out = model(x)
            return metric(out, y, nn.MSELoss())
        """, "step")
    assert not value.grad and value.has(V.PYSCALAR)


def test_a_helper_called_under_no_grad_passes_no_graph():
    value = _returns("""
        import torch


        def probs(logits):
            return logits.softmax(-1)


        def act(model, x):
            out = model(x)
            with torch.no_grad():
                p = probs(out)
            return p
        """, "act")
    assert not value.grad


def test_a_loss_of_a_detached_prediction_carries_no_graph():
    value = _returns("""
        import torch.nn as nn


        def logged(model, x, y):
            pred = model(x)
            return nn.MSELoss()(pred.detach().cpu(), y)
        """, "logged")
    assert not value.grad and value.has(V.LOSS)


def test_a_parameter_free_layer_on_noise_carries_no_graph():
    value = _returns("""
        import torch
        import torch.nn as nn


        def noise(shape):
            return nn.Upsample(scale_factor=2)(torch.randn(shape))
        """, "noise")
    assert not value.grad and value.has(V.TENSOR)


def test_a_module_parameter_filled_with_classes_is_no_module():
    analysis = _analysis("""
        import functools
        import torch.nn as nn


        def stack(module, n):
            return [module(8) for _ in range(n)]


        a = stack(nn.Linear, 2)
        b = stack(functools.partial(nn.Linear, bias=False), 2)
        """)
    func = analysis.index.functions[0]
    assert not analysis.facts_for(func).env["module"].has(V.MODULE)


def test_a_model_parameter_is_a_module_by_its_name_only():
    analysis = _analysis("""
        def run(model, x):
            return model(x)
        """)
    value = analysis.facts_for(analysis.index.functions[0]).returns
    assert value.grad and value.has(V.BY_NAME)
    assert "only by its parameter's name" in tensor_premise(value)


# ---------------------------------------------------------------------- premises
def test_the_tensor_premise_names_what_failed():
    assert tensor_premise(Value.of(V.PYSCALAR)) == "may be a Python number, not a tensor"
    assert "container" in tensor_premise(Value.of(V.TENSOR, V.CONTAINER))
    assert "module" in tensor_premise(Value.of(V.MODULE))
    assert tensor_premise(Value.of(V.TENSOR)) is None


def test_unpacking_into_an_unseen_call_hands_over_every_entry():
    analysis = _analysis("""
        import torch.nn as nn


        def train(loader, loss):
            enc = nn.Linear(4, 4)
            inputs = {}
            for i, x in enumerate(loader):
                inputs[i] = enc(x)
            loss(**inputs)
        """)
    assert "reaches `loss(...)`" in container_premise(analysis, "train:inputs")


def test_a_container_read_in_another_method_is_followed():
    analysis = _analysis("""
        import torch.nn as nn


        class Trainer:
            def __init__(self, reducer):
                self.net = nn.Linear(4, 4)
                self.reducer = reducer
                self.pending = []

            def step(self, batches):
                for x in batches:
                    self.pending.append(self.net(x).sum())

            def flush(self):
                self.reducer.reduce(self.pending)
        """)
    assert "self.reducer.reduce" in container_premise(analysis, "Trainer.self.pending")


def test_no_fix_on_a_value_typed_by_name():
    source = textwrap.dedent("""\
        import torch


        def collect(model, loader):
            outputs = []
            for x in loader:
                outputs.append(model(x))
            return torch.cat(outputs).mean().item()
        """)
    (finding,) = [f for f in lint_source(source, "collect.py") if f.code == "TPF001"]
    assert finding.plan is None and "not proven a tensor" in finding.fix
