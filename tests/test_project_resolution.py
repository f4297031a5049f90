"""Cross-file resolution: a model class imported from a file next to the linted one."""
from __future__ import annotations

import ast
import os
import textwrap

from flake8_torch_preflight.analysis import FileAnalysis
from flake8_torch_preflight.engine import lint_source

MODEL = '''
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 3)

    def forward(self, x):
        return F.softmax(self.fc(x), dim=1)


class RawNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 3)

    def forward(self, x):
        return self.fc(x)
'''

TRAIN = '''
import torch
import torch.nn as nn
{import_line}


def main(loader):
    model = {cls}()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
'''


def _lint(path, import_line, cls="Net"):
    source = textwrap.dedent(TRAIN.format(import_line=import_line, cls=cls))
    path.write_text(source)
    return [f for f in lint_source(source, str(path)) if f.code == "TPF005"]


def test_absolute_import_of_sibling_file(tmp_path):
    (tmp_path / "models.py").write_text(MODEL)
    found = _lint(tmp_path / "train.py", "from models import Net")
    assert [f.line for f in found] == [13]
    assert "models.py" in found[0].message


def test_relative_import_and_package_reexport(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "nets").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "nets" / "__init__.py").write_text("from .classifier import Net\n")
    (pkg / "nets" / "classifier.py").write_text(MODEL)
    assert len(_lint(pkg / "train.py", "from .nets import Net")) == 1
    # Absolute import through the parent package directory.
    assert len(_lint(pkg / "train_abs.py", "from pkg.nets.classifier import Net")) == 1


def test_raw_model_and_unresolved_imports_are_quiet(tmp_path):
    (tmp_path / "models.py").write_text(MODEL)
    assert _lint(tmp_path / "train.py", "from models import RawNet", cls="RawNet") == []
    assert _lint(tmp_path / "train2.py", "from othermodels import Net") == []
    assert _lint(tmp_path / "train3.py", "from torchvision.models import Net") == []


def test_cache_follows_modification_time(tmp_path):
    models = tmp_path / "models.py"
    models.write_text(MODEL.replace("return F.softmax(self.fc(x), dim=1)", "return self.fc(x)"))
    assert _lint(tmp_path / "train.py", "from models import Net") == []
    models.write_text(MODEL)
    stat = models.stat()
    os.utime(models, (stat.st_atime, stat.st_mtime + 5))
    assert FileAnalysis(ast.parse(""), str(models)).other_file(str(models)) is not None
    assert len(_lint(tmp_path / "train.py", "from models import Net")) == 1


def test_script_in_a_subfolder_imports_from_the_repository_root(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "models.py").write_text(MODEL)
    (tmp_path / "tools").mkdir()   # not a package: scripts are run from the root
    assert len(_lint(tmp_path / "tools" / "train.py", "from models import Net")) == 1


def test_the_search_stops_at_the_project_root(tmp_path):
    (tmp_path / "models.py").write_text(MODEL)        # above the project: not ours
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    (project / "setup.py").write_text("")
    assert _lint(project / "scripts" / "train.py", "from models import Net") == []


def test_project_folder_named_like_a_library(tmp_path):
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "__init__.py").write_text(MODEL)
    assert len(_lint(tmp_path / "train.py", "from datasets import Net")) == 1


def test_star_import_of_a_project_module(tmp_path):
    (tmp_path / "models.py").write_text(MODEL)
    assert len(_lint(tmp_path / "train.py", "from models import *")) == 1


def test_last_definition_of_a_name_wins(tmp_path):
    source = textwrap.dedent('''
        import torch
        import torch.nn as nn
        from typing import overload


        @overload
        def build(n: int) -> nn.Module: ...


        def build(n):
            return nn.Sequential(nn.Linear(n, n), nn.Softmax(dim=1))


        def main(loader):
            model = build(10)
            criterion = nn.CrossEntropyLoss()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
        ''')
    assert [f.code for f in lint_source(source, str(tmp_path / "t.py"))].count("TPF005") == 1


def test_two_different_classes_joined_are_no_class():
    from flake8_torch_preflight.analysis.project.index import ClassInfo
    from flake8_torch_preflight.analysis.core.values import Value, join

    a = ClassInfo(ast.ClassDef(name="A"), "A", [])
    b = ClassInfo(ast.ClassDef(name="B"), "B", [])
    assert join(Value(cls=a), Value(cls=b)).cls is None
    assert join(Value(cls=a), Value()).cls is a
    assert join(Value(cls=a), Value(cls=a)).cls is a


def test_one_analysis_per_module_whoever_imports_it(tmp_path):
    """A module's analysis does not depend on its importer: it is the same object whether it
    is reached from the linted file or four imports away, and every hop resolves (issue 19:
    analyses keyed by import depth were re-made for each importer)."""
    from flake8_torch_preflight.analysis.project import workspace

    names = ["train", "engine", "models", "layers", "kernels"]
    for here, there in zip(names, names[1:]):
        (tmp_path / f"{here}.py").write_text(f"import {there}\n")
    (tmp_path / "kernels.py").write_text("X = 1\n")
    workspace.clear()
    analysis = FileAnalysis(ast.parse("import engine\n"), str(tmp_path / "train.py"))
    chain = []
    for there in names[1:]:
        analysis = analysis.other_file(str(tmp_path / f"{there}.py")) if analysis else None
        chain.append(analysis)
    assert all(a is not None for a in chain)
    direct = FileAnalysis(ast.parse("import kernels\n"), str(tmp_path / "train.py"))
    assert direct.other_file(str(tmp_path / "kernels.py")) is chain[-1]


TRAIN_IMPORTING = """import torch
import {module}


def main(model, loader, optimizer):
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main(None, [], None)
"""


def test_import_time_seeding_does_not_depend_on_lint_order(tmp_path):
    """What importing a project module seeds is kept per module across linted files (a
    summary of lines and texts); an answer cut short by an import cycle (`data` imports
    `helpers`, which seeds and imports `data`: read from `helpers`, `data`'s part of the
    cycle is cut) is not kept, so each entry point gets the same answer
    whichever is linted first."""
    from flake8_torch_preflight.analysis.topics import seeding
    from flake8_torch_preflight.analysis.project import workspace
    from flake8_torch_preflight.engine import lint_source

    (tmp_path / "data.py").write_text("import helpers\n\nSCALE = 1\n")
    (tmp_path / "helpers.py").write_text("import numpy as np\nimport data\n\nnp.random.seed(0)\n")
    (tmp_path / "proxy.py").write_text("import data\n")
    entries = {name: TRAIN_IMPORTING.format(module=module)
               for name, module in (("train_a.py", "helpers"), ("train_b.py", "data"),
                                    ("train_c.py", "proxy"))}
    for name, text in entries.items():
        (tmp_path / name).write_text(text)

    def lint_in(order):
        workspace.clear()
        seeding._SUMMARIES.clear()
        seeding._MODULES.clear()
        out = {}
        for name in order:
            out[name] = [f.message for f in lint_source(entries[name], str(tmp_path / name))]
        return out

    first = lint_in(["train_a.py", "train_b.py", "train_c.py"])
    assert first == lint_in(["train_c.py", "train_b.py", "train_a.py"])
    assert all(any("np.random.seed" in m for m in messages) for messages in first.values())
