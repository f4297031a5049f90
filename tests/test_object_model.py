"""Issue 25: what the interpreter knows an object is (identity, kind, gradient state)."""
from __future__ import annotations

import ast
import textwrap

from flake8_torch_preflight.analysis import FileAnalysis
from flake8_torch_preflight.analysis.core import values as V


def _env(body: str) -> dict:
    source = "import copy\nimport functools\nimport torch\nimport torch.nn as nn\n\n\n" \
        "def main(flag):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    analysis = FileAnalysis(ast.parse(source), "train.py")
    return next(f for f in analysis.all_facts() if f.func is not None).env


def test_a_deep_copy_is_a_new_module():
    env = _env("net = nn.Linear(2, 2)\nema = copy.deepcopy(net)\n")
    assert env["ema"].has(V.MODULE) and env["ema"].has(V.FRESH)
    assert not env["net"].has(V.FRESH)


def test_partial_is_a_factory():
    assert _env("make = functools.partial(nn.Linear, 4)\n")["make"].has(V.FACTORY)


def test_frozen_by_requires_grad_and_by_a_loop_over_parameters():
    env = _env("a = nn.Linear(2, 2)\na.requires_grad_(False)\n"
               "b = nn.Linear(2, 2)\nfor p in b.parameters():\n    p.requires_grad = False\n"
               "out = b(torch.randn(1, 2))\n")
    assert env["a"].has(V.FROZEN) and env["b"].has(V.FROZEN)
    assert not env["out"].grad


def test_frozen_only_on_every_path_and_thawed_again():
    env = _env("a = nn.Linear(2, 2)\nif flag:\n    a.requires_grad_(False)\n"
               "b = nn.Linear(2, 2)\nb.requires_grad_(False)\nb.requires_grad_(True)\n")
    assert not env["a"].has(V.FROZEN) and not env["b"].has(V.FROZEN)


def test_integer_casts_carry_no_graph():
    env = _env("net = nn.Linear(2, 2)\nids = net(torch.randn(1, 2)).long()\n")
    assert not env["ids"].grad


def test_a_thawed_part_makes_the_model_trainable_again():
    env = _env("net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))\n"
               "for p in net.parameters():\n    p.requires_grad = False\n"
               "for p in net[1].parameters():\n    p.requires_grad = True\n"
               "enc = nn.Linear(2, 2)\nenc.requires_grad_(False)\nenc.weight.requires_grad_(True)\n"
               "head = nn.Linear(2, 2)\nhead.requires_grad_(False)\nhead.bias.requires_grad = flag\n")
    assert not any(env[name].has(V.FROZEN) for name in ("net", "enc", "head"))


def test_a_copy_is_no_construction_of_a_new_model():
    env = _env("net = nn.Linear(2, 2)\nbest = copy.deepcopy(net)\n")
    assert env["best"].node is env["net"].node
