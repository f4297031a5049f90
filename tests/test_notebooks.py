"""Notebooks: code cells as one module, IPython syntax, positions in every format, noqa,
`tpf fix` rewriting only the changed cells, and flake8 through nbQA."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flake8_torch_preflight import notebooks
from flake8_torch_preflight.checking import Settings, check_file

nbformat = pytest.importorskip("nbformat")

SETUP = "import torch\nimport torch.nn as nn\n%matplotlib inline\n!nvidia-smi"
MODEL = ("model = nn.Linear(4, 2)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
         "criterion = nn.CrossEntropyLoss()\nmodel?")
TRAIN = ("%%time\nhistory = []\nfor x, y in loader:\n    optimizer.zero_grad()\n"
         "    loss = criterion(model(x), y)\n    history.append(loss){comment}\n"
         "    loss.backward()\n    optimizer.step()")


def make_notebook(path: Path, *cells: str, kernel: str = "python", outputs: bool = True) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": kernel, "display_name": "k"}
    nb.cells.append(nbformat.v4.new_markdown_cell("# Training a classifier\n\nNotes `%d`."))
    for index, source in enumerate(cells):
        cell = nbformat.v4.new_code_cell(source)
        cell.id = f"cell-{index}"
        if outputs:
            cell.execution_count = index + 1
            cell.outputs = [nbformat.v4.new_output("stream", text=f"out {index}\n"),
                            nbformat.v4.new_output("display_data",
                                                   data={"image/png": "iVBORw0KGgo=\n"})]
        nb.cells.append(cell)
    nbformat.write(nb, str(path))
    return path


def run(args, cwd, stdin=None):
    return subprocess.run([sys.executable, "-m", "flake8_torch_preflight", *args], cwd=cwd,
                          capture_output=True, text=True, input=stdin, timeout=120)


@pytest.fixture
def notebook(tmp_path):
    return make_notebook(tmp_path / "train.ipynb", SETUP, MODEL, TRAIN.format(comment=""))


# ---------------------------------------------------------------------------- IPython syntax

@pytest.mark.parametrize("line, expected", [
    ("%matplotlib inline\n", "_#atplotlib inline\n"),
    ("!pip install torch\n", "_#ip install torch\n"),
    ("    !ls\n", "    _#s\n"),
    ("files = !ls *.pt\n", "files = _#s *.pt\n"),
    ("model?\n", "_#del?\n"),
    ("?torch.nn\n", "_#orch.nn\n"),
    ("torch.nn.Linear??\n", "_#rch.nn.Linear??\n"),
    ("torch.*Tensor?\n", "_#rch.*Tensor?\n"),
    ("%\n", "_\n"),
])
def test_magic_lines_become_same_length_python(line, expected):
    out = notebooks.neutralise([line])
    assert out == [expected]
    assert len(out[0]) == len(line)


def test_lines_inside_strings_and_brackets_are_not_magic():
    lines = ['text = """\n', "%d items\n", '!done"""\n', "total = (a\n", "    % b)\n",
             "x = 1  # why?\n", "s = 'a' \\\n", "    ! b\n"]
    assert notebooks.neutralise(lines) == lines


def test_cell_magics():
    python_body = ["%%time\n", "x = f()\n"]
    assert notebooks.neutralise(python_body) == ["_#time\n", "x = f()\n"]
    shell = ["%%bash\n", "echo hi\n", "  ls -la\n"]
    out = notebooks.neutralise(shell)
    assert all(line.startswith("#") for line in out)
    assert [len(x) for x in out] == [len(x) for x in shell]


def test_a_magic_inside_a_block_keeps_it_valid(tmp_path):
    path = make_notebook(tmp_path / "n.ipynb", "import torch\nfor i in range(3):\n    !echo $i")
    result = check_file(str(path), Settings())
    assert result.problems == [] and result.checked


# ---------------------------------------------------------------------------- checking

def test_cells_are_one_flow_and_placed_by_cell(notebook):
    result = check_file(str(notebook), Settings())
    assert result.problems == []
    [report] = [r for r in result.reports if r.finding.code == "TPF001"]
    assert (report.cell, report.cell_line, report.cell_column) == (3, 6, 5)
    # the file position is where that source line is stored in the JSON text
    raw = notebook.read_text().splitlines()[report.line - 1]
    assert raw[report.column - 1:].startswith('history.append(loss)')
    # message line references point into the notebook, not the joined module
    assert "cell 3 line 5" in report.finding.evidence


def test_text_report_names_the_cell(notebook):
    out = run(["check", "--isolated", "train.ipynb"], notebook.parent)
    assert out.returncode == 1
    assert "train.ipynb:cell 3:line 6:5: TPF001 [warning]" in out.stdout
    assert "  6 |     history.append(loss)" in out.stdout


def test_json_sarif_github_regions(notebook):
    data = json.loads(run(["check", "--isolated", "--format", "json", "train.ipynb"],
                          notebook.parent).stdout)
    [finding] = [f for f in data["findings"] if f["code"] == "TPF001"]
    assert (finding["cell"], finding["cell_line"], finding["cell_column"]) == (3, 6, 5)
    raw_lines = notebook.read_text().splitlines()
    assert "history.append(loss)" in raw_lines[finding["line"] - 1]
    sarif = json.loads(run(["check", "--isolated", "--format", "sarif", "train.ipynb"],
                           notebook.parent).stdout)
    from test_formatters import _validate
    _validate(sarif)
    [result] = [r for r in sarif["runs"][0]["results"] if r["ruleId"] == "TPF001"]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == (finding["line"], finding["column"])
    assert result["properties"] == {"cell": 3, "cellLine": 6, "cellColumn": 5,
                                    "fixSafety": "safe"}
    assert result["locations"][0]["logicalLocations"][0]["name"] == "cell 3"
    assert result["message"]["text"].startswith("cell 3, line 6: ")
    github = run(["check", "--isolated", "--format", "github", "train.ipynb"], notebook.parent)
    [line] = [x for x in github.stdout.splitlines() if "TPF001" in x]
    assert f"file=train.ipynb,line={finding['line']},col={finding['column']}," in line
    assert "(cell 3%2C line 6)" in line


def test_noqa_per_line_in_a_cell(tmp_path):
    path = make_notebook(tmp_path / "n.ipynb", SETUP, MODEL, TRAIN.format(comment="  # noqa: TPF001"))
    assert [r for r in check_file(str(path), Settings()).reports if r.finding.code == "TPF001"] == []
    other = make_notebook(tmp_path / "m.ipynb", SETUP, MODEL, TRAIN.format(comment="  # noqa: TPF003"))
    assert [r.finding.code for r in check_file(str(other), Settings()).reports] == ["TPF001"]


def test_a_cell_that_does_not_parse_is_reported_and_the_rest_checked(tmp_path):
    make_notebook(tmp_path / "n.ipynb", SETUP, "def broken(:\n    pass", MODEL,
                  TRAIN.format(comment=""))
    out = run(["check", "--isolated", "n.ipynb"], tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith("tpf: error: n.ipynb: cell 2: syntax error: ")
    assert "(line 1)" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "n.ipynb:cell 4:line 6:5: TPF001" in out.stdout


@pytest.mark.parametrize("content, needle", [
    (b"{not json", "not a notebook: the file is not JSON"),
    (b'{"cells": 3, "nbformat": 4, "nbformat_minor": 5, "metadata": {}}', "not a notebook"),
    (b"\xff\xfe", "not a notebook"),
])
def test_bad_notebooks_are_one_line(tmp_path, content, needle):
    (tmp_path / "bad.ipynb").write_bytes(content)
    out = run(["check", "--isolated", "bad.ipynb"], tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert needle in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_other_kernels_are_skipped_and_counted_as_not_checked(tmp_path):
    make_notebook(tmp_path / "r.ipynb", "library(torch)\nx <- 1", kernel="R")
    out = run(["check", "--isolated", "r.ipynb"], tmp_path)
    assert out.returncode == 1 and "1 file could not be checked" in out.stdout
    assert "r.ipynb: not a Python notebook (kernel language: r)" in out.stderr


def test_folders_include_notebooks_but_not_checkpoints(notebook):
    checkpoints = notebook.parent / ".ipynb_checkpoints"
    checkpoints.mkdir()
    shutil.copy(notebook, checkpoints / "train-checkpoint.ipynb")
    data = json.loads(run(["check", "--isolated", "--format", "json", "."], notebook.parent).stdout)
    assert {Path(f["path"]).name for f in data["findings"]} == {"train.ipynb"}


# ---------------------------------------------------------------------------- fixing

def _raw_source_line_changed(before: str, after: str):
    changed = [(a, b) for a, b in zip(before.splitlines(True), after.splitlines(True)) if a != b]
    return changed, len(before.splitlines()) == len(after.splitlines())


def test_fix_rewrites_only_the_changed_line(notebook):
    before = notebook.read_bytes()
    out = run(["fix", "--isolated", "train.ipynb"], notebook.parent)
    assert out.returncode == 0, out.stderr
    assert "train.ipynb:cell 3:line 6:5: fixed TPF001" in out.stderr
    after = notebook.read_bytes()
    changed, same_count = _raw_source_line_changed(before.decode(), after.decode())
    assert same_count
    assert changed == [('    "    history.append(loss)\\n",\n',
                        '    "    history.append(loss.detach())\\n",\n')]
    # magics, outputs and metadata untouched; a second run changes nothing
    assert run(["fix", "--isolated", "train.ipynb"], notebook.parent).returncode == 0
    assert notebook.read_bytes() == after


def test_fix_keeps_a_foreign_layout_byte_for_byte(tmp_path):
    """Not nbformat's own layout: indent 2, a string source, escaped non-ASCII, no final
    newline. Only the fixed cell's source may differ."""
    nb = json.loads(json.dumps(nbformat.reads(nbformat.writes(nbformat.from_dict({
        "nbformat": 4, "nbformat_minor": 4, "metadata": {"kernelspec": {"language": "python"}},
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "Entraîner le modèle"},
            {"cell_type": "code", "metadata": {"tags": ["setup"]}, "execution_count": 1,
             "outputs": [{"output_type": "stream", "name": "stdout", "text": ["é\n"]}],
             "source": SETUP + "\n" + MODEL},
            {"cell_type": "code", "metadata": {}, "execution_count": 2, "outputs": [],
             "source": TRAIN.format(comment="")},
        ]})), as_version=4)))
    nb["cells"][2]["source"] = TRAIN.format(comment="")       # a single string, not a list
    text = json.dumps(nb, indent=2, ensure_ascii=True)          # no trailing newline
    path = tmp_path / "foreign.ipynb"
    path.write_text(text)
    assert run(["fix", "--isolated", "foreign.ipynb"], tmp_path).returncode == 0
    after = path.read_text()
    old_value = json.dumps(TRAIN.format(comment=""), ensure_ascii=True)
    new_value = json.dumps(TRAIN.format(comment="").replace("append(loss)", "append(loss.detach())"),
                           ensure_ascii=True)
    assert after == text.replace(old_value, new_value)


