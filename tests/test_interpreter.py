"""Unit tests of the interpreter's pieces: values and their joins, the environment merge,
the loop re-walk, and the semantics tables the interpreter looks library calls up in."""
from __future__ import annotations

import ast
import textwrap

import pytest

from flake8_torch_preflight.analysis import FileAnalysis
from flake8_torch_preflight.analysis.core import values as V
from flake8_torch_preflight.analysis.core.env import Env, carried_values_changed, merge_envs
from flake8_torch_preflight.analysis.semantics import registry
from flake8_torch_preflight.analysis.core.values import UNKNOWN, Value, join


def graph(line: int, *tags: str) -> Value:
    return Value.new_graph(line, ast.Constant(0), V.TENSOR, *tags)


# ---------------------------------------------------------------------- values
def test_join_with_unknown_is_identity():
    value = graph(3, V.LOSS)
    assert join(value, UNKNOWN) is value
    assert join(UNKNOWN, value) is value
    assert join(value, value) is value


def test_join_unions_what_either_may_be():
    a, b = graph(3, V.LOSS), Value.of(V.PYSCALAR, params=frozenset({1}))
    joined = join(a, b)
    assert joined.grad and not joined.leaf
    assert joined.graphs == {3}
    assert {V.LOSS, V.PYSCALAR, V.TENSOR} <= joined.tags
    assert joined.params == {1}
    assert joined.origin == a.origin


def test_join_of_leaves_is_a_leaf_only_if_every_graph_part_is():
    leaf = Value.new_graph(1, ast.Constant(0), V.TENSOR, leaf=True)
    assert join(leaf, Value.of(V.PYSCALAR)).leaf
    assert not join(leaf, graph(2)).leaf


def test_join_marks_disagreeing_activations_unsure():
    softmax = graph(1, V.SOFTMAX)
    assert V.ACTIVATION_UNSURE in join(softmax, graph(2, V.LOGITS)).tags
    assert V.ACTIVATION_UNSURE not in join(softmax, graph(3, V.SOFTMAX)).tags


def test_join_pairs_tuple_elements():
    a = Value(tags=frozenset({V.CONTAINER}), elements=(graph(1), Value.of(V.PYSCALAR)))
    b = Value(tags=frozenset({V.CONTAINER}), elements=(Value.of(V.TENSOR), graph(2)))
    joined = join(a, b)
    assert [e.grad for e in joined.elements] == [True, True]
    c = Value(tags=frozenset({V.CONTAINER}), elements=(graph(1),))
    assert join(a, c).elements is None   # different lengths: items no longer known one by one


def test_graph_lines_saturate_instead_of_growing_without_bound():
    value = UNKNOWN
    for line in range(1, 200):
        value = join(value, graph(line))
    assert value.graphs is V.ANY_GRAPH
    assert value.shares_graph(graph(5000))
    assert not graph(1).shares_graph(graph(2))
    assert not value.shares_graph(Value.of(V.TENSOR))   # no graph at all: nothing shared


def test_breakers_and_container_reads():
    loss = graph(4, V.LOSS, V.DIVIDED).with_containers("f:losses")
    broken = loss.no_graph(V.TENSOR)
    assert not broken.grad and broken.graphs == frozenset() and V.LOSS not in broken.tags
    assert broken.containers == {"f:losses"}     # still came from the container
    held = loss.as_container()
    assert held.has(V.CONTAINER) and held.contents().grad and not held.contents().has(V.CONTAINER)
    params = Value.of(V.PARAMS, V.CONTAINER)
    assert params.contents().has(V.TENSOR)       # an element of model.parameters()
    assert loss.host_number().tags == {V.PYSCALAR}


def test_summary_return_takes_what_flows_in_at_the_call():
    ret = Value(tags=frozenset({V.TENSOR}), params=frozenset({0}))    # `def f(x): return x * 2`
    at_call = ret.through_call({0: graph(9, V.LOSS)})
    assert at_call.grad and at_call.graphs == {9} and V.LOSS in at_call.tags
    assert not at_call.params
    assert not ret.through_call({1: graph(9)}).grad    # the other argument does not flow


def test_attribute_view_drops_the_binding_methods_flow():
    value = graph(2).with_containers("A.self.x")
    value = Value(**{**value.__dict__, "params": frozenset({0})})
    seen = value.as_attribute()
    assert seen.grad and not seen.containers and not seen.params


