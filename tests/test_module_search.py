"""Finding the module an import names, as Python (and astroid) would, in a closed world:
from the repository root, through folders without `__init__.py`, through absolute
re-exports and star imports, and into project packages named like a library we list."""
from __future__ import annotations

import textwrap

import pytest

from flake8_torch_preflight.analysis.project import resolution as project, workspace
from flake8_torch_preflight.engine import lint_source

SOFTMAX_NET = """
    import torch.nn as nn
    import torch.nn.functional as F


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(10, 3)

        def forward(self, x):
            return F.softmax(self.fc(x), dim=1)
    """

TRAIN = """
    import torch
    import torch.nn as nn
    {imports}


    def main(loader):
        model = {build}
        criterion = nn.CrossEntropyLoss()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
    """


@pytest.fixture(autouse=True)
def _fresh():
    for table in (project._FILES, project._ROOTS, project._MARKED):
        table.clear()
    workspace.clear()
    yield


def write(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def softmax_findings(root, main, imports, build="Net()"):
    write(root, {main: TRAIN.format(imports=imports, build=build)})
    source = (root / main).read_text()
    return [f for f in lint_source(source, str(root / main)) if f.code == "TPF005"]


# ---------------------------------------------------------------------------- the root

def test_a_deep_script_imports_from_the_marked_repository_root(tmp_path):
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    write(tmp_path / "repo", {"lib/nets/__init__.py": "", "lib/__init__.py": "",
                              "lib/nets/classifier.py": SOFTMAX_NET})
    main = "examples/vision/cls/scripts/train.py"        # four folders, no __init__.py
    found = softmax_findings(tmp_path / "repo", main, "from lib.nets.classifier import Net")
    assert len(found) == 1 and "classifier.py" in found[0].message


def test_no_marker_keeps_the_search_a_few_levels_deep(tmp_path):
    write(tmp_path / "repo", {"lib/__init__.py": "", "lib/classifier.py": SOFTMAX_NET})
    main = "a/b/c/d/train.py"
    if project._marked_root(str(tmp_path)) is not None:
        pytest.skip("a root marker above the temporary folder")
    assert softmax_findings(tmp_path / "repo", main, "from lib.classifier import Net") == []
    # three levels up is still searched
    assert len(softmax_findings(tmp_path / "repo", "a/b/train.py",
                                "from lib.classifier import Net")) == 1


def test_without_a_marker_the_working_directory_is_the_root(tmp_path, monkeypatch):
    write(tmp_path / "repo", {"lib/__init__.py": "", "lib/classifier.py": SOFTMAX_NET})
    monkeypatch.chdir(tmp_path / "repo")
    found = softmax_findings(tmp_path / "repo", "a/b/c/d/train.py", "from lib.classifier import Net")
    assert len(found) == 1
    monkeypatch.chdir(tmp_path / "repo" / "a")       # the root is below the package: not found
    assert softmax_findings(tmp_path / "repo", "a/b/c/d/train2.py",
                            "from lib.classifier import Net") == []


def test_nothing_above_the_marked_root_is_searched(tmp_path):
    write(tmp_path, {"outside.py": SOFTMAX_NET})
    (tmp_path / "repo" / "sub").mkdir(parents=True)
    (tmp_path / "repo" / "pyproject.toml").write_text("")
    assert softmax_findings(tmp_path / "repo", "sub/train.py", "from outside import Net") == []
    assert project.module_file(str(tmp_path / "repo" / "sub" / "train.py"), "outside") is None


# ---------------------------------------------------------------------------- re-exports

def test_absolute_reexport_from_a_package_init(tmp_path):
    (tmp_path / ".git").mkdir()
    write(tmp_path, {"proj/__init__.py": "from proj.training.nets import Net\n",
                     "proj/training/__init__.py": "",
                     "proj/training/nets.py": SOFTMAX_NET})
    assert len(softmax_findings(tmp_path, "recipes/train.py", "from proj import Net")) == 1
    assert len(softmax_findings(tmp_path, "recipes/train2.py", "import proj",
                                build="proj.Net()")) == 1


def test_reexport_of_a_library_name_stays_unknown(tmp_path):
    (tmp_path / ".git").mkdir()
    write(tmp_path, {"proj/__init__.py": "from somelib.nets import Net\n"})
    assert softmax_findings(tmp_path, "train.py", "from proj import Net") == []


# ---------------------------------------------------------------------------- star imports

def test_star_import_through_a_package_that_star_imports(tmp_path):
    (tmp_path / ".git").mkdir()
    write(tmp_path, {"utils/__init__.py": "from .nets import *\n", "utils/nets.py": SOFTMAX_NET})
    assert len(softmax_findings(tmp_path, "train.py", "from utils import *")) == 1


def test_star_import_of_a_name_the_module_imports(tmp_path):
    (tmp_path / ".git").mkdir()
    write(tmp_path, {"common.py": "from models.nets import Net\n", "models/nets.py": SOFTMAX_NET})
    assert len(softmax_findings(tmp_path, "train.py", "from common import *")) == 1


@pytest.mark.parametrize("exports", ['__all__ = ["Other"]\n', ""])
def test_star_import_honours_all_and_private_names(tmp_path, exports):
    (tmp_path / ".git").mkdir()
    net = SOFTMAX_NET if exports else SOFTMAX_NET.replace("class Net", "class _Net")
    write(tmp_path, {"utils.py": exports + textwrap.dedent(net)})
    name = "Net()" if exports else "_Net()"
    assert softmax_findings(tmp_path, "train.py", "from utils import *", build=name) == []


# ---------------------------------------------------------------------------- library names

def test_a_project_package_named_like_a_library_is_the_projects(tmp_path):
    """The timm repository's own `timm/`: its `create_model` is the project's code (here
    returning a softmax network), not what our table says of the library's (a model)."""
    (tmp_path / "setup.py").write_text("")
    factory = SOFTMAX_NET + """

    def create_model(name, **kwargs):
        return Net()
    """
    write(tmp_path, {"timm/__init__.py": factory})
    found = softmax_findings(tmp_path, "train.py", "import timm",
                             build="timm.create_model('resnet50')")
    assert len(found) == 1


def test_a_library_without_a_project_folder_of_its_name_is_the_library(tmp_path):
    (tmp_path / "setup.py").write_text("")
    write(tmp_path, {"models.py": SOFTMAX_NET})
    assert softmax_findings(tmp_path, "train.py", "import timm",
                            build="timm.create_model('resnet50')") == []
    assert project.library_named_project(_analysis(tmp_path / "train.py"),
                                         "timm.create_model") is None


def _analysis(path):
    import ast

    from flake8_torch_preflight.analysis import FileAnalysis
    return FileAnalysis(ast.parse(path.read_text()), str(path))
