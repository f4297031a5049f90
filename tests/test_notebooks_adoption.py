"""Notebook fixes that keep IPython's rules, and malformed notebooks said in one line
(issue 21)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from test_notebooks import MODEL, SETUP, TRAIN, make_notebook

nbformat = pytest.importorskip("nbformat")

EVAL = ("import torch.nn as nn\n\n\ndef evaluate(model: nn.Module, loader):\n"
        "    model.eval()\n    correct = 0\n    for images, labels in loader:\n"
        "        logits = model(images)\n"
        "        correct += (logits.argmax(dim=1) == labels).sum().item()\n"
        "    return correct\n")


def run(args, cwd):
    return subprocess.run([sys.executable, "-m", "flake8_torch_preflight", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def code_sources(path):
    cells = json.loads(path.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


# ---------------------------------------------------------------------------- cell magics

@pytest.mark.parametrize("first", ["%%capture\n!pip install torchvision",
                                   "%%time\nimport os", "%%bash\necho hi"])
def test_an_added_import_never_goes_above_a_cell_magic(tmp_path, first):
    notebook = make_notebook(tmp_path / "eval.ipynb", first, EVAL)
    result = run(["fix", "--isolated", "eval.ipynb"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "fixed TPF002" in result.stderr
    sources = code_sources(notebook)
    for source in sources:   # a cell magic stays the cell's first line
        assert not source.startswith("import torch\n%%")
    assert sources[0].splitlines()[0] == first.splitlines()[0]
    assert any(line == "import torch" for s in sources for line in s.splitlines())
    python_cell = 1 if first.startswith("%%bash") else 0
    assert "import torch" in sources[python_cell].splitlines()
    if first.startswith("%%capture"):   # after the install, which must run first
        assert sources[0] == "%%capture\n!pip install torchvision\nimport torch"
    if first.startswith("%%time"):
        assert sources[0].startswith("%%time\nimport torch\n")
    assert run(["fix", "--isolated", "eval.ipynb"], tmp_path).returncode == 0   # idempotent


def test_an_added_import_goes_into_the_first_plain_cell_before_timeit(tmp_path):
    notebook = make_notebook(tmp_path / "eval.ipynb", "%%timeit\nx = 1", EVAL)
    assert run(["fix", "--isolated", "eval.ipynb"], tmp_path).returncode == 0
    sources = code_sources(notebook)
    assert sources[0] == "%%timeit\nx = 1"           # %%timeit keeps no names: not there
    assert sources[1].startswith("import torch\n")


# ---------------------------------------------------------------------------- broken cells

def test_a_cell_that_does_not_parse_is_skipped_and_the_others_fixed(tmp_path):
    notebook = make_notebook(tmp_path / "train.ipynb", SETUP, MODEL,
                             "def broken(:\n    pass", TRAIN.format(comment=""))
    check = run(["check", "--isolated", "train.ipynb"], tmp_path)
    assert "1 fixable" in check.stdout, check.stdout
    result = run(["fix", "--isolated", "train.ipynb"], tmp_path)
    assert "train.ipynb:cell 4:line 6:5: fixed TPF001" in result.stderr, result.stderr
    assert "train.ipynb: cell 3: syntax error" in result.stderr
    assert "skipped" in result.stderr
    assert result.returncode == 1            # as tpf check: a cell was not checked
    sources = code_sources(notebook)
    assert "history.append(loss.detach())" in sources[3]
    assert sources[2] == "def broken(:\n    pass"


# ---------------------------------------------------------------------------- malformed

CELL = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
        "source": "x = 1\n"}


def notebook_json(cells):
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells})


@pytest.mark.parametrize("text, needle", [
    ("[1, 2]", "not a notebook: the JSON is a list, not an object"),
    (notebook_json({"a": 1}), "not a notebook: cells is an object, not a list"),
    (notebook_json([CELL, "x = 1"]), "not a notebook: cells[1] is a string, not an object"),
    (notebook_json([dict(CELL, source=5)]), "not a notebook: cells[0].source is a number, not text or a list of lines"),
    (notebook_json([dict(CELL, source=["x", 5])]), "not a notebook: cells[0].source[1] is a number, not text"),
    (notebook_json([{"metadata": {}, "source": "x"}]), "not a notebook: cells[0] has no cell_type"),
    (notebook_json([{"cell_type": "code", "metadata": {}}]), "not a notebook: cells[0] (a code cell) has no source"),
    (json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": None, "cells": [CELL]}),
     "not a notebook: metadata is null, not an object"),
    ('{"nbformat": 4, "nbformat_minor": 5, "cells": null}',
     "not a notebook: cells is null, not a list"),
])
@pytest.mark.parametrize("command", ["check", "fix"])
def test_a_malformed_notebook_is_one_clear_line(tmp_path, text, needle, command):
    (tmp_path / "bad.ipynb").write_text(text)
    result = run([command, "--isolated", "bad.ipynb"], tmp_path)
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("tpf: error")]
    assert len(errors) == 1 and errors[0].startswith("tpf: error: bad.ipynb: "), result.stderr
    assert needle in errors[0]
    for internal in ("object has no attribute", "is not iterable", "NoneType", "line None",
                     "Traceback"):
        assert internal not in result.stderr


def test_a_syntax_error_without_a_line_names_no_line_none(tmp_path):
    make_notebook(tmp_path / "nul.ipynb", "x = 1\0")
    result = run(["check", "--isolated", "nul.ipynb"], tmp_path)
    assert "line None" not in result.stderr and "cell 1" in result.stderr
