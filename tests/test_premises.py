"""Issue 25: a claim carries its proof. Every error the fixtures produce is asked for its
premises; each must be proven (an assumed premise makes at most a warning, which names it)."""
from __future__ import annotations

import ast

import pytest

from fixture_format import FIXTURES, rule_fixtures
from flake8_torch_preflight.engine import lint_tree
from flake8_torch_preflight.findings import ERROR, WARNING

CASES = rule_fixtures()


def _findings(path):
    source = path.read_text()
    return lint_tree(ast.parse(source), str(path))


@pytest.mark.parametrize("path", CASES, ids=[str(p.relative_to(FIXTURES)) for p in CASES])
def test_every_error_rests_on_proven_premises(path):
    for finding in _findings(path):
        if finding.severity != ERROR:
            continue
        assert finding.premises, f"{finding.code} line {finding.line}: an error with no premises"
        unproven = [p.sentence() for p in finding.premises if not p.proven]
        assert not unproven, f"{finding.code} line {finding.line}: error on {unproven}"


def test_an_assumed_premise_lowers_an_error_and_is_named(tmp_path):
    source = (
        "import torch\n\n\n"
        "def collect(model, loader):\n"
        "    outputs = []\n"
        "    for x in loader:\n"
        "        out = model(x)\n"
        "        outputs.append(out)\n"
        "    print(len(outputs))\n")
    found = [f for f in lint_tree(ast.parse(source), "collect.py") if f.code == "TPF001"]
    assert found and all(f.severity == WARNING for f in found)
    assert "`model` is taken for a model or a loss by its parameter's name" in found[0].evidence
    assert any(not p.proven for p in found[0].premises)


def test_printing_the_mean_loss_does_not_refuse_the_detach_fix():
    """Issue 25 item 4: `print(sum(losses) / len(losses))` is a builtin that cannot need a
    graph, not "a call the analysis cannot see into"."""
    source = (
        "import torch\n"
        "import torch.nn as nn\n\n\n"
        "def train(loader):\n"
        "    model = nn.Linear(8, 1)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    losses = []\n"
        "    for x, y in loader:\n"
        "        loss = ((model(x) - y) ** 2).mean()\n"
        "        optimizer.zero_grad()\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        "        losses.append(loss)\n"
        "    print(sum(losses) / len(losses))\n")
    found = [f for f in lint_tree(ast.parse(source), "train.py") if f.code == "TPF001"]
    assert found and found[0].plan is not None, found[0].fix if found else "no finding"
