"""Folding `if` tests over names bound once to a literal (analysis/constants.py)."""
from __future__ import annotations

import ast
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flake8_torch_preflight.analysis import FileAnalysis
from flake8_torch_preflight.analysis.core.constants import static_truth


def _truth(body: str, test: str):
    source = "def main(arg):\n" + textwrap.indent(textwrap.dedent(body), "    ") + \
        f"    if {test}:\n        pass\n"
    analysis = FileAnalysis(ast.parse(source), "train.py")
    facts = next(f for f in analysis.all_facts() if f.func is not None)
    node = next(n for n in ast.walk(facts.func.node) if isinstance(n, ast.If))
    return static_truth(analysis, facts, node.test)


@pytest.mark.parametrize("body, test, truth", [
    ("world_size = 1\n", "world_size > 1", False),
    ("world_size = 1\n", "world_size > 1 or arg", None),       # unknown operand decides
    ("world_size = 1\n", "world_size > 1 and arg", False),     # short-circuits
    ("x = 1\ny = 'a'\n", "x == (x and y)", False),             # `and` gives its last operand
    ("x = 0\n", "(x or 'cpu') == 'cpu'", True),
    ("use_ddp = False\n", "not use_ddp", True),
    ("mode = 'ddp'\n", "mode == 'ddp'", True),
    ("world_size = 1\nworld_size = 4\n", "world_size > 1", None),   # bound twice
    ("world_size = 1\nworld_size += 1\n", "world_size > 1", None),  # rebound
    ("world_size = 1\nfor world_size in range(3):\n    pass\n", "world_size > 1", None),
    ("", "arg > 1", None),                                      # a parameter
    ("n = 10 ** 30\n", "n > 1", None),                          # not a literal
    ("n = 1\n", "n > 'a'", None),                               # would raise: unknown
])
def test_folding(body, test, truth):
    assert _truth(body, test) is truth


def test_global_declaration_makes_a_name_unknown():
    source = ("WORLD = 1\n\ndef set_world(n):\n    global WORLD\n    WORLD = n\n\n"
              "if WORLD > 1:\n    pass\n")
    analysis = FileAnalysis(ast.parse(source), "train.py")
    node = next(n for n in ast.walk(analysis.tree) if isinstance(n, ast.If))
    assert static_truth(analysis, analysis.module_facts, node.test) is None


_ATOMS = st.sampled_from(["x", "y", "1", "0", "True", "None", "'a'", "10 ** 40", "arg"])
_TESTS = st.recursive(_ATOMS, lambda inner: st.one_of(
    st.tuples(inner, st.sampled_from([" > ", " == ", " and ", " or ", " is ", " <= "]), inner)
      .map(lambda t: f"({t[0]}{t[1]}{t[2]})"),
    inner.map(lambda t: f"(not {t})")), max_leaves=30)


@pytest.mark.filterwarnings("ignore::SyntaxWarning")   # `1 is 1` in the generated tests
@settings(max_examples=400, deadline=None)
@given(_TESTS)
def test_folding_never_raises_and_agrees_with_python(test):
    truth = _truth("x = 1\ny = 'a'\n", test)
    if truth is None:
        return
    try:
        expected = bool(eval(test, {}, {"x": 1, "y": "a"}))  # noqa: S307 (our own generated text)
    except Exception:
        return
    assert truth is expected


# ------------------------------------------------ attributes of `self` as the file builds them

_LOSS = '''
class Loss:
    def __init__(self, model, autobalance=False, *, gain=1.0):
        self.autobalance = autobalance
        self.gain = gain
        self.mode = "sum"

    def __call__(self, x):
        if {test}:
            pass
'''


def _self_truth(test: str, tail: str):
    source = _LOSS.format(test=test) + textwrap.dedent(tail)
    analysis = FileAnalysis(ast.parse(source), "loss.py")
    facts = next(f for f in analysis.all_facts() if f.func is not None and f.func.name == "__call__")
    node = next(n for n in ast.walk(facts.func.node) if isinstance(n, ast.If))
    return static_truth(analysis, facts, node.test)


@pytest.mark.parametrize("test, tail, truth", [
    ("self.autobalance", "loss = Loss(net)\n", False),            # the default, never passed
    ("self.mode == 'sum'", "loss = Loss(net)\n", True),           # a literal store
    ("self.gain > 2", "loss = Loss(net, True)\n", False),          # keyword-only, not passed
    ("self.autobalance", "loss = Loss(net, True)\n", None),        # passed by position
    ("self.autobalance", "loss = Loss(net, autobalance=flag)\n", None),
    ("self.autobalance", "loss = Loss(net, **cfg)\n", None),
    ("self.autobalance", "loss = Loss(*args)\n", None),
    ("self.autobalance", "", None),                                # built elsewhere: unknown
    ("self.autobalance", "loss = Loss(net)\nloss.autobalance = True\n", None),   # stored again
    ("self.autobalance", "loss = Loss(net)\nsetattr(loss, name, True)\n", None),
    ("self.autobalance", "loss = Loss(net)\nvars(loss).update(cfg)\n", None),
    ("self.autobalance", "make = functools.partial(Loss, autobalance=True)\nmake(net)\n", None),
    ("self.autobalance", "class Balanced(Loss):\n    pass\nloss = Loss(net)\n", None),
])
def test_self_attribute_folding(test, tail, truth):
    assert _self_truth(test, tail) is truth


@pytest.mark.parametrize("body, test, truth", [
    # issue 25: a literal dict that is only read folds through `.get` and `[]`
    ("config = {'is_fixed': False, 'lr': 0.1}\n", "config.get('is_fixed')", False),
    ("config = {'is_fixed': False}\n", "config.get('missing')", False),        # None
    ("config = {'is_fixed': False}\n", "config.get('missing', True)", True),
    ("config = {'warmup': 3}\n", "config['warmup'] > 1", True),
    ("config = {'is_fixed': False}\nconfig['is_fixed'] = arg\n", "config.get('is_fixed')", None),
    ("config = {'is_fixed': False}\nsetup(config)\n", "config.get('is_fixed')", None),
    ("config = {'is_fixed': False}\nconfig.update(arg)\n", "config.get('is_fixed')", None),
    ("config = {'is_fixed': arg}\n", "config.get('is_fixed')", None),          # not literal
])
def test_folding_literal_dicts(body, test, truth):
    assert _truth(body, test) is truth
