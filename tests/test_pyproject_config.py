"""`[tool.flake8-torch-preflight]` in pyproject.toml: read by `tpf` (flake8 cannot read
pyproject.toml), the same keys as `[flake8]`, its values over `[flake8]`'s key by key, the
command line over both; a bad value is one line and exit 2."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# TPF001 on line 10; TPF003 (no zero_grad) on line 11 once `optimizer.zero_grad()` goes
LEAK = textwrap.dedent("""\
    import torch.nn as nn


    def train(model: nn.Module, loader, optimizer):
        criterion = nn.CrossEntropyLoss()
        history = []
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            history.append(loss)
            loss.backward()
            optimizer.step()
        return [h.item() for h in history]
    """)


def run(args, cwd):
    return subprocess.run([sys.executable, "-m", "flake8_torch_preflight", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def codes(result):
    return sorted({line.split(": ")[1].split()[0] for line in result.stdout.splitlines()
                   if ": TPF" in line})


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.py").write_text(LEAK)
    return tmp_path


def table(project, body):
    (project / "pyproject.toml").write_text(
        "[project]\nname = 'x'\n\n[tool.flake8-torch-preflight]\n" + textwrap.dedent(body))


def test_the_table_is_read(project):
    assert run(["check", "-q", "train.py"], project).returncode == 1
    table(project, 'extend-ignore = ["TPF001"]\n')
    result = run(["check", "-q", "train.py"], project)
    assert result.returncode == 0 and result.stdout == ""


def test_it_wins_over_flake8_key_by_key_and_the_command_line_over_both(project):
    (project / "setup.cfg").write_text("[flake8]\nextend-ignore = TPF001\ntpf-notes = true\n")
    assert run(["check", "-q", "train.py"], project).returncode == 0
    table(project, "extend-ignore = []\n")
    result = run(["check", "-q", "train.py"], project)
    assert codes(result) == ["TPF001"]
    assert run(["check", "-q", "--extend-ignore", "TPF001", "train.py"], project).returncode == 0


def test_found_from_a_subfolder_and_exclude_is_relative_to_it(project):
    (project / "gen").mkdir()
    (project / "gen" / "model_pb2.py").write_text(LEAK)
    (project / "src").mkdir()
    (project / "src" / "train.py").write_text(LEAK)
    table(project, 'exclude = ["gen"]\nper-file-ignores = {"src/*" = ["TPF001"]}\n')
    result = run(["check", "-q", "."], project)
    assert "model_pb2" not in result.stdout and "src/train.py" not in result.stdout
    assert "./train.py" in result.stdout
    # found from below; `gen` is the pyproject.toml's folder's, not the current one's
    inner = run(["check", "-q", "../gen", "train.py"], project / "src")
    assert "model_pb2" not in inner.stdout and "train.py" in inner.stdout


def test_isolated_ignores_it_and_config_names_it(project):
    table(project, 'select = ["TPF003"]\n')
    assert run(["check", "-q", "train.py"], project).stdout == ""
    assert codes(run(["check", "-q", "--isolated", "train.py"], project)) == ["TPF001"]
    (project / "other").mkdir()
    (project / "other" / "pyproject.toml").write_text(
        '[tool.flake8-torch-preflight]\nextend-ignore = ["TPF001"]\n')
    assert run(["check", "-q", "--config", "other/pyproject.toml", "train.py"],
               project).stdout == ""


def test_notes_and_vram_gpu_keys(project):
    table(project, 'notes = true\nvram-gpu = "a100-80gb"\ncache = false\n')
    assert run(["check", "train.py"], project).returncode == 1


@pytest.mark.parametrize("body, needle", [
    ("select = 3\n", "select"),
    ('select = ["TPF-1"]\n', "TPF-1"),
    ('selct = ["TPF001"]\n', "select"),                 # unknown key, with a suggestion
    ('notes = "yes"\n', "notes"),
    ('vram-gpu = "a100-90gb"\n', "a100-80gb"),
    ('per-file-ignores = ["tests/*:TPF001"]\n', "per-file-ignores"),
    ("select = [\n", "pyproject.toml"),                 # not TOML
])
def test_a_bad_value_is_one_line_and_exit_2(project, body, needle):
    table(project, body)
    result = run(["check", "train.py"], project)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in result.stderr


def test_a_pyproject_without_the_table_changes_nothing_even_when_broken(project):
    (project / "pyproject.toml").write_text("[tool.black\nline-length = 99\n")
    assert run(["check", "-q", "train.py"], project).returncode == 1


def test_documented():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    configuration = " ".join(readme.split("## Configuration", 1)[1].split("\n## ", 1)[0].split())
    assert "[tool.flake8-torch-preflight]" in configuration
    assert "flake8 itself cannot read `pyproject.toml`" in configuration
    ci = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    assert "[tool.flake8-torch-preflight]" in ci and "precedence" in ci.lower()
