"""Cross-file resolution: a model class imported from a file next to the linted one."""
from __future__ import annotations

import os
import textwrap

import ast

from flake8_torch_preflight.analysis import FileAnalysis, project
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