def test_fix_diff_applies_with_git(notebook):
    git = shutil.which("git")
    if git is None:
        pytest.skip("no git")
    folder = notebook.parent
    subprocess.run([git, "init", "-q"], cwd=folder, check=True)
    diff = run(["fix", "--isolated", "--diff", "."], folder)
    assert diff.returncode == 1 and diff.stdout.startswith("--- a/train.ipynb\n+++ b/train.ipynb\n")
    patch = folder / "fix.patch"
    patch.write_text(diff.stdout)
    subprocess.run([git, "apply", "fix.patch"], cwd=folder, check=True)
    assert "history.append(loss.detach())" in notebook.read_text()


def test_noqa_in_a_cell_is_honoured_by_fix(tmp_path):
    path = make_notebook(tmp_path / "n.ipynb", SETUP, MODEL, TRAIN.format(comment="  # noqa"))
    before = path.read_bytes()
    assert run(["fix", "--isolated", "n.ipynb"], tmp_path).returncode == 0
    assert path.read_bytes() == before


# ---------------------------------------------------------------------------- nbQA

def test_flake8_through_nbqa_names_the_same_cell(notebook):
    if shutil.which("nbqa") is None and subprocess.run(
            [sys.executable, "-m", "nbqa", "--version"], capture_output=True).returncode != 0:
        pytest.skip("nbqa is not installed (it is in the test extras)")
    out = subprocess.run([sys.executable, "-m", "nbqa", "flake8", "train.ipynb", "--select", "TPF",
                          "--isolated"], cwd=notebook.parent, capture_output=True, text=True,
                         timeout=300)
    assert "Traceback" not in out.stderr, out.stderr
    assert "train.ipynb:cell_3:6:5: TPF001 [warning]" in out.stdout
    assert "TPF011" not in out.stdout          # notes stay off by default through nbQA too
    ours = run(["check", "--isolated", "train.ipynb"], notebook.parent).stdout
    assert "train.ipynb:cell 3:line 6:5: TPF001" in ours


_EVALUATE = ("def evaluate(model, loader):\n    model.eval()\n    correct = 0\n"
             "    with torch.no_grad():\n        for x, y in loader:\n"
             "            correct += (model(x).argmax(1) == y).sum().item()\n    return correct")
_EPOCHS = ("for epoch in range(10):\n    for x, y in train_loader:\n        optimizer.zero_grad()\n"
           "        nn.functional.cross_entropy(model(x), y).backward()\n        optimizer.step()\n"
           "    print(evaluate(model, val_loader))")


@pytest.mark.parametrize("layers, reported", [
    ("nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)", False),   # same in both modes
    ("nn.Linear(784, 128), nn.ReLU(), nn.Dropout(0.2), nn.Linear(128, 10)", True),
])
def test_sequential_model_left_in_eval_in_a_notebook(tmp_path, layers, reported):
    model = (f"model = nn.Sequential({layers}).to('cuda')\n"
             "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)")
    path = make_notebook(tmp_path / "mlp.ipynb", "import torch\nimport torch.nn as nn", model,
                         _EVALUATE, _EPOCHS)
    result = check_file(str(path), Settings())
    codes = [r.finding.code for r in result.reports]
    assert ("TPF007" in codes) is reported