# ---------------------------------------------------------------------- environment
def test_merge_joins_names_written_on_either_branch():
    base = Env({"x": Value.of(V.PYSCALAR), "y": UNKNOWN})
    left, right = base.branch(), base.branch()
    left["x"] = graph(1)
    right["z"] = Value.of(V.TENSOR)
    merged = merge_envs(base, left, right)
    assert merged["x"].grad and V.PYSCALAR in merged["x"].tags   # either branch
    assert merged["z"].has(V.TENSOR)
    assert merged["y"] is UNKNOWN                                 # untouched
    assert {"x", "z"} <= merged.written


def test_merge_of_one_branch_keeps_the_path_that_skipped_it():
    base = Env({"x": Value.of(V.PYSCALAR)})
    body = base.branch()
    body["x"] = graph(1)
    merged = merge_envs(base, body)
    assert merged["x"].grad and merged["x"].has(V.PYSCALAR)      # the loop may not have run


def test_carried_values_changed_ignores_settled_facts():
    before = Env({"h": Value.of(V.PYSCALAR), "n": Value.of(V.PYSCALAR)})
    after = Env({"h": graph(3), "n": Value.of(V.TENSOR, V.PYSCALAR)})
    assert carried_values_changed(before, after, {"h"})
    assert not carried_values_changed(before, after, {"n"})       # a number became a tensor
    assert not carried_values_changed(before, after, set())


# ---------------------------------------------------------------------- the loop re-walk
def facts_of(source: str, function: str = "train"):
    analysis = FileAnalysis(ast.parse(textwrap.dedent(source)), "t.py")
    func = next(f for f in analysis.index.functions if f.name == function)
    return analysis, analysis.facts_for(func)


def test_loop_is_walked_again_when_a_carried_value_changes():
    _, facts = facts_of("""
        import torch

        def train(model, loader, history):
            hidden = 0
            for x in loader:
                history.append(hidden)      # iteration 2 on: the previous step's output
                hidden = model(x, hidden)
        """)
    assert len(facts.stores) == 1          # recorded once: the first walk was rolled back
    assert facts.stores[0].value.grad       # what the second iteration stores carries a graph


def test_loop_without_carried_change_is_walked_once():
    analysis, facts = facts_of("""
        import torch

        def train(model, loader, optimizer):
            for x in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
        """)
    assert len(facts.backwards) == 1 and len(facts.steps) == 1
    assert len(facts.forwards) == 1


def test_branches_join_in_the_environment():
    _, facts = facts_of("""
        import torch

        def train(model, x, flag):
            if flag:
                out = model(x)
            else:
                out = 0
            return out
        """)
    assert facts.returns.grad and facts.returns.has(V.PYSCALAR)


# ---------------------------------------------------------------------- semantics tables
def test_every_table_entry_names_a_callable():
    for table in (registry.QUALIFIED, registry.METHODS, registry.KIND_DEFAULTS,
                  registry.ATTRIBUTES, registry.ATTRIBUTE_DEFAULTS, registry.BUILTINS):
        assert table and all(callable(h) for h in table.values())
    assert [order for order, _, _ in registry.PATTERNS] == sorted(o for o, _, _ in registry.PATTERNS)


def test_registering_twice_is_an_error():
    with pytest.raises(ValueError):
        registry.qualified("torch.autograd.backward")(lambda call: None)


def test_a_new_library_is_one_table_entry(monkeypatch):
    """Teaching the analysis a framework: register a handler, nothing in the interpreter."""
    monkeypatch.setitem(registry.QUALIFIED, "mylib.make_model",
                        lambda call: Value.of(V.MODULE, node=call.node))
    _, facts = facts_of("""
        import mylib

        def train(loader):
            model = mylib.make_model()
            for x in loader:
                model(x).sum().backward()
        """)
    assert len(facts.forwards) == 1 and facts.backwards[0].value.grad


def test_unseen_calls_are_marked():
    _, facts = facts_of("""
        import torch
        import somelib

        def train(model, x):
            y = model(x)
            somelib.report(y)
            return torch.stack([y]).sum()
        """)
    unseen = {call.qualname or call.method: call.unseen for call in facts.calls}
    assert unseen["somelib.report"] and not unseen["torch.stack"]
